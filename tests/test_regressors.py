"""Attention regressors against independent references (scikit-learn, numpy)."""

import numpy as np
import pytest
import torch
from scipy.special import softmax
from sklearn.linear_model import LinearRegression
from sklearn.linear_model import Ridge as SkRidge

from attnreg.core.threads import torch_threads
from attnreg.models.regressors import (
    AttentionRegression,
    TrainableOLSTransformer,
    symmetric_whitening,
)

LAM = 1e-3


def _data(n=60, m=15, d=5, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(d, d))
    x = rng.normal(size=(n + m, d)) @ a
    y = x @ rng.normal(size=(d, 1)) + 0.3 * rng.normal(size=(n + m, 1))
    return x[:n], y[:n], x[n:]


def _set(param, value):
    with torch.no_grad():
        param.copy_(torch.as_tensor(value, dtype=param.dtype))


@pytest.mark.parametrize("qk", ["single", "separate", "shared"])
def test_constructed_regression_attention_is_ridge(qk):
    """No softmax, W_q W_kᵀ = N (XᵀX + λI)⁻¹ (scores are divided by N): ridge, untrained."""
    x, y, q = _data()
    n, d = x.shape
    target = n * np.linalg.inv(x.T @ x + LAM * np.eye(d))
    model = AttentionRegression(d, variant="regression", qk=qk)
    if qk == "single":
        _set(model.w, target)
    elif qk == "separate":
        _set(model.w_q, target)
        _set(model.w_k, np.eye(d))
    else:
        _set(model.w, np.linalg.cholesky(target))  # W Wᵀ = target
    sk = SkRidge(alpha=LAM, fit_intercept=False).fit(x, y[:, 0])
    fitted = model.predict(x, y, x).numpy()[:, 0]
    predicted = model.predict(x, y, q).numpy()[:, 0]
    np.testing.assert_allclose(fitted, sk.predict(x), rtol=0, atol=1e-10)
    np.testing.assert_allclose(predicted, sk.predict(q), rtol=0, atol=1e-10)
    # its attention matrix on the training rows is the ridge hat matrix
    args = (torch.tensor(x), torch.tensor(x), torch.tensor(y))
    _, cache = model.run_with_cache(*args, method="forward")
    hat = x @ np.linalg.solve(x.T @ x + LAM * np.eye(d), x.T)
    np.testing.assert_allclose(cache["attn.hook_weights"][0].numpy(), hat, atol=1e-10)


def test_whitening_built_in_is_ols_for_any_invertible_shared_w():
    x, y, q = _data(seed=1)
    ols = LinearRegression(fit_intercept=False).fit(x, y)
    for seed in range(3):
        model = AttentionRegression(
            x.shape[1], variant="whitened", qk="shared", whiten_ridge=1e-13, seed=seed
        )
        got = model.predict(x, y, q).numpy()
        np.testing.assert_allclose(got, ols.predict(q), rtol=1e-6, atol=1e-8)


def test_symmetric_whitening_matches_numpy_eigh():
    x, _, _ = _data(n=80, d=4, seed=2)
    s = x.T @ x / len(x)
    vals, vecs = np.linalg.eigh(s)
    expected = vecs @ np.diag(vals**-0.5) @ vecs.T
    got = symmetric_whitening(torch.tensor(x)[None])[0].numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
    f = x @ got
    np.testing.assert_allclose(f.T @ f / len(x), np.eye(4), atol=1e-10)


def test_softmax_attention_matches_a_numpy_softmax_smoother():
    x, y, q = _data(seed=3)
    model = AttentionRegression(x.shape[1], variant="softmax", qk="separate", seed=4)
    wq, wk = model.w_q.detach().numpy(), model.w_k.detach().numpy()
    weights = softmax((q @ wq) @ (x @ wk).T / np.sqrt(x.shape[1]), axis=1)
    np.testing.assert_allclose(model.predict(x, y, q).numpy(), weights @ y, atol=1e-12)
    seen = []
    with torch.no_grad(), model.hooks([("attn.hook_weights", lambda t, _n: seen.append(t))]):
        loo = model(torch.tensor(x), torch.tensor(x), torch.tensor(y), exclude_self=True)
    a = seen[0][0].numpy()
    np.testing.assert_allclose(np.diag(a), 0.0)
    np.testing.assert_allclose(a.sum(1), 1.0, atol=1e-12)
    scores = (x @ wq) @ (x @ wk).T / np.sqrt(x.shape[1])
    np.fill_diagonal(scores, -np.inf)
    np.testing.assert_allclose(loo.numpy(), softmax(scores, axis=1) @ y, atol=1e-12)


