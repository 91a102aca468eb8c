"""Associative memories against references written here: numpy pinv, Hebbian and Krotov–Hopfield
updates as loops, brute-force nearest patterns, energies, chunked = unchunked, bad inputs."""

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import logsumexp, softmax

from attnreg.data.patterns import flip_bits, random_binary, random_sphere
from attnreg.memory import (
    DenseAssociativeMemory,
    HebbianMemory,
    ModernHopfield,
    PseudoInverseMemory,
    UniversalHopfieldMemory,
    polynomial_associate,
)
from attnreg.memory.base import log_sum_exp
from attnreg.training import generator

TINY = 4096  # bytes: forces many key blocks
EPS = np.finfo(np.float64).eps


def _gauss(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


# ---------------------------------------------------------------- pseudo-inverse memory


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 14), d=st.integers(1, 10), dv=st.integers(1, 4), seed=st.integers(0, 99))
def test_pinv_memory_equals_numpy_pinv(n, d, dv, seed):
    k, v, q = _gauss((n, d), seed), _gauss((n, dv), seed + 1), _gauss((5, d), seed + 2)
    out = PseudoInverseMemory().store(k, v).retrieve(q).numpy()
    np.testing.assert_allclose(out, q @ np.linalg.pinv(k) @ v, atol=1e-8 * (1 + np.abs(v).max()))


@pytest.mark.parametrize("d", [4, 8, 16])
def test_pinv_memory_exact_iff_n_at_most_d(d):
    for n in range(1, 2 * d + 1):
        k, v = _gauss((n, d), n), _gauss((n, 3), 100 + n)
        out = PseudoInverseMemory().store(k, v).retrieve(k).numpy()
        rel = np.linalg.norm(out - v, axis=1) / np.linalg.norm(v, axis=1)
        if n <= d:
            assert rel.max() < 1e-8
        else:
            assert rel.min() > 1e-6  # the criterion of the capacity study: not one row exact


def test_pinv_energy_is_distance_to_key_span_and_retrieval_zeroes_it():
    k = _gauss((3, 7), 0)
    mem = PseudoInverseMemory().store(k)
    x = _gauss((4, 7), 1)
    projector = np.linalg.pinv(k) @ k
    ref = 0.5 * np.sum((x - x @ projector) ** 2, axis=1)
    np.testing.assert_allclose(mem.energy(x).numpy(), ref, rtol=1e-10)
    after = mem.energy(mem.retrieve(x)).numpy()
    assert (after <= ref + 1e-12).all() and np.abs(after).max() < 1e-10


# ---------------------------------------------------------------- Hebbian


def _hebbian_weights_loop(patterns):
    n, d = patterns.shape
    w = np.zeros((d, d))
    for mu in range(n):
        for i in range(d):
            for j in range(d):
                if i != j:
                    w[i, j] += patterns[mu, i] * patterns[mu, j] / d
    return w


def _sign_keep(h, s):
    return np.where(h > 0, 1.0, np.where(h < 0, -1.0, s))


def test_hebbian_synchronous_dynamics_equal_loop():
    p = random_binary(5, 24, generator(0), torch.float64)
    q = flip_bits(p, 4, generator(1))
    w = _hebbian_weights_loop(p.numpy())
    mem = HebbianMemory().store(p)
    np.testing.assert_allclose(mem.weights_.numpy(), w, atol=1e-12)
    np.testing.assert_allclose(mem.field(q).numpy(), q.numpy() @ w, atol=1e-12)
    s = q.numpy().copy()
    for _ in range(100):
        new = _sign_keep(s @ w, s)
        if (new == s).all():
            break
        s = new
    np.testing.assert_array_equal(mem.retrieve(q).numpy(), s)


def test_hebbian_asynchronous_sweep_equals_loop_and_lowers_energy():
    p = random_binary(6, 16, generator(2), torch.float64)
    q = flip_bits(p, 5, generator(3))
    w = _hebbian_weights_loop(p.numpy())
    mem = HebbianMemory(dynamics="asynchronous").store(p)
    out = mem.retrieve(q, steps=1, generator=generator(9)).numpy()
    order = torch.randperm(16, generator=generator(9)).tolist()
    s = q.numpy().copy()
    energies = [-0.5 * np.einsum("mi,ij,mj->m", s, w, s)]
    for i in order:
        s[:, i] = _sign_keep(s @ w[:, i], s[:, i])
        energies.append(-0.5 * np.einsum("mi,ij,mj->m", s, w, s))
    np.testing.assert_array_equal(out, s)
    assert (np.diff(np.array(energies), axis=0) <= 1e-12).all()
    np.testing.assert_allclose(mem.energy(q).numpy(), energies[0], atol=1e-10)


# ---------------------------------------------------------------- dense associative memory


