"""Forgetting attention: causal softmax attention whose logits carry a forget gate's cumulative
log-decay (Lin et al. 2025, "Forgetting Transformer: Softmax Attention with a Forget Gate",
arXiv 2503.02130; fla's ``forgetting_attn``).

``o_t = Σ_{i≤t} w_{t,i} v_i``, ``w_{t,i} = softmax_{i≤t}(scale · q_tᵀ k_i + Σ_{i<j≤t} log f_j)``.

Regression: ``o_t = argmin_b Σ_{i≤t} γ_{t,i} ‖v_i − b‖²`` with
``γ_{t,i} = e^{scale · q_tᵀ k_i} Π_{i<j≤t} f_j``: the **Nadaraya–Watson (local-constant)
smoother** with the exponential kernel times the forget gates' decay, solved in closed form (the
weighted mean). ``f ≡ 1`` is :func:`attnreg.sequence.softmax_attention`.
"""

from __future__ import annotations

import torch
from torch.nn.functional import scaled_dot_product_attention

from attnreg.core.results import check_finite_result
from attnreg.core.validation import ArrayLike
from attnreg.sequence.inputs import check_qkv, check_scale, per_token


def forgetting_attention(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, forget: float | ArrayLike, *, scale: float = 1.0
) -> torch.Tensor:
    """Forgetting attention (module docstring): ``q, k (B, H, T, d_k)``, ``v (B, H, T, d_v)``
    → ``o (B, H, T, d_v)``. ``forget`` ``f_t ∈ (0, 1]``: a number, ``(H,)`` or ``(B, H, T)``.

    Computed by PyTorch's ``scaled_dot_product_attention`` with the additive bias
    ``c_t − c_i`` (``c_t = Σ_{j≤t} log f_j``, summed in float64) and ``−∞`` above the diagonal;
    the bias is a ``T × T`` matrix per batch element and head."""
    qt, kt, vt = check_qkv(q, k, v)
    f = per_token("forget", forget, kt, low=0.0, high=1.0, open_low=True)
    s = check_scale(scale)
    out = scaled_dot_product_attention(qt * s, kt, vt, attn_mask=forget_bias(f), scale=1.0)
    return check_finite_result(out, "forgetting_attention")


def forget_bias(forget: torch.Tensor) -> torch.Tensor:
    """``c_t − c_i`` for ``i ≤ t`` and ``−∞`` for ``i > t`` (``(B, H, T, T)``, ``forget``'s
    dtype), with ``c_t = Σ_{j≤t} log f_j`` accumulated in float64 (``c`` grows like ``T``;
    its differences are what the weights use)."""
    c = forget.to(torch.float64).log().cumsum(-1)
    bias = c.unsqueeze(-1) - c.unsqueeze(-2)
    t_len = forget.shape[-1]
    future = torch.ones(t_len, t_len, dtype=torch.bool, device=forget.device).triu(1)
    return bias.masked_fill(future, -torch.inf).to(forget.dtype)
