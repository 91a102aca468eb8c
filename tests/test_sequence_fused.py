"""The fused form (``mode="fused"``, :mod:`attnreg.sequence.fused`): the lengths around its
chunk of stored states and below ``d_k`` against the numpy estimator references of
``sequence_refs`` (float64, rounding-error bounds as in ``test_sequence``), float32 against
the same references, its gradients by ``torch.autograd.gradcheck`` (float64, finite
differences: independent of the backward kernel) for every layer it covers, the gradients at a
length of several stored chunks against autograd through the token loop, and the choice of
form (``mode="auto"``).
"""

import numpy as np
import pytest
import sequence_refs as ref
import torch

from attnreg.sequence import (
    comba,
    delta_rule,
    fused_autograd,
    fused_generalized,
    fused_momentum,
    generalized_delta_rule,
    linear_attention,
    longhorn,
    mesa,
    momentum_delta_rule,
    titans,
)
from attnreg.sequence.inputs import choose_mode

B, H, D, DV = 2, 2, 8, 5
LENGTHS = (1, 3, 31, 33, 65)  # T = 1 and 3 < d_k; around 32 and 64


def draw(t, seed, kind="random", normalize=True):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, H, t, D))
    v = rng.standard_normal((B, H, t, DV))
    if kind == "random":
        k = rng.standard_normal((B, H, t, D))
    else:  # every column ≈ one common factor
        k = rng.standard_normal((B, H, t, 1)) + 0.01 * rng.standard_normal((B, H, t, D))
    if normalize:
        k = k / np.linalg.norm(k, axis=-1, keepdims=True)
    beta = rng.uniform(0.0, 1.5, (B, H, t))
    alpha = rng.uniform(0.5, 1.0, (B, H, t))
    return q, k, v, beta, alpha


def online_bound(q, mags, alpha, u=ref.U64):
    """``8 u (d + n_t) t ‖q_t‖ m_t``: the contractive online updates' rounding (test_sequence)."""
    t, d = q.shape[2:]
    steps = np.arange(1, t + 1)
    return (
        8 * u * (d + ref.heads(ref.log_budget, alpha)) * steps * np.linalg.norm(q, axis=-1) * mags
    )


@pytest.mark.parametrize("kind", ["random", "correlated"])
@pytest.mark.parametrize("t", LENGTHS)
def test_fused_delta_rules_are_online_least_squares(t, kind):
    q, k, v, beta, alpha = draw(t, t, kind)
    for gate in (None, alpha):
        full = np.ones((B, H, t)) if gate is None else gate
        want, mags = ref.heads(ref.lms, q, k, v, beta, full)
        bound = online_bound(q, mags, full)
        fused = delta_rule(q, k, v, beta, decay=gate, mode="fused").numpy()
        loop = delta_rule(q, k, v, beta, decay=gate, mode="recurrent").numpy()
        assert np.all(np.linalg.norm(fused - want, axis=-1) <= bound)
        assert np.all(np.linalg.norm(fused - loop, axis=-1) <= 2 * bound)


@pytest.mark.parametrize("scale", [-0.3, 2.0**-3])
def test_the_kernel_scales_the_read_out_as_scaled_queries_would(scale):
    """``scale`` is applied in the kernel, once per output entry: the answer is the estimator's
    at the queries ``scale · q``, to the same bound."""
    q, k, v, beta, alpha = draw(33, 7)
    want, mags = ref.heads(ref.lms, scale * q, k, v, beta, alpha)
    out = delta_rule(q, k, v, beta, decay=alpha, scale=scale, mode="fused").numpy()
    assert np.all(np.linalg.norm(out - want, axis=-1) <= online_bound(scale * q, mags, alpha))


def test_the_kernel_reports_the_largest_output_of_each_batch_element_and_head():
    """The largest ``|o|`` per batch element and head, computed while ``o`` is written, is what
    the finiteness and underflow checks read: it must be ``max |o|`` exactly, and NaN where
    ``o`` has a NaN (here a NaN value reaches the kernel directly, past the input checks)."""
    q, k, v, beta, _ = (torch.from_numpy(x) for x in draw(31, 8))
    out, largest = fused_autograd.fused(q, k, v, None, beta, True, 0.5)
    assert torch.equal(largest, out.abs().amax(dim=(-2, -1)))
    v[1, 0, 5, 2] = float("nan")
    out, largest = fused_autograd.fused(q, k, v, None, beta, True, 1.0)
    assert torch.isnan(out[1, 0]).any() and not torch.isnan(out[1, 1]).any()
    assert torch.isnan(largest[1, 0]) and largest[1, 1] == out[1, 1].abs().max()


