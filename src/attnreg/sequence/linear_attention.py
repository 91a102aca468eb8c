"""Linear attention, optionally decayed — RetNet's and Mamba-2's scalar gate, GLA's gate per key
channel — in its three forms side by side: :func:`linear_attention` (the public layer),
:func:`linear_recurrent` (the token loop, as the recurrence is defined), :func:`linear_chunked`
(the block-parallel form: ``O = diag(e^G) Q S_0 + (Q Kᵀ ⊙ L) V`` per block, the chunkwise form of
Yang et al. 2024, "Gated Linear Attention Transformers"; :mod:`~attnreg.sequence.tiling`) and
the fused CPU recurrence (:mod:`~attnreg.sequence.fused`)."""

from __future__ import annotations

import torch

from attnreg.core.scaling import unit_scale
from attnreg.core.validation import ArrayLike, check_flag
from attnreg.sequence.checked import Result, checked_result, scaled
from attnreg.sequence.fused_autograd import fused
from attnreg.sequence.inputs import check_finite_qkv, check_qkv_for, check_scale, decay_of
from attnreg.sequence.tiling import (
    CHUNK,
    SEGMENT,
    batched,
    block_major,
    by_segments,
    carry_states,
    channel_decay_matrix,
    decay_matrix,
    decayed,
    log_of,
)


def linear_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    decay: float | ArrayLike | None = None,
    normalize: bool = False,
    scale: float = 1.0,
    mode: str = "auto",
) -> torch.Tensor:
    """Linear attention, optionally decayed: ``S_t = α_t S_{t−1} + k_t v_tᵀ``,
    ``o_t = S_tᵀ q_t`` (``S_0 = 0``). With ``normalize``, ``o_t`` is divided by ``z_tᵀ q_t``,
    ``z_t = α_t z_{t−1} + k_t`` (every ``z_tᵀ q_t`` must be non-zero, e.g. positive feature maps).

    Regression: ``o_t = W_t q_t`` with ``W_t = W_0 − ∇ ½ Σ_{i≤t} γ_{t,i} ‖W k_i − v_i‖²`` at
    ``W_0 = 0``: **one gradient step of size 1** on a weighted least-squares loss over linear
    maps, weights ``γ_{t,i} = Π_{i<j≤t} α_j`` (all 1 without decay). ``decay`` is a number, a
    per-head constant ``(H,)`` (RetNet, Sun et al. 2023) or a per-token gate ``(B, H, T)``
    (GLA's / Mamba-2's scalar gate: Yang et al. 2024, Dao & Gu 2024), or one gate per key
    channel ``(B, H, T, d_k)``, ``S' = Diag(α_t) S_{t−1}`` (GLA; every form, the chunked one by
    :func:`channel_chunked`). Normalised, it is the
    Nadaraya–Watson smoother with the linear kernel ``k_iᵀ q_t`` (Katharopoulos et al. 2020).
    The normalised output does not change when ``q`` or ``k`` of a head is multiplied by a
    positive number, so both are first brought to unit magnitude per head by powers of two
    (exact): ``q, k ~ 1e±200`` give the answer rather than an underflow or overflow.
    """
    qt, kt, vt, mode = check_qkv_for(mode, q, k, v)
    alpha = decay_of(decay, kt, channels=True)
    check_flag("normalize", normalize)
    s = check_scale(scale)
    if normalize:  # the output does not change with q's scale: q is brought to unit magnitude
        if mode == "fused":  # its normalised output carries no largest |o|: checked now
            check_finite_qkv(qt, kt, vt)
        qt = qt * s
        qt, kt, s = qt / unit_scale(qt), kt / unit_scale(kt), 1.0

    def layer(qc: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, sc: float) -> Result:
        return linear_forms(qc, kc, vc, alpha, normalize, sc, mode)

    return checked_result(layer, qt, kt, vt, s, "linear_attention")


def linear_forms(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    alpha: torch.Tensor | None,
    normalize: bool,
    scale: float,
    mode: str,
) -> Result:
    """:func:`linear_attention` on validated inputs, queries scaled by ``scale``."""
    d_v = v.shape[-1]
    if normalize:
        v = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)
    largest = None
    if mode == "fused":
        out, largest = fused(q, k, v, alpha, None, False, scale)
    elif mode == "chunk" and alpha is not None and alpha.ndim == 4:
        out = channel_chunked(scaled(q, scale), k, v, alpha.log())
    elif mode == "chunk":
        out = linear_chunked(scaled(q, scale), k, v, log_of(alpha))
    else:
        out = linear_recurrent(scaled(q, scale), k, v, alpha)[0]
    if normalize:
        return normalized(out[..., :d_v], out[..., d_v:]), None
    return out, largest


