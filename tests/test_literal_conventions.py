"""The sources' own conventions, runnable as written, against computations written here.

* ``VonOswaldSummaryLayer``: the von Oswald construction as the summary "Self-Attention
  Mimicking Gradient Descent" writes it (targets first, un-normalised sum) against an explicit
  GD loop on ``½ Σ‖W x_i − y_i‖²`` from ``W0 ≠ 0``.
* ``OLSTransformer(convention="tan-zhao")``: ``L = V Λ^{-1/2}`` from ``numpy.linalg.eigh``, the
  identity feed-forward block, and predictions against ``numpy.linalg.lstsq`` and scikit-learn.

Tolerances are error bounds. The GD layer sums products of the data: its error is at most
``γ · |·|`` with ``γ = c (N + d) u`` and ``|·|`` the same computation on absolute values (Higham
2002, §3.1). The Tan & Zhao layer is the normal equations applied twice (``X* M S M XᵀY``,
``M = (S + E)⁻¹``): relative error ``≤ 2 √max(N, d) · u · κ(S)`` (the rule ``attnreg verify``
checks it to).
"""

import warnings

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.linear_model import LinearRegression
from sklearn.utils.estimator_checks import parametrize_with_checks

from attnreg import LSAStack, OLSTransformer
from attnreg.constructions import VonOswaldSummaryLayer
from attnreg.constructions.ols import FeedForward
from attnreg.core.whitening import ConditioningWarning, RankWarning
from attnreg.sklearn import OLSTransformerRegressor

U64 = np.finfo(np.float64).eps / 2
U32 = np.finfo(np.float32).eps / 2


# ------------------------------------------------------------------ references written here


def gd_sum_steps(x, y, etas, w0):
    """GD on ½ Σ_i ‖W x_i − y_i‖² (no 1/N), one sample at a time: W ← W − η Σ (W x_i − y_i) x_iᵀ."""
    w = w0.copy()
    for eta in etas:
        grad = np.zeros_like(w)
        for i in range(len(x)):
            grad += np.outer(w @ x[i] - y[i], x[i])
        w = w - eta * grad
    return w


def gd_abs_bound(x, y, xq, etas, w0):
    """The same recursion on absolute values: ``|W_k|`` bounds every term the layer sums, so
    ``|x_q| A_Kᵀ`` bounds the magnitudes in the computed prediction."""
    a = np.abs(w0)
    ax, ay = np.abs(x), np.abs(y)
    for eta in etas:
        a = a + eta * sum(np.outer(ay[i] + a @ ax[i], ax[i]) for i in range(len(x)))
    return np.abs(xq) @ a.T


def gd_tolerance(x, y, xq, etas, w0, unit=U64):
    """``4 K (N + d + 3) u · bound``: each of the K steps sums N + d products (γ_{N+d+3})."""
    n, d = x.shape
    k = len(etas)
    return 4 * k * (n + d + 3) * unit * gd_abs_bound(x, y, xq, etas, w0)


def kept_condition(x):
    """κ(XᵀX) over the singular values above max(N, d)·eps·σ_max (the kept spectrum)."""
    s = np.linalg.svd(x, compute_uv=False)
    s = s[s > max(x.shape) * np.finfo(np.float64).eps * s[0]]
    return float((s[0] / s[-1]) ** 2)


def normal_equations_tol(x, unit=U64):
    return 2 * np.sqrt(max(x.shape)) * unit * kept_condition(x)


def rel_err(got, expected):
    return float(np.max(np.abs(got - expected)) / np.max(np.abs(expected)))


def _gd_task(n, d, dy, m, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)) / np.sqrt(d)
    return x, rng.normal(size=(n, dy)), rng.normal(size=(m, d)), rng.normal(size=(dy, d))


# ------------------------------------------------------------------ von Oswald, the summary

GD_SHAPES = [  # (N, d, dy, η·N)
    (7, 3, 2, 0.5),
    (20, 5, 1, 0.9),
    (4, 8, 3, 0.3),
    (1, 2, 1, 1.0),
    (33, 1, 4, 0.7),
]


@pytest.mark.parametrize(("n", "d", "dy", "eta_n"), GD_SHAPES)
@pytest.mark.parametrize("seed", [0, 1])
def test_summary_layer_is_one_gd_step_on_the_summed_loss(n, d, dy, eta_n, seed):
    x, y, q, w0 = _gd_task(n, d, dy, 6, seed)
    eta = eta_n / n
    layer = VonOswaldSummaryLayer(d, dy, eta, w0=w0)
    w1 = gd_sum_steps(x, y, [eta], w0)
    got = layer.predict(x, y, q).numpy()
    expected = q @ w1.T
    assert np.all(np.abs(got - expected) <= gd_tolerance(x, y, q, [eta], w0))


