"""The fast paths equal the plain computations (numpy / explicit torch) on small inputs."""

import itertools

import numpy as np
import pytest
import torch
from scipy.special import softmax

from attnreg import associate
from attnreg.bench.p1_ols import cholesky_predict, lstsq_predict, p1_data
from attnreg.constructions.ols import OLSAttention, OLSTransformer
from attnreg.core.streamed import chunk_sizes, fused_softmax, streamed
from attnreg.core.whitening import right_singular, whitening_matrix


def _data(seed, b=2, m=13, n=257, d=5, dv=3, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, m, d, generator=gen, dtype=dtype)
    k = torch.randn(b, n, d, generator=gen, dtype=dtype)
    v = torch.randn(b, n, dv, generator=gen, dtype=dtype)
    return q, k, v


@pytest.mark.parametrize("separation", ["softmax", "max", "power", "identity"])
@pytest.mark.parametrize("similarity", ["dot", "scaled_dot", "whitened_dot", "euclidean"])
def test_streamed_blocks_equal_the_whole_score_matrix(similarity, separation):
    q, k, v = _data(0)
    metric = torch.eye(5, dtype=torch.float64) + 0.1
    beta = 0.6
    if similarity == "dot":
        s = q @ k.mT
    elif similarity == "scaled_dot":
        s = q @ k.mT / np.sqrt(5)
    elif similarity == "whitened_dot":
        s = q @ metric @ k.mT
    else:
        s = -torch.cdist(q, k)
    s = (beta * s).numpy()
    if separation == "softmax":
        w = softmax(s, axis=-1)
    elif separation == "max":
        w = (s == s.max(-1, keepdims=True)).astype(float)
    elif separation == "power":
        w = s**3
    else:
        w = s
    expected = w @ v.numpy()
    for budget in (8 * 3 * 2 * 7 * 5, 8 * 3 * 2 * 13 * 64, 2**30):  # 7-key, 64-key, one block
        qm, scale = _folded(q, similarity, beta, metric)
        got = streamed(qm, k, v, similarity, separation, scale, 3, False, 1, budget)
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-10, atol=1e-11)


def _folded(q, similarity, beta, metric):
    """A bilinear similarity folded into the queries, as the core does before streaming."""
    if similarity == "whitened_dot":
        return q @ metric, beta
    if similarity == "scaled_dot":
        return q, beta / np.sqrt(q.shape[-1])
    return q, beta


def _product_bound(q, k, v, metric=None):
    """Componentwise forward-error bound of ``(Q M Kᵀ) V`` in any association:
    ``γ_n |Q||M||K|ᵀ|V|`` with ``γ_n ≈ n·u`` and ``n`` the summed lengths (Higham 2002, §3.5);
    doubled because the reference carries such an error too."""
    a = q.abs() if metric is None else q.abs() @ metric.abs()
    n = q.shape[-1] * (1 if metric is None else 2) + k.shape[-2]
    return 2 * n * torch.finfo(q.dtype).eps / 2 * ((a @ k.abs().mT) @ v.abs())


def test_chunk_sizes_follow_the_budget():
    for budget in (2**12, 2**20, 2**28):
        qb, kb = chunk_sizes(3, 4096, 200_000, 4, budget)
        assert 3 * 4 * 3 * qb * kb <= max(budget, 3 * 4 * 3)
    small, large = chunk_sizes(1, 4096, 200_000, 4, 2**20), chunk_sizes(1, 4096, 200_000, 4, 2**28)
    assert small[0] * small[1] < large[0] * large[1]


@pytest.mark.parametrize("similarity", ["dot", "scaled_dot", "whitened_dot"])
def test_fused_softmax_equals_explicit_softmax(similarity):
    q, k, v = _data(1)
    metric = torch.eye(5, dtype=torch.float64) * 0.5
    qm, scale = _folded(q, similarity, 1.7, metric)
    got = fused_softmax(qm, k, v, scale)
    scale = 1.7 / np.sqrt(5) if similarity == "scaled_dot" else 1.7
    qm = q @ metric if similarity == "whitened_dot" else q
    expected = softmax(scale * (qm @ k.mT).numpy(), axis=-1) @ v.numpy()
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-11, atol=1e-12)


def test_associate_softmax_float32_matches_float64_reference():
    q, k, v = _data(2, b=1, m=64, n=3000, d=16, dv=16, dtype=torch.float32)
    got = associate(q[0], k[0], v[0], similarity="scaled_dot", separation="softmax")
    s = q[0].double() @ k[0].double().T / 4.0
    expected = softmax(s.numpy(), axis=-1) @ v[0].double().numpy()
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-4, atol=1e-5)


