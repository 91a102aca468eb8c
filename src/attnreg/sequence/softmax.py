"""Causal softmax attention — the Nadaraya–Watson (local-constant) kernel smoother — with its
fused form (PyTorch's ``scaled_dot_product_attention``) and the explicit weights the hooked
module reads (:func:`causal_weights`, also the local linear fit's weights)."""

from __future__ import annotations

import torch
from torch.nn.functional import pad, scaled_dot_product_attention

from attnreg.core.results import check_finite_result
from attnreg.core.validation import ArrayLike
from attnreg.sequence.inputs import check_qkv, check_scale


def softmax_attention(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, *, scale: float = 1.0
) -> torch.Tensor:
    """Causal softmax attention ``o_t = Σ_{i≤t} w_{t,i} v_i``, ``w_{t,i} = softmax_{i≤t}(scale ·
    q_tᵀ k_i)``.

    Regression: ``o_t = argmin_b Σ_{i≤t} w_{t,i} ‖v_i − b‖²``: the **Nadaraya–Watson
    (local-constant) kernel smoother** with the exponential kernel ``γ_{t,i} = e^{scale · q_tᵀ
    k_i}`` (Nadaraya 1964, Watson 1964; Vaswani et al. 2017), solved in closed form (the
    weighted mean). Computed by PyTorch's fused ``scaled_dot_product_attention(is_causal=True)``
    (the attention core has no causal mask); no ``T × T`` matrix is held. ``scale=1/√d_k`` is
    Transformer attention.
    """
    qt, kt, vt = check_qkv(q, k, v)
    out = softmax_fused(qt, kt, vt, check_scale(scale))
    return check_finite_result(out, "softmax_attention")


def softmax_fused(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """Causal ``softmax(scale · Q Kᵀ) V`` by PyTorch's fused
    ``scaled_dot_product_attention(is_causal=True)`` (on the CPU a flash-attention kernel: tiles
    of queries × keys with an online softmax; no ``T × T`` matrix). Values of another width than
    the keys are zero-padded to one head width (zero columns change nothing). The scale goes
    into the queries before the kernel applies its causal mask (inside the kernel a scale of 0
    or below would multiply the mask's −∞: NaN for 0, +∞ for a negative scale)."""
    q = q * scale
    d, d_v = k.shape[-1], v.shape[-1]
    if d_v < d:
        v = pad(v, (0, d - d_v))
    elif d_v > d:
        q, k = pad(q, (0, d_v - d)), pad(k, (0, d_v - d))
    out = scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0)
    return out[..., :d_v]


def causal_weights(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """``w_{t,i} = softmax_{i≤t}(scale · q_tᵀ k_i)`` and 0 for ``i > t``: ``(B, H, M, T)`` for
    queries ``(B, H, M, d)`` at positions ``offset … offset + M − 1`` with ``offset = T − M``
    (the last M positions of the keys)."""
    m, t_len = q.shape[2], k.shape[2]
    scores = scale * (q @ k.mT)
    rows = torch.arange(t_len - m, t_len, device=q.device)[:, None]
    future = torch.arange(t_len, device=q.device)[None, :] > rows
    return torch.softmax(scores.masked_fill(future, -torch.inf), dim=-1)
