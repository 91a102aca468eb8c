"""Log-linear attention: linear attention whose past is split into Fenwick-tree segments, each
with its own weight (Guo et al. 2025, "Log-Linear Attention", arXiv 2506.04761; fla's
``log_linear_attn``).

The prefix ``[0, t)`` splits by the binary digits of ``t``: for each set bit ``b`` the segment of
the ``2^b`` positions whose digits above ``b`` agree with ``t``'s; the token ``i`` lies at level
``ℓ(t, i) = b + 1`` (``b`` the highest bit where ``i`` and ``t`` differ) and ``t`` itself at
level 0. ``o_t = Σ_{i≤t} λ_{t, ℓ(t,i)} (Π_{i<j≤t} α_j) (q_tᵀ k_i) v_i``.

Regression: ``o_t = W_t q_t`` with ``W_t`` **one gradient step of size 1** from ``W = 0`` on the
weighted least-squares loss ``½ Σ_{i≤t} γ_{t,i} ‖W k_i − v_i‖²``, ``γ_{t,i} = λ_{t, ℓ(t,i)}
Π_{i<j≤t} α_j``: :func:`attnreg.sequence.linear_attention`'s estimator with weights that the
query sets per segment, ``O(log t)`` of them, coarser the further back. ``λ ≡ 1`` is (decayed)
linear attention.
"""

from __future__ import annotations

import math

import torch

from attnreg.core.results import check_finite_result
from attnreg.core.validation import ArrayLike, as_tensor
from attnreg.sequence.forgetting import forget_bias
from attnreg.sequence.inputs import check_qkv, check_scale, decay_of


def levels(t_len: int) -> int:
    """The number of levels a sequence of ``t_len`` tokens uses: ``⌈log₂ t_len⌉ + 1``."""
    return math.ceil(math.log2(t_len)) + 1 if t_len > 1 else 1


def log_linear_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    level_weights: ArrayLike,
    *,
    decay: float | ArrayLike | None = None,
    scale: float = 1.0,
) -> torch.Tensor:
    """Log-linear attention (module docstring): ``q, k (B, H, T, d_k)``, ``v (B, H, T, d_v)``,
    ``level_weights`` ``λ (B, H, T, L)`` with ``L ≥`` :func:`levels` ``(T)`` (the weight query
    ``t`` gives each level; extra levels are unused) → ``o (B, H, T, d_v)``. ``decay``
    ``α_t ∈ (0, 1]``: a number, ``(H,)`` or ``(B, H, T)``.

    Computed directly: the weights ``γ_{t,i}`` and the products ``q_tᵀ k_i`` are ``T × T``
    matrices per batch element and head (the decays as differences of cumulative log-decays
    summed in float64)."""
    qt, kt, vt = check_qkv(q, k, v)
    lam = _level_weights(level_weights, kt)
    alpha = decay_of(decay, kt)
    t_len = kt.shape[2]
    index = fenwick_levels(t_len, kt.device).expand(*kt.shape[:2], t_len, t_len)
    gamma = lam.gather(-1, index)
    if alpha is None:
        gamma = gamma.tril()
    else:
        gamma = gamma * forget_bias(alpha).exp()
    scores = check_scale(scale) * (qt @ kt.mT)
    return check_finite_result((gamma * scores) @ vt, "log_linear_attention")


def fenwick_levels(t_len: int, device: torch.device | None = None) -> torch.Tensor:
    """``ℓ(t, i)`` for every pair (``(T, T)``, int64): the bit length of ``t XOR i`` — 0 on the
    diagonal, ``b + 1`` for ``b`` the highest differing bit (above the diagonal too, where the
    weights are zeroed)."""
    positions = torch.arange(t_len, device=device)
    differ = positions[:, None] ^ positions[None, :]
    return torch.frexp(differ.to(torch.float64))[1].to(torch.int64)


def _level_weights(value: ArrayLike, like: torch.Tensor) -> torch.Tensor:
    """``λ`` as a finite ``(B, H, T, L)`` tensor in ``like``'s dtype, ``L ≥ levels(T)``."""
    tensor = as_tensor("level_weights", value, ndim=(4,))
    b_, h, t_len = like.shape[:3]
    need = levels(t_len)
    if tuple(tensor.shape[:3]) != (b_, h, t_len) or tensor.shape[3] < need:
        raise ValueError(
            f"level_weights: must have shape (B, H, T, L) = {(b_, h, t_len)} + (L ≥ {need},) "
            f"(⌈log₂ T⌉ + 1 levels), got {tuple(tensor.shape)}"
        )
    return tensor.to(like.dtype)
