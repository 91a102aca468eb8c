"""One energy family of associative memories, from the projection to softmax.

Every member uses the same whitened similarity and differs only in the separation ``F``.

**Similarity.** For stored patterns ``K`` (``N × d``, rows ``k_i``) with Gram matrix
``G = K Kᵀ`` and covariance ``S = KᵀK``:

``s(ξ) = G^{-1/2} K ξ = K̃ ξ``,  ``K̃ = G^{+1/2} K = K S^{+1/2} = U Vᵀ``

for the thin SVD ``K = U Σ Vᵀ`` (numerical null space dropped: ``⁺`` is the pseudo-inverse).
``K̃`` is the polar factor of ``K``. Its rows ``k̃_i`` (the columns of ``Kᵀ G^{-1/2}``) are the
whitened patterns: orthonormal when ``N ≤ d``, a tight frame when ``N > d``. In both cases
``K̃ᵀK̃ = P = Kᵀ G⁺ K``, the orthogonal projection onto the span of the patterns.
:func:`whitened_patterns` builds ``K̃`` with the package's whitening
(:func:`attnreg.core.whitening.whitening_matrix`, R-SVD, so the error grows like ``κ(K)``,
not ``κ(K)²``). For ``N ≤ d`` it whitens ``Kᵀ``, whose covariance is the Gram matrix ``G``
(Gram whitening). For ``N > d`` it whitens ``K`` (covariance ``S``). The attention's whitened
dot ``k_iᵀ S⁺ ξ`` (:func:`attnreg.core.retrieval.whitened_metric`) is the same similarity read in
pattern coordinates: ``k_iᵀ S⁺ η = k̃_iᵀ ξ`` for ``η = S^{1/2} ξ``.

**Energy and step.** For a separation function ``F``:

``E_F(ξ) = −Σ_i F(s_i(ξ)) + ½ ξᵀξ``,  ``ξ ← ∇_ξ Σ_i F(s_i) = Σ_i F'(s_i) k̃_i = K̃ᵀ F'(K̃ ξ)``

This is the concave–convex procedure (Yuille & Rangarajan 2003) that Ramsauer et al. (2021,
"Hopfield Networks is All You Need") apply to the softmax energy. When ``Σ F(s_i)`` is convex,
the step never raises ``E_F``, and it lowers it by at least ``½ ‖ξ_new − ξ‖²``:
``E(ξ_new) ≤ ½‖ξ_new‖² − ΣF(s(ξ)) − ξ_newᵀ(ξ_new − ξ) = E(ξ) − ½‖ξ_new − ξ‖²``
(tangent plane of the convex term). The family:

* ``"quadratic"`` — ``F(s) = s²/2``. Here ``E = ½ ξᵀ(I − P)ξ`` (the squared distance to the
  pattern span) and one step is the projection ``Pξ``. This is the pseudo-inverse memory of
  Kohonen (1972) and Personnaz, Guyon & Dreyfus (1985). On its own context it is the
  OLS-Transformer's attention: the hat matrix, with the patterns the feature columns of the
  design (Tan & Zhao, arXiv 2604.13656). Capacity ``d``: every stored pattern is a fixed
  point while ``N ≤ d``. Queries with flipped bits are recalled up to a fraction of ``d``.
* ``"power"`` — ``F(s) = |s|ⁿ/n`` (``n ≥ 2``; ``n = 2`` is the quadratic), with
  ``F'(s) = sign(s)|s|ⁿ⁻¹``. This is the dense associative memory of Krotov & Hopfield
  (2016), with polynomial capacity ``∝ d^{n−1}``. **Sign convention:** the absolute value keeps
  ``F`` convex for odd ``n`` too, so the step is a concave–convex step for every ``n``. For
  even ``n`` it is ``sⁿ/n``. ``F'`` is odd, so an anti-aligned pattern pulls with the opposite
  sign, as ``s^{n−1}`` does for even ``n``. Plain ``s³/3`` would not be convex, and the
  descent guarantee would be lost. The energy is unbounded below for ``n ≥ 3``: iterating from
  ``‖s‖ > 1`` grows the state like ``|s|^{(n−1)^t}``. Use one step, or a sign read-out, as
  Krotov & Hopfield do.
* ``"softmax"`` — the normalised exponential: ``Σ_i F(s_i)`` becomes
  ``β⁻¹ log Σ_i exp(β s_i)``, and ``E = −β⁻¹ log Σ_i exp(β s_i) + ½ ξᵀξ + β⁻¹ log N + ½ M²``
  with ``M = max_i ‖k̃_i‖`` (Ramsauer et al. 2021, eq. 2; the constant makes ``E ≥ 0``). One
  step is softmax attention on the whitened patterns, ``K̃ᵀ softmax(β K̃ ξ)``. Its capacity is
  exponential in ``d`` (Demircigil et al. 2017). The whitened similarities obey
  ``‖s‖² = ξᵀPξ ≤ ‖ξ‖²`` whatever ``N`` is, so the self-similarity of a stored pattern shrinks
  like ``d/√N`` once ``N > d``. A fixed ``β`` then blurs the retrieval; ``β ∝ √N`` (the
  ``"mean"`` covariance ``S/N`` of the package's whitening) keeps it sharp.

**Read-outs.** The step's result lives in whitened coordinates: the attractor of a strongly
separated pattern ``k_j`` is (a multiple of) ``k̃_j``, not ``k_j``. The linear decoder
``S^{1/2} = K̃ᵀ K`` maps every ``k̃_i`` back to ``k_i`` exactly. On the step's result it gives
``S^{1/2} K̃ᵀ F'(s) = Kᵀ F'(s)``: the Universal Hopfield form (Millidge et al. 2022) with this
similarity and the raw patterns as values (``readout="pattern"`` of :meth:`EnergyMemory.step`).

Steps run on :func:`attnreg.core.retrieval.associate`: dot similarity on the whitened patterns,
with identity, power ``n − 1`` or softmax separation. Odd ``n`` takes a streamed loop over blocks
of patterns instead, because the core's ``power`` separation is ``sⁿ⁻¹`` without the sign.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from attnreg.core.retrieval import associate
from attnreg.core.streamed import DEFAULT_MEMORY_BUDGET, chunk_sizes
from attnreg.core.validation import as_tensor, check_choice, check_positive, check_positive_int
from attnreg.core.whitening import whitening_matrix
from attnreg.memory.base import check_patterns, check_states

ENERGIES = ("quadratic", "power", "softmax")
READOUTS = ("state", "pattern")


def _root_pinv(x: torch.Tensor, rtol: float | None) -> torch.Tensor:
    """``(XᵀX)^{+1/2}`` (``(B, d, d)``) from the package's whitening ``L = V Λ^{-1/2}`` of ``x``
    (``(B, N, d)``): ``V Λ^{-1/2} Vᵀ = L Λ^{1/2} Lᵀ`` over the kept directions."""
    white = whitening_matrix(x, rtol=rtol, warn=False, checked=True)
    eig = white.eigenvalues
    assert eig is not None  # the SVD path reports the eigenvalues
    lmat = white.matrix
    return (lmat * eig.clamp_min(0).sqrt().unsqueeze(-2)) @ lmat.mT


def whitened_patterns(patterns: Any, *, rtol: float | None = None) -> torch.Tensor:
    """The whitened patterns ``K̃ = G^{+1/2} K = K S^{+1/2}`` of ``patterns`` ``K``: ``(N, d)``,
    or ``(B, N, d)`` for ``B`` memories at once.

    For ``N ≤ d``, the Gram whitening ``G^{+1/2} K`` with ``G = K Kᵀ``: the whitening of ``Kᵀ``,
    whose covariance is ``G``. For ``N > d``, the package's covariance whitening
    ``K S^{+1/2}``. Both are the polar factor ``U Vᵀ`` of the thin SVD ``K = U Σ Vᵀ``. Directions
    with singular value at or below ``rtol · σ_max`` (default ``max(N, d) · eps``) are dropped,
    which gives the pseudo-inverse. The rows are orthonormal for ``N ≤ d`` at full rank, and
    ``K̃ᵀK̃`` is the projection onto the pattern span.
    """
    k = as_tensor("patterns", patterns, ndim=(2, 3))
    if k.shape[-2] == 0 or k.shape[-1] == 0:
        raise ValueError(f"patterns: need N >= 1 patterns of d >= 1 features, got {tuple(k.shape)}")
    if not k.is_floating_point():
        k = k.double()
    single = k.ndim == 2
    kb = k.unsqueeze(0) if single else k
    n, d = kb.shape[-2], kb.shape[-1]
    if n <= d:
        out = _root_pinv(kb.mT, rtol) @ kb  # G^{+1/2} K, G = K Kᵀ
    else:
        out = kb @ _root_pinv(kb, rtol)  # K S^{+1/2}, S = KᵀK
    return out[0] if single else out


def separation_value(s: torch.Tensor, energy: str, power: int = 3) -> torch.Tensor:
    """``F(s)`` elementwise for ``"quadratic"`` (``s²/2``) and ``"power"`` (``|s|ⁿ/n``).
    ``"softmax"`` has no per-pattern ``F``: its sum is the log-sum-exp of :func:`family_energy`.
    """
    check_choice("energy", energy, ("quadratic", "power"))
    n = 2 if energy == "quadratic" else check_positive_int("power", power)
    return s.abs().pow(n) / n


def separation_derivative(s: torch.Tensor, energy: str, power: int = 3) -> torch.Tensor:
    """``F'(s)`` elementwise: ``s`` (quadratic), ``sign(s)|s|ⁿ⁻¹`` (power)."""
    check_choice("energy", energy, ("quadratic", "power"))
    n = 2 if energy == "quadratic" else check_positive_int("power", power)
    return s if n == 2 else s.sign() * s.abs().pow(n - 1)


