"""The sequence layers' parameters are validated like the estimators' (quality.md's
catalogue): a 0-d array is a number, a bool / string / None is refused naming the argument, a
scale that requires grad is refused rather than silently detached, a decay that underflows in
the inputs' dtype says so, and softmax attention takes any finite scale (0 and negative
included). Each case failed on 32b572b."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.special import softmax

from attnreg.sequence import delta_rule, linear_attention, mesa, softmax_attention

B, H, T, D = 1, 2, 5, 3


def qkv(dtype=np.float64, seed: int = 0):
    rng = np.random.default_rng(seed)
    return tuple(rng.normal(size=(B, H, T, D)).astype(dtype) for _ in range(3))


def test_a_zero_dimensional_array_is_a_number():
    q, k, v = qkv()
    got = delta_rule(q, k, v, np.array(0.5))
    assert torch.equal(got, delta_rule(q, k, v, 0.5))
    assert torch.equal(mesa(q, k, v, 1.0, lam=np.array(1.0)), mesa(q, k, v, 1.0, lam=1.0))


@pytest.mark.parametrize("bad", [True, "0.5", None, np.array([True, False])])
def test_beta_must_be_numeric(bad):
    q, k, v = qkv()
    with pytest.raises(ValueError, match="beta"):
        delta_rule(q, k, v, bad)


@pytest.mark.parametrize("bad", ["2", True, None, float("nan")])
def test_scale_must_be_a_finite_number(bad):
    q, k, v = qkv()
    with pytest.raises(ValueError, match="scale"):
        linear_attention(q, k, v, scale=bad)


def test_a_scale_that_requires_grad_is_refused_not_detached():
    q, k, v = (torch.from_numpy(a) for a in qkv())
    scale = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    with pytest.raises(ValueError, match="scale: a tensor that requires grad"):
        linear_attention(q, k, v, scale=scale)
    assert torch.equal(
        linear_attention(q, k, v, scale=torch.tensor(0.5)), linear_attention(q, k, v, scale=0.5)
    )


def test_normalize_must_be_a_flag():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="normalize"):
        linear_attention(q, k, v, normalize="yes")


def test_a_decay_that_underflows_in_float32_says_so():
    q, k, v = qkv(np.float32)
    with pytest.raises(ValueError, match=r"decay: 1e-200 underflows to 0 in torch\.float32"):
        linear_attention(q, k, v, decay=1e-200)
    q64, k64, v64 = qkv(np.float64)
    assert torch.isfinite(linear_attention(q64, k64, v64, decay=1e-200)).all()


@pytest.mark.parametrize("scale", [0.0, -1.0, 0.5])
def test_softmax_attention_takes_any_finite_scale(scale):
    """Against the causal softmax written here: scale 0 gives the running mean of the values."""
    q, k, v = qkv()
    got = softmax_attention(q, k, v, scale=scale).numpy()
    expected = np.empty_like(v)
    for t in range(T):
        w = softmax(scale * np.einsum("bhd,bhid->bhi", q[:, :, t], k[:, :, : t + 1]), axis=-1)
        expected[:, :, t] = np.einsum("bhi,bhid->bhd", w, v[:, :, : t + 1])
    unit = np.finfo(np.float64).eps / 2
    scores = np.abs(scale) * np.abs(q) @ np.abs(k).swapaxes(-1, -2)
    bound = 8 * (D + T) * unit * (1 + scores.max()) * np.abs(v).max()
    assert np.abs(got - expected).max() <= bound


def test_module_flags_and_ridge_are_checked_at_construction():
    from attnreg.sequence import LinearAttentionLayer, LonghornLayer, MesaNetLayer

    with pytest.raises(ValueError, match="diagonal"):
        LonghornLayer(diagonal="False")
    with pytest.raises(ValueError, match="normalize"):
        LinearAttentionLayer(normalize="yes")
    for bad in (-1, 0.0, np.array([[1.0, -2.0]])):
        with pytest.raises(ValueError, match="lam"):
            MesaNetLayer(lam=bad)


def test_a_hooked_softmax_layer_refuses_and_accepts_what_the_unhooked_one_does():
    """scale = 0: both paths give the running mean of the values (the weights are uniform)."""
    from attnreg.sequence import SoftmaxAttentionLayer

    q, k, v = (torch.from_numpy(a) for a in qkv())
    layer = SoftmaxAttentionLayer(scale=0.0)
    plain = layer(q, k, v)
    hooked = layer.run_with_hooks(q, k, v, hooks=[("hook_weights", lambda t, n: None)])
    counts = torch.arange(1, T + 1, dtype=torch.float64)[:, None]
    running_mean = v.cumsum(2) / counts
    unit = np.finfo(np.float64).eps / 2
    bound = 8 * T * unit * float(v.abs().max())
    assert float((plain - running_mean).abs().max()) <= bound
    assert float((hooked - running_mean).abs().max()) <= bound