@pytest.mark.parametrize(("n", "d", "dy", "eta_n"), GD_SHAPES)
def test_raw_query_token_holds_minus_w0_plus_delta_w0_times_xq(n, d, dy, eta_n):
    x, y, q, w0 = _gd_task(n, d, dy, 5, 2)
    eta = eta_n / n
    delta = eta * sum(np.outer(y[i] - w0 @ x[i], x[i]) for i in range(n))
    tokens = VonOswaldSummaryLayer(d, dy, eta, w0=w0).query_tokens(x, y, q).numpy()
    assert tokens.shape == (5, dy + d)
    y_entry = -(q @ (w0 + delta).T)
    assert np.all(np.abs(tokens[:, :dy] - y_entry) <= gd_tolerance(x, y, q, [eta], w0))
    np.testing.assert_array_equal(tokens[:, dy:], q)  # x-entries pass unchanged (KQ·PV = 0 there)
    # the summary's closing formula (W0 − ΔW0) x has the sign of ΔW0 reversed
    wrong = q @ (w0 - delta).T
    assert np.max(np.abs(-tokens[:, :dy] - wrong)) > 1e3 * np.max(gd_tolerance(x, y, q, [eta], w0))


@pytest.mark.parametrize("steps", [2, 3, 5])
def test_stacked_summary_layers_are_k_gd_steps_from_w0(steps):
    x, y, q, w0 = _gd_task(16, 4, 2, 6, steps)
    etas = list(np.linspace(0.6, 0.2, steps) / 16)
    layer = VonOswaldSummaryLayer(4, 2, etas, steps, w0)
    expected = q @ gd_sum_steps(x, y, etas, w0).T
    got = layer.predict(x, y, q).numpy()
    assert np.all(np.abs(got - expected) <= gd_tolerance(x, y, q, etas, w0))


def test_summary_layer_batched_float32_and_unbatched():
    rng = np.random.default_rng(3)
    b, n, d, dy = 4, 12, 3, 2
    x = rng.normal(size=(b, n, d)) / np.sqrt(d)
    y, q = rng.normal(size=(b, n, dy)), rng.normal(size=(b, 5, d))
    w0 = rng.normal(size=(dy, d))
    eta = 0.5 / n
    layer = VonOswaldSummaryLayer(d, dy, eta, w0=w0)
    got = layer.predict(x, y, q).numpy()
    assert got.shape == (b, 5, dy)
    got32 = layer.predict(*(a.astype(np.float32) for a in (x, y, q)))
    assert got32.dtype == torch.float32
    for t in range(b):
        expected = q[t] @ gd_sum_steps(x[t], y[t], [eta], w0).T
        bound = gd_tolerance(x[t], y[t], q[t], [eta], w0)
        assert np.all(np.abs(got[t] - expected) <= bound)
        # float32: the inputs' rounding (u32 relative) plus the same γ-bound in u32
        bound32 = gd_tolerance(x[t], y[t], q[t], [eta], w0, unit=U32) * 2
        assert np.all(np.abs(got32[t].double().numpy() - expected) <= bound32)
    np.testing.assert_array_equal(layer.predict(x[0], y[0], q[0]).numpy(), got[0])
    assert layer.query_tokens(x[0], y[0], q[0]).shape == (5, dy + d)


def test_summary_layer_equals_the_package_lsa_with_eta_times_n():
    """The same step in two conventions: a sum with η/N (summary) is a mean with η (package)."""
    x, y, q, w0 = _gd_task(10, 4, 2, 6, 4)
    eta = 0.4
    summary = VonOswaldSummaryLayer(4, 2, eta / 10, w0=w0).predict(x, y, q).numpy()
    package = LSAStack.gd(4, 2, eta, 1, w0).predict(x, y, q).numpy()
    bound = gd_tolerance(x, y, q, [eta / 10], w0)
    assert np.all(np.abs(summary - package) <= 2 * bound)


def test_summary_layer_weights_scores_and_hooks():
    x, y, q, w0 = _gd_task(6, 3, 2, 4, 5)
    layer = VonOswaldSummaryLayer(3, 2, 0.1, w0=w0)
    kq, pv = layer.key_query(0).numpy(), layer.value_projection(0).numpy()
    expected_kq = np.zeros((5, 5))
    expected_kq[2:, 2:] = np.eye(3)
    expected_pv = np.zeros((5, 5))
    expected_pv[:2, :2] = -0.1 * np.eye(2)
    expected_pv[:2, 2:] = 0.1 * w0
    np.testing.assert_array_equal(kq, expected_kq)
    np.testing.assert_array_equal(pv, expected_pv)
    _, cache = layer.run_with_cache(x, y, q, names=["layers.0.hook_scores"])
    scores = cache["layers.0.hook_scores"][0].numpy()  # (M, N): e_qᵀ KQᵀ e_i = x_qᵀ x_i
    bound = 4 * 3 * U64 * (np.abs(q) @ np.abs(x).T)
    assert np.all(np.abs(scores - q @ x.T) <= bound)


