"""The softmax (modern Hopfield) energy against a 60-digit mpmath evaluation of Ramsauer et
al.'s formula written here, on the exact float inputs, down to energies far below its terms."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
import torch

from attnreg.memory import EnergyMemory, ModernHopfield, family_energy
from attnreg.memory.softmax_energy import softmax_energy

U = np.finfo(np.float64).eps / 2


def _reference(states: np.ndarray, patterns: np.ndarray, beta: float) -> np.ndarray:
    """``−β⁻¹ log Σ_i exp(β k_iᵀξ) + ½ξᵀξ + β⁻¹ log N + ½ max_i ‖k_i‖²`` with 60 digits: every
    float64 input is exact in mpmath, so the only error is mpmath's, far below float64's."""
    with mpmath.workdps(60):
        b = mpmath.mpf(beta)
        ks = [[mpmath.mpf(float(v)) for v in row] for row in patterns]
        big_m2 = max(mpmath.fsum(v * v for v in row) for row in ks)
        out = []
        for xi in states:
            x = [mpmath.mpf(float(v)) for v in xi]
            scores = [mpmath.fsum(a * c for a, c in zip(row, x, strict=True)) for row in ks]
            top = max(scores)
            lse = top + mpmath.log(mpmath.fsum(mpmath.exp(b * (s - top)) for s in scores)) / b
            half = mpmath.fsum(v * v for v in x) / 2
            out.append(float(-lse + half + mpmath.log(len(ks)) / b + big_m2 / 2))
    return np.array(out)


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _cases() -> list[tuple[str, np.ndarray, np.ndarray, float]]:
    d = 8
    x1 = _rng(0).normal(size=(1, d))
    signs = np.where(_rng(1).normal(size=(6, d)) > 0, 1.0, -1.0)  # equal norms, exactly
    copies = np.repeat(_rng(2).normal(size=(1, d)), 5, axis=0)
    return [
        # one pattern, states 1e-12 away: E = ½‖ξ − k‖² ≈ 1e-24 (the terms are about 4)
        ("one pattern", x1, x1 + 1e-12 * _rng(3).normal(size=(3, d)), 0.7),
        # ±1 patterns, a huge β: E = ½‖δ‖² + (log N)/β, both about 1e-20
        ("sharp", signs, signs[:3] + 1e-10 * _rng(4).normal(size=(3, d)), 1e20),
        # exact copies of one pattern: every gap is 0 (the near-tie branch), E = ½‖δ‖²
        ("copies", copies, copies[:2] + 1e-11 * _rng(5).normal(size=(2, d)), 2.0),
        # ordinary: random patterns and states, E of the order of its terms
        ("ordinary", _rng(6).normal(size=(20, d)), 2 * _rng(7).normal(size=(4, d)), 0.5),
        # a small β: E near the mean of g_i
        ("soft", _rng(8).normal(size=(9, d)), _rng(9).normal(size=(3, d)), 1e-6),
    ]


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c[0])
def test_energy_is_accurate_relative_to_itself(case):
    """``E = g* + β⁻¹ D`` is a sum of two non-negative terms: ``g*`` is ``d`` squares of
    correctly rounded differences plus an exact zero (``k*`` of largest norm in every case
    but "ordinary" and "soft"), ``D`` a log of a mean of ``N`` exponentials, so the relative
    error is a few ``(d + N) u`` — except for the score roundings, ``d u ‖k‖‖ξ‖`` per gap,
    which weigh only where the softmax spreads its weight ("ordinary", "soft": there ``E``
    is of the order of ``‖k‖‖ξ‖`` and the same bound, relative to ``‖k‖‖ξ‖``, applies)."""
    _name, patterns, states, beta = case
    want = _reference(states, patterns, beta)
    d, n = patterns.shape[1], patterns.shape[0]
    scale = np.maximum(
        np.abs(want),
        np.abs(states).sum(1) * np.abs(patterns).max() if _name in ("ordinary", "soft") else 0,
    )
    bound = 8 * (d + n) * U * scale
    mem = ModernHopfield(beta=beta).store(torch.from_numpy(patterns))
    got = mem.energy(torch.from_numpy(states)).numpy()
    assert np.all(np.abs(got - want) <= bound), (got, want)
    single = mem.energy(torch.from_numpy(states[0])).numpy()
    assert abs(single - want[0]) <= bound[0]
    batched = softmax_energy(
        torch.from_numpy(np.stack([states, states])),
        torch.from_numpy(np.stack([patterns, patterns])),
        beta,
        memory_budget=64,  # one state at a time
    ).numpy()
    assert np.all(np.abs(batched - want) <= bound)


def test_the_direct_sum_loses_what_the_stable_form_keeps():
    """The "one pattern" case summed as written (float64) is off by far more than the energy
    itself: the cancellation the stable form avoids is real."""
    _name, patterns, states, beta = _cases()[0]
    want = _reference(states, patterns, beta)
    s = states @ patterns.T
    direct = (
        -s[:, 0] + 0.5 * (states**2).sum(1) + 0.5 * (patterns**2).sum(1).max()
    )  # N = 1: log Σ exp(β s) / β = s, log N = 0
    assert np.abs(direct - want).max() > 1e3 * np.abs(want).max()
    got = ModernHopfield(beta=beta).store(torch.from_numpy(patterns))
    assert np.allclose(got.energy(torch.from_numpy(states)).numpy(), want, rtol=1e-13, atol=0)


def test_the_energy_family_uses_the_same_stable_form():
    """``EnergyMemory("softmax")``'s energy on the whitened patterns ``K̃`` against the
    reference on ``K̃`` (as float64 numbers), at a stored pattern (tiny energy) and away."""
    k = np.where(_rng(10).normal(size=(5, 12)) > 0, 1.0, -1.0)
    mem = EnergyMemory("softmax", beta=1e18).store(torch.from_numpy(k))
    kt = mem.whitened_.numpy()
    states = np.concatenate([kt[:2] + 1e-10 * _rng(11).normal(size=(2, 12)), kt[2:3] * 3])
    want = _reference(states, kt, 1e18)
    got = mem.energy(torch.from_numpy(states)).numpy()
    # K̃'s row norms differ in their last bits: M² − ‖k*‖² carries their rounding, d u M²
    bound = 8 * (12 + 5) * U * np.maximum(np.abs(want), 1e-3) + 2 * 12 * U
    assert np.all(np.abs(got - want) <= bound), (got, want)
    fam = family_energy(torch.from_numpy(states), mem.whitened_, "softmax", beta=1e18)
    assert torch.equal(fam, torch.from_numpy(got))


def test_overflowing_energy_is_a_value_error_naming_the_states():
    k = torch.ones(3, 4, dtype=torch.float64)
    mem = ModernHopfield(beta=1e-300).store(k)
    with pytest.raises(ValueError, match="states: the energy overflows"):
        mem.energy(torch.full((1, 4), 1e160, dtype=torch.float64))
    with pytest.raises(ValueError, match="states: the softmax scores"):
        ModernHopfield(beta=1e10).store(k).energy(torch.full((1, 4), 1e300, dtype=torch.float64))
