"""Each construction's forward pass against an independent numpy / scikit-learn reference."""

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from refs import gd_predict, gdpp_predict, lstsq_predict, ridge_per_prefix, ridge_predict
from sklearn.linear_model import LinearRegression

from attnreg import LSAStack, MesaLayer, OLSAttention, OLSTransformer
from attnreg.core.whitening import RankWarning


def _data(b, n, d, dy, seed, m=4):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(b, n, d)), rng.normal(size=(b, n, dy)), rng.normal(size=(b, m, d))


def _each(fn, x, y, q):
    return np.stack([fn(x[b], y[b], q[b]) for b in range(len(x))])


@settings(max_examples=40, deadline=None)
@given(
    b=st.integers(1, 3),
    n=st.integers(1, 20),
    d=st.integers(1, 7),
    dy=st.integers(1, 3),
    seed=st.integers(0, 999),
    method=st.sampled_from(["svd", "eigh"]),
    covariance=st.sampled_from(["gram", "mean"]),
)
def test_ols_transformer_equals_lstsq_for_every_shape(b, n, d, dy, seed, method, covariance):
    x, y, q = _data(b, n, d, dy, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RankWarning)
        got = OLSTransformer(method=method, covariance=covariance).predict(x, y, q).numpy()
        got_attn = OLSAttention(method=method, covariance=covariance).predict(x, y, q).numpy()
    expected = _each(lstsq_predict, x, y, q)
    tol = 1e-9 * max(1.0, np.abs(expected).max())
    np.testing.assert_allclose(got, expected, atol=tol)
    np.testing.assert_allclose(got_attn, expected, atol=tol)


def test_cholesky_whitening_gives_the_same_layer():
    x, y, q = _data(3, 30, 5, 2, 1)
    got = OLSTransformer(method="cholesky").predict(x, y, q).numpy()
    np.testing.assert_allclose(got, _each(lstsq_predict, x, y, q), atol=1e-12)


def test_on_its_own_context_attention_is_the_hat_matrix():
    x, y, _ = _data(1, 25, 4, 1, 2)
    layer = OLSTransformer()
    out, cache = layer.run_with_cache(x, y, x)
    out = out.numpy()[0]
    sk = LinearRegression(fit_intercept=False).fit(x[0], y[0]).predict(x[0])
    np.testing.assert_allclose(out, sk, atol=1e-12)
    hat = x[0] @ np.linalg.inv(x[0].T @ x[0]) @ x[0].T
    np.testing.assert_allclose(cache["attn.hook_scores"][0].numpy(), hat, atol=1e-12)
    # (XL)(XL)ᵀ(XL) = XL: attention is the identity on the context's whitened features
    xl = x[0] @ layer.w_q[0].numpy()
    np.testing.assert_allclose(xl @ xl.T @ xl, xl, atol=1e-12)
    np.testing.assert_allclose(np.trace(hat), 4, atol=1e-10)


def test_weights_are_tied_and_hold_the_coefficients():
    x, y, _ = _data(1, 30, 3, 2, 3)
    layer = OLSTransformer().fit(torch.from_numpy(x), torch.from_numpy(y))
    assert torch.equal(layer.w_q, layer.w_k) and torch.equal(layer.w_k, layer.w_v)
    beta = np.linalg.lstsq(x[0], y[0], rcond=None)[0]
    np.testing.assert_allclose(layer.coefficients[0].numpy(), beta, atol=1e-12)
    lmat = layer.w_q[0].numpy()
    np.testing.assert_allclose(layer.w_p[0].numpy(), lmat.T @ x[0].T @ y[0], atol=1e-12)


@pytest.mark.parametrize("method", ["svd", "eigh", "cholesky"])
@pytest.mark.parametrize("n", [4, 30])
def test_ridge_forms_equal_ridge(method, n):
    x, y, q = _data(2, n, 6, 2, 4)
    lam = 0.4
    expected = _each(lambda a, b, c: ridge_predict(a, b, c, lam), x, y, q)
    got = OLSTransformer(ridge=lam, method=method).predict(x, y, q).numpy()
    np.testing.assert_allclose(got, expected, atol=1e-11)
    got = OLSAttention(ridge=lam, method=method).predict(x, y, q).numpy()
    np.testing.assert_allclose(got, expected, atol=1e-11)
    got = OLSAttention(ridge=lam, covariance="mean", method=method).predict(x, y, q).numpy()
    expected_mean = _each(lambda a, b, c: ridge_predict(a, b, c, n * lam), x, y, q)
    np.testing.assert_allclose(got, expected_mean, atol=1e-11)


def test_n_below_d_warns_with_rank_and_gives_minimum_norm():
    x, y, q = _data(1, 3, 8, 1, 5)
    with pytest.warns(RankWarning, match="rank 3 < d = 8"):
        got = OLSTransformer().predict(x, y, q).numpy()
    np.testing.assert_allclose(got, _each(lstsq_predict, x, y, q), atol=1e-12)


def test_collinear_and_constant_features_use_pseudo_inverse():
    rng = np.random.default_rng(6)
    x = rng.normal(size=(1, 20, 3))
    x = np.concatenate([x, x[..., :1] * 2.0, np.ones((1, 20, 1))], axis=-1)  # d = 5, rank 4
    y, q = rng.normal(size=(1, 20, 1)), rng.normal(size=(1, 3, 5))
    with pytest.warns(RankWarning, match="rank 4 < d = 5"):
        got = OLSTransformer().predict(x, y, q).numpy()
    np.testing.assert_allclose(got, _each(lstsq_predict, x, y, q), atol=1e-10)


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(2, 12),
    d=st.integers(1, 5),
    dy=st.integers(1, 3),
    steps=st.integers(1, 3),
    seed=st.integers(0, 999),
)
def test_lsa_stack_is_k_gd_steps(n, d, dy, steps, seed):
    x, y, q = _data(2, n, d, dy, seed)
    x = x / np.sqrt(d)
    rng = np.random.default_rng(seed)
    etas = list(rng.uniform(0.05, 0.5, steps))
    w0 = rng.normal(size=(dy, d))
    got = LSAStack.gd(d, dy, etas, steps, w0).predict(x, y, q).numpy()
    expected = _each(lambda a, b, c: gd_predict(a, b, c, etas, w0), x, y, q)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-11)


