"""Modern Hopfield (softmax attention) memory and the Universal Hopfield grid.

Both are ``Vᵀ sep(β · sim(K, q))`` (Millidge et al. 2022) evaluated by
:func:`attnreg.core.attention`: streaming softmax / top-1 over blocks of memories, so millions
of memories are searched without the queries × memories score matrix.
"""

from __future__ import annotations

from typing import Any

import torch

from attnreg.core import SEPARATIONS, associate
from attnreg.core.streamed import DEFAULT_MEMORY_BUDGET
from attnreg.core.validation import (
    check_choice,
    check_flag,
    check_nonnegative,
    check_positive,
    check_positive_int,
)
from attnreg.core.whitening import whitening_matrix
from attnreg.memory.base import (
    DISTANCES,
    check_patterns,
    check_states,
    extreme_scale,
    log_sum_exp,
    scaled_retrieval,
)
from attnreg.memory.softmax_energy import softmax_energy

GRID_SIMILARITIES = ("dot", "euclidean", "manhattan", "whitened_dot")


class ModernHopfield:
    """Softmax modern Hopfield network (Ramsauer et al. 2020; Demircigil et al. 2017 for
    ``F(x) = exp(x)``): ``ξ ← Xᵀ softmax(β X ξ)`` — one step is softmax attention.

    Energy (Ramsauer et al., eq. 2): ``E(ξ) = −β⁻¹ log Σ_i exp(β x_iᵀ ξ) + ½ ξᵀξ + β⁻¹ log N
    + ½ M²`` with ``M = max_i ‖x_i‖``; the update is the concave-convex procedure for ``E`` and
    never increases it (their Theorem 1). Capacity is exponential in ``d`` (Demircigil et al.:
    about ``2^{d/2}`` random ±1 patterns all fixed points).

    ``retrieve`` iterates up to ``max_steps`` updates, stopping early once no coordinate moves
    by more than ``tol``. With ``values`` (hetero-association) one step returns values.
    """

    def __init__(
        self,
        beta: float = 1.0,
        max_steps: int = 1,
        tol: float = 1e-6,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
    ) -> None:
        self.beta = beta
        self.max_steps = max_steps
        self.tol = tol
        self.memory_budget = memory_budget
        self._check_settings()

    def _check_settings(self) -> None:
        """Validate the settings (at construction, and again at ``store``: they are attributes)."""
        check_positive("beta", self.beta)
        check_positive_int("max_steps", self.max_steps)
        check_nonnegative("tol", self.tol)
        check_positive("memory_budget", self.memory_budget)

    def store(self, patterns: Any, values: Any = None) -> ModernHopfield:
        """Store patterns ``X (N, d)`` (and optional values ``(N, dv)``)."""
        self._check_settings()
        self.patterns_ = check_patterns("patterns", patterns)
        self.values_ = None
        if values is not None:
            self.values_ = check_patterns("values", values).to(self.patterns_.dtype)
            if self.values_.shape[0] != self.patterns_.shape[0]:
                raise ValueError(
                    f"patterns and values disagree on N: patterns shape "
                    f"{tuple(self.patterns_.shape)}, values shape {tuple(self.values_.shape)}"
                )
        return self

    def _step(self, q: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """One update ``Vᵀ softmax(β X ξ)``; extreme magnitudes are rescaled by powers of two
        with the scale folded into β (:func:`scaled_retrieval`): the answer, or a
        ``ValueError`` when the scores themselves overflow."""

        def softmax_step(
            q: torch.Tensor, x: torch.Tensor, v: torch.Tensor, beta: float
        ) -> torch.Tensor:
            out = associate(
                q, x, v, separation="softmax", beta=beta, memory_budget=self.memory_budget
            )
            assert isinstance(out, torch.Tensor)
            return out

        return scaled_retrieval(
            softmax_step,
            q,
            self.patterns_,
            values,
            similarity="dot",
            separation="softmax",
            beta=self.beta,
            names="queries, patterns",
        )

    def retrieve(self, queries: Any, steps: int | None = None) -> torch.Tensor:
        """``Xᵀ softmax(β X ξ)`` iterated (auto-association) or once (hetero-association)."""
        x = self.patterns_
        q, single = check_states("queries", queries, x.shape[1], x.dtype)
        if self.values_ is not None:
            out = self._step(q, self.values_)
            return out[0] if single else out
        steps = self.max_steps if steps is None else check_positive_int("steps", steps)
        for _ in range(steps):
            new = self._step(q, x)
            moved = float((new - q).abs().max())
            q = new
            if moved <= self.tol:
                break
        return q[0] if single else q

    def log_sum_exp(self, states: torch.Tensor) -> torch.Tensor:
        """``log Σ_i exp(β x_iᵀ ξ)`` per state, through the attention core
        (:func:`attnreg.memory.base.log_sum_exp`)."""
        return log_sum_exp(states, self.patterns_, self.beta, self.memory_budget)

    def energy(self, states: Any) -> torch.Tensor:
        """Ramsauer et al.'s energy ``E(ξ)`` per state, in the stable form of
        :func:`attnreg.memory.softmax_energy.softmax_energy` (accurate where ``E`` is far below
        its terms ``½‖ξ‖²``, ``½M²``)."""
        x = self.patterns_
        s, single = check_states("states", states, x.shape[1], x.dtype)
        e = softmax_energy(s, x, self.beta, self.memory_budget)
        return e[0] if single else e


class UniversalHopfieldMemory:
    """One cell of the Universal Hopfield grid (Millidge et al. 2022):
    ``retrieve(q) = Vᵀ sep(β · sim(K, q))``, one step.

    Similarities: ``dot``, ``euclidean`` (``−‖q − k‖₂``), ``manhattan`` (``−‖q − k‖₁``),
    ``whitened_dot`` (``q S⁺ kᵀ``, ``S = KᵀK``). Separations: ``identity``, ``power`` (``xⁿ``),
    ``softmax``, ``max`` (one-hot arg-max, i.e. nearest pattern). With ``normalize`` the
    identity / power weights are divided by their sum (softmax and max are normalised already).

    Distance similarities are negative, so before identity / power separation they are shifted
    to be non-negative: weights ``(c + β·sim)ⁿ`` with the per-query ``c = β (‖q‖ + max_k ‖k‖)``
    (same norm as the distance; the triangle inequality makes every weight ≥ 0), the shift
    added to the scores in the attention core (``associate(..., offset=c)``), so each weight is
    computed as it is written (a binomial expansion of ``(c + β·sim)ⁿ`` in powers of ``sim``
    loses about ``n log₂ 3`` bits to cancellation on digits: wrong beyond ``n ≈ 25``). Softmax
    and max are shift-invariant, so no shift is applied there. The normalised weights do not
    depend on β (:func:`~attnreg.memory.base.scaled_retrieval` computes them with β = 1).
    """

    def __init__(
        self,
        similarity: str = "euclidean",
        separation: str = "softmax",
        beta: float = 1.0,
        power: int = 2,
        normalize: bool = True,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
    ) -> None:
        self.similarity = similarity
        self.separation = separation
        self.beta = beta
        self.power = power
        self.normalize = normalize
        self.memory_budget = memory_budget
        self._check_settings()

    def _check_settings(self) -> None:
        """Validate the settings (at construction, and again at ``store``: they are attributes)."""
        check_choice("similarity", self.similarity, GRID_SIMILARITIES)
        check_choice("separation", self.separation, SEPARATIONS)
        check_positive("beta", self.beta)
        check_positive_int("power", self.power)
        check_flag("normalize", self.normalize)
        check_positive("memory_budget", self.memory_budget)

    def store(self, keys: Any, values: Any = None) -> UniversalHopfieldMemory:
        """Store keys ``(N, d)`` and values (default: the keys themselves)."""
        self._check_settings()
        k = check_patterns("keys", keys)
        v = k if values is None else check_patterns("values", values).to(k.dtype)
        if v.shape[0] != k.shape[0]:
            raise ValueError(
                f"keys and values disagree on N: keys shape {tuple(k.shape)}, "
                f"values shape {tuple(v.shape)}"
            )
        self.keys_, self.values_ = k, v
        self.metric_ = None
        self.key_scale_: torch.Tensor | None = None
        self._keys = k
        if self.similarity == "whitened_dot":  # (KᵀK)⁺ of extreme keys from K / 2^e (exact)
            self.key_scale_ = extreme_scale(k)
            self._keys = k / self.key_scale_ if bool(self.key_scale_ != 1) else k
            w = whitening_matrix(self._keys, warn=False).matrix[0]
            self.metric_ = w @ w.mT
        return self

    def retrieve(self, queries: Any) -> torch.Tensor:
        """``Vᵀ sep(β · sim(K, q))`` for queries ``(M, d)`` (or one ``(d,)`` query). At extreme
        magnitudes the inputs are rescaled by powers of two (:func:`scaled_retrieval`): the
        answer, or a ``ValueError`` when the scores or the answer leave the float range."""
        k = self.keys_
        q, single = check_states("queries", queries, k.shape[1], k.dtype)
        n = self.power if self.separation == "power" else 1
        out = scaled_retrieval(
            self._retrieve,
            q,
            self._keys,
            self.values_,
            similarity=self.similarity,
            separation=self.separation,
            beta=self.beta,
            power=n,
            normalize=self.normalize,
            key_scale=self.key_scale_,
        )
        return out[0] if single else out

    def _retrieve(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: float
    ) -> torch.Tensor:
        """``Vᵀ sep(β · sim(K, q))`` on the given (possibly rescaled) tensors."""
        shifted = self.similarity in DISTANCES and self.separation in ("identity", "power")
        if not shifted:
            out = associate(
                q,
                k,
                v,
                similarity=self.similarity,
                separation=self.separation,
                beta=beta,
                power=self.power,
                metric=self.metric_,
                normalize=self.normalize,
                memory_budget=self.memory_budget,
            )
            assert isinstance(out, torch.Tensor)
            return out
        p = 2.0 if self.similarity == "euclidean" else 1.0
        offset = beta * (q.norm(p=p, dim=1) + k.norm(p=p, dim=1).max())
        out = associate(
            q,
            k,
            v,
            similarity=self.similarity,
            separation=self.separation,
            beta=beta,
            power=self.power,
            normalize=self.normalize,
            memory_budget=self.memory_budget,
            offset=offset,
        )
        assert isinstance(out, torch.Tensor)
        return out
