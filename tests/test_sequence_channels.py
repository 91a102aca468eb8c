"""One decay per key channel, ``decay (B, H, T, d_k)``: GLA's gate for linear attention and, with
the delta rule, Kimi Delta Attention. Against numpy written from the definitions in
``sequence_refs`` (the channel-weighted sum ``Σ_i Σ_c q_{t,c} γ_{t,i,c} k_{i,c} v_i``; online
least squares with ``W ← W Diag(α_t)`` before each step), float64, rounding-error bounds as in
``test_sequence``; the gradients of the fused form by ``torch.autograd.gradcheck``; the shapes
and forms that are refused.
"""

import numpy as np
import pytest
import sequence_refs as ref
import torch

from attnreg.sequence import delta_rule, fused_autograd, linear_attention

B, H, DV = 2, 2, 3
MODES = ("fused", "recurrent")


def draw(t, d_k, seed, correlated=False):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, H, t, d_k))
    k = rng.standard_normal((B, H, t, d_k))
    if correlated:  # every column ≈ one common factor (ρ ≈ 0.99)
        k = rng.standard_normal((B, H, t, 1)) + 0.1 * k
    k = k / np.linalg.norm(k, axis=-1, keepdims=True)
    v = rng.standard_normal((B, H, t, DV))
    beta = rng.uniform(0.0, 1.5, (B, H, t))
    alpha = rng.uniform(0.3, 1.0, (B, H, t, d_k))  # a different gate for every channel
    return q, k, v, beta, alpha


@pytest.mark.parametrize("mode", (*MODES, "chunk"))
@pytest.mark.parametrize(
    ("t", "d_k", "correlated", "strong"),
    [(1, 5, False, False), (4, 8, True, False), (33, 6, False, False), (70, 4, False, True)],
)
def test_kda_is_online_least_squares_with_a_decay_per_coordinate(mode, t, d_k, correlated, strong):
    """Every form of KDA (the chunked one in blocks of 32: T = 33 and 70 cross them) against
    online least squares with a per-coordinate decay; ``strong``: gates down to 1e-6, whose
    products over a block underflow to 0 (the chunked form never divides by them)."""
    q, k, v, beta, alpha = draw(t, d_k, t + d_k, correlated)
    if strong:
        alpha = np.where(alpha < 0.5, 1e-6, alpha)
    want, mags = ref.heads(ref.lms, q, k, v, beta, alpha)
    out = delta_rule(q, k, v, beta, decay=alpha, scale=0.5, mode=mode).numpy()
    steps = np.arange(1, t + 1)
    n = d_k + ref.heads(ref.log_budget, alpha)
    bound = 8 * ref.U64 * n * steps * np.linalg.norm(0.5 * q, axis=-1) * mags
    assert np.all(np.linalg.norm(out - 0.5 * want, axis=-1) <= bound)


@pytest.mark.parametrize("mode", (*MODES, "chunk"))
@pytest.mark.parametrize(("t", "d_k"), [(1, 5), (4, 8), (33, 6), (70, 3)])
def test_gla_is_the_channel_weighted_sum(mode, t, d_k):
    """Every form of GLA (the chunked one in blocks of 64: T = 70 crosses one) against the
    channel-weighted sum."""
    q, k, v, _, alpha = draw(t, d_k, 100 + t)
    want, mag = ref.heads(ref.channel_weighted_sum, q, k, v, alpha)
    out = linear_attention(q, k, v, decay=alpha, mode=mode).numpy()
    tol = 4 * ref.U64 * (d_k + ref.heads(ref.log_budget, alpha))[..., None] * mag
    assert np.all(np.abs(out - want) <= tol)


def test_one_gate_per_channel_equal_across_channels_is_the_per_token_gate():
    """Special case: a per-channel gate whose channels agree is the per-token gate (to the
    same bound: the two run different loops of the kernel)."""
    q, k, v, beta, alpha = draw(33, 8, 7)
    per_token = alpha[..., 0]
    same = np.repeat(per_token[..., None], 8, axis=-1)
    want, mags = ref.heads(ref.lms, q, k, v, beta, per_token)
    bound = 8 * ref.U64 * (8 + ref.heads(ref.log_budget, per_token)) * np.arange(1, 34)
    bound = bound * np.linalg.norm(q, axis=-1) * mags
    for gate in (per_token, same):
        out = delta_rule(q, k, v, beta, decay=gate, mode="fused").numpy()
        assert np.all(np.linalg.norm(out - want, axis=-1) <= bound)


@pytest.fixture
def short_chunks(monkeypatch):
    monkeypatch.setattr(fused_autograd, "CHUNK", 4)


def test_gradcheck_with_a_decay_per_channel(short_chunks):
    q, k, v, beta, alpha = (torch.tensor(x, requires_grad=True) for x in draw(9, 5, 3))
    assert torch.autograd.gradcheck(
        lambda q, k, v, b, a: delta_rule(q, k, v, b, decay=a, scale=0.7, mode="fused"),
        (q, k, v, beta, alpha),
    )
    assert torch.autograd.gradcheck(
        lambda q, k, v, a: linear_attention(q, k, v, decay=a, mode="fused"), (q, k, v, alpha)
    )


def test_wrong_gate_shapes_are_refused_by_name():
    q, k, v, beta, alpha = draw(6, 4, 5)
    with pytest.raises(ValueError, match=r"decay: a per-channel value must have shape"):
        delta_rule(q, k, v, beta, decay=alpha[..., :3])
    with pytest.raises(ValueError, match=r"decay: every value must lie in \(0, 1\]"):
        linear_attention(q, k, v, decay=np.where(alpha > 0.5, alpha, 0.0))
