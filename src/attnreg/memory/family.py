"""The energy family's step, decode and energy as functions of states and whitened patterns
(formulas, sources and the extreme-magnitude contract in :mod:`attnreg.memory.energy`).

:func:`family_step`, :func:`family_decode` and :func:`family_energy` run on the attention core;
the homogeneous separations are computed at unit scale and the exact power of two is put back
(:func:`restore_scale`); the softmax energy is :func:`attnreg.memory.softmax_energy.softmax_energy`.
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
from attnreg.core.validation import check_choice, check_positive, check_positive_int
from attnreg.memory.softmax_energy import softmax_energy

ENERGIES = ("quadratic", "power", "softmax")


def check_family(energy: str, power: int, beta: float) -> None:
    check_choice("energy", energy, ENERGIES)
    if energy == "power" and (check_positive_int("power", power) < 2):
        raise ValueError(f"power: must be an integer >= 2, got {power!r}")
    if energy == "softmax":
        check_positive("beta", beta)


def restore_scale(
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
        return restore_scale(out, e_v, name) if bool((e_v != 0).any()) else out
    e = row_exponents(states)
    unit = _associate(times_power_of_two(states, -e), whitened, v, energy, n, beta, memory_budget)
    return restore_scale(unit, (n - 1) * e + e_v, name)


def family_step(
    states: torch.Tensor,
    whitened: torch.Tensor,
    energy: str,
    *,
    values: torch.Tensor | None = None,
    power: int = 3,
    beta: float = 1.0,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    name: str = "states",
) -> torch.Tensor:
    """One step ``Σ_i F'(s_i) v_i`` with ``s = K̃ ξ`` for states ``(M, d)`` (or ``(B, M, d)``
    with whitened patterns ``(B, N, d)``: ``B`` memories at once).

    ``values`` ``V`` (``(N, dv)``) defaults to ``K̃``, which gives the concave–convex step
    ``ξ ← K̃ᵀ F'(K̃ξ)``. With ``V = K`` it is the same step read out in pattern coordinates.
    Softmax weights are ``softmax(β s)``. Computed by :func:`attnreg.core.associate` (dot
    similarity; identity, signed power ``sign(s)|s|ⁿ⁻¹`` or softmax separation), at unit scale
    for the homogeneous ``F`` (:mod:`attnreg.memory.energy`: extreme magnitudes). ``name``:
    the argument the errors name.
    """
    check_family(energy, power, beta)
    return _step(states, whitened, energy, values, power, beta, memory_budget, name)


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
    with values ``K``, at unit scale (:mod:`attnreg.memory.energy`: extreme magnitudes)."""
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
    magnitudes as in :mod:`attnreg.memory.energy`.
    """
    check_family(energy, power, beta)
    if energy == "softmax":
        return softmax_energy(states, whitened, beta, memory_budget)
    e = row_exponents(states)
    x = times_power_of_two(states, -e)
    half = 0.5 * (x * x).sum(-1, keepdim=True)
    step = _step(x, whitened, energy, None, power, beta, memory_budget, "states")
    if energy == "quadratic":
        residual = x - step
        return restore_scale(0.5 * (residual * residual).sum(-1, keepdim=True), 2 * e, "states")[
            ..., 0
        ]
    total = (x * step).sum(-1, keepdim=True) / power
    quadratic = restore_scale(half, 2 * e, "states", underflow=False)
    polynomial = restore_scale(total, power * e, "states", underflow=False)
    lost = (half > 0) & (quadratic.abs() < torch.finfo(x.dtype).tiny)
    lost &= polynomial.abs() < torch.finfo(x.dtype).tiny
    if bool(lost.any()):
        raise ValueError(
            f"states: the energy underflows {x.dtype} at this magnitude; scale the states up"
        )
    return (quadratic - polynomial)[..., 0]
