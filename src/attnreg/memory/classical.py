"""Linear and polynomial memories: pseudo-inverse (regression), Hebbian Hopfield, dense AM.

All three are ``Vᵀ sep(sim(K, q))`` (Millidge et al. 2022) evaluated by
:func:`attnreg.core.attention`; none holds the queries × memories score matrix except the
asynchronous dense-memory update (documented there).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from attnreg.core.results import check_finite_result
from attnreg.core.retrieval import associate
from attnreg.core.scaling import rescale_tasks
from attnreg.core.streamed import DEFAULT_MEMORY_BUDGET
from attnreg.core.validation import (
    check_choice,
    check_nonnegative,
    check_positive,
    check_positive_int,
)
from attnreg.core.whitening import whitening_matrix
from attnreg.memory.base import (
    check_patterns,
    check_states,
    krotov_hopfield_coefficients,
    sign_update,
)

DYNAMICS = ("synchronous", "asynchronous")


def _out(x: torch.Tensor, single: bool) -> torch.Tensor:
    return x[0] if single else x


class PseudoInverseMemory:
    """Regression memory: ``retrieve(q) = q S⁺ Kᵀ V`` with ``S = KᵀK + λI`` (whitened dot,
    identity separation).

    The least-squares / hat-matrix reading of regression: stored keys ``K (N, d)`` map to
    values ``V (N, dv)`` (hetero-association; ``V = K`` for auto-association). ``q S⁺ Kᵀ`` is
    the row of the hat matrix ``H = K S⁺ Kᵀ``; ``H = I_N`` exactly when ``N ≤ d`` and ``K`` has
    full row rank, so every stored value is recalled exactly: perfect-recall capacity
    ``N_max = d`` (the pseudo-inverse / projection rule of Kohonen 1972 and Personnaz, Guyon &
    Dreyfus 1985; Goulet Coulombe 2025 for the attention form). For ``N > d`` the recall of a
    generic hetero-associative value is a least-squares fit, no longer exact; in the
    auto-associative case with ``rank K = d`` the retrieval is the identity map.

    Energy (auto-associative state space): ``E(ξ) = ½ ξᵀ (I − P) ξ`` with ``P = S⁺ KᵀK`` the
    projection onto the span of the keys — the squared distance to the stored subspace; one
    retrieval step ``ξ → ξP`` (for ``λ = 0``) brings it to 0, so it never increases.

    Keys and values of extreme magnitude (where ``KᵀK`` would over- or underflow) are divided
    by powers of two ``s``, ``t`` (:func:`attnreg.core.scaling.rescale_tasks`, exact):
    ``q S⁺ Kᵀ V = (q/s)(S_s)⁺ (K/s)ᵀ (V/t) · t`` with ``S_s = (K/s)ᵀ(K/s) + (λ/s²) I``, the
    queries by their own power of two. The answer is the given problem's (ridge with the given
    λ) at any magnitude, or a ``ValueError`` where it lies outside the float range (e.g.
    ``q KᵀV / λ`` for keys of magnitude 1e-300): never zeros. ``metric_`` is ``S_s⁺``, for the
    rescaled keys.
    """

    def __init__(
        self,
        ridge: float = 0.0,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
        warn_rank: bool = False,
    ) -> None:
        self.ridge = ridge
        self.memory_budget = memory_budget
        self.warn_rank = warn_rank
        self._check_settings()

    def _check_settings(self) -> None:
        """Validate the settings (at construction, and again at ``store``: they are attributes)."""
        check_nonnegative("ridge", self.ridge)
        check_positive("memory_budget", self.memory_budget)
        if not isinstance(self.warn_rank, bool):
            raise ValueError(f"warn_rank: must be True or False, got {self.warn_rank!r}")

    def store(self, keys: Any, values: Any = None) -> PseudoInverseMemory:
        """Store ``keys (N, d)`` → ``values (N, dv)`` (``values=None``: auto-association)."""
        self._check_settings()
        k = check_patterns("keys", keys)
        v = k if values is None else check_patterns("values", values).to(k.dtype)
        if v.shape[0] != k.shape[0]:
            raise ValueError(
                f"keys and values disagree on N: keys shape {tuple(k.shape)}, "
                f"values shape {tuple(v.shape)}"
            )
        n, d = k.shape
        keys, values, self.rescaling_ = rescale_tasks(k[None], v[None], float(self.ridge))
        self._keys, self._values = keys[0], values[0]
        # N < d is a memory's normal regime (rank N by construction): no rank warning then,
        # unless it serves as a regression (``warn_rank``: the minimum-norm answer is named).
        warn = n >= d or self.warn_rank
        w = whitening_matrix(self._keys, ridge=self.rescaling_.ridge, warn=warn).matrix[0]
        self.keys_, self.values_ = k, v
        self.metric_ = w @ w.mT
        return self

    def retrieve(self, queries: Any) -> torch.Tensor:
        """``q S⁺ Kᵀ V`` for queries ``(M, d)`` (or one ``(d,)`` query)."""
        q, single = check_states("queries", queries, self.keys_.shape[1], self.keys_.dtype)

        def recall(q: torch.Tensor) -> torch.Tensor:
            out = associate(
                q[0],
                self._keys,
                self._values,
                similarity="whitened_dot",
                separation="identity",
                metric=self.metric_,
                memory_budget=self.memory_budget,
            )
            assert isinstance(out, torch.Tensor)
            return out[None]

        out = self.rescaling_.answer(q[None], recall, "retrieve")[0]
        return _out(check_finite_result(out, "retrieve"), single)

    def energy(self, states: Any) -> torch.Tensor:
        """``E(ξ) = ½ ξᵀ (I − S⁺KᵀK) ξ`` per state (the squared distance to the key span)."""
        x, single = check_states("states", states, self.keys_.shape[1], self.keys_.dtype)
        projected = x @ self.metric_ @ (self._keys.mT @ self._keys)  # scale-free projection
        return _out(0.5 * ((x - projected) * x).sum(-1), single)


class HebbianMemory:
    """Classical Hopfield network (Hopfield 1982): ±1 patterns, Hebbian weights
    ``W = (1/d) Σ_μ ξᵘ ξᵘᵀ`` with zero diagonal, updates ``s_i ← sign(Σ_j W_ij s_j)``.

    Universal Hopfield form: ``W s = (1/d)(Kᵀ (K s) − N s)`` — dot similarity, identity
    separation, sign after the sum; computed by :func:`associate` without forming ``W``
    (except for asynchronous dynamics, which need its columns). Capacity: about ``0.138 d``
    patterns are retrieved with a few percent of bit errors (Amit, Gutfreund & Sompolinsky
    1985); ``d / (2 ln d)`` are fixed points without error (McEliece et al. 1987).

    Energy ``E(s) = −½ sᵀ W s``; an asynchronous update (one unit at a time) never increases
    it. Synchronous updates may enter 2-cycles; their Lyapunov function is ``−s(t)ᵀ W s(t−1)``.
    """

    def __init__(
        self,
        dynamics: str = "synchronous",
        max_steps: int = 100,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
    ) -> None:
        self.dynamics = dynamics
        self.max_steps = max_steps
        self.memory_budget = memory_budget
        self._check_settings()

    def _check_settings(self) -> None:
        """Validate the settings (at construction, and again at ``store``: they are attributes)."""
        check_choice("dynamics", self.dynamics, DYNAMICS)
        check_positive_int("max_steps", self.max_steps)
        check_positive("memory_budget", self.memory_budget)

    def store(self, patterns: Any) -> HebbianMemory:
        """Store ±1 patterns ``(N, d)``."""
        self._check_settings()
        self.patterns_ = check_patterns("patterns", patterns, binary=True)
        return self

    @property
    def weights_(self) -> torch.Tensor:
        """The ``d × d`` weight matrix ``(KᵀK − N I)/d`` (zero diagonal)."""
        k = self.patterns_
        n, d = k.shape
        return (k.mT @ k - n * torch.eye(d, dtype=k.dtype, device=k.device)) / d

    def field(self, states: Any) -> torch.Tensor:
        """Local fields ``W s = (1/d)(Kᵀ(Ks) − N s)`` per state."""
        k = self.patterns_
        s, single = check_states("states", states, k.shape[1], k.dtype)
        out = associate(s, k, k, memory_budget=self.memory_budget)
        assert isinstance(out, torch.Tensor)
        return _out((out - k.shape[0] * s) / k.shape[1], single)

    def retrieve(
        self, queries: Any, steps: int | None = None, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Run the dynamics from ``queries`` (±1) until a fixed point or ``steps`` updates
        (a step is one synchronous update or one asynchronous sweep over all units in a random
        order drawn from ``generator``)."""
        k = self.patterns_
        s, single = check_states("queries", queries, k.shape[1], k.dtype, binary=True)
        steps = self.max_steps if steps is None else check_positive_int("steps", steps)
        # Identity separation with dot similarity is (s Kᵀ) K = s (KᵀK): the d × d product is
        # formed once here, unscaled (integer entries, so float32 sums are exact; the sign of
        # the field is unchanged by the 1/d).
        n, d = k.shape
        weights = k.mT @ k - n * torch.eye(d, dtype=k.dtype, device=k.device)
        if self.dynamics == "asynchronous":
            for _ in range(steps):
                new = s.clone()
                for i in torch.randperm(d, generator=generator).tolist():
                    new[:, i] = sign_update(new @ weights[:, i], new[:, i])
                if torch.equal(new, s):
                    break
                s = new
            return _out(s, single)
        # Synchronous dynamics end in fixed points or 2-cycles (Goles et al. 1985): a state
        # stops being updated once it is in one.
        s = s.clone()
        active = torch.arange(s.shape[0], device=s.device)
        previous: torch.Tensor | None = None
        for _ in range(steps):
            current = s[active]
            new = sign_update(current @ weights, current)
            done = (new == current).all(dim=1)
            if previous is not None:
                done |= (new == previous).all(dim=1)
            s[active] = new
            previous, active = current[~done], active[~done]
            if active.numel() == 0:
                break
        return _out(s, single)

    def energy(self, states: Any) -> torch.Tensor:
        """``E(s) = −½ sᵀ W s = −(‖K s‖² − N‖s‖²) / (2d)`` per state."""
        k = self.patterns_
        s, single = check_states("states", states, k.shape[1], k.dtype)
        kks = associate(s, k, k, memory_budget=self.memory_budget)
        assert isinstance(kks, torch.Tensor)
        quad = (kks * s).sum(-1) - k.shape[0] * (s * s).sum(-1)
        return _out(-quad / (2 * k.shape[1]), single)


