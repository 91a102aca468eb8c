"""One energy family of associative memories, from the projection to softmax.

Every member uses the same whitened similarity and differs only in the separation ``F``.

**Similarity.** For stored patterns ``K`` (``N × d``, rows ``k_i``) with Gram matrix
``G = K Kᵀ`` and covariance ``S = KᵀK``:

``s(ξ) = G^{-1/2} K ξ = K̃ ξ``,  ``K̃ = G^{+1/2} K = K S^{+1/2} = U Vᵀ``

for the thin SVD ``K = U Σ Vᵀ`` (numerical null space dropped: ``⁺`` is the pseudo-inverse).
``K̃`` is the polar factor of ``K``. Its rows ``k̃_i`` (the columns of ``Kᵀ G^{-1/2}``) are the
whitened patterns: orthonormal when ``N ≤ d``, a tight frame when ``N > d``. In both cases
``K̃ᵀK̃ = P = Kᵀ G⁺ K``, the orthogonal projection onto the span of the patterns.
:func:`~attnreg.memory.whitened.whitened_patterns` builds ``K̃`` with the package's whitening
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
  combination of the values). Its energy overflowing (``½‖ξ − k̃*‖²`` beyond the float range)
  is a ``ValueError``; a term underflowing is not an error.
"""

from __future__ import annotations

from typing import Any

import torch

from attnreg.core import associate
from attnreg.core.scaling import row_exponents, times_power_of_two
from attnreg.core.streamed import DEFAULT_MEMORY_BUDGET
from attnreg.core.validation import check_choice, check_positive_int
from attnreg.memory.base import check_patterns, check_states
from attnreg.memory.family import (
    ENERGIES,
    check_family,
    family_decode,
    family_energy,
    family_step,
    restore_scale,
)
from attnreg.memory.whitened import whitened_patterns

__all__ = [
    "ENERGIES",
    "READOUTS",
    "EnergyMemory",
    "family_decode",
    "family_energy",
    "family_step",
    "whitened_patterns",
]

READOUTS = ("state", "pattern")


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
        check_family(self.energy_kind, self.power, self.beta)
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
        s = restore_scale(unit, e, "states")
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
        return family_step(x, self.whitened_, self.energy_kind, values=values, name=name, **kw)

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
