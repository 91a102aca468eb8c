"""Local linear attention — the kernel-weighted local-linear ridge fit centred at the query
(Zuo et al. 2025) — computed directly, queries in blocks of bounded memory."""

from __future__ import annotations

import torch

from attnreg.core.results import check_finite_result
from attnreg.core.validation import ArrayLike, check_positive
from attnreg.sequence.inputs import check_qkv, check_scale
from attnreg.sequence.softmax import causal_weights

LOCAL_BLOCK_BYTES = 64 * 2**20


def local_linear_attention(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, *, lam: float, scale: float = 1.0
) -> torch.Tensor:
    """Local linear attention: the intercept ``b̂_t`` of
    ``min_{b, W} Σ_{i≤t} w_{t,i} ‖v_i − b − W (k_i − q_t)‖² + λ ‖W‖²_F`` with the softmax weights
    ``w_{t,i} = softmax_{i≤t}(scale · q_tᵀ k_i)``.

    Regression: **kernel-weighted local-linear (affine) ridge regression** centred at the query,
    solved in closed form, ``b̂_t = v̄_t + Σ^{vk}_t (Σ^{kk}_t + λI)⁻¹ (q_t − k̄_t)`` with the weighted
    means and centred covariances of the past keys and values (Zuo et al. 2025, "Local linear
    attention", arXiv 2510.01450): softmax attention is its local-constant special case (``W = 0``).
    The fit at the query ``q_t`` itself is unscaled; ``scale`` enters the weights only. ``lam > 0``.
    Computed directly (``O(T² d_k²)`` work, queries in blocks of bounded memory).
    """
    qt, kt, vt = check_qkv(q, k, v)
    out = local_linear(qt, kt, vt, check_positive("lam", lam), check_scale(scale))
    return check_finite_result(out, "local_linear_attention")


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