class DenseAssociativeMemory:
    """Dense associative memory with ``F(x) = xⁿ`` (Krotov & Hopfield 2016), ±1 patterns.

    Energy ``E(s) = −Σ_μ F(ξᵘ·s)``. Update of unit ``i`` (the sign that lowers ``E``):
    ``s_i ← sign(Σ_μ [F(ξ_iᵘ + aᵘ_i) − F(−ξ_iᵘ + aᵘ_i)])``, ``aᵘ_i = Σ_{j≠i} ξ_jᵘ s_j``.
    In Universal Hopfield form the field is ``Kᵀ A(K s) + s·Σ_μ B(ξᵘ·s)`` with polynomials
    ``A, B`` of degree ``n − 1`` (:func:`krotov_hopfield_coefficients`): dot similarity,
    power separation, one :func:`associate` call per power. ``n = 2`` is the Hebbian network.
    Error-free capacity ``d^{n−1} / (2 (2n−3)!! ln d)``.

    Synchronous dynamics update all units from the same state (the capacity criterion of
    Krotov & Hopfield: one update from a stored pattern leaves it unchanged); asynchronous
    dynamics update one unit at a time and never increase ``E`` (they hold the ``M × N``
    overlaps, so they are meant for small problems).
    """

    def __init__(
        self,
        power: int = 3,
        dynamics: str = "synchronous",
        max_steps: int = 1,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
    ) -> None:
        self.power = power
        self.dynamics = dynamics
        self.max_steps = max_steps
        self.memory_budget = memory_budget
        self._check_settings()

    def _check_settings(self) -> int:
        """Validate the settings (at construction, and again at ``store``: they are
        attributes); returns the power ``n``."""
        n = check_positive_int("power", self.power)
        if n < 2:
            raise ValueError(f"power: must be an integer >= 2, got {self.power!r}")
        check_choice("dynamics", self.dynamics, DYNAMICS)
        check_positive_int("max_steps", self.max_steps)
        check_positive("memory_budget", self.memory_budget)
        return n

    def store(self, patterns: Any) -> DenseAssociativeMemory:
        """Store ±1 patterns ``(N, d)``."""
        n = self._check_settings()
        self.patterns_ = check_patterns("patterns", patterns, binary=True)
        self._a, self._b = krotov_hopfield_coefficients(n)
        return self

    def field(self, states: Any) -> torch.Tensor:
        """``h = Kᵀ A(K s) + s Σ_μ B(ξᵘ·s)`` per state (streamed over the memories)."""
        k = self.patterns_
        s, single = check_states("states", states, k.shape[1], k.dtype)
        aug = torch.cat([k, torch.ones(k.shape[0], 1, dtype=k.dtype, device=k.device)], 1)
        h = torch.zeros_like(s)
        for p in range(self.power):
            a_p = float(self._a[p]) if p < len(self._a) else 0.0
            b_p = float(self._b[p]) if p < len(self._b) else 0.0
            if a_p == 0.0 and b_p == 0.0:
                continue
            if p == 0:
                sums = aug.sum(0, keepdim=True)
            else:
                out = associate(
                    s, k, aug, separation="power", power=p, memory_budget=self.memory_budget
                )
                assert isinstance(out, torch.Tensor)
                sums = out
            h = h + a_p * sums[:, :-1] + b_p * sums[:, -1:] * s
        return _out(h, single)

    def retrieve(
        self, queries: Any, steps: int | None = None, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Run ``steps`` (default ``max_steps``) updates from ±1 ``queries``."""
        k = self.patterns_
        s, single = check_states("queries", queries, k.shape[1], k.dtype, binary=True)
        steps = self.max_steps if steps is None else check_positive_int("steps", steps)
        for _ in range(steps):
            if self.dynamics == "synchronous":
                new = sign_update(self.field(s), s)
            else:
                new = self._sweep(s, generator)
            if torch.equal(new, s):
                break
            s = new
        return _out(s, single)

    def _sweep(self, s: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        k, n = self.patterns_, self.power
        s = s.clone()
        overlaps = s @ k.mT
        for i in torch.randperm(k.shape[1], generator=generator).tolist():
            xi = k[:, i]
            rest = overlaps - xi * s[:, i : i + 1]
            h = ((rest + xi) ** n - (rest - xi) ** n).sum(-1)
            new = sign_update(h, s[:, i])
            overlaps = overlaps + xi * (new - s[:, i]).unsqueeze(-1)
            s[:, i] = new
        return s

    def energy(self, states: Any) -> torch.Tensor:
        """``E(s) = −Σ_μ (ξᵘ·s)ⁿ`` per state (streamed: power separation, values = 1)."""
        k = self.patterns_
        s, single = check_states("states", states, k.shape[1], k.dtype)
        ones = torch.ones(k.shape[0], 1, dtype=k.dtype, device=k.device)
        out = associate(s, k, ones, separation="power", power=self.power)
        assert isinstance(out, torch.Tensor)
        return _out(-out[:, 0], single)


def dam_capacity_theory(d: float, power: int) -> float:
    """Krotov & Hopfield (2016) error-free capacity ``d^{n−1} / (2 (2n−3)!! ln d)``
    (``n = 2``: McEliece et al. 1987, ``d / (2 ln d)``)."""
    from scipy.special import factorial2

    double = factorial2(2 * power - 3, exact=True) if power > 1 else 1
    return float(d ** (power - 1) / (2 * double * np.log(d)))
