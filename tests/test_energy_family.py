"""The energy family ``E_F(ξ) = −Σ_i F(s_i) + ½ ξᵀξ`` with ``s = G^{-1/2} K ξ``, against
computations written here in numpy: the whitening by SVD and by eigendecompositions, the
energies by explicit sums, the update by central finite differences of ``Σ_i F(s_i)``, the
projection by ``np.linalg.lstsq`` / ``pinv``, and the energy along several steps. Ends with a
tiny run of the capacity study that must report the new rows, summary lines and checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnreg import OLSTransformer
from attnreg.memory import EnergyMemory, family_energy, family_step, whitened_patterns
from attnreg.studies.capacity.config import CapacityConfig
from attnreg.studies.capacity.run import run

U = np.finfo(np.float64).eps / 2
FAMILIES = [("quadratic", 2, 1.0), ("power", 3, 1.0), ("power", 4, 1.0), ("softmax", 2, 3.0)]
SHAPES = [(5, 12), (12, 12), (40, 12)]  # N < d, N = d, N > d


def _binary(n: int, d: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).choice([-1.0, 1.0], size=(n, d))


def _polar(k: np.ndarray) -> np.ndarray:
    u, s, vh = np.linalg.svd(k, full_matrices=False)
    keep = s > max(k.shape) * np.finfo(k.dtype).eps * s[0]
    return u[:, keep] @ vh[keep]


def _np_energy(xi: np.ndarray, kt: np.ndarray, energy: str, power: int, beta: float) -> float:
    """``E_F`` by explicit sums over the patterns."""
    s = [float(kt[i] @ xi) for i in range(kt.shape[0])]
    half = 0.5 * float(xi @ xi)
    if energy == "quadratic":
        return -sum(v * v / 2 for v in s) + half
    if energy == "power":
        return -sum(abs(v) ** power / power for v in s) + half
    top = max(beta * v for v in s)
    lse = top + math.log(sum(math.exp(beta * v - top) for v in s))
    big_m = max(float(np.linalg.norm(row)) for row in kt)
    return -lse / beta + half + math.log(len(s)) / beta + 0.5 * big_m**2


def _np_sum_f(xi: np.ndarray, kt: np.ndarray, energy: str, power: int, beta: float) -> float:
    """``Σ_i F(s_i)`` (softmax: ``β⁻¹ log Σ_i exp(β s_i)``), the function whose gradient the
    step is."""
    s = kt @ xi
    if energy == "quadratic":
        return float((s * s).sum() / 2)
    if energy == "power":
        return float((np.abs(s) ** power).sum() / power)
    top = float((beta * s).max())
    return (top + math.log(float(np.exp(beta * s - top).sum()))) / beta


@pytest.mark.parametrize(("n", "d"), SHAPES)
def test_whitened_patterns_are_the_polar_factor_and_the_gram_whitening(n, d):
    k = _binary(n, d, n + d)
    kt = whitened_patterns(torch.from_numpy(k)).numpy()
    kappa = np.linalg.cond(k)
    tol = 10 * max(n, d) * U * kappa  # backward-stable SVD: error ∝ u κ(K)
    np.testing.assert_allclose(kt, _polar(k), atol=tol)
    if n < d:  # Gram whitening G^{-1/2} K, G = K Kᵀ, by numpy's eigh
        lam, vec = np.linalg.eigh(k @ k.T)
        np.testing.assert_allclose(kt, vec @ np.diag(lam**-0.5) @ vec.T @ k, atol=tol * kappa)
        np.testing.assert_allclose(kt @ kt.T, np.eye(n), atol=tol)
    if n > d:  # covariance whitening K S^{-1/2}
        lam, vec = np.linalg.eigh(k.T @ k)
        np.testing.assert_allclose(kt, k @ vec @ np.diag(lam**-0.5) @ vec.T, atol=tol * kappa)
    # K̃ᵀK̃ is the projection onto the pattern span: pinv(K) K
    np.testing.assert_allclose(kt.T @ kt, np.linalg.pinv(k) @ k, atol=tol * kappa)


def test_rank_deficient_patterns_give_the_pseudo_inverse_whitening():
    base = _binary(3, 10, 0)
    k = np.vstack([base, base[:1], -base[1:2]])  # N = 5, rank 3
    kt = whitened_patterns(torch.from_numpy(k)).numpy()
    np.testing.assert_allclose(kt.T @ kt, np.linalg.pinv(k) @ k, atol=1e-12)


@pytest.mark.parametrize(("n", "d"), SHAPES)
@pytest.mark.parametrize(("energy", "power", "beta"), FAMILIES)
def test_energy_matches_explicit_sums(n, d, energy, power, beta):
    k = _binary(n, d, 1)
    xi = np.random.default_rng(2).normal(size=(6, d))
    mem = EnergyMemory(energy, power=power, beta=beta).store(torch.from_numpy(k))
    kt = _polar(k)
    expected = np.array([_np_energy(x, kt, energy, power, beta) for x in xi])
    got = mem.energy(torch.from_numpy(xi)).numpy()
    scale = np.abs(expected) + 0.5 * (xi**2).sum(1) + 1.0
    # the sums carry N + d rounding errors each; the whitening is off by about u κ(K) relative,
    # which moves F(s) by at most n times that
    tol = 100 * (n + d) * U * np.linalg.cond(k) * power * scale
    assert np.all(np.abs(got - expected) <= tol), (got, expected)


@pytest.mark.parametrize(("n", "d"), SHAPES)
@pytest.mark.parametrize(("energy", "power", "beta"), FAMILIES)
def test_step_is_the_gradient_of_the_sum_of_f(n, d, energy, power, beta):
    """``ξ ← Σ F'(s_i) k̃_i = ∇ Σ F(s_i)``, by central differences with step ``h = u^{1/3}``
    (truncation ``h²`` plus cancellation ``u/h``: total about ``u^{2/3} ≈ 4e-11`` of the
    function's scale; the tolerance allows 10⁴ times that)."""
    k = _binary(n, d, 3)
    kt = _polar(k)
    xi = np.random.default_rng(4).normal(size=d) * 0.5
    mem = EnergyMemory(energy, power=power, beta=beta).store(torch.from_numpy(k))
    got = mem.step(torch.from_numpy(xi)).numpy()
    h = U ** (1 / 3)
    grad = np.empty(d)
    for j in range(d):
        e = np.zeros(d)
        e[j] = h
        f_plus = _np_sum_f(xi + e, kt, energy, power, beta)
        f_minus = _np_sum_f(xi - e, kt, energy, power, beta)
        grad[j] = (f_plus - f_minus) / (2 * h)
    scale = 1.0 + abs(_np_sum_f(xi, kt, energy, power, beta))
    np.testing.assert_allclose(got, grad, atol=1e4 * U ** (2 / 3) * scale)


@pytest.mark.parametrize(("n", "d"), [(5, 12), (9, 30), (40, 12)])
def test_quadratic_step_is_the_least_squares_projection(n, d):
    k = _binary(n, d, 5)
    xi = np.random.default_rng(6).normal(size=(4, d))
    mem = EnergyMemory("quadratic").store(torch.from_numpy(k))
    got = mem.step(torch.from_numpy(xi)).numpy()
    coef, *_ = np.linalg.lstsq(k.T, xi.T, rcond=None)  # min ‖Kᵀ c − ξ‖
    projected = (k.T @ coef).T
    tol = 10 * max(n, d) * U * np.linalg.cond(k) * np.abs(xi).max()
    np.testing.assert_allclose(got, projected, atol=tol)
    np.testing.assert_allclose(got, xi @ (np.linalg.pinv(k) @ k), atol=tol)
    # E = ½ ξᵀ(I − P)ξ = ½ ‖ξ − Pξ‖², and the step reaches the minimum 0
    energy = mem.energy(torch.from_numpy(xi)).numpy()
    np.testing.assert_allclose(energy, 0.5 * ((xi - projected) ** 2).sum(1), atol=tol)
    after = mem.energy(torch.from_numpy(got)).numpy()
    assert np.all(after <= tol**2 * d)
    # the power separation with n = 2 is the same memory
    power2 = EnergyMemory("power", power=2).store(torch.from_numpy(k))
    np.testing.assert_allclose(power2.step(torch.from_numpy(xi)).numpy(), got, atol=tol)


@pytest.mark.parametrize(("n", "d"), [(6, 16), (64, 16)])
@pytest.mark.parametrize(("energy", "power", "beta"), FAMILIES)
@pytest.mark.parametrize("query", ["random", "near"])
def test_energy_never_increases_over_several_steps(n, d, energy, power, beta, query):
    """Concave–convex descent, checked with the numpy energies: ``E_{t+1} ≤ E_t`` and indeed
    ``E_t − E_{t+1} ≥ ½‖ξ_{t+1} − ξ_t‖²`` up to the round-off of the sums."""
    rng = np.random.default_rng(7)
    k = _binary(n, d, 8)
    if query == "random":
        xi = rng.normal(size=d)
    else:
        xi = k[3].copy()
        xi[rng.choice(d, 2, replace=False)] *= -1
    mem = EnergyMemory(energy, power=power, beta=beta).store(torch.from_numpy(k))
    kt = _polar(k)
    e = _np_energy(xi, kt, energy, power, beta)
    for _ in range(3):
        new = mem.step(torch.from_numpy(xi)).numpy()
        e_new = _np_energy(new, kt, energy, power, beta)
        scale = max(abs(e), abs(e_new), 0.5 * xi @ xi, 0.5 * new @ new, 1.0)
        tol = 100 * (n + d) * U * scale
        assert e_new <= e + tol
        assert e - e_new >= 0.5 * ((new - xi) ** 2).sum() - tol
        xi, e = new, e_new


def test_pattern_readout_and_decoder():
    k = _binary(20, 12, 9)
    kt = _polar(k)
    xi = np.random.default_rng(10).normal(size=(5, 12))
    for energy, power, beta in FAMILIES:
        mem = EnergyMemory(energy, power=power, beta=beta).store(torch.from_numpy(k))
        s = xi @ kt.T
        if energy == "softmax":
            w = np.exp(beta * s - (beta * s).max(1, keepdims=True))
            w /= w.sum(1, keepdims=True)
        else:
            w = np.sign(s) * np.abs(s) ** (power - 1)
        pattern = mem.step(torch.from_numpy(xi), readout="pattern").numpy()
        np.testing.assert_allclose(pattern, w @ k, rtol=1e-10, atol=1e-10)
        state = mem.step(torch.from_numpy(xi)).numpy()
        np.testing.assert_allclose(state, w @ kt, rtol=1e-10, atol=1e-10)
        decoded = mem.decode(torch.from_numpy(state)).numpy()
        np.testing.assert_allclose(decoded, pattern, rtol=1e-10, atol=1e-10)
    # the decoder S^{1/2} maps each whitened pattern back to its pattern
    mem = EnergyMemory("softmax").store(torch.from_numpy(k))
    np.testing.assert_allclose(mem.decode(mem.whitened_).numpy(), k, atol=1e-12)


def test_odd_power_convention_and_streaming():
    k = torch.from_numpy(_binary(50, 10, 11))
    xi = torch.from_numpy(np.random.default_rng(12).normal(size=(7, 10)))
    kt = whitened_patterns(k)
    whole = family_step(xi, kt, "power", power=3)
    blocks = family_step(xi, kt, "power", power=3, memory_budget=3 * 8 * 7 * 4)
    torch.testing.assert_close(blocks, whole, rtol=1e-12, atol=1e-12)
    # |s|ⁿ/n: F' is odd, so the step is odd in ξ and the energy even
    torch.testing.assert_close(family_step(-xi, kt, "power", power=3), -whole)
    torch.testing.assert_close(
        family_energy(-xi, kt, "power", power=3), family_energy(xi, kt, "power", power=3)
    )
    energy_blocks = family_energy(xi, kt, "softmax", beta=2.0, memory_budget=3 * 8 * 7 * 4)
    torch.testing.assert_close(energy_blocks, family_energy(xi, kt, "softmax", beta=2.0))


SCALES = [1e-300, 1e-200, 1.0, 1e200, 1e300]
TINY_NORMAL = np.finfo(np.float64).tiny
HUGE = np.finfo(np.float64).max


def _np_weights(s: np.ndarray, energy: str, power: int, beta: float) -> np.ndarray:
    """``F'(s)`` (quadratic, power) or ``softmax(β s)`` by numpy."""
    if energy == "softmax":
        w = np.exp(beta * s - (beta * s).max(1, keepdims=True))
        return w / w.sum(1, keepdims=True)
    n = 2 if energy == "quadratic" else power
    return np.sign(s) * np.abs(s) ** (n - 1)


def _scaled(unit: np.ndarray, log10_factor: float) -> np.ndarray | None:
    """``unit · 10^log10_factor`` row by row, or ``None`` if a non-zero row leaves the normal
    float64 range (the answer is not representable)."""
    big = np.abs(unit).max(-1)
    with np.errstate(divide="ignore"):
        top = np.log10(big[big > 0]) + log10_factor
    if np.any(top > math.log10(HUGE)) or np.any(top < math.log10(TINY_NORMAL)):
        return None
    return unit * 10.0**log10_factor


def _check(call, want: np.ndarray | None, name: str, tol: float) -> None:
    """``call()`` equals ``want`` within ``tol`` relative to each row's largest entry, or —
    when ``want`` is ``None`` (not representable) — raises a ValueError naming ``name``."""
    if want is None:
        with pytest.raises(ValueError, match=name):
            call()
        return
    got = call().numpy()
    assert np.all(np.isfinite(got))
    scale = np.abs(want).max(-1, keepdims=True) if want.ndim > 1 else np.abs(want)
    assert np.all(np.abs(got - want) <= tol * scale), (got, want)


@pytest.mark.parametrize("a", SCALES)
@pytest.mark.parametrize("b", SCALES)
@pytest.mark.parametrize(("energy", "power", "beta"), FAMILIES)
def test_extreme_magnitudes_give_the_scaled_answer_or_a_value_error(energy, power, beta, a, b):
    """Patterns ``a·K`` and states ``b·ξ`` at 1e±200…1e±300. ``K̃`` does not depend on ``a``.
    Quadratic and power are homogeneous: every answer is the unit-scale numpy answer times its
    power of ``b`` (and ``a`` for the pattern read-outs), or a ValueError naming the states when
    that is beyond the float range. Softmax is computed as is (numpy on the scaled scores); its
    energy's ``½‖ξ‖²`` overflowing is the only error. Never NaN, never silent zeros."""
    k, xi = _binary(10, 16, 13), np.random.default_rng(14).normal(size=(4, 16))
    kt = _polar(k)
    n = 2 if energy == "quadratic" else power
    tol = 100 * (10 + 16) * U * np.linalg.cond(k) * n
    mem = EnergyMemory(energy, power=power, beta=beta).store(torch.from_numpy(k * a))
    np.testing.assert_allclose(mem.whitened_.numpy(), kt, rtol=0, atol=tol)
    x = torch.from_numpy(xi * b)
    la, lb = math.log10(a), math.log10(b)
    _check(lambda: mem.similarity(x), _scaled(xi @ kt.T, lb), "states", tol)
    _check(lambda: mem.decode(x), _scaled(xi @ kt.T @ k, lb + la), "states", tol)
    if energy == "softmax":
        w = _np_weights((xi * b) @ kt.T, energy, power, beta)
        step, pattern = w @ kt, _scaled(w @ k, la)
        s = beta * (xi * b) @ kt.T
        lse = s.max(1) + np.log(np.exp(s - s.max(1, keepdims=True)).sum(1))
        with np.errstate(over="ignore"):
            half = 0.5 * ((xi * b) ** 2).sum(1)
        big_m = np.linalg.norm(kt, axis=1).max()
        energy_want = -lse / beta + half + math.log(10) / beta + 0.5 * big_m**2
        energy_want = energy_want if np.all(np.isfinite(half)) else None
    else:
        w = _np_weights(xi @ kt.T, energy, power, beta)
        step = _scaled(w @ kt, (n - 1) * lb)
        pattern = _scaled(w @ k, (n - 1) * lb + la)
        half = 0.5 * (xi**2).sum(1)
        if energy == "quadratic":
            residual = xi - xi @ kt.T @ kt
            energy_want = _scaled(0.5 * (residual**2).sum(1, keepdims=True), 2 * lb)
        else:
            quad = _scaled(half[:, None], 2 * lb)
            poly = _scaled((np.abs(xi @ kt.T) ** n).sum(1, keepdims=True) / n, n * lb)
            if (lb > 0 and (quad is None or poly is None)) or (quad is None and poly is None):
                energy_want = None  # a term overflows, or both underflow
            else:
                energy_want = (0.0 if quad is None else quad) - (0.0 if poly is None else poly)
        if energy_want is not None:
            energy_want = energy_want[:, 0]
    _check(lambda: mem.step(x), step, "states", tol)
    _check(lambda: mem.step(x, readout="pattern"), pattern, "states", tol)
    _check(lambda: mem.retrieve(x), step, "queries", tol)
    _check(lambda: mem.energy(x), energy_want, "states", tol)


@pytest.mark.parametrize(
    ("energy", "power", "shift"), [("quadratic", 2, 1000), ("power", 3, 500), ("power", 4, 330)]
)
def test_power_of_two_scaling_is_exact_for_the_homogeneous_separations(energy, power, shift):
    """``step(2ᵏ ξ) = 2^{k(n−1)} step(ξ)`` for ``k = ±shift`` and, for the quadratic,
    ``E(2ᵏ ξ) = 2^{2k} E(ξ)`` for ``k = ±shift/2``, bit for bit (the states are computed at unit
    scale and division by a power of two is exact)."""
    k = torch.from_numpy(_binary(10, 16, 15))
    xi = torch.from_numpy(np.random.default_rng(16).normal(size=(4, 16)))
    mem = EnergyMemory(energy, power=power).store(k)
    for sign in (1, -1):
        e = sign * shift
        scaled = torch.ldexp(xi, torch.tensor(e))
        want = torch.from_numpy(np.ldexp(mem.step(xi).numpy(), e * (power - 1)))
        assert torch.equal(mem.step(scaled), want)
        if energy == "quadratic":  # E has degree 2: 2^{±500} keeps it in range
            half = torch.ldexp(xi, torch.tensor(e // 2))
            want_e = torch.from_numpy(np.ldexp(mem.energy(xi).numpy(), 2 * (e // 2)))
            assert torch.equal(mem.energy(half), want_e)


def test_softmax_scores_that_overflow_are_a_value_error():
    k = _binary(10, 16, 17)
    mem = EnergyMemory("softmax", beta=1e10).store(k)
    with pytest.raises(ValueError, match="queries: the softmax scores"):
        mem.retrieve(np.full(16, 1e300))
    with pytest.raises(ValueError, match="states: the softmax scores"):
        mem.energy(np.full(16, 1e300))


def test_invalid_settings_are_refused():
    k = _binary(4, 6, 0)
    with pytest.raises(ValueError, match="energy"):
        EnergyMemory("cubic").store(k)
    with pytest.raises(ValueError, match="power"):
        EnergyMemory("power", power=1).store(k)
    with pytest.raises(ValueError, match="beta"):
        EnergyMemory("softmax", beta=0.0).store(k)
    mem = EnergyMemory().store(k)
    with pytest.raises(ValueError, match="readout"):
        mem.step(np.ones(6), readout="values")
    with pytest.raises(ValueError, match="d = 5"):
        mem.step(np.ones(5))


@pytest.mark.parametrize(("n", "d"), [(40, 5), (200, 12)])
def test_ols_transformer_on_its_context_is_one_quadratic_step(n, d):
    """Patterns: the d columns of X (dimension N). State: a target column y. One quadratic step
    is the hat matrix ``X pinv(X) y`` = the layer's forward pass on its own context, and
    ``E(y) = ½ RSS``."""
    rng = np.random.default_rng(n)
    x = rng.normal(size=(n, d)) * np.logspace(0, -2, d)
    y = x @ rng.normal(size=(d, 2)) + rng.normal(size=(n, 2))
    out = OLSTransformer().fit(torch.from_numpy(x), torch.from_numpy(y))(torch.from_numpy(x))
    mem = EnergyMemory("quadratic").store(torch.from_numpy(x.T))
    step = mem.step(torch.from_numpy(y.T)).numpy().T
    tol = 10 * max(n, d) * U * np.linalg.cond(x) * np.abs(y).max()
    np.testing.assert_allclose(out[0].numpy(), step, atol=tol)
    np.testing.assert_allclose(step, x @ np.linalg.pinv(x) @ y, atol=tol)
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    half_rss = 0.5 * ((y - x @ coef) ** 2).sum(0)
    np.testing.assert_allclose(mem.energy(torch.from_numpy(y.T)).numpy(), half_rss, rtol=1e-10)


TINY = {
    "seeds": 1,
    "queries": 60,
    "pinv_d": [4],
    "hebbian_d": [16],
    "hebbian_epsilons": [0.1],
    "dam2_d": [8],
    "dam3_d": [8],
    "dam4_d": [8],
    "softmax_d": [6, 8],
    "sphere_d": [4],
    "grid_random_d": 8,
    "digits_n": [20],
    "n_limit": 4096,
    "energy_quadratic_d": [8, 16, 32],
    "energy_power3_d": [8, 12, 16],
    "energy_power4_d": [8, 12],
    "energy_softmax_d": [10, 14],
    "energy_check_n": [4, 24],
    "energy_check_d": 8,
    "energy_check_queries": 8,
    "ols_energy_cases": [[32, 4], [64, 8]],
    "cost_queries": 16,
    "cost_repeats": 2,
    "workers": 1,
}


def test_tiny_capacity_study_reports_the_energy_family():
    result = run(CapacityConfig(**TINY))
    again = run(CapacityConfig(**TINY))
    timing = ("seconds", "seconds_per_retrieval", "store_seconds")

    def strip(rows):
        return [{k: None if v != v else v for k, v in r.items() if k not in timing} for r in rows]

    assert strip(result.rows) == strip(again.rows)  # same config and seed, same numbers
    rows = result.rows
    for key in ("quadratic", "power3", "power4", "softmax"):
        for readout in ("state", "pattern"):
            curve = [r for r in rows if r.get("family") == f"energy:{key}@{readout}"]
            assert [r["d"] for r in curve] == TINY[f"energy_{key}_d"]
            assert all(r["n_max"] >= 1 and r["readout"] == readout for r in curve)
    pattern = {
        key: [r["n_max"] for r in rows if r.get("family") == f"energy:{key}@pattern"]
        for key in ("quadratic", "softmax")
    }
    assert pattern["softmax"][-1] > pattern["softmax"][0]
    assert pattern["quadratic"] == sorted(pattern["quadratic"])
    checks = [r for r in rows if r["kind"] == "energy_check"]
    assert len(checks) == 4 * 2 * 2
    assert all(r["max_relative_increase"] <= 1e-10 for r in checks)
    ols = [r for r in rows if r["kind"] == "ols_energy"]
    assert [(r["n"], r["d"]) for r in ols] == [(32, 4), (64, 8)]
    assert all(r["worst_error_over_bound"] <= 1 for r in ols)
    cost = [r for r in rows if r["kind"] == "energy_cost"]
    assert {r["energy"] for r in cost} == {"quadratic", "power3", "power4", "softmax"}
    for r in cost:  # the state a retrieval reads, in float64 (8 bytes a number): d² for the
        # quadratic's one linear map, K̃ and K (2 N d) for the others; per pattern and per KiB
        numbers = r["d"] ** 2 if r["energy"] == "quadratic" else 2 * r["n"] * r["d"]
        assert r["state_bytes"] == 8 * numbers, r
        assert r["n"] == max(1, round(r["n_max"]))
        assert r["bytes_per_pattern"] == r["state_bytes"] / r["n"]
        assert r["patterns_per_kib"] == r["n"] * 1024 / r["state_bytes"]
    summary = result.summary
    for name in (
        "energy family: N_max(d)",
        "energy family: growth laws fitted to N_max(d)",
        "energy family: retrieval never increases E_F",
        "OLS-Transformer: its forward pass is one quadratic-energy step",
        "energy family: cost per retrieval and per stored pattern",
    ):
        assert name in summary, sorted(summary)
    fits = summary["energy family: growth laws fitted to N_max(d)"]
    assert "log-log slope" in fits["columns"]
    assert {r[0] for r in fits["rows"]} == {"quadratic", "power3", "power4", "softmax"}
    assert summary["energy family: retrieval never increases E_F"]["lead"].startswith("Yes")
    names = {c["check"]: c["passed"] for c in result.checks}
    assert names["energy family: largest relative energy increase per step"]
    assert names["energy family: largest relative shortfall below the concave-convex descent"]
    assert names["OLS-Transformer vs one quadratic step: error / bound"]
    figures = {f.name for f in result.figures}
    assert {"capacity_energy_family", "capacity_energy_cost"} <= figures
    for figure in result.figures + again.figures:
        figure.close()