def _numpy_scores_and_metric(model, x, q):
    """The layer's raw scores ``Q Kᵀ / N`` and the metric ``M`` with ``x* M xᵀ = Q Kᵀ``, built
    in numpy from the model's weights (module docstring): ZCA data whitening ``S^{-1/2}`` from
    ``eigh``, the projections, and (whitened variant) ``L_K = C⁻ᵀ`` with
    ``C Cᵀ = KᵀK/N + ρI``; and their error bounds ``64·u·κ·(the product on absolute values)``,
    κ the condition numbers of the whitened covariances."""
    n, d = x.shape
    lx, kappa = np.eye(d), 1.0
    if model.whitening:
        vals, vecs = np.linalg.eigh(x.T @ x / n)
        lx, kappa = vecs @ np.diag(vals**-0.5) @ vecs.T, vals.max() / vals.min()
    if model.qk == "single":
        wq = wk = np.eye(d)
        inner = model.w.detach().numpy()
    else:
        wq = (model.w if model.qk == "shared" else model.w_q).detach().numpy()
        wk = (model.w if model.qk == "shared" else model.w_k).detach().numpy()
        inner = np.eye(wq.shape[1])
    if model.variant == "whitened":
        keys = x @ lx @ wk
        s_k = keys.T @ keys / n + model.whiten_ridge * np.eye(keys.shape[1])
        lk = np.linalg.inv(np.linalg.cholesky(s_k)).T
        inner = lk @ inner @ lk.T
        kappa *= np.linalg.cond(s_k)
    metric = lx @ wq @ inner @ wk.T @ lx.T
    scores = (q @ lx @ wq) @ inner @ (x @ lx @ wk).T / n
    a = [np.abs(t) for t in (lx, wq, inner, wk)]
    metric_size = a[0] @ a[1] @ a[2] @ a[3].T @ a[0].T
    tol = 64 * 2.0**-53 * kappa  # chains of < 64 roundings, amplified by the whitenings' κ
    return scores, metric, tol * np.abs(q) @ metric_size @ np.abs(x).T / n, tol * metric_size


@pytest.mark.parametrize("variant", ["regression", "whitened"])
@pytest.mark.parametrize("qk", ["single", "separate", "shared"])
@pytest.mark.parametrize("whitening", [False, True])
def test_scores_and_effective_metric_equal_a_numpy_build_of_the_layer(variant, qk, whitening):
    x, y, q = _data(seed=5)
    model = AttentionRegression(x.shape[1], variant=variant, qk=qk, whitening=whitening, seed=1)
    want_scores, want_metric, tol, tol_metric = _numpy_scores_and_metric(model, x, q)
    with torch.no_grad():
        args = (torch.tensor(q), torch.tensor(x), torch.tensor(y))
        _, cache = model.run_with_cache(*args, method="forward")
    metric = model.effective_metric(torch.tensor(x))[0].numpy()
    for got, want, bound in (
        (cache["attn.hook_scores"][0].numpy(), want_scores, tol),
        (q @ metric @ x.T / len(x), want_scores, tol),
        (metric, want_metric, tol_metric),
    ):
        assert np.all(np.abs(got - want) <= bound), np.max(np.abs(got - want) / bound)


def test_layernorm_is_applied_to_queries_and_keys():
    x, y, q = _data(seed=6)
    plain = AttentionRegression(x.shape[1], variant="regression", qk="single", seed=0)
    normed = AttentionRegression(
        x.shape[1], variant="regression", qk="single", layernorm=True, seed=0
    )

    def ln(a):
        return (a - a.mean(1, keepdims=True)) / np.sqrt(a.var(1, keepdims=True) + 1e-5)

    w = normed.w.detach().numpy()
    expected = (ln(q) @ w @ ln(x).T / len(x)) @ y
    np.testing.assert_allclose(normed.predict(x, y, q).numpy(), expected, rtol=1e-6)
    assert not np.allclose(plain.predict(x, y, q).numpy(), expected)


def test_trainable_ols_transformer_with_constructed_weights_is_ols():
    x, y, q = _data(seed=7)
    n, d = x.shape
    vals, vecs = np.linalg.eigh(x.T @ x / n)
    lmat = vecs / np.sqrt(vals)
    model = TrainableOLSTransformer(d, 1)
    for name in ("w_q", "w_k", "w_v"):
        _set(getattr(model, name), lmat)
    _set(model.w_p, lmat.T @ x.T @ y / n)
    ols = LinearRegression(fit_intercept=False).fit(x, y)
    with torch.no_grad():
        got = model(torch.tensor(q), torch.tensor(x)).numpy()
    np.testing.assert_allclose(got, ols.predict(q), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(model.vp_product.numpy()[:, 0], ols.coef_[0], rtol=1e-8)


def test_bad_inputs_are_refused_with_names():
    with pytest.raises(ValueError, match=r"variant: unknown value 'linear'.*softmax, regression"):
        AttentionRegression(3, variant="linear")
    with pytest.raises(ValueError, match="qk: unknown value"):
        AttentionRegression(3, qk="tied")
    with pytest.raises(ValueError, match="d: must be an integer >= 1"):
        AttentionRegression(0)
    model = AttentionRegression(3)
    x = np.ones((4, 3))
    x_bad = x.copy()
    x_bad[2, 1] = np.nan
    with pytest.raises(ValueError, match=r"x_ctx: contains NaN at index \(2, 1\)"):
        model.predict(x_bad, np.ones(4), x)
    with pytest.raises(ValueError, match="x_ctx: expected d = 3"):
        model.predict(np.ones((4, 2)), np.ones(4), np.ones((1, 2)))
    with pytest.raises(ValueError, match="exclude_self needs the queries"):
        model(
            torch.ones(2, 3, dtype=torch.float64),
            torch.ones(4, 3, dtype=torch.float64),
            torch.ones(4, 1, dtype=torch.float64),
            exclude_self=True,
        )
    with pytest.raises(ValueError, match="n_threads"):
        with torch_threads(0):
            pass


def test_torch_threads_restores_the_setting():
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_run_with_cache_passes_keyword_arguments():
    model = AttentionRegression(3, variant="softmax", qk="shared", seed=0)
    x = torch.randn(5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    y = torch.randn(5, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    out, cache = model.run_with_cache(x, x, y, exclude_self=True, method="forward")
    weights = cache["attn.hook_weights"][0]
    assert torch.all(torch.diagonal(weights) == 0)
    torch.testing.assert_close(out, weights @ y)
