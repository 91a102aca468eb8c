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

Steps, similarities, read-outs and energies run on the attention core
(:func:`attnreg.core.associate`): dot similarity on the whitened patterns, with identity,
signed power ``sign(s)|s|ⁿ⁻¹`` (the core's ``power`` for even ``n``, whose odd exponent keeps
the sign; ``signed_power`` for odd ``n``) or softmax separation. The power energy's sum comes
from the step by Euler's theorem for the homogeneous ``F``:
``Σ_i |s_i|ⁿ = Σ_i s_i F'(s_i) = ξᵀ K̃ᵀF'(K̃ξ)``; the softmax energy, summed without cancellation,
from :func:`attnreg.memory.softmax_energy.softmax_energy`.

**Extreme magnitudes** (entries at 1e±200 … 1e±300): the scale-equivariant answer, or a
``ValueError`` naming the argument; never silent zeros or NaN.

* Patterns: ``K̃`` does not depend on the scale of ``K`` (``K̃(aK) = K̃(K)``, ``a > 0``), so
  patterns outside ``2^±(maxexp/4)`` are divided by a power of two before the whitening
  (:func:`attnreg.core.scaling.power_of_two_scale`; exact in binary floating point). Values
  (the pattern read-out ``K``) are rescaled the same way and the factor is put back.
* Quadratic and power: ``F`` is homogeneous, so ``F'(2ᵉ s) = 2^{e(n−1)} F'(s)`` and
  ``F(2ᵉ s) = 2^{en} F(s)``. When a state's largest entry lies outside
  ``2^±(maxexp/(4(n−1)))`` (for the energies: always), each state is divided by the power of
  two ``2ᵉ`` of its largest entry, computed at unit scale, and the exact factor is put back.
  An answer beyond the float range is a ``ValueError`` naming the states: overflow (e.g.
  ``|s|ⁿ⁻¹`` of states at 1e300), or underflow of a non-zero answer (e.g. the cube of states
  at 1e-200).
* Softmax: not scale-equivariant (``softmax(β · 2ᵉ s)`` sharpens with ``e``), so states are
  used as given. Scores ``β s`` that overflow are a ``ValueError`` naming the states; finite
  scores, however large or small, give the correct weights (a step is then a convex
  combination of the values). Its energy's ``½‖ξ‖²`` overflowing is a ``ValueError``; that
  term underflowing is not an error (the other terms dominate).
"""

from __future__ import annotations

from typing import Any

import torch

from attnreg.core import associate
from attnreg.core.scaling import (
    exponent,
    is_ordinary,
    ordinary_limit,
    power_of_two_scale,
    row_exponents,
    times_power_of_two,
)
from attnreg.core.streamed import DEFAULT_MEMORY_BUDGET
from attnreg.core.validation import as_tensor, check_choice, check_positive, check_positive_int
from attnreg.core.whitening import whitening_matrix
from attnreg.memory.base import check_patterns, check_states
from attnreg.memory.softmax_energy import softmax_energy

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
    ``K̃ᵀK̃`` is the projection onto the pattern span. Patterns at extreme magnitudes are first
    divided by a power of two (module docstring), so ``K̃`` is the same at any scale.
    """
    k = as_tensor("patterns", patterns, ndim=(2, 3))
    if k.shape[-2] == 0 or k.shape[-1] == 0:
        raise ValueError(f"patterns: need N >= 1 patterns of d >= 1 features, got {tuple(k.shape)}")
    if not k.is_floating_point():
        k = k.double()
    single = k.ndim == 2
    kb = k.unsqueeze(0) if single else k
    scale = power_of_two_scale(kb)  # K̃ is invariant to the patterns' scale
    if bool((scale != 1).any()):
        kb = kb / scale
    n, d = kb.shape[-2], kb.shape[-1]
    if n <= d:
        out = _root_pinv(kb.mT, rtol) @ kb  # G^{+1/2} K, G = K Kᵀ
    else:
        out = kb @ _root_pinv(kb, rtol)  # K S^{+1/2}, S = KᵀK
    return out[0] if single else out


def _check_family(energy: str, power: int, beta: float) -> None:
    check_choice("energy", energy, ENERGIES)
    if energy == "power" and (check_positive_int("power", power) < 2):
        raise ValueError(f"power: must be an integer >= 2, got {power!r}")
    if energy == "softmax":
        check_positive("beta", beta)


