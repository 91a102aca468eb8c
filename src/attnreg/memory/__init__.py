"""Associative memories in the Universal Hopfield form, with their energies.

``retrieve(q) = Vᵀ sep(β · sim(K, q))`` (Millidge et al. 2022) on the chunked
:func:`attnreg.core.attention` kernel:

* :class:`PseudoInverseMemory` — regression memory (whitened dot, identity): capacity ``d``;
* :class:`HebbianMemory` — Hopfield (1982): capacity ``0.138 d`` / ``d / (2 ln d)``;
* :class:`DenseAssociativeMemory` — Krotov & Hopfield (2016), ``F(x) = xⁿ``: ``∝ d^{n−1}``;
* :class:`ModernHopfield` — softmax (Demircigil et al. 2017; Ramsauer et al. 2020):
  exponential in ``d``;
* :class:`UniversalHopfieldMemory` — any similarity × separation cell of the grid;
* :class:`EnergyMemory` — one energy ``E_F(ξ) = −Σ_i F(s_i) + ½ ξᵀξ`` with the whitened
  similarity ``s = G^{-1/2} K ξ``: ``F`` quadratic (the projection, capacity ``d``), ``|s|ⁿ/n``
  (polynomial) or softmax (exponential) — :mod:`attnreg.memory.energy`.

:class:`MemoryRegressor` reads a hetero-associative memory as an in-context regressor
(``predict(x_ctx, y_ctx, x_query)``: keys ``x``, values ``y``): the pseudo-inverse memory is the
OLS / ridge prediction, one modern Hopfield step the softmax kernel smoother.
"""

from attnreg.memory.base import krotov_hopfield_coefficients, polynomial_associate
from attnreg.memory.classical import (
    DenseAssociativeMemory,
    HebbianMemory,
    PseudoInverseMemory,
    dam_capacity_theory,
)
from attnreg.memory.energy import EnergyMemory
from attnreg.memory.family import ENERGIES, family_decode, family_energy, family_step
from attnreg.memory.modern import GRID_SIMILARITIES, ModernHopfield, UniversalHopfieldMemory
from attnreg.memory.regressor import MemoryRegressor
from attnreg.memory.whitened import whitened_patterns

__all__ = [
    "ENERGIES",
    "GRID_SIMILARITIES",
    "DenseAssociativeMemory",
    "EnergyMemory",
    "HebbianMemory",
    "MemoryRegressor",
    "ModernHopfield",
    "PseudoInverseMemory",
    "UniversalHopfieldMemory",
    "dam_capacity_theory",
    "family_decode",
    "family_energy",
    "family_step",
    "krotov_hopfield_coefficients",
    "polynomial_associate",
    "whitened_patterns",
]