def test_summary_layer_rejects_bad_arguments():
    with pytest.raises(ValueError, match="w0"):
        VonOswaldSummaryLayer(3, 2, 0.1, w0=np.zeros((3, 2)))
    with pytest.raises(ValueError, match="eta"):
        VonOswaldSummaryLayer(3, 2, [0.1, 0.2], steps=3)
    with pytest.raises(ValueError, match="eta"):
        VonOswaldSummaryLayer(3, 2, -0.1)
    layer = VonOswaldSummaryLayer(3, 1, 0.1)
    with pytest.raises(ValueError, match="d = 3"):
        layer.predict(np.ones((4, 2)), np.ones(4), np.ones((2, 2)))


# ------------------------------------------------------------------ Tan & Zhao as written


def _ols_task(n, d, dy, seed, m=6):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)), rng.normal(size=(n, dy)), rng.normal(size=(m, d))


@pytest.mark.parametrize(("n", "d", "dy"), [(30, 4, 1), (12, 6, 3), (6, 6, 2), (4, 9, 1)])
@pytest.mark.parametrize("covariance", ["gram", "mean"])
def test_tan_zhao_layer_equals_lstsq(n, d, dy, covariance):
    x, y, q = _ols_task(n, d, dy, n + d)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RankWarning)
        got = OLSTransformer(convention="tan-zhao", covariance=covariance).predict(x, y, q)
    expected = q @ np.linalg.lstsq(x, y, rcond=None)[0]
    assert rel_err(got.numpy(), expected) <= normal_equations_tol(x)


def test_tan_zhao_on_degenerate_designs():
    """Zero, constant-plus-intercept and collinear columns: the null space is dropped, as in the
    package's whitening, and the answer is the minimum-norm least squares one."""
    rng = np.random.default_rng(7)
    base = rng.normal(size=(20, 3))
    designs = [
        np.hstack([base, np.zeros((20, 1))]),
        np.hstack([base, np.ones((20, 1)), np.ones((20, 1))]),
        np.hstack([base, base[:, :1] - 2 * base[:, 1:2]]),
    ]
    y, q = rng.normal(size=(20, 2)), rng.normal(size=(5, 3))
    for x in designs:
        xq = np.hstack([q, rng.normal(size=(5, x.shape[1] - 3))])
        with pytest.warns(RankWarning):
            got = OLSTransformer(convention="tan-zhao").predict(x, y, xq).numpy()
        expected = xq @ np.linalg.lstsq(x, y, rcond=None)[0]
        assert rel_err(got, expected) <= normal_equations_tol(x)


def test_tan_zhao_l_from_eigh_whitens_s():
    x, y, _ = _ols_task(40, 5, 2, 11)
    s = x.T @ x
    kappa = kept_condition(x)
    lam, v = np.linalg.eigh(s)
    l_np = v / np.sqrt(lam)  # L = V Λ^{-1/2}
    eye = np.eye(5)
    # Lᵀ S L = I − Lᵀ E L with ‖E‖ ≤ ε‖S‖: off by at most ε κ(S)
    assert np.max(np.abs(l_np.T @ s @ l_np - eye)) <= 5 * np.sqrt(40) * U64 * kappa
    layer = OLSTransformer(convention="tan-zhao").fit(torch.from_numpy(x), torch.from_numpy(y))
    lmat = layer.w_q[0].numpy()
    assert np.max(np.abs(lmat.T @ s @ lmat - eye)) <= 5 * np.sqrt(40) * U64 * kappa
    # the same L up to the order and signs of the eigenvectors: L Lᵀ = S⁻¹ for both
    s_inv = np.linalg.inv(s)
    bound = 5 * np.sqrt(40) * U64 * kappa * np.max(np.abs(s_inv))
    assert np.max(np.abs(lmat @ lmat.T - l_np @ l_np.T)) <= 2 * bound
    # tied weights W_Q = W_K = W_V = L and W_P = P = Lᵀ XᵀY
    assert torch.equal(layer.w_q, layer.w_k) and torch.equal(layer.w_k, layer.w_v)
    p = lmat.T @ x.T @ y
    p_bound = 4 * 40 * U64 * (np.abs(lmat).T @ np.abs(x).T @ np.abs(y))
    assert np.all(np.abs(layer.w_p[0].numpy() - p) <= p_bound)
    assert layer.method == "eigh"


