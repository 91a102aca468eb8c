"""The sequence layers' modules (hook points on the state and the read-out), their input
checks, and their gradients. States read through hooks are compared with numpy sums written
here; edits through hooks change the read-out as the regression says they must.
"""

import numpy as np
import pytest
import sequence_refs as ref
import torch

from attnreg.sequence import (
    DeltaRuleLayer,
    LinearAttentionLayer,
    LocalLinearAttentionLayer,
    LonghornLayer,
    MesaNetLayer,
    SoftmaxAttentionLayer,
    delta_rule,
    linear_attention,
    local_linear_attention,
    longhorn,
    mesa,
    softmax_attention,
)

B, H, T, D, DV = 2, 2, 12, 4, 3


def data(seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(B, H, T, D, generator=g), torch.randn(B, H, T, D, generator=g)
    v = torch.randn(B, H, T, DV, generator=g)
    beta = torch.rand(B, H, T, generator=g)
    alpha = 0.5 + 0.5 * torch.rand(B, H, T, generator=g)
    k = k / k.norm(dim=-1, keepdim=True)
    return [x.to(dtype) for x in (q, k, v, beta, alpha)]


def decayed_moments(a, b, weights, alpha):
    """``Σ_{i≤t} γ_{t,i} w_i a_i b_iᵀ`` for every t (one head, numpy)."""
    g = ref.decay_weights(alpha) * weights[None, :]
    return np.einsum("ti,ik,iv->tkv", g, a, b)


def test_linear_attention_state_hook_reads_the_decayed_sum():
    q, k, v, _, alpha = data(1)
    layer = LinearAttentionLayer(normalize=True, scale=0.5)
    out, cache = layer.run_with_cache(q.exp(), k.exp(), v, alpha)
    assert set(cache) == {
        "hook_q", "hook_k", "hook_v", "hook_state", "hook_normalizer", "hook_output",
    }  # fmt: skip
    kk, vv, aa = k.exp()[1, 0].numpy(), v[1, 0].numpy(), alpha[1, 0].numpy()
    state = decayed_moments(kk, vv, np.ones(T), aa)
    z = decayed_moments(kk, np.ones((T, 1)), np.ones(T), aa)[..., 0]
    mag = decayed_moments(np.abs(kk), np.abs(vv), np.ones(T), aa)
    tol = 4 * ref.U64 * ref.log_budget(aa)[:, None, None] * mag
    assert np.all(np.abs(cache["hook_state"][1, 0].numpy() - state) <= tol)
    assert np.allclose(cache["hook_normalizer"][1, 0].numpy(), z, rtol=4 * ref.U64 * 2 * T, atol=0)
    # the hooked (explicit) path gives the function's numbers
    plain = linear_attention(q.exp(), k.exp(), v, decay=alpha, normalize=True, scale=0.5)
    num, nmag = ref.weighted_sum(0.5 * q.exp()[1, 0].numpy(), kk, vv, aa)
    den, _ = ref.weighted_sum(0.5 * q.exp()[1, 0].numpy(), kk, np.ones((T, 1)), aa)
    bound = 8 * ref.U64 * (D + ref.log_budget(aa))[:, None] * (nmag / den + np.abs(num / den))
    for o in (out, plain):
        assert np.all(np.abs(o[1, 0].numpy() - num / den) <= bound)


def test_editing_the_state_edits_the_read_out():
    """Doubling every state doubles the read-out ``o_t = S_tᵀ q_t`` (exactly: scaling by 2 commutes
    with rounding); zeroing it gives 0."""
    q, k, v, beta, alpha = data(2)
    for layer, args in (
        (LinearAttentionLayer(), (q, k, v, alpha)),
        (DeltaRuleLayer(scale=0.7), (q, k, v, beta, alpha)),
        (LonghornLayer(), (q, k, v, beta)),
        (LonghornLayer(diagonal=True), (q, k, v, beta)),
    ):
        base = layer.run_with_hooks(*args, hooks=[("hook_state", lambda s, _: None)])
        doubled = layer.run_with_hooks(*args, hooks=[("hook_state", lambda s, _: 2 * s)])
        zeroed = layer.run_with_hooks(*args, hooks=[("hook_state", lambda s, _: 0 * s)])
        assert torch.equal(zeroed, torch.zeros_like(base))
        assert torch.equal(doubled, 2 * base)
        assert not torch.equal(base, torch.zeros_like(base))


def test_delta_rule_state_hook_is_the_lms_iterate():
    q, k, v, beta, alpha = data(3)
    _, cache = DeltaRuleLayer().run_with_cache(q, k, v, beta, alpha, names=["hook_state"])
    states = cache["hook_state"]
    assert states.shape == (B, H, T, D, DV)
    # the LMS loop written here, on W = Sᵀ
    kk, vv, bb, aa = (x[0, 1].numpy() for x in (k, v, beta, alpha))
    w = np.zeros((DV, D))
    for t in range(T):
        w = aa[t] * w
        w = w - bb[t] * np.outer(w @ kk[t] - vv[t], kk[t])
        bound = 8 * ref.U64 * D * (t + 1) * np.abs(vv[: t + 1]).sum()
        assert np.abs(states[0, 1, t].numpy().T - w).max() <= bound


def test_mesa_hooks_read_and_edit_the_moments():
    q, k, v, beta, alpha = data(4)
    lam = torch.full((H, D), 0.3, dtype=torch.float64)
    layer = MesaNetLayer(lam=lam, scale=0.5)
    out, cache = layer.run_with_cache(q, k, v, beta, alpha)
    kk, vv, bb, aa = (x[1, 1].numpy() for x in (k, v, beta, alpha))
    want_kk = decayed_moments(kk, kk, bb, aa)
    want_kv = decayed_moments(kk, vv, bb, aa)
    tol = (
        4
        * ref.U64
        * ref.log_budget(aa)[:, None, None]
        * decayed_moments(np.abs(kk), np.abs(kk), bb, aa).max()
    )
    assert np.all(np.abs(cache["hook_kk"][1, 1].numpy() - want_kk) <= tol)
    assert np.all(np.abs(cache["hook_kv"][1, 1].numpy() - want_kv) <= tol * np.abs(vv).max())
    want, parts = ref.decayed_ridge(0.5 * q[1, 1].numpy(), kk, vv, bb, aa, 0.3)
    bound = 8 * ref.U64 * (D + ref.log_budget(aa)) * parts
    plain = mesa(q, k, v, beta, decay=alpha, lam=lam, scale=0.5)
    for o in (out, plain):
        assert np.all(np.linalg.norm(o[1, 1].numpy() - want, axis=-1) <= bound)
    # H^{kv} doubled: the ridge read-out is linear in it (exactly: scaling by 2 commutes with
    # rounding)
    doubled = layer.run_with_hooks(q, k, v, beta, alpha, hooks=[("hook_kv", lambda s, _: 2 * s)])
    assert torch.equal(doubled, 2 * out)


def test_softmax_and_local_linear_weight_hooks():
    q, k, v, _, _ = data(5)
    for layer in (SoftmaxAttentionLayer(scale=0.8), LocalLinearAttentionLayer(lam=0.2, scale=0.8)):
        out, cache = layer.run_with_cache(q, k, v)
        w = cache["hook_weights"][0, 1].numpy()
        for t in range(T):
            qq, kk = q[0, 1].numpy(), k[0, 1].numpy()
            want = ref.softmax_weights(qq, kk, 0.8, t)
            # relative error of each weight ≤ u · (d |scale| ‖q‖ max‖k‖ + t) (scores, then sum)
            spread = D * 0.8 * np.linalg.norm(qq[t]) * np.linalg.norm(kk[: t + 1], axis=1).max()
            assert np.all(np.abs(w[t, : t + 1] - want) <= 8 * ref.U64 * (spread + t + 1) * want)
            assert np.all(w[t, t + 1 :] == 0)
        plain = layer(q, k, v)
        assert float((out - plain).abs().max()) <= 8 * ref.U64 * T * D * float(v.abs().max())
    # all weight on the first token: every output is v_0 (softmax) / the fit through one point
    first = torch.zeros(B, H, T, T, dtype=torch.float64)
    first[..., 0] = 1.0
    edited = SoftmaxAttentionLayer().run_with_hooks(
        q, k, v, hooks=[("hook_weights", lambda w, _: first)]
    )
    assert torch.equal(edited, v[:, :, :1].expand(B, H, T, DV))


def online_bound(q, mags, alpha):
    """``8 u (d + n_t) t ‖q_t‖ m_t`` per position: a contractive online update adds at most
    ``u · O(d) · m_i`` of rounding per step and never amplifies it."""
    steps = np.arange(1, T + 1)
    budget = ref.heads(ref.log_budget, alpha)
    return 8 * ref.U64 * (D + budget) * steps * np.linalg.norm(q, axis=-1) * mags


def module_cases(q, k, v, beta, alpha):
    """Each module's output and its independent numpy reference (:mod:`sequence_refs`: the
    estimator each layer is, one token at a time, no attnreg code) with the rounding bound:
    ``(output, reference, bound, per_position)`` (``per_position``: the bound is on the
    Euclidean norm of each position's error, else elementwise)."""
    tq, tk, tv, tb, ta = (torch.from_numpy(x) for x in (q, k, v, beta, alpha))
    ones = np.ones((B, H, T))
    budget = ref.heads(ref.log_budget, alpha)
    cases = []
    want, mag = ref.heads(ref.weighted_sum, 0.3 * q, k, v, alpha)
    out = LinearAttentionLayer(scale=0.3)(tq, tk, tv, ta)
    cases.append((out, want, 4 * ref.U64 * (D + budget)[..., None] * mag, False))
    want, mags = ref.heads(ref.lms, q, k, v, beta, ones)
    out = DeltaRuleLayer(mode="recurrent")(tq, tk, tv, tb)
    cases.append((out, want, online_bound(q, mags, ones), True))
    eps = beta / (1 + beta * (k * k).sum(-1))
    _, mags = ref.heads(ref.lms, q, k, v, eps, ones)
    out = LonghornLayer()(tq, tk, tv, tb)
    cases.append((out, ref.heads(ref.proximal, q, k, v, beta), online_bound(q, mags, ones), True))
    lam = np.full((B, H, D), 0.5)
    want, parts = ref.heads(ref.decayed_ridge, q, k, v, beta, alpha, lam)
    out = MesaNetLayer(lam=0.5)(tq, tk, tv, tb, ta)
    cases.append((out, want, 8 * ref.U64 * (D + budget) * parts, True))
    want, mags = ref.heads(lambda qq, kk, vv: ref.smoother(qq, kk, vv, 1.0), q, k, v)
    cases.append((SoftmaxAttentionLayer()(tq, tk, tv), want, 4 * ref.U64 * mags[..., None], False))
    want, mags = ref.heads(lambda qq, kk, vv: ref.local_linear_fit(qq, kk, vv, 0.5, 1.0), q, k, v)
    out = LocalLinearAttentionLayer(lam=0.5)(tq, tk, tv)
    cases.append((out, want, 4 * ref.U64 * mags[..., None], False))
    return cases


def test_modules_compute_their_layers():
    """Each module, unhooked, against its numpy token loop within the rounding bound (before:
    each module was compared with the very function it calls, which only its wiring could
    fail)."""
    q, k, v, beta, alpha = (x.numpy() for x in data(6))
    for number, (out, want, bound, per_position) in enumerate(module_cases(q, k, v, beta, alpha)):
        err = np.abs(out.numpy() - want)
        if per_position:
            err = np.linalg.norm(err, axis=-1)
        assert np.all(err <= bound), (number, float((err / bound).max()))


@pytest.mark.parametrize("scale", [0.0, -1.0])
@pytest.mark.parametrize("hooked", [False, True])
def test_softmax_layer_takes_a_zero_or_negative_scale_hooked_or_not(scale, hooked):
    """``scale = 0``: the causal mean of the values; ``scale < 0`` weights by ``e^{scale q·k}``;
    the same answer with ``hook_weights`` hooked as without (issue 29: unhooked it raised a false
    "overflowed", hooked it returned values; fixed before this test, which guards it)."""
    q, k, v, _, _ = (x.numpy() for x in data(8))
    layer = SoftmaxAttentionLayer(scale=scale)
    args = tuple(torch.from_numpy(x) for x in (q, k, v))
    if hooked:
        out = layer.run_with_hooks(*args, hooks=[("hook_weights", lambda w, _: None)])
    else:
        out = layer(*args)
    want = np.empty_like(out.numpy())
    for b, h, t in np.ndindex(B, H, T):
        s = scale * (k[b, h, : t + 1] @ q[b, h, t])
        w = np.exp(s - s.max())
        want[b, h, t] = (w / w.sum()) @ v[b, h, : t + 1]
    _, mags = ref.heads(lambda qq, kk, vv: ref.smoother(qq, kk, vv, scale), q, k, v)
    assert np.all(np.abs(out.numpy() - want) <= 4 * ref.U64 * mags[..., None])


# ------------------------------------------------------------------------------ contract


def test_numpy_in_and_float32_kept():
    q, k, v, beta, alpha = data(7, torch.float32)
    out = delta_rule(q.numpy(), k.numpy(), v.numpy(), beta.numpy(), decay=alpha.numpy())
    assert out.dtype == torch.float32 and out.shape == (B, H, T, DV)
    assert mesa(q, k, v.double(), 1.0, lam=1.0).dtype == torch.float64


def test_causality():
    """Changing the tokens after position t changes no output at positions ≤ t."""
    q, k, v, beta, alpha = data(8)
    q2, k2, v2 = q.clone(), k.clone(), v.clone()
    q2[:, :, 7:] += 1.0
    k2[:, :, 7:] *= -1.0
    v2[:, :, 7:] += 3.0
    calls = [
        lambda q, k, v: linear_attention(q, k, v, decay=alpha),
        lambda q, k, v: delta_rule(q, k, v, beta, decay=alpha),
        lambda q, k, v: longhorn(q, k, v, beta),
        lambda q, k, v: mesa(q, k, v, beta, decay=alpha, lam=0.4),
        lambda q, k, v: softmax_attention(q, k, v),
        lambda q, k, v: local_linear_attention(q, k, v, lam=0.4),
    ]
    for call in calls:
        a, b = call(q, k, v), call(q2, k2, v2)
        assert torch.equal(a[:, :, :7], b[:, :, :7])
        assert not torch.equal(a[:, :, 7:], b[:, :, 7:])


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda q, k, v: linear_attention(q[0], k, v), "q: expected a 4-D array"),
        (lambda q, k, v: linear_attention(q, k[..., :2], v), "q and k must have the same shape"),
        (lambda q, k, v: linear_attention(q, k, v[:, :, :3]), "v must agree with k"),
        (lambda q, k, v: linear_attention(q, k, v, decay=0.0), "decay: every value must lie in"),
        (lambda q, k, v: linear_attention(q, k, v, decay=1.01), "decay: every value must lie in"),
        (lambda q, k, v: linear_attention(q, k, v, decay=torch.ones(3)), "decay: a per-head"),
        (
            lambda q, k, v: linear_attention(q, k, v, decay=torch.ones(B, H, 5)),
            "decay: a per-token",
        ),
        (lambda q, k, v: linear_attention(q, k, v, mode="fast"), "mode: unknown value"),
        (lambda q, k, v: linear_attention(q, k, v, scale=float("nan")), "scale: must be a finite"),
        (lambda q, k, v: delta_rule(q, k, v, -0.1), "beta: every value must lie in"),
        (lambda q, k, v: longhorn(q, k, v, float("inf")), "beta: contains Inf"),
        (lambda q, k, v: mesa(q, k, v, 1.0, lam=0.0), "lam: every value must be > 0"),
        (lambda q, k, v: mesa(q, k, v, 1.0, lam=torch.ones(H, D + 1)), "lam: expected a number"),
        (lambda q, k, v: local_linear_attention(q, k, v, lam=-1.0), "lam: must be a finite"),
        (lambda q, k, v: softmax_attention(q.half(), k, v), "q: float16 input is refused"),
    ],
)
def test_bad_input_is_a_value_error_naming_the_argument(call, message):
    q, k, v, _, _ = data(9)
    with pytest.raises(ValueError, match=message):
        call(q, k, v)