@pytest.mark.parametrize(
    ("argument", "bad"), [("v", float("nan")), ("q", float("inf")), ("k", -float("inf"))]
)
def test_a_bad_input_that_meets_zeros_still_reaches_the_output_and_is_named(argument, bad):
    """The fused form checks ``q, k, v`` only when its output is not finite: a NaN or Inf must
    reach the output even where it is multiplied by zero — ``β_t = 0`` at the bad token, the
    state still zero (token 0, ``v_0 = 0``), a zero query."""
    q, k, v, beta, alpha = draw(6, 12)
    beta[:, :, 0] = 0.0
    v[:, :, 0] = 0.0
    q[:, :, 0] = 0.0
    args = {"q": q, "k": k, "v": v}
    args[argument] = args[argument].copy()
    args[argument][1, 1, 0, 3 % args[argument].shape[-1]] = bad
    for decay in (None, alpha):
        with pytest.raises(ValueError, match=rf"{argument}: contains (NaN|Inf) at index \(1, 1, 0"):
            delta_rule(args["q"], args["k"], args["v"], beta, decay=decay, mode="fused")
    with pytest.raises(ValueError, match=rf"{argument}: contains"):
        linear_attention(args["q"], args["k"], args["v"], mode="fused")
    with pytest.raises(ValueError, match=rf"{argument}: contains"):
        longhorn(args["q"], args["k"], args["v"], beta, diagonal=True, mode="fused")


def test_a_read_out_scaled_below_the_float_range_is_refused_and_a_zero_scale_is_zero():
    """Outputs of order ``1e-320`` (subnormal in float64) because of ``scale`` are an underflow,
    as they were when ``q`` was scaled before the kernel; ``scale = 0`` is a true zero."""
    q, k, v, beta, _ = draw(5, 9)
    with pytest.raises(ValueError, match=r"delta_rule: .*underflow"):
        delta_rule(q, k, v, beta, scale=1e-320, mode="fused")
    assert not delta_rule(q, k, v, beta, scale=0.0, mode="fused").any()


@pytest.mark.parametrize("d_k", [4, 5, 7, 9])
def test_the_rows_in_fours_and_the_rows_left_over(d_k):
    """The kernel updates the state four rows at a time and the last ``d_k mod 4`` rows one at
    a time: key widths with no rows left over, and with one, three and one after two fours."""
    rng = np.random.default_rng(d_k)
    q, k = rng.standard_normal((2, B, H, 33, d_k))
    k = k / np.linalg.norm(k, axis=-1, keepdims=True)
    v = rng.standard_normal((B, H, 33, DV))
    beta, alpha = rng.uniform(0.0, 1.5, (B, H, 33)), rng.uniform(0.5, 1.0, (B, H, 33))
    want, mags = ref.heads(ref.lms, q, k, v, beta, alpha)
    out = delta_rule(q, k, v, beta, decay=alpha, mode="fused").numpy()
    assert np.all(np.linalg.norm(out - want, axis=-1) <= online_bound(q, mags, alpha))
    want, mag = ref.heads(ref.weighted_sum, q, k, v, alpha)
    out = linear_attention(q, k, v, decay=alpha, mode="fused").numpy()
    tol = 4 * ref.U64 * (d_k + ref.heads(ref.log_budget, alpha))[..., None] * mag
    assert np.all(np.abs(out - want) <= tol)


@pytest.mark.parametrize("t", LENGTHS)
def test_fused_linear_attention_is_the_weighted_sum(t):
    q, k, v, _, alpha = draw(t, 100 + t, normalize=False)
    for gate in (None, alpha):
        full = np.ones((B, H, t)) if gate is None else gate
        out = linear_attention(q, k, v, decay=gate, scale=0.7, mode="fused").numpy()
        want, mag = ref.heads(ref.weighted_sum, 0.7 * q, k, v, full)
        tol = 4 * ref.U64 * (D + ref.heads(ref.log_budget, full))[..., None] * mag
        assert np.all(np.abs(out - want) <= tol)


