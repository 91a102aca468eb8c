"""Every estimator of attnreg.estimators against a reference written in the tests."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from refs import gd_predict, gdpp_predict, lstsq_predict, ridge_per_prefix
from scipy.special import softmax
from sklearn.linear_model import Ridge as SkRidge

from attnreg import GD, OLS, GDPlusPlus, KernelSmoother, Mesa, PreconditionedGD, Ridge
from attnreg.core.whitening import RankWarning
from attnreg.estimators import optimal_preconditioner

shapes = st.tuples(st.integers(1, 3), st.integers(1, 25), st.integers(1, 8), st.integers(1, 3))


def _data(b, n, d, dy, seed, m=4):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(b, n, d)), rng.normal(size=(b, n, dy)), rng.normal(size=(b, m, d))


@settings(max_examples=30, deadline=None)
@given(shape=shapes, seed=st.integers(0, 1000))
def test_ols_matches_numpy_lstsq(shape, seed):
    x, y, q = _data(*shape, seed)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RankWarning)
        got = OLS().predict(x, y, q).numpy()
    expected = np.stack([lstsq_predict(x[b], y[b], q[b]) for b in range(len(x))])
    np.testing.assert_allclose(got, expected, atol=1e-8 * max(1, np.abs(expected).max()))


@settings(max_examples=30, deadline=None)
@given(shape=shapes, seed=st.integers(0, 1000), lam=st.floats(1e-3, 10))
def test_ridge_matches_sklearn(shape, seed, lam):
    x, y, q = _data(*shape, seed)
    expected = np.stack(
        [
            SkRidge(alpha=lam, fit_intercept=False)
            .fit(x[b], y[b])
            .predict(q[b])
            .reshape(len(q[b]), -1)
            for b in range(len(x))
        ]
    )
    np.testing.assert_allclose(Ridge(lam).predict(x, y, q).numpy(), expected, atol=1e-9)


def test_ridge_mean_covariance_is_n_lambda():
    x, y, q = _data(1, 12, 3, 1, 0)
    expected = SkRidge(alpha=12 * 0.2, fit_intercept=False).fit(x[0], y[0]).predict(q[0])
    got = Ridge(0.2, covariance="mean").predict(x[0], y[0], q[0]).numpy()
    np.testing.assert_allclose(got.ravel(), expected.ravel(), atol=1e-12)


@settings(max_examples=20, deadline=None)
@given(shape=shapes, seed=st.integers(0, 1000), steps=st.integers(1, 4))
def test_gd_matches_explicit_loop(shape, seed, steps):
    x, y, q = _data(*shape, seed)
    rng = np.random.default_rng(seed + 1)
    w0 = rng.normal(size=(shape[3], shape[2]))
    etas = list(rng.uniform(0.05, 0.5, size=steps))
    expected = np.stack([gd_predict(x[b], y[b], q[b], etas, w0) for b in range(len(x))])
    got = GD(eta=etas, steps=steps, w0=w0).predict(x, y, q).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)


def test_preconditioned_gd_matches_loop():
    x, y, q = _data(2, 15, 4, 2, 3)
    rng = np.random.default_rng(9)
    g = rng.normal(size=(4, 4))
    expected = np.stack([gd_predict(x[b], y[b], q[b], [0.2, 0.1], None, g) for b in range(2)])
    got = PreconditionedGD(g, eta=[0.2, 0.1], steps=2).predict(x, y, q).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(("etas", "gammas"), [([0.3], [0.0]), ([0.3, 0.2], [0.01, 0.02])])
def test_gd_plus_plus_matches_token_loop(etas, gammas):
    x, y, q = _data(2, 10, 3, 2, 5)
    x = x / 3
    expected = np.stack([gdpp_predict(x[b], y[b], q[b], etas, gammas) for b in range(2)])
    got = GDPlusPlus(eta=etas, gamma=gammas, steps=len(etas)).predict(x, y, q).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


def test_kernel_smoother_matches_scipy_softmax():
    x, y, q = _data(1, 20, 3, 2, 6)
    expected = softmax(1.5 * q[0] @ x[0].T, axis=1) @ y[0]
    got = KernelSmoother(beta=1.5).predict(x[0], y[0], q[0]).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_mesa_causal_matches_ridge_per_prefix():
    x, y, _ = _data(2, 12, 4, 2, 7)
    expected = np.stack([ridge_per_prefix(x[b], y[b], 0.5) for b in range(2)])
    np.testing.assert_allclose(Mesa(0.5).causal(x, y, x).numpy(), expected, rtol=1e-10)


def test_optimal_preconditioner_minimises_the_expected_loss():
    """Monte-Carlo check of Ahn et al.'s Γ* against small perturbations of it."""
    d, n, tasks = 3, 6, 40_000
    sigma = np.diag([1.0, 0.5, 0.25])
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(tasks, n, d, generator=gen, dtype=torch.float64) @ torch.from_numpy(
        np.sqrt(sigma)
    )
    w = torch.randn(tasks, 1, d, generator=gen, dtype=torch.float64)
    xq = torch.randn(tasks, 1, d, generator=gen, dtype=torch.float64) @ torch.from_numpy(
        np.sqrt(sigma)
    )
    y, yq = x @ w.mT, xq @ w.mT
    best = optimal_preconditioner(sigma, n)
    written_out = np.linalg.inv((1 + 1 / n) * sigma + np.trace(sigma) / n * np.eye(d))
    np.testing.assert_allclose(best.numpy(), written_out, rtol=1e-12)
    loss = lambda g: float(((PreconditionedGD(g).predict(x, y, xq) - yq) ** 2).mean())  # noqa: E731
    base = loss(best)
    for scale in (0.8, 1.2):
        assert base < loss(best * scale)