def normalized(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    """``numerator / z_tᵀ q_t``; a zero denominator is a ``ValueError`` naming the position."""
    zero = denominator == 0
    if bool(zero.any()):
        where = tuple(int(i) for i in zero.nonzero()[0, :3].tolist())
        raise ValueError(
            f"normalize: z_tᵀ q_t = 0 at (batch, head, position) {where}; normalised linear "
            "attention needs non-zero normalisers (e.g. positive feature maps of q and k)"
        )
    return numerator / denominator


def linear_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    decay: torch.Tensor | None,
    *,
    states: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The token loop, as the recurrence is defined: ``S_t = α_t S_{t−1} + k_t v_tᵀ``
    (``decay`` one factor per token ``(B, H, T)``, one per key channel ``(B, H, T, d_k)``, or
    ``None``), ``o_t = S_tᵀ q_t``, from ``S_0 = 0``. With ``states=True`` every ``S_t`` is
    returned too, stacked along the token axis (``(B, H, T, d_k, d_v)``: the modules' state
    hooks read them)."""
    s = k.new_zeros(*k.shape[:2], k.shape[-1], v.shape[-1])
    outs, kept = [], []
    for t in range(k.shape[2]):
        s = decayed(s, decay, t)
        s = s + k[:, :, t, :, None] * v[:, :, t, None, :]
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, :, t], s))
        if states:
            kept.append(s)
    return torch.stack(outs, dim=2), torch.stack(kept, dim=2) if states else None


def linear_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_decay: torch.Tensor | None,
    chunk: int = CHUNK,
    segment: int = SEGMENT,
) -> torch.Tensor:
    """``S_t = α_t S_{t−1} + k_t v_tᵀ``, ``o_t = S_tᵀ q_t`` (``log_decay = log α``, ``(B, H, T)``
    or ``None``) in blocks of ``chunk`` tokens, ``segment`` tokens at a time."""
    state = q.new_zeros(q.shape[0] * q.shape[1], q.shape[-1], v.shape[-1])
    parts = [None if x is None else block_major(x, chunk) for x in (q, k, v, log_decay)]
    return by_segments(_linear_segment, parts, state, q, segment)


def _linear_segment(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_decay: torch.Tensor | None,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One segment (block-major ``(n, B·H, C, ·)``) from the entering state ``(B·H, d_k, d_v)``;
    returns its outputs and the state leaving it. Without decay the states entering the blocks
    are the exclusive prefix sums of the blocks' ``Kᵀ V``: one product with the strictly lower
    triangle of ones (no loop)."""
    scores = q @ k.mT
    if log_decay is None:
        writes = k.mT @ v
        before = torch.ones(len(q), len(q), dtype=q.dtype, device=q.device).tril_(-1)
        entering = (before @ writes.flatten(1)).view_as(writes) + state
        out = torch.baddbmm(batched(q @ entering), batched(scores.tril_()), batched(v))
        return out.view(*q.shape[:-1], -1), entering[-1] + writes[-1]
    g = log_decay.cumsum(-1)
    last = g[..., -1:]
    writes = (k * (last - g).exp().unsqueeze(-1)).mT @ v
    entering, state = carry_states(writes, last.squeeze(-1).exp(), state, dim=0)
    inter = (q * g.exp().unsqueeze(-1)) @ entering
    out = torch.baddbmm(batched(inter), batched(scores * decay_matrix(g)), batched(v))
    return out.view_as(inter), state


def channel_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_decay: torch.Tensor,
    chunk: int = CHUNK,
    segment: int = SEGMENT,
) -> torch.Tensor:
    """Linear attention with one decay per key channel (GLA's gate; Longhorn's diagonal form),
    ``S_t = Diag(α_t) S_{t−1} + k_t v_tᵀ``, ``o_t = S_tᵀ q_t``, ``log_decay = log α``
    ``(B, H, T, d_k)``, in blocks of ``chunk`` tokens. Within a block
    ``o_t = S_0ᵀ (e^{G_t} ⊙ q_t) + Σ_{i≤t} (Σ_j q_{tj} k_{ij} e^{G_{tj} − G_{ij}}) v_i`` with
    ``G`` the cumulative log-decays per channel: the scores are a ``C × C × d_k`` product per
    block (every exponent ≤ 0)."""
    state = q.new_zeros(q.shape[0] * q.shape[1], q.shape[-1], v.shape[-1])
    parts = [block_major(x, chunk) for x in (q, k, v, log_decay)]
    return by_segments(_channel_segment, parts, state, q, segment)


def _channel_segment(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_decay: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One segment of :func:`channel_chunked` (block-major) from the entering state."""
    g = log_decay.cumsum(-2)  # (n, B·H, C, d_k): log α summed in the block, per channel
    scores = (q.unsqueeze(-2) * k.unsqueeze(-3) * channel_decay_matrix(g)).sum(-1)  # (…, C, C)
    last = g[..., -1:, :]
    writes = (k * (last - g).exp()).mT @ v
    entering, state = carry_states(writes, last.squeeze(-2).exp(), state, dim=0)
    return (q * g.exp()) @ entering + scores @ v, state