@pytest.mark.parametrize("t", LENGTHS)
def test_fused_longhorn_is_the_proximal_step(t):
    q, k, v, beta, _ = draw(t, 200 + t, normalize=False)
    out = longhorn(q, k, v, beta, mode="fused").numpy()
    want = ref.heads(ref.proximal, q, k, v, beta)
    eps = beta / (1 + beta * (k * k).sum(-1))
    ones = np.ones((B, H, t))
    _, mags = ref.heads(ref.lms, q, k, v, eps, ones)
    assert np.all(np.linalg.norm(out - want, axis=-1) <= online_bound(q, mags, ones))
    diag = longhorn(q, k, v, beta, diagonal=True, mode="fused").numpy()
    want = ref.heads(ref.diagonal_proximal, q, k, v, beta)
    steps = np.arange(1, t + 1)
    n_diag = D + steps * (1 + np.cumsum(-np.log1p(-eps * (k * k).max(-1)), axis=-1))
    bound = 8 * ref.U64 * n_diag * steps * np.linalg.norm(q, axis=-1) * mags
    assert np.all(np.linalg.norm(diag - want, axis=-1) <= bound)


def test_fused_float32_is_within_its_bound():
    """float32 inputs stay float32 and agree with the float64 reference to ``u₃₂``'s bound."""
    t = 65
    q, k, v, beta, alpha = draw(t, 7)
    f32 = [torch.from_numpy(x.astype(np.float32)) for x in (q, k, v, beta, alpha)]
    out = delta_rule(f32[0], f32[1], f32[2], f32[3], decay=f32[4], mode="fused")
    assert out.dtype == torch.float32
    # the reference on the float32-rounded inputs: only the arithmetic's rounding is left
    q, k, v, beta, alpha = (x.double().numpy() for x in f32)
    want, mags = ref.heads(ref.lms, q, k, v, beta, alpha)
    u32 = float(np.finfo(np.float32).eps) / 2
    bound = online_bound(q, mags, alpha, u=u32)
    assert np.all(np.linalg.norm(out.double().numpy() - want, axis=-1) <= bound)


def _gradcheck(fn, *inputs):
    xs = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in inputs]
    assert torch.autograd.gradcheck(fn, xs)


@pytest.fixture
def short_chunks(monkeypatch):
    """States stored every 4 tokens, so T = 9 crosses two chunk boundaries of the backward."""
    monkeypatch.setattr(fused_autograd, "CHUNK", 4)


def test_gradcheck_delta_rule_and_gated(short_chunks):
    q, k, v, beta, alpha = draw(9, 1)
    _gradcheck(lambda q, k, v, b: delta_rule(q, k, v, b, mode="fused"), q, k, v, beta)
    _gradcheck(
        lambda q, k, v, b, a: delta_rule(q, k, v, b, decay=a, scale=0.5, mode="fused"),
        q,
        k,
        v,
        beta,
        alpha,
    )


def test_gradcheck_linear_attention(short_chunks):
    q, k, v, _, alpha = draw(9, 2, normalize=False)
    _gradcheck(lambda q, k, v: linear_attention(q, k, v, mode="fused"), q, k, v)
    _gradcheck(lambda q, k, v, a: linear_attention(q, k, v, decay=a, mode="fused"), q, k, v, alpha)
    pos = [np.abs(x) + 0.1 for x in (q, k)]
    _gradcheck(lambda q, k, v: linear_attention(q, k, v, normalize=True, mode="fused"), *pos, v)


def test_gradcheck_longhorn(short_chunks):
    q, k, v, beta, _ = draw(9, 3, normalize=False)
    _gradcheck(lambda q, k, v, b: longhorn(q, k, v, b, mode="fused"), q, k, v, beta)
    _gradcheck(lambda q, k, v, b: longhorn(q, k, v, b, diagonal=True, mode="fused"), q, k, v, beta)


def test_gradcheck_comba(short_chunks):
    """Comba's fused form: the prediction read at ``p`` (its own gradient), the step along
    ``k``."""
    q, k, v, beta, alpha = draw(9, 6)
    p = draw(9, 7)[1]
    _gradcheck(
        lambda q, k, v, p, b, a: comba(q, k, v, p, b, decay=a, scale=0.5, mode="fused"),
        q,
        k,
        v,
        p,
        beta,
        alpha,
    )


def test_gradcheck_momentum_delta_rule_and_titans(monkeypatch):
    """The momentum kernel's backward (pairs stored every 4 tokens: T = 9 crosses two):
    every input, the error read at ``p``; Titans through the same kernel with ``p = k``."""
    monkeypatch.setattr(fused_momentum, "CHUNK", 4)
    q, k, v, beta, alpha = draw(9, 8)
    p = draw(9, 9)[1]
    rng = np.random.default_rng(10)
    eta, mu = rng.uniform(0.5, 1.0, beta.shape), rng.uniform(0.1, 0.9, beta.shape)

    def layer(q, k, v, p, b, e, m, a):
        return momentum_delta_rule(q, k, v, p, b, e, momentum=m, decay=a, scale=0.5, mode="fused")

    _gradcheck(layer, q, k, v, p, 0.5 * beta, eta, mu, alpha)
    _gradcheck(
        lambda q, k, v, t, m, a: titans(q, k, v, lr=t, momentum=m, decay=a, mode="fused"),
        q,
        k,
        v,
        0.5 * beta,
        mu,
        alpha,
    )


