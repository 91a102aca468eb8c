"""The kernel-weighted layers: causal softmax attention (local-constant fit) and local linear
attention (local-linear fit), both with the weights ``w_{t,i} = softmax_{i≤t}(scale · q_tᵀ k_i)``.
"""

from __future__ import annotations

import torch
from torch.nn.functional import pad, scaled_dot_product_attention

LOCAL_BLOCK_BYTES = 64 * 2**20


def causal_weights(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """``w_{t,i} = softmax_{i≤t}(scale · q_tᵀ k_i)`` and 0 for ``i > t``: ``(B, H, M, T)`` for
    queries ``(B, H, M, d)`` at positions ``offset … offset + M − 1`` with ``offset = T − M``
    (the last M positions of the keys)."""
    m, t_len = q.shape[2], k.shape[2]
    scores = scale * (q @ k.mT)
    rows = torch.arange(t_len - m, t_len, device=q.device)[:, None]
    future = torch.arange(t_len, device=q.device)[None, :] > rows
    return torch.softmax(scores.masked_fill(future, -torch.inf), dim=-1)


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


def local_linear(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lam: float,
    scale: float,
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """The intercept ``b̂_t = v̄_t + Σ^{vk}_t (Σ^{kk}_t + λI)⁻¹ (q_t − k̄_t)`` of the kernel-weighted
    local-linear fit at every position, with the weighted means ``k̄_t = Σ_i w_{t,i} k_i``,
    ``v̄_t`` and the centred weighted moments ``Σ^{kk}_t = Σ_i w_{t,i} (k_i − k̄_t)(k_i − k̄_t)ᵀ``,
    ``Σ^{kv}_t`` (centred before they are summed: no cancellation of ``E[kkᵀ] − k̄k̄ᵀ``). Queries
    go in blocks whose centred keys and values take about ``LOCAL_BLOCK_BYTES``. ``weights``
    (``(B, H, T, T)``, e.g. read or edited through a hook) replaces the softmax weights."""
    b, h, t_len, d_k = k.shape
    per_query = b * h * t_len * (2 * d_k + v.shape[-1]) * q.element_size()
    step = max(1, LOCAL_BLOCK_BYTES // per_query)
    eye = torch.eye(d_k, dtype=q.dtype, device=q.device)
    outs = []
    for start in range(0, t_len, step):
        end = min(start + step, t_len)
        qb, kp, vp = q[:, :, start:end], k[:, :, :end], v[:, :, :end]
        if weights is None:
            w = causal_weights(qb, kp, scale)  # (B, H, M, end)
        else:
            w = weights[:, :, start:end, :end]
        k_mean, v_mean = w @ kp, w @ vp
        k_centred = kp.unsqueeze(2) - k_mean.unsqueeze(-2)  # (B, H, M, end, d_k)
        v_centred = vp.unsqueeze(2) - v_mean.unsqueeze(-2)
        weighted = k_centred * w.unsqueeze(-1)
        s_kk = weighted.mT @ k_centred + lam * eye
        s_kv = weighted.mT @ v_centred
        x = torch.linalg.solve(s_kk, (qb - k_mean).unsqueeze(-1))
        outs.append(v_mean + (s_kv.mT @ x).squeeze(-1))
    return torch.cat(outs, dim=2)