def test_lsa_gd_weights_match_the_paper():
    w0 = np.array([[0.3, -0.2]])
    stack = LSAStack.gd(d=2, dy=1, eta=0.8, w0=w0)
    kq = np.zeros((3, 3))
    kq[:2, :2] = np.eye(2)
    pv = np.zeros((3, 3))
    pv[2, :2] = 0.8 * w0  # the paper's P W_V = (η/N)[[0, 0], [W0, −I]]; the layer averages
    pv[2, 2] = -0.8
    np.testing.assert_array_equal(stack.key_query(0)[0].numpy(), kq)
    np.testing.assert_allclose(stack.value_projection(0)[0].numpy(), pv)


def test_gd_plus_plus_stack_matches_token_loop():
    x, y, q = _data(2, 8, 3, 1, 7)
    x = x / 3
    got = LSAStack.gd_plus_plus(3, 1, 8, [0.4, 0.3], [0.02, 0.05], 2).predict(x, y, q).numpy()
    expected = _each(lambda a, b, c: gdpp_predict(a, b, c, [0.4, 0.3], [0.02, 0.05]), x, y, q)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


def test_preconditioned_layer_matches_preconditioned_gd():
    x, y, q = _data(2, 9, 4, 2, 8)
    rng = np.random.default_rng(0)
    g = rng.normal(size=(4, 4))
    w0 = rng.normal(size=(2, 4))
    got = LSAStack.preconditioned(g, 2, 0.3, 2, w0).predict(x, y, q).numpy()
    expected = _each(lambda a, b, c: gd_predict(a, b, c, [0.3, 0.3], w0, g), x, y, q)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


def test_stack_exposes_scores_by_layer_name():
    x, y, q = _data(1, 6, 2, 1, 9)
    stack = LSAStack.gd(2, 1, 0.1, steps=2)
    out, cache = stack.run_with_cache(x, y, q)
    assert {"layers.0.hook_scores", "layers.1.hook_weights"} <= set(cache)
    tokens = np.concatenate([np.hstack([x[0], y[0]]), np.hstack([q[0], np.zeros((4, 1))])])
    expected = tokens[:, :2] @ tokens[:6, :2].T / 6  # first layer: x_jᵀ x_i over the mean
    np.testing.assert_allclose(cache["layers.0.hook_scores"][0, 0].numpy(), expected, atol=1e-12)
    np.testing.assert_allclose(out.numpy(), stack.predict(x, y, q).numpy(), atol=1e-12)


def test_a_gd_stack_runs_at_every_context_size():
    """The one convention (context mean, weights hold η): no context size is built in."""
    for n in (3, 6, 11):
        x, y, q = _data(1, n, 2, 1, n)
        got = LSAStack.gd(2, 1, 0.4).predict(x, y, q).numpy()
        np.testing.assert_allclose(got[0], gd_predict(x[0], y[0], q[0], [0.4]), atol=1e-12)


def test_mesa_layer_is_ridge_at_every_prefix():
    x, y, q = _data(2, 15, 4, 2, 10)
    layer = MesaLayer(0.7)
    got = layer(torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(x)).numpy()
    expected = np.stack([ridge_per_prefix(x[b], y[b], 0.7) for b in range(2)])
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
    preds = layer.predict(x, y, q).numpy()
    np.testing.assert_allclose(
        preds, _each(lambda a, b, c: ridge_predict(a, b, c, 0.7), x, y, q), atol=1e-11
    )


def test_float32_forward_stays_float32_and_close():
    x, y, q = _data(2, 30, 5, 1, 11)
    got = OLSTransformer().predict(x.astype(np.float32), y.astype(np.float32), q.astype(np.float32))
    assert got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), _each(lstsq_predict, x, y, q), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("hook", ["hook_q", "hook_k", "hook_v", "hook_output"])
@pytest.mark.parametrize(
    ("b", "n", "d", "dy", "kwargs"),
    [
        (1, 3, 5, 1, {}),  # N < d: the minimum-norm answer
        (2, 2, 6, 2, {"ridge": 0.3}),
        (3, 40, 6, 1, {"method": "cholesky"}),
        (2, 30, 4, 3, {"covariance": "mean", "method": "eigh"}),
        (300, 64, 16, 1, {"method": "cholesky"}),  # several task blocks on the unhooked path
    ],
)
def test_a_read_only_hook_leaves_the_ols_transformer_bit_for_bit(hook, b, n, d, dy, kwargs):
    """docs/one-form.md: a read-only hook on hook_q/k/v/output leaves the output bit for bit
    (on 9e9883b the hooked path projected the queries and differed by ~1e-16)."""
    x, y, q = _data(b, n, d, dy, seed=b + n, m=5)
    seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RankWarning)
        plain = OLSTransformer(**kwargs).predict(x, y, q)
        hooked = OLSTransformer(**kwargs).run_with_hooks(
            x, y, q, hooks=[(f"attn.{hook}", lambda t, name: seen.append(name))]
        )
    assert seen == [f"attn.{hook}"]  # the hook ran, once, on the whole batch
    assert torch.equal(hooked, plain)