def _krotov_hopfield_loop(patterns, s, n):
    h = np.zeros_like(s)
    for m in range(s.shape[0]):
        for i in range(s.shape[1]):
            for xi in patterns:
                a = xi @ s[m] - xi[i] * s[m, i]
                h[m, i] += (xi[i] + a) ** n - (-xi[i] + a) ** n
    return h


@pytest.mark.parametrize("power", [2, 3, 4])
def test_dam_field_equals_krotov_hopfield_rule(power):
    p = random_binary(7, 10, generator(power), torch.float64)
    q = flip_bits(p[:3], 2, generator(10 + power))
    mem = DenseAssociativeMemory(power=power, memory_budget=TINY).store(p)
    ref = _krotov_hopfield_loop(p.numpy(), q.numpy(), power)
    np.testing.assert_allclose(mem.field(q).numpy(), ref, rtol=1e-10, atol=1e-8)
    np.testing.assert_array_equal(mem.retrieve(q).numpy(), _sign_keep(ref, q.numpy()))
    energy = -np.sum((q.numpy() @ p.numpy().T) ** power, axis=1)
    np.testing.assert_allclose(mem.energy(q).numpy(), energy, rtol=1e-12)


def test_dam_power_two_is_the_hebbian_network():
    p = random_binary(9, 30, generator(4), torch.float64)
    q = flip_bits(p, 3, generator(5))
    dam = DenseAssociativeMemory(power=2).store(p).retrieve(q)
    heb = HebbianMemory(max_steps=1).store(p).retrieve(q)
    np.testing.assert_array_equal(dam.numpy(), heb.numpy())


@settings(max_examples=15, deadline=None)
@given(power=st.integers(2, 4), seed=st.integers(0, 1000))
def test_dam_asynchronous_updates_never_increase_energy(power, seed):
    p = random_binary(12, 14, generator(seed), torch.float64)
    q = flip_bits(p[:4], 4, generator(seed + 1))
    mem = DenseAssociativeMemory(power=power, dynamics="asynchronous").store(p)
    e = [mem.energy(q)]
    s = q
    for step in range(3):
        s = mem.retrieve(s, steps=1, generator=generator(seed + step))
        e.append(mem.energy(s))
    assert all(bool((b <= a + 1e-9).all()) for a, b in itertools.pairwise(e))


# ---------------------------------------------------------------- modern Hopfield


def test_modern_hopfield_step_and_energy_equal_numpy():
    x, q = _gauss((30, 6), 0), _gauss((4, 6), 1) * 2
    beta = 0.7
    mem = ModernHopfield(beta=beta, memory_budget=TINY).store(x)
    ref = softmax(beta * q @ x.T, axis=1) @ x
    np.testing.assert_allclose(mem.retrieve(q, steps=1).numpy(), ref, rtol=1e-10)
    big_m = np.linalg.norm(x, axis=1).max()
    energy = (
        -logsumexp(beta * q @ x.T, axis=1) / beta
        + 0.5 * np.sum(q * q, axis=1)
        + math.log(30) / beta
        + 0.5 * big_m**2
    )
    np.testing.assert_allclose(mem.energy(q).numpy(), energy, rtol=1e-10)


@pytest.mark.parametrize("scale", [1e-300, 1e-3, 1.0, 30.0, 1e8, 1e20, 1e300])
def test_log_sum_exp_through_the_core_equals_scipy(scale):
    """``log Σ_i exp(β x_iᵀ ξ)`` from the core's max and softmax (one reference key) against
    scipy's ``logsumexp``, from near-uniform weights (1e-300) to one-hot (1e300), batched too.
    The scores carry a rounding of about ``d u · β max|q| max|x|`` each; the log of the ratio of
    two sums of ``N`` weights adds about ``N u``."""
    x, q = _gauss((3, 40, 6), 2), _gauss((3, 5, 6), 3) * scale
    beta = 0.7
    want = logsumexp(beta * q @ x.transpose(0, 2, 1), axis=-1)
    bound = 40 * 6 * np.finfo(np.float64).eps * beta * np.abs(q).max() * np.abs(x).max()
    got = log_sum_exp(torch.from_numpy(q), torch.from_numpy(x), beta, memory_budget=TINY)
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=bound + 40 * EPS)
    single = log_sum_exp(torch.from_numpy(q[0]), torch.from_numpy(x[0]), beta)
    np.testing.assert_allclose(single.numpy(), want[0], rtol=0, atol=bound + 40 * EPS)


def test_log_sum_exp_refuses_overflowing_scores():
    x = torch.ones(4, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="states: the softmax scores"):
        log_sum_exp(torch.full((2, 3), 1e300, dtype=torch.float64), x, 1e10)