def test_streamed_softmax_gradients_equal_plain_autograd():
    q, k, v = (t.requires_grad_() for t in _data(3, m=4, n=40))
    out = streamed(q, k, v, "euclidean", "softmax", 0.8, 2, False, 1, 8 * 3 * 2 * 4 * 6)
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    plain = torch.softmax(-0.8 * torch.cdist(q, k), -1) @ v
    expected = torch.autograd.grad(plain.sum(), (q, k, v))
    for g, e in zip(grads, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-12)


def test_linear_attention_q_ktv_equals_qkt_v():
    q, k, v = _data(4, n=50)
    expected = (q @ k.mT) @ v
    assert ((associate(q, k, v) - expected).abs() <= _product_bound(q, k, v)).all()
    metric = torch.eye(5, dtype=torch.float64) + 0.2
    got = associate(q, k, v, similarity="whitened_dot", metric=metric)
    bound = _product_bound(q, k, v, metric)
    assert ((got - (q @ metric @ k.mT) @ v).abs() <= bound).all()


@pytest.mark.parametrize("shape", [(3, 40, 6), (2, 6, 6), (2, 4, 7)])
def test_r_svd_gives_the_singular_values_and_right_vectors(shape):
    x = torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    sigma, vecs = right_singular(x)
    _, s_ref, _ = np.linalg.svd(x.numpy())
    k = min(shape[1:])
    np.testing.assert_allclose(sigma.numpy()[:, :k], s_ref, rtol=1e-12)
    assert vecs.shape == (shape[0], shape[2], shape[2])
    torch.testing.assert_close(
        vecs.mT @ vecs, torch.eye(shape[2], dtype=torch.float64).expand_as(vecs)
    )
    w = whitening_matrix(x, ridge=0.1).matrix
    gram = x.mT @ x + 0.1 * torch.eye(shape[2], dtype=torch.float64)
    # L Lᵀ = (XᵀX + λI)⁻¹ on the range of Xᵀ (X's null space is dropped: it meets no data)
    torch.testing.assert_close(
        w @ w.mT @ x.mT, torch.linalg.inv(gram) @ x.mT, rtol=1e-9, atol=1e-10
    )


def _normal_equations_bound(x: torch.Tensor, y: torch.Tensor, xq: torch.Tensor) -> np.ndarray:
    """Per query, ``2·8·(N + d)·u·κ(XᵀX)·‖x*‖·‖β̂‖``: the forward-error bound of a prediction
    through the normal equations, on both sides of a comparison (no per-element rtol: a
    prediction can be a cancellation of larger terms)."""
    unit = np.finfo(np.float64).eps / 2
    n, d = x.shape[-2], x.shape[-1]
    out = []
    for c, t, a in zip(x.numpy(), y.numpy(), xq.numpy(), strict=True):
        beta = np.linalg.lstsq(c, t, rcond=None)[0]
        norms = np.linalg.norm(a, axis=1, keepdims=True) * np.linalg.norm(beta)
        out.append(2 * 8 * (n + d) * unit * np.linalg.cond(c.T @ c) * norms)
    return np.stack(out)


@pytest.mark.parametrize("method", ["cholesky", "svd", "eigh"])
def test_ols_transformer_predict_equals_lstsq_and_normal_equations(method):
    x, y, xq = p1_data(16, 20, 4, 7, seed=6)
    expected = np.stack(
        [
            a @ np.linalg.lstsq(c, t, rcond=None)[0]
            for c, t, a in zip(x.numpy(), y.numpy(), xq.numpy(), strict=True)
        ]
    )
    bound = _normal_equations_bound(x, y, xq)
    for name, got in (
        ("layer", OLSTransformer(method=method).predict(x, y, xq)),
        ("lstsq", lstsq_predict(x, y, xq)),
        ("cholesky", cholesky_predict(x, y, xq)),
    ):
        err = np.abs(got.numpy() - expected)
        assert np.all(err <= bound), (name, float((err / bound).max()))


def test_predict_fast_path_equals_the_literal_layer_written_in_numpy():
    """The fast path, the hooked forward and OLS-attention against Tan & Zhao's layer built
    here in numpy from each task (``L = C⁻ᵀ`` with ``C Cᵀ = XᵀX``, so ``L Lᵀ = (XᵀX)⁻¹``;
    ``P = Lᵀ XᵀY``; ``out = (X* L)(X L)ᵀ(X L) P``), within the normal equations' forward-error
    bound ``c·u·κ(XᵀX)·‖x*‖·‖β̂‖`` per query (both sides carry such an error)."""
    x, y, xq = p1_data(5, 30, 3, 4, seed=7)
    literal = []
    for c, t, a in zip(x.numpy(), y.numpy(), xq.numpy(), strict=True):
        lmat = np.linalg.inv(np.linalg.cholesky(c.T @ c)).T
        keys = c @ lmat
        literal.append((a @ lmat) @ keys.T @ keys @ (lmat.T @ c.T @ t))
    expected, bound = np.stack(literal), _normal_equations_bound(x, y, xq)
    for name, got in (
        ("fast path", OLSTransformer(method="cholesky").predict(x, y, xq)),
        ("hooked forward", OLSTransformer(method="cholesky").run_with_cache(x, y, xq)[0]),
        ("OLS-attention", OLSAttention().predict(x, y, xq)),
    ):
        err = np.abs(got.numpy() - expected)
        assert np.all(err <= bound), (name, float((err / bound).max()))