def _restore(
    unit: torch.Tensor, shift: torch.Tensor, name: str, *, underflow: bool = True
) -> torch.Tensor:
    """``unit · 2^shift`` per row, or a ``ValueError`` naming ``name`` when it leaves the float
    range: an infinite entry (overflow), or — with ``underflow`` — a row that is non-zero at
    unit scale but below the smallest normal number after the shift."""
    out = times_power_of_two(unit, shift)
    if not bool(torch.isfinite(out).all()):
        raise ValueError(
            f"{name}: the result overflows {unit.dtype} at this magnitude (largest factor "
            f"2^{int(shift.max())} on the unit-scale answer); scale the {name} down"
        )
    if underflow:
        tiny = torch.finfo(unit.dtype).tiny
        lost = (unit.abs().amax(-1) > 0) & (out.abs().amax(-1) < tiny)
        if bool(lost.any()):
            raise ValueError(
                f"{name}: the result underflows {unit.dtype} at this magnitude (smallest "
                f"factor 2^{int(shift.min())} on the unit-scale answer); scale the {name} up"
            )
    return out


def _value_exponent(values: torch.Tensor) -> torch.Tensor:
    """The exponent ``e`` of :func:`power_of_two_scale` (0 at ordinary magnitudes): per memory
    ``(B, 1, 1)`` for ``(B, N, dv)`` values, ``(1, 1)`` for ``(N, dv)``."""
    scale = power_of_two_scale(values if values.ndim == 3 else values.unsqueeze(0))
    e = exponent(scale)
    return e if values.ndim == 3 else e[0]


def _associate(
    states: torch.Tensor,
    whitened: torch.Tensor,
    values: torch.Tensor,
    energy: str,
    n: int,
    beta: float,
    memory_budget: int,
) -> torch.Tensor:
    """``Σ_i F'(s_i) v_i`` (softmax: ``softmax(β s)``) by the core, as given."""
    if energy == "softmax":
        kw: dict[str, Any] = {"separation": "softmax", "beta": beta}
    else:  # F'(s) = sign(s)|s|ⁿ⁻¹: the core's power separation keeps the sign for odd n − 1
        separation = "identity" if n == 2 else "power" if n % 2 == 0 else "signed_power"
        kw = {"separation": separation, "power": max(1, n - 1)}
    out = associate(states, whitened, values, memory_budget=memory_budget, **kw)
    assert isinstance(out, torch.Tensor)
    return out


def _step(
    states: torch.Tensor,
    whitened: torch.Tensor,
    energy: str,
    values: torch.Tensor | None,
    power: int,
    beta: float,
    memory_budget: int,
    name: str,
) -> torch.Tensor:
    """:func:`family_step` with the argument name ``name`` in its errors."""
    v = whitened if values is None else values
    n = 2 if energy == "quadratic" else power
    # K̃ has rows of norm ≤ 1: only given values can need rescaling
    limit = ordinary_limit(states.dtype)
    plain_values = values is None or is_ordinary(values.abs().amax(dim=(-2, -1)), limit)
    power_limit = ordinary_limit(states.dtype, n - 1)
    if energy != "softmax" and plain_values and is_ordinary(states.abs().amax(-1), power_limit):
        # ordinary magnitudes: |s|ⁿ⁻¹ stays within 2^±(maxexp/4), nothing to rescale
        return _associate(states, whitened, v, energy, n, beta, memory_budget)
    e_v = torch.zeros((), dtype=torch.int32) if plain_values else _value_exponent(v)
    if bool((e_v != 0).any()):
        v = times_power_of_two(v, -e_v)
    if energy == "softmax":
        out = _associate(states, whitened, v, energy, n, beta, memory_budget)
        if not bool(torch.isfinite(out).all()):
            raise ValueError(
                f"{name}: the softmax scores β·s overflow {states.dtype} (β = {beta:g}, "
                f"largest |ξ| = {float(states.abs().max()):.3g}); scale the {name} down"
            )
        return _restore(out, e_v, name) if bool((e_v != 0).any()) else out
    e = row_exponents(states)
    unit = _associate(times_power_of_two(states, -e), whitened, v, energy, n, beta, memory_budget)
    return _restore(unit, (n - 1) * e + e_v, name)


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
    Softmax weights are ``softmax(β s)``. Computed by :func:`attnreg.core.associate` (dot
    similarity; identity, signed power ``sign(s)|s|ⁿ⁻¹`` or softmax separation), at unit scale
    for the homogeneous ``F`` (module docstring: extreme magnitudes).
    """
    _check_family(energy, power, beta)
    return _step(states, whitened, energy, values, power, beta, memory_budget, "states")


def family_decode(
    states: torch.Tensor,
    whitened: torch.Tensor,
    patterns: torch.Tensor,
    *,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> torch.Tensor:
    """``S^{1/2} ξ = Σ_i (k̃_iᵀ ξ) k_i`` for states ``(M, d)``, whitened patterns ``K̃`` and
    patterns ``K`` (``(N, d)``; or ``(B, …)`` for ``B`` memories): maps each ``k̃_i`` to
    ``k_i``, and a state-read-out step to its pattern read-out. The core's identity separation
    with values ``K``, at unit scale (module docstring: extreme magnitudes)."""
    return _step(states, whitened, "quadratic", patterns, 2, 1.0, memory_budget, "states")


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
    energy is ``½‖ξ‖² − Σ_i |s_i|ⁿ/n`` with ``Σ_i |s_i|ⁿ = ξᵀ K̃ᵀF'(K̃ξ)`` (Euler's theorem for
    the homogeneous ``F``; its rounding is of the order of the direct sum's, whose terms carry
    the cancellation of ``s_i`` too). The softmax energy is
    ``−β⁻¹ log Σ_i exp(β s_i) + ½‖ξ‖² + β⁻¹ log N + ½ max_i ‖k̃_i‖²``, summed without
    cancellation by :func:`attnreg.memory.softmax_energy.softmax_energy` (its scores from the
    core, a block of states at a time). The quadratic and power terms come from the attention
    core, which streams over the patterns (no ``M × N`` matrix is held whole); extreme
    magnitudes as in the module docstring.
    """
    _check_family(energy, power, beta)
    if energy == "softmax":
        return softmax_energy(states, whitened, beta, memory_budget)
    e = row_exponents(states)
    x = times_power_of_two(states, -e)
    half = 0.5 * (x * x).sum(-1, keepdim=True)
    step = _step(x, whitened, energy, None, power, beta, memory_budget, "states")
    if energy == "quadratic":
        residual = x - step
        return _restore(0.5 * (residual * residual).sum(-1, keepdim=True), 2 * e, "states")[..., 0]
    total = (x * step).sum(-1, keepdim=True) / power
    quadratic = _restore(half, 2 * e, "states", underflow=False)
    polynomial = _restore(total, power * e, "states", underflow=False)
    lost = (half > 0) & (quadratic.abs() < torch.finfo(x.dtype).tiny)
    lost &= polynomial.abs() < torch.finfo(x.dtype).tiny
    if bool(lost.any()):
        raise ValueError(
            f"states: the energy underflows {x.dtype} at this magnitude; scale the states up"
        )
    return (quadratic - polynomial)[..., 0]