@settings(max_examples=10, deadline=None)
@given(beta=st.floats(0.05, 5.0), seed=st.integers(0, 1000))
def test_modern_hopfield_updates_never_increase_energy(beta, seed):
    x = random_sphere(20, 8, generator(seed), torch.float64)
    q = torch.as_tensor(_gauss((5, 8), seed) * 3)
    mem = ModernHopfield(beta=beta).store(x)
    energies = [mem.energy(q)]
    for _ in range(3):
        q = mem.retrieve(q, steps=1)
        energies.append(mem.energy(q))
    assert all(bool((b <= a + 1e-9).all()) for a, b in itertools.pairwise(energies))


def test_modern_hopfield_chunked_equals_unchunked():
    x = random_binary(500, 12, generator(0), torch.float64)
    q = flip_bits(x[:50], 2, generator(1))
    small = ModernHopfield(beta=2.0, max_steps=3, memory_budget=TINY).store(x).retrieve(q)
    big = ModernHopfield(beta=2.0, max_steps=3, memory_budget=2**30).store(x).retrieve(q)
    np.testing.assert_allclose(small.numpy(), big.numpy(), rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------- Universal Hopfield grid


@pytest.mark.parametrize("similarity", ["dot", "euclidean", "manhattan"])
def test_max_separation_is_brute_force_nearest_pattern(similarity):
    k, q = _gauss((60, 5), 2), _gauss((25, 5), 3)
    out = UniversalHopfieldMemory(similarity, "max", memory_budget=TINY).store(k).retrieve(q)
    if similarity == "dot":
        best = [int(np.argmax([qa @ ki for ki in k])) for qa in q]
    else:
        order = 2 if similarity == "euclidean" else 1
        best = [int(np.argmin([np.linalg.norm(qa - ki, order) for ki in k])) for qa in q]
    np.testing.assert_array_equal(out.numpy(), k[best])


@pytest.mark.parametrize("similarity", ["euclidean", "manhattan"])
@pytest.mark.parametrize(("separation", "power"), [("identity", 1), ("power", 3)])
def test_distance_power_separation_equals_shifted_weights(similarity, separation, power):
    k, q, beta = _gauss((40, 4), 4), _gauss((6, 4), 5), 0.8
    mem = UniversalHopfieldMemory(
        similarity, separation, beta=beta, power=power, memory_budget=TINY
    )
    out = mem.store(k).retrieve(q).numpy()
    order = 2 if similarity == "euclidean" else 1
    ref = np.zeros_like(q)
    for a, qa in enumerate(q):
        c = beta * (np.linalg.norm(qa, order) + max(np.linalg.norm(ki, order) for ki in k))
        w = np.array([(c - beta * np.linalg.norm(qa - ki, order)) ** power for ki in k])
        assert (w >= 0).all()
        ref[a] = w @ k / w.sum()
    np.testing.assert_allclose(out, ref, rtol=1e-9)


U64 = 2.0**-53


@pytest.mark.parametrize("similarity", ["euclidean", "manhattan"])
def test_distance_power_of_high_degree_is_each_weight_as_written(similarity):
    """Degree 60: each weight (c − β‖q − k‖)ⁿ against a log-space loop, within the first-order
    rounding bound of the shifted score t = c − β‖q − k‖ raised to n (relative error of t at
    most (c + β‖q − k‖)/t · γ, times n; normalising doubles it). A binomial expansion of the
    power in powers of the distance missed this by orders of magnitude (cancellation)."""
    n, beta = 60, 100.0
    k, q = _gauss((40, 4), 4), _gauss((6, 4), 5)
    mem = UniversalHopfieldMemory(similarity, "power", beta=beta, power=n, memory_budget=TINY)
    out = mem.store(k).retrieve(q).numpy()
    order = 2 if similarity == "euclidean" else 1
    gamma = (2 * 4 + 40 + 4) * U64
    for a, qa in enumerate(q):
        c = np.linalg.norm(qa, order) + max(np.linalg.norm(ki, order) for ki in k)
        dist = np.array([np.linalg.norm(qa - ki, order) for ki in k])
        t = c - dist  # ≥ 0; 0 where the triangle inequality is tight (a weight of 0)
        log_w = n * np.log(np.where(t > 0, t, 1.0))
        w = np.where(t > 0, np.exp(log_w - log_w[t > 0].max()), 0.0)
        ref = w @ k / w.sum()
        relative = np.where(t > 0, (c + dist) / np.where(t > 0, t, 1.0), 0.0)
        bound = 4 * n * gamma * (w * relative) @ np.abs(k) / w.sum()
        assert np.all(np.abs(out[a] - ref) <= bound), (a, np.abs(out[a] - ref) / bound)


def test_normalised_power_weights_do_not_overflow_with_a_large_beta():
    """β cancels in the normalised weights (β s)ⁿ / Σ (β s)ⁿ: at β = 100, n = 150 the answer is
    the β = 1 one ((β·s)ⁿ up to 350¹⁵⁰ ≈ 1e381 used to overflow the weighted sum)."""
    n = 150
    gen = np.random.default_rng(9)
    k, q = gen.uniform(0, 1, (30, 8)), gen.uniform(0, 1, (5, 8))
    out = UniversalHopfieldMemory("dot", "power", beta=100.0, power=n).store(k).retrieve(q)
    gamma = (2 * 8 + 30 + 8) * U64
    for a, qa in enumerate(q):
        log_w = n * np.log(k @ qa)
        w = np.exp(log_w - log_w.max())
        ref = w @ k / w.sum()
        bound = 4 * n * gamma * (w @ k) / w.sum()  # non-negative data: R is the answer itself
        assert np.all(np.abs(out[a].numpy() - ref) <= bound)


def test_polynomial_associate_equals_direct_sum():
    k, q, v = _gauss((30, 3), 6), _gauss((4, 3), 7), _gauss((30, 2), 8)
    coef = [0.5, -1.0, 0.0, 2.0]
    out = polynomial_associate(
        torch.as_tensor(q), torch.as_tensor(k), torch.as_tensor(v), coef, scale=0.3, offset=1.5
    )
    s = 1.5 + 0.3 * (q @ k.T)
    weights = sum(c * s**p for p, c in enumerate(coef))
    np.testing.assert_allclose(out.numpy(), weights @ v, rtol=1e-10)


# ---------------------------------------------------------------- bad input


def test_bad_inputs_raise_value_errors_naming_the_argument():
    with pytest.raises(ValueError, match=r"patterns.*\+1/-1"):
        HebbianMemory().store(np.array([[1.0, 0.5], [1.0, -1.0]]))
    with pytest.raises(ValueError, match=r"patterns.*\+1/-1"):
        DenseAssociativeMemory().store(np.array([[2.0, 1.0]]))
    with pytest.raises(ValueError, match=r"queries.*\+1/-1"):
        HebbianMemory().store(np.ones((2, 3))).retrieve(np.array([[1.0, 0.0, 1.0]]))
    with pytest.raises(ValueError, match=r"queries.*d = 4.*d = 3"):
        ModernHopfield().store(np.ones((2, 3))).retrieve(np.ones((1, 4)))
    with pytest.raises(ValueError, match="N = 0"):
        PseudoInverseMemory().store(np.zeros((0, 3)))
    with pytest.raises(ValueError, match="N = 0"):
        HebbianMemory().store(np.zeros((0, 3)))
    with pytest.raises(ValueError, match="keys and values disagree on N"):
        PseudoInverseMemory().store(np.ones((3, 2)), np.ones((4, 2)))
    with pytest.raises(ValueError, match="dot, euclidean, manhattan, whitened_dot"):
        UniversalHopfieldMemory("cosine").store(np.ones((2, 2)))
    with pytest.raises(ValueError, match="identity, softmax, power, max"):
        UniversalHopfieldMemory("dot", "sparsemax").store(np.ones((2, 2)))
    with pytest.raises(ValueError, match=r"dynamics.*synchronous, asynchronous"):
        HebbianMemory(dynamics="random").store(np.ones((2, 2)))
    with pytest.raises(ValueError, match="power"):
        DenseAssociativeMemory(power=1).store(np.ones((2, 2)))
    with pytest.raises(ValueError, match="beta"):
        ModernHopfield(beta=0.0).store(np.ones((2, 2)))


def test_the_pseudo_inverse_memory_as_a_regressor_names_the_rank_at_n_below_d():
    """As a regression (MemoryRegressor) the minimum-norm answer at N < d warns with the rank
    found, like every predictor; as a memory (capacity: N ≤ d is its normal regime) it does
    not. The answer is numpy's lstsq (minimum norm) either way."""
    import warnings

    import numpy as np

    from attnreg.core.whitening import RankWarning
    from attnreg.memory import MemoryRegressor, PseudoInverseMemory

    rng = np.random.default_rng(5)
    x, y, q = rng.normal(size=(3, 6)), rng.normal(size=(3, 1)), rng.normal(size=(2, 6))
    with pytest.warns(RankWarning, match="rank 3 < d = 6"):
        got = MemoryRegressor(PseudoInverseMemory()).predict(x, y, q)
    expected = q @ np.linalg.lstsq(x, y, rcond=None)[0]
    assert (
        np.max(np.abs(got.numpy() - expected))
        <= 64 * 2**-53 * np.linalg.cond(x) * np.abs(expected).max()
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", RankWarning)
        PseudoInverseMemory().store(x, y)  # the memory itself: no warning
    with pytest.raises(ValueError, match="warn_rank"):
        PseudoInverseMemory(warn_rank="yes")
