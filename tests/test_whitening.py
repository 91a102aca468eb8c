"""Whitening against numpy's eigendecomposition and pseudo-inverse."""

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnreg.constructions import OLSAttention
from attnreg.core.whitening import ConditioningWarning, RankWarning, whitening_matrix


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(2, 30),
    d=st.integers(1, 8),
    seed=st.integers(0, 10_000),
    method=st.sampled_from(["svd", "eigh"]),
    covariance=st.sampled_from(["gram", "mean"]),
)
def test_llt_is_pseudo_inverse_of_s(n, d, seed, method, covariance):
    x = np.random.default_rng(seed).normal(size=(n, d))
    c = 1.0 if covariance == "gram" else n
    s = x.T @ x / c
    with pytest.warns(RankWarning) if n < d else _no_warning():
        w = whitening_matrix(torch.from_numpy(x), covariance=covariance, method=method)
    lmat = w.matrix[0].numpy()
    np.testing.assert_allclose(
        lmat @ lmat.T, np.linalg.pinv(s), atol=1e-8 * np.linalg.norm(np.linalg.pinv(s))
    )
    assert int(w.rank[0]) == np.linalg.matrix_rank(x)


class _no_warning:
    def __enter__(self):
        import warnings

        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("error", RankWarning)

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)


@pytest.mark.parametrize("method", ["svd", "eigh", "cholesky"])
def test_whitened_features_are_orthonormal(method):
    x = np.random.default_rng(1).normal(size=(40, 5))
    lmat = whitening_matrix(torch.from_numpy(x), method=method).matrix[0].numpy()
    f = x @ lmat
    np.testing.assert_allclose(f.T @ f, np.eye(5), atol=1e-12)


@pytest.mark.parametrize("method", ["svd", "eigh", "cholesky"])
def test_ridge_whitening_against_numpy_eigh(method):
    x = np.random.default_rng(2).normal(size=(7, 4))
    lam = 0.3
    evals, evecs = np.linalg.eigh(x.T @ x)
    expected = evecs @ np.diag(1 / (evals + lam)) @ evecs.T
    lmat = whitening_matrix(torch.from_numpy(x), ridge=lam, method=method).matrix[0].numpy()
    np.testing.assert_allclose(lmat @ lmat.T, expected, atol=1e-12)


def test_rank_warning_names_rank_and_ridge_is_silent():
    x = np.random.default_rng(3).normal(size=(10, 2)) @ np.ones((2, 5))  # rank 1
    with pytest.warns(RankWarning, match="rank 1 < d = 5"):
        whitening_matrix(torch.from_numpy(x))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", RankWarning)
        whitening_matrix(torch.from_numpy(x), ridge=1e-3)


def test_cholesky_refuses_singular_design():
    x = np.ones((6, 3))
    with pytest.raises(ValueError, match="numerically singular for the Cholesky whitening"):
        whitening_matrix(torch.from_numpy(x), method="cholesky")


def test_ill_conditioned_design_warns_with_condition_number():
    rng = np.random.default_rng(4)
    u, _ = np.linalg.qr(rng.normal(size=(30, 4)))
    v, _ = np.linalg.qr(rng.normal(size=(4, 4)))
    x = (u * np.array([1, 1e-2, 1e-4, 1e-6])) @ v.T  # κ(XᵀX) = 1e12
    with pytest.warns(ConditioningWarning, match=r"1\.0e\+12"):
        whitening_matrix(torch.from_numpy(x))


@pytest.mark.parametrize("method", ["svd", "eigh", "cholesky"])
def test_every_method_warns_past_the_same_condition_threshold(method):
    # κ(XᵀX) from 1e4 to 1e13 on a 40 × 5 design: each method warns when κ > 1/√u (tested
    # outside a factor-4 band: the Cholesky path estimates κ by power iteration, from below,
    # within a factor 0.42), and when it does not warn its answer holds the normal equations'
    # bound C·u·κ against numpy's SVD-based least squares
    rng = np.random.default_rng(12)
    u_mat, _ = np.linalg.qr(rng.normal(size=(40, 5)))
    v_mat, _ = np.linalg.qr(rng.normal(size=(5, 5)))
    unit = 2.0**-53
    threshold = unit**-0.5
    for kappa in (1e4, 1e6, 0.25 * threshold, threshold, 4.5 * threshold, 1e9, 1e12, 1e13):
        x = (u_mat * np.sqrt(np.logspace(0, -np.log10(kappa), 5))) @ v_mat.T
        y = x @ rng.normal(size=(5, 1)) + 1e-3 * rng.normal(size=(40, 1))
        q = rng.normal(size=(7, 5))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = OLSAttention(method=method).predict(x, y, q).numpy()
        warned = any(issubclass(w.category, ConditioningWarning) for w in caught)
        true_kappa = np.linalg.cond(x.T @ x)
        if true_kappa > 4 * threshold:
            assert warned, (method, true_kappa)
        elif true_kappa < 0.3 * threshold:
            assert not warned, (method, true_kappa)
        expected = q @ np.linalg.lstsq(x, y, rcond=None)[0]
        rel = np.abs(got - expected).max() / np.abs(expected).max()
        assert rel <= 64 * unit * true_kappa, (method, true_kappa, rel)


@pytest.mark.parametrize("method", ["cholesky", "eigh"])  # svd: R-only QR, no backward
def test_whitening_inside_a_trained_graph_warns_nothing_and_passes_gradients(method: str) -> None:
    """Keys that carry a gradient (a trained projection before the whitening, as in the compare
    study's whitened regressors): no warning (no scalar read of a tensor that requires grad),
    and the gradient of ``sum(L)`` matches central differences in float64."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 12, 3, generator=g, dtype=torch.float64)
    w = torch.randn(3, 3, generator=g, dtype=torch.float64).requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        whitening_matrix(x @ w, method=method).matrix.sum().backward()
    assert w.grad is not None
    step, numeric = 1e-6, torch.zeros(3, 3, dtype=torch.float64)
    with torch.no_grad():
        for i in range(3):
            for j in range(3):
                e = torch.zeros(3, 3, dtype=torch.float64)
                e[i, j] = step
                up = whitening_matrix(x @ (w + e), method=method).matrix.sum()
                down = whitening_matrix(x @ (w - e), method=method).matrix.sum()
                numeric[i, j] = (up - down) / (2 * step)
    # central differences: truncation O(step²), rounding O(u·|f|/step)
    bound = 1e-6 * max(1.0, float(numeric.abs().max()))
    assert float((w.grad - numeric).abs().max()) <= bound