def test_tan_zhao_feed_forward_block_is_present_applied_and_the_identity():
    x, y, q = _ols_task(25, 4, 1, 12)
    layer = OLSTransformer(convention="tan-zhao")
    assert isinstance(layer.ffn, FeedForward)
    assert "ffn" in dict(layer.named_modules())
    out, cache = layer.run_with_cache(x, y, q)
    assert layer.ffn.weight is not None
    np.testing.assert_array_equal(layer.ffn.weight.numpy(), np.eye(4))
    # applied: its output is the attention's output, unchanged (multiplying by I is exact) ...
    torch.testing.assert_close(cache["ffn.hook_output"], cache["attn.hook_output"], rtol=0, atol=0)
    # ... and on the forward path: editing it changes the layer's output (doubling is exact)
    plain = layer.predict(x, y, q)
    doubled = layer.run_with_hooks(x, y, q, hooks=[("ffn.hook_output", lambda t, _: 2 * t)])
    torch.testing.assert_close(doubled, 2 * plain, rtol=0, atol=0)
    assert rel_err(out.numpy(), plain.numpy()) <= normal_equations_tol(x)
    # the package convention has no feed-forward block
    assert OLSTransformer().ffn is None
    assert "ffn.hook_output" not in OLSTransformer().hook_names()


def test_tan_zhao_coefficients_are_lstsq():
    x, y, _ = _ols_task(30, 5, 2, 13)
    layer = OLSTransformer(convention="tan-zhao").fit(torch.from_numpy(x), torch.from_numpy(y))
    beta = np.linalg.lstsq(x, y, rcond=None)[0]
    assert rel_err(layer.coefficients[0].numpy(), beta) <= normal_equations_tol(x)


def test_tan_zhao_float32_and_extreme_scale():
    x, y, q = _ols_task(30, 4, 1, 14)
    x32, y32, q32 = (a.astype(np.float32) for a in (x, y, q))
    expected = q32.astype(np.float64) @ np.linalg.lstsq(x32, y32, rcond=None)[0]
    got = OLSTransformer(convention="tan-zhao").predict(x32, y32, q32)
    assert got.dtype == torch.float32
    assert rel_err(got.double().numpy(), expected) <= normal_equations_tol(x32, U32)
    a = 2.0**600  # XᵀX overflows float64; the layer rescales by a power of two
    big = OLSTransformer(convention="tan-zhao").predict(x * a, y * a, q * a).numpy()
    expected64 = q @ np.linalg.lstsq(x, y, rcond=None)[0]
    assert rel_err(big / a, expected64) <= normal_equations_tol(x)


def test_tan_zhao_rejects_another_method_and_unknown_conventions():
    with pytest.raises(ValueError, match="eigh"):
        OLSTransformer(convention="tan-zhao", method="svd")
    with pytest.raises(ValueError, match="convention"):
        OLSTransformer(convention="tan_zhao")
    assert OLSTransformer(convention="tan-zhao", method="eigh").method == "eigh"
    assert OLSTransformer().method == "svd"


# ------------------------------------------------------------------ scikit-learn


@parametrize_with_checks(
    [
        OLSTransformerRegressor(convention="tan-zhao"),
        OLSTransformerRegressor(ridge=0.5, convention="tan-zhao"),
    ]
)
def test_sklearn_contract_tan_zhao(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConditioningWarning)
        check(estimator)


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("dy", [1, 3])
def test_regressor_tan_zhao_equals_linear_regression(fit_intercept, dy):
    rng = np.random.default_rng(dy)
    x = rng.normal(size=(50, 4)) + 3.0
    w = rng.normal(size=(4, dy))
    y = x @ w + 2.0 + 0.1 * rng.normal(size=(50, dy))
    y = y[:, 0] if dy == 1 else y
    ours = OLSTransformerRegressor(fit_intercept=fit_intercept, convention="tan-zhao").fit(x, y)
    sk = LinearRegression(fit_intercept=fit_intercept).fit(x, y)
    design = x - x.mean(axis=0) if fit_intercept else x
    tol = normal_equations_tol(design)
    assert rel_err(ours.coef_, sk.coef_) <= tol
    xt = rng.normal(size=(7, 4)) + 3.0
    assert rel_err(ours.predict(xt), sk.predict(xt)) <= tol
    assert ours.layer_.ffn is not None and ours.layer_.method == "eigh"


def test_regressor_convention_is_a_parameter():
    est = OLSTransformerRegressor(convention="tan-zhao")
    assert est.get_params()["convention"] == "tan-zhao"
    assert clone(est).convention == "tan-zhao"
    assert OLSTransformerRegressor().get_params()["convention"] == "package"
    bad = OLSTransformerRegressor(convention="paper")  # validated in fit, not in __init__
    with pytest.raises(ValueError, match="convention"):
        bad.fit(np.ones((5, 2)), np.ones(5))