def test_nan_is_named():
    q, k, v, _, _ = data(10)
    v[0, 1, 3, 2] = float("nan")
    with pytest.raises(ValueError, match=r"v: contains NaN at index \(0, 1, 3, 2\)"):
        delta_rule(q, k, v, 0.5)


def test_zero_normaliser_is_a_value_error():
    q, k, v, _, _ = data(11)
    with pytest.raises(ValueError, match="normalize: z_tᵀ q_t = 0"):
        linear_attention(torch.zeros_like(q), k, v, normalize=True)


@pytest.mark.parametrize("length", [5, 70])
def test_gradients_match_finite_differences(length):
    """``torch.autograd.gradcheck``: analytic gradients of the chunked forms against central
    finite differences, in float64, within one block (5 tokens) and across two (70 tokens, in
    gradcheck's fast mode: random projections of the Jacobian). Mesa without decay at 70 tokens
    takes both of its blocked paths: the first block per position (its growth bound exceeds
    ``MAX_GROWTH``), the second by Woodbury."""
    g = torch.Generator().manual_seed(12)
    shape = (1, 1, length, 2)

    def leaf(*size, low=0.0):
        return (
            low + (1 - low) * torch.rand(*size, generator=g, dtype=torch.float64)
        ).requires_grad_()

    q, k, v = (torch.randn(shape, generator=g, dtype=torch.float64).requires_grad_() for _ in "qkv")
    beta, alpha = leaf(1, 1, length), leaf(1, 1, length, low=0.5)
    checks = [
        (lambda q, k, v, a: linear_attention(q, k, v, decay=a), (q, k, v, alpha)),
        (lambda q, k, v: linear_attention(q, k, v), (q, k, v)),
        (lambda q, k, v, b, a: delta_rule(q, k, v, b, decay=a), (q, k, v, beta, alpha)),
        (lambda q, k, v, b: longhorn(q, k, v, b), (q, k, v, beta)),
        (lambda q, k, v, b: longhorn(q, k, v, b, diagonal=True), (q, k, v, beta)),
        (lambda q, k, v, b, a: mesa(q, k, v, b, decay=a, lam=0.5), (q, k, v, beta, alpha)),
        (lambda q, k, v, b: mesa(q, k, v, b, lam=0.5), (q, k, v, beta)),
        (lambda q, k, v: softmax_attention(q, k, v), (q, k, v)),
        (lambda q, k, v: local_linear_attention(q, k, v, lam=0.5), (q, k, v)),
    ]
    if length > 5:  # the forms with blocks: decayed linear attention, delta rule, the
        checks = [checks[i] for i in (0, 2, 4, 5, 6)]  # diagonal Longhorn, Mesa (both forms)
    for fn, args in checks:
        assert torch.autograd.gradcheck(fn, args, fast_mode=length > 5)