def test_gradcheck_generalized_delta_rule(monkeypatch):
    """The generalized rule's backward (states stored every 4 tokens: T = 9 crosses two),
    with one gate per token and one per key channel."""
    monkeypatch.setattr(fused_generalized, "CHUNK", 4)
    q, k, v, _, alpha = draw(9, 11)
    kappa = draw(9, 12)[1]
    erase = -0.5 * kappa
    channels = np.random.default_rng(13).uniform(0.5, 1.0, k.shape)
    for gate in (alpha, channels):
        _gradcheck(
            lambda q, k, v, a, b, g: generalized_delta_rule(
                q, k, v, a, b, decay=g, scale=0.5, mode="fused"
            ),
            q,
            k,
            v,
            erase,
            kappa,
            gate,
        )


def test_gradients_equal_autograd_through_the_token_loop():
    """T = 150: three stored chunks of 64, the last partial; d_k ≠ d_v. The reference is torch's
    autograd through the token loop (no code of the backward kernel)."""
    q, k, v, beta, alpha = draw(150, 4)
    grads = []
    for mode in ("fused", "recurrent"):
        xs = [torch.tensor(x, requires_grad=True) for x in (q, k, v, beta, alpha)]
        out = delta_rule(*xs[:4], decay=xs[4], mode=mode)
        weights = torch.from_numpy(np.random.default_rng(5).standard_normal(out.shape))
        (out * weights).sum().backward()
        grads.append([x.grad for x in xs])
    # the reverse recurrence is the forward's adjoint: T rank-one updates of d-term products,
    # so the forward's bound with the gradients' magnitude in place of the outputs'
    t = q.shape[2]
    for fused, loop in zip(*grads, strict=True):
        bound = 8 * ref.U64 * (D + t) * t * float(loop.abs().max())
        assert float((fused - loop).abs().max()) <= bound


def test_float32_gradients_are_within_their_bound():
    """The backward kernel accumulates its dot products in the inputs' dtype: float32 gradients
    (T = 150, three stored chunks, with a decay) against float64 autograd through the token
    loop, to the same bound in float32's unit roundoff."""
    q, k, v, beta, alpha = draw(150, 10)
    grads = []
    for dtype, mode in ((torch.float32, "fused"), (torch.float64, "recurrent")):
        xs = [torch.tensor(x, dtype=dtype, requires_grad=True) for x in (q, k, v, beta, alpha)]
        out = delta_rule(*xs[:4], decay=xs[4], mode=mode)
        weights = torch.from_numpy(np.random.default_rng(11).standard_normal(out.shape))
        (out * weights.to(dtype)).sum().backward()
        grads.append([x.grad.double() for x in xs])
    t = q.shape[2]
    for fused, loop in zip(*grads, strict=True):
        bound = 8 * ref.U32 * (D + t) * t * float(loop.abs().max())
        assert float((fused - loop).abs().max()) <= bound


def test_auto_picks_fused_on_the_cpu_and_chunk_elsewhere():
    cpu = torch.zeros(1, 1, 1, 1)
    meta = torch.zeros(1, 1, 1, 1, device="meta")  # stands in for an accelerator
    assert choose_mode("auto", cpu) == "fused"
    assert choose_mode("auto", meta) == "chunk"
    assert choose_mode("auto", cpu, forms=("chunk", "recurrent")) == "chunk"
    assert choose_mode("auto", meta, forms=("fused", "recurrent")) == "recurrent"
    assert choose_mode("chunk", cpu) == "chunk"
    assert choose_mode("recurrent", meta) == "recurrent"
    with pytest.raises(ValueError, match="CPU only"):
        choose_mode("fused", meta)
    with pytest.raises(ValueError, match="no fused form"):
        choose_mode("fused", cpu, forms=("chunk", "recurrent"))
    with pytest.raises(ValueError, match="no chunk form"):
        choose_mode("chunk", cpu, forms=("fused", "recurrent"))
    q, k, v, beta, _ = draw(3, 6)
    with pytest.raises(ValueError, match="no fused form"):
        mesa(q, k, v, beta, lam=1.0, mode="fused")
    with pytest.raises(ValueError, match="mode"):
        delta_rule(q, k, v, beta, mode="fast")