def _check_family(energy: str, power: int, beta: float) -> None:
    check_choice("energy", energy, ENERGIES)
    if energy == "power" and (check_positive_int("power", power) < 2):
        raise ValueError(f"power: must be an integer >= 2, got {power!r}")
    if energy == "softmax":
        check_positive("beta", beta)


def family_energy(
    states: torch.Tensor,
    whitened: torch.Tensor,
    energy: str,
    *,
    power: int = 3,
    beta: float = 1.0,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> torch.Tensor:
    """``E_F(ξ)`` (``(M,)``) for states ``(M, d)`` and whitened patterns ``K̃`` (``(N, d)``).
    A leading batch axis on both (``(B, M, d)``, ``(B, N, d)``) gives ``(B, M)``.

    The quadratic energy is ``½ ‖ξ − K̃ᵀ(K̃ξ)‖²``, the same number as
    ``−½‖s‖² + ½‖ξ‖²`` (since ``K̃ᵀK̃ = P``) without its cancellation near the span. The power
    energy is ``−Σ_i |s_i|ⁿ/n + ½‖ξ‖²``. The softmax energy is
    ``−β⁻¹ log Σ_i exp(β s_i) + ½‖ξ‖² + β⁻¹ log N + ½ max_i ‖k̃_i‖²``. Power and softmax
    stream over blocks of patterns, so no ``M × N`` matrix is held whole.
    """
    _check_family(energy, power, beta)
    half = 0.5 * (states * states).sum(-1)
    if energy == "quadratic":
        residual = states - (states @ whitened.mT) @ whitened
        return 0.5 * (residual * residual).sum(-1)
    m, n = states.shape[-2], whitened.shape[-2]
    batch = states.shape[0] if states.ndim == 3 else 1
    _, block = chunk_sizes(batch, m, n, whitened.element_size(), memory_budget)
    if energy == "power":
        total = torch.zeros_like(half)
        for start in range(0, n, block):
            s = states @ whitened[..., start : start + block, :].mT
            total = total + separation_value(s, "power", power).sum(-1)
        return half - total
    best = torch.full_like(half, -math.inf)
    acc = torch.zeros_like(half)
    for start in range(0, n, block):
        scores = beta * (states @ whitened[..., start : start + block, :].mT)
        new_best = torch.maximum(best, scores.amax(-1))
        acc = acc * torch.exp(best - new_best) + torch.exp(scores - new_best.unsqueeze(-1)).sum(-1)
        best = new_best
    lse = best + torch.log(acc)
    big_m = whitened.norm(dim=-1).amax(-1, keepdim=True)
    if whitened.ndim == 2:
        big_m = big_m[0]
    return -lse / beta + half + math.log(n) / beta + 0.5 * big_m**2


def family_step(
    states: torch.Tensor,
    whitened: torch.Tensor,
    energy: str,
    *,
    values: torch.Tensor | None = None,
    power: int = 3,
    beta: float = 1.0,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> torch.Tensor:
    """One step ``Σ_i F'(s_i) v_i`` with ``s = K̃ ξ`` for states ``(M, d)`` (or ``(B, M, d)``
    with whitened patterns ``(B, N, d)``: ``B`` memories at once).

    ``values`` ``V`` (``(N, dv)``) defaults to ``K̃``, which gives the concave–convex step
    ``ξ ← K̃ᵀ F'(K̃ξ)``. With ``V = K`` it is the same step read out in pattern coordinates.
    Softmax weights are ``softmax(β s)``. Computed by :func:`attnreg.core.retrieval.associate`
    (dot similarity; identity, power ``n − 1`` or softmax separation). Odd ``n`` uses a streamed
    loop over pattern blocks with ``F'(s) = sign(s)|s|ⁿ⁻¹``.
    """
    _check_family(energy, power, beta)
    v = whitened if values is None else values
    n = 2 if energy == "quadratic" else power
    if energy == "softmax":
        out = associate(
            states, whitened, v, separation="softmax", beta=beta, memory_budget=memory_budget
        )
    elif n == 2:
        out = associate(states, whitened, v, separation="identity", memory_budget=memory_budget)
    elif n % 2 == 0:  # sign(s)|s|^{n-1} = s^{n-1} for odd n - 1
        out = associate(
            states, whitened, v, separation="power", power=n - 1, memory_budget=memory_budget
        )
    else:
        m, count = states.shape[-2], whitened.shape[-2]
        batch = states.shape[0] if states.ndim == 3 else 1
        _, block = chunk_sizes(batch, m, count, whitened.element_size(), memory_budget)
        out = states.new_zeros(*states.shape[:-1], v.shape[-1])
        for start in range(0, count, block):
            s = states @ whitened[..., start : start + block, :].mT
            out = out + separation_derivative(s, "power", n) @ v[..., start : start + block, :]
    assert isinstance(out, torch.Tensor)
    return out


class EnergyMemory:
    """Auto-associative memory on the energy ``E_F(ξ) = −Σ_i F(s_i) + ½ ξᵀξ`` with the whitened
    similarity ``s = G^{-1/2} K ξ`` (module docstring for the formulas and sources).

    ``energy``: ``"quadratic"`` (projection, pseudo-inverse memory), ``"power"`` (``|s|ⁿ/n``,
    ``power`` = ``n``) or ``"softmax"`` (inverse temperature ``beta``). ``store(K)`` keeps the
    patterns and their whitening ``K̃`` (``whitened_``); ``step`` is one concave–convex update;
    ``retrieve`` iterates it; ``energy(ξ)`` evaluates ``E_F``; ``decode`` maps states to pattern
    coordinates (``S^{1/2} ξ``).
    """

    def __init__(
        self,
        energy: str = "quadratic",
        power: int = 3,
        beta: float = 1.0,
        max_steps: int = 1,
        rtol: float | None = None,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
    ) -> None:
        self.energy_kind = energy
        self.power = power
        self.beta = beta
        self.max_steps = max_steps
        self.rtol = rtol
        self.memory_budget = memory_budget

    def __repr__(self) -> str:
        extra = {"power": f", power={self.power}", "softmax": f", beta={self.beta:g}"}
        return f"EnergyMemory({self.energy_kind!r}{extra.get(self.energy_kind, '')})"

    def store(self, patterns: Any) -> EnergyMemory:
        """Store patterns ``K`` (``(N, d)``) and compute ``K̃ = G^{+1/2} K``."""
        _check_family(self.energy_kind, self.power, self.beta)
        check_positive_int("max_steps", self.max_steps)
        self.patterns_ = check_patterns("patterns", patterns)
        if not self.patterns_.is_floating_point():
            self.patterns_ = self.patterns_.double()
        self.whitened_ = whitened_patterns(self.patterns_, rtol=self.rtol)
        return self

    def _states(self, states: Any, name: str = "states") -> tuple[torch.Tensor, bool]:
        k = self.patterns_
        return check_states(name, states, k.shape[1], k.dtype)

    def _kw(self) -> dict[str, Any]:
        return {"power": self.power, "beta": self.beta, "memory_budget": self.memory_budget}

    def similarity(self, states: Any) -> torch.Tensor:
        """``s = K̃ ξ``: ``(M, N)`` for states ``(M, d)`` (``(N,)`` for one state)."""
        x, single = self._states(states)
        s = x @ self.whitened_.mT
        return s[0] if single else s

    def energy(self, states: Any) -> torch.Tensor:
        """``E_F(ξ)`` per state (:func:`family_energy`)."""
        x, single = self._states(states)
        e = family_energy(x, self.whitened_, self.energy_kind, **self._kw())
        return e[0] if single else e

    def step(self, states: Any, readout: str = "state") -> torch.Tensor:
        """One update ``K̃ᵀ F'(K̃ξ)`` (``readout="state"``). With ``readout="pattern"`` the
        update is read out in pattern coordinates, ``S^{1/2} K̃ᵀ F'(s) = Kᵀ F'(s)`` (values
        ``K``)."""
        check_choice("readout", readout, READOUTS)
        x, single = self._states(states)
        values = self.patterns_ if readout == "pattern" else None
        out = family_step(x, self.whitened_, self.energy_kind, values=values, **self._kw())
        return out[0] if single else out

    def retrieve(self, queries: Any, steps: int | None = None, readout: str = "state") -> Any:
        """``steps`` updates (default ``max_steps``) from ``queries``; the last one read out
        as ``readout`` (``"state"`` or ``"pattern"``)."""
        check_choice("readout", readout, READOUTS)
        x, single = self._states(queries, "queries")
        steps = self.max_steps if steps is None else check_positive_int("steps", steps)
        for _ in range(steps - 1):
            x = family_step(x, self.whitened_, self.energy_kind, **self._kw())
        values = self.patterns_ if readout == "pattern" else None
        x = family_step(x, self.whitened_, self.energy_kind, values=values, **self._kw())
        return x[0] if single else x

    def decode(self, states: Any) -> torch.Tensor:
        """``S^{1/2} ξ`` with ``S^{1/2} = K̃ᵀ K``: maps each whitened pattern ``k̃_i`` to
        ``k_i``."""
        x, single = self._states(states)
        out = (x @ self.whitened_.mT) @ self.patterns_
        return out[0] if single else out

    def state_bytes(self, readout: str = "pattern") -> int:
        """Bytes of state a retrieval reads. The quadratic energy's step (and its read-out) is
        a linear map, ``P`` or ``S^{1/2}``: ``d·d`` numbers whatever ``N`` is. Power and softmax
        read ``K̃`` (``N·d``), plus ``K`` (another ``N·d``) for the pattern read-out."""
        check_choice("readout", readout, READOUTS)
        n, d = self.whitened_.shape
        size = self.whitened_.element_size()
        if self.energy_kind == "quadratic":
            return d * d * size
        return (2 if readout == "pattern" else 1) * n * d * size

    def linear_map(self, readout: str = "pattern") -> torch.Tensor:
        """The quadratic energy's step as one ``d × d`` matrix acting on row states:
        ``P = K̃ᵀK̃`` (``"state"``) or ``S^{1/2} = K̃ᵀK`` (``"pattern"``)."""
        check_choice("readout", readout, READOUTS)
        if self.energy_kind != "quadratic":
            raise ValueError(f"linear_map: only the quadratic energy is linear, not {self!r}")
        values = self.patterns_ if readout == "pattern" else self.whitened_
        return self.whitened_.mT @ values