class EnergyMemory:
    """Auto-associative memory on the energy ``E_F(ξ) = −Σ_i F(s_i) + ½ ξᵀξ`` with the whitened
    similarity ``s = G^{-1/2} K ξ`` (module docstring for the formulas and sources).

    ``energy``: ``"quadratic"`` (projection, pseudo-inverse memory), ``"power"`` (``|s|ⁿ/n``,
    ``power`` = ``n``) or ``"softmax"`` (inverse temperature ``beta``). ``store(K)`` keeps the
    patterns and their whitening ``K̃`` (``whitened_``); ``step`` is one concave–convex update;
    ``retrieve`` iterates it; ``energy(ξ)`` evaluates ``E_F``; ``decode`` maps states to pattern
    coordinates (``S^{1/2} ξ``). At extreme magnitudes every method gives the scale-equivariant
    answer (quadratic, power; softmax as computed) or a ``ValueError`` naming the argument,
    never silent zeros or NaN (module docstring).
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
        """``s = K̃ ξ``: ``(M, N)`` for states ``(M, d)`` (``(N,)`` for one state), the weights
        of the core's identity separation."""
        x, single = self._states(states)
        e = row_exponents(x)
        values = x.new_zeros(self.whitened_.shape[0], 1)  # the weights do not depend on them
        _, unit = associate(times_power_of_two(x, -e), self.whitened_, values, return_weights=True)
        s = _restore(unit, e, "states")
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
        out = self._step(x, readout, "states")
        return out[0] if single else out

    def _step(self, x: torch.Tensor, readout: str, name: str) -> torch.Tensor:
        values = self.patterns_ if readout == "pattern" else None
        kw = self._kw()
        return _step(x, self.whitened_, self.energy_kind, values, name=name, **kw)

    def retrieve(self, queries: Any, steps: int | None = None, readout: str = "state") -> Any:
        """``steps`` updates (default ``max_steps``) from ``queries``; the last one read out
        as ``readout`` (``"state"`` or ``"pattern"``)."""
        check_choice("readout", readout, READOUTS)
        x, single = self._states(queries, "queries")
        steps = self.max_steps if steps is None else check_positive_int("steps", steps)
        for _ in range(steps - 1):
            x = self._step(x, "state", "queries")
        x = self._step(x, readout, "queries")
        return x[0] if single else x

    def decode(self, states: Any) -> torch.Tensor:
        """``S^{1/2} ξ`` with ``S^{1/2} = K̃ᵀ K``: maps each whitened pattern ``k̃_i`` to
        ``k_i`` (:func:`family_decode`)."""
        x, single = self._states(states)
        out = family_decode(x, self.whitened_, self.patterns_, memory_budget=self.memory_budget)
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