def test_nan_in_a_predict_input_is_still_named():
    x, y, xq = p1_data(2, 10, 3, 2)
    x[1, 4, 2] = float("nan")
    with pytest.raises(ValueError, match=r"x_ctx: contains NaN at index \(1, 4, 2\)"):
        OLSTransformer(method="cholesky").predict(x, y, xq)
    big = torch.full((4, 3), 3e38, dtype=torch.float32)  # finite, but its sum overflows
    assert associate(big[:1] * 0, big, big[:, :1] * 0).shape == (1, 1)


@pytest.mark.parametrize("n", [64, 1000, 1003])
def test_blocked_qr_gives_the_same_triangular_factor(monkeypatch, n):
    from attnreg.core import whitening

    monkeypatch.setattr(whitening, "TSQR_BLOCK_BYTES", 8 * 2 * 6 * 20)  # blocks of 24 rows
    x = torch.randn(2, n, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(8))
    r = whitening._triangular_factor(x)
    assert r.shape == (2, 6, 6)
    torch.testing.assert_close(r.mT @ r, x.mT @ x, rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(torch.triu(r), r)
    sigma, _ = right_singular(x)
    np.testing.assert_allclose(sigma.numpy(), np.linalg.svd(x.numpy())[1], rtol=1e-12)


@pytest.mark.parametrize(("budget", "step"), [(2**20, 37), (512 * 5, 5), (100, 1)])
def test_task_blocks_cover_the_batch_once(monkeypatch, budget, step):
    from attnreg.core import linear

    monkeypatch.setattr(linear, "TASK_BLOCK_BYTES", budget)
    blocks = linear.task_blocks(37, 512)  # 512 bytes per task
    assert [b.stop - b.start for b in blocks[:-1]] == [step] * (len(blocks) - 1)
    assert blocks[0].start == 0 and blocks[-1].stop == 37
    assert all(a.stop == b.start for a, b in itertools.pairwise(blocks))


@pytest.mark.parametrize(
    ("method", "ridge", "covariance"),
    [
        ("cholesky", 0.0, "gram"),
        ("cholesky", 0.3, "mean"),
        ("svd", 0.0, "mean"),
        ("svd", 0.3, "gram"),
        ("eigh", 0.2, "gram"),
    ],
)
def test_ols_transformer_in_task_blocks_equals_the_whole_batch(
    monkeypatch, method, ridge, covariance
):
    from attnreg.core import linear

    gen = torch.Generator().manual_seed(9)
    x = torch.randn(11, 20, 4, generator=gen, dtype=torch.float64)
    y = torch.randn(11, 20, 2, generator=gen, dtype=torch.float64)
    xq = torch.randn(11, 7, 4, generator=gen, dtype=torch.float64)
    kwargs = {"method": method, "ridge": ridge, "covariance": covariance}
    whole = OLSTransformer(**kwargs).predict(x, y, xq)
    fitted = OLSTransformer(**kwargs).fit(x, y)
    one_query = fitted(xq[:1])  # one query batch shared by every task
    monkeypatch.setattr(linear, "TASK_BLOCK_BYTES", 3 * 20 * 4 * 8)  # blocks of 3, 3, 3, 2
    assert len(linear.task_blocks(11, 20 * 4 * 8)) == 4
    blocked = OLSTransformer(**kwargs)
    got = blocked.predict(x, y, xq)
    torch.testing.assert_close(got, whole, rtol=1e-11, atol=1e-12)
    torch.testing.assert_close(blocked.w_p, fitted.w_p, rtol=1e-11, atol=1e-12)
    literal = (
        (xq @ blocked.w_q) @ (x @ blocked.w_k).mT @ (x @ blocked.w_v) @ blocked.w_p / blocked.scale
    )
    torch.testing.assert_close(got, literal, rtol=1e-10, atol=1e-11)
    torch.testing.assert_close(blocked(xq), whole, rtol=1e-11, atol=1e-12)  # forward, blocked
    torch.testing.assert_close(blocked(xq[:1]), one_query, rtol=1e-11, atol=1e-12)
    recorded = OLSTransformer(**kwargs).run_with_cache(x, y, xq)[0]
    torch.testing.assert_close(recorded, whole, rtol=1e-10, atol=1e-11)