@pytest.mark.parametrize("mode", ["fused", "chunk"])
def test_a_state_hook_refuses_a_form_that_holds_no_states(mode):
    """A module built for the fused or chunked form cannot show per-token states: a state hook
    is refused naming ``mode`` (before, the mode was silently dropped for the token loop);
    with ``mode="recurrent"`` or ``"auto"`` the hook reads the states."""
    q, k, v, beta, _ = data(7)
    seen = []
    for module, args in (
        (LinearAttentionLayer(mode=mode), ()),
        (DeltaRuleLayer(mode=mode), (beta,)),
        (LonghornLayer(mode=mode), (beta,)),
    ):
        with pytest.raises(ValueError, match=f"mode: '{mode}' never holds"):
            module.run_with_hooks(q, k, v, *args, hooks=[("hook_state", lambda t, n: None)])
    if mode == "chunk":
        with pytest.raises(ValueError, match="mode: 'chunk' never holds"):
            MesaNetLayer(mode="chunk").run_with_hooks(
                q, k, v, beta, hooks=[("hook_kk", lambda t, n: None)]
            )
    for ok in ("auto", "recurrent"):
        hook = [("hook_state", lambda t, n: seen.append(t.shape))]
        DeltaRuleLayer(mode=ok).run_with_hooks(q, k, v, beta, hooks=hook)
    assert seen == [(B, H, T, D, DV)] * 2
