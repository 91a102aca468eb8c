"""The delta rule — DeltaNet, Gated DeltaNet, and KDA with a gate per key channel — in its three
forms side by side: :func:`delta_rule` (the public layer), :func:`delta_recurrent` (the token
loop), :func:`delta_chunked` (the WY / UT-transform form of Yang et al. 2024, "Parallelizing
Linear Transformers with the Delta Rule over Sequence Length"; KDA's gate per key channel in
:func:`kda_chunked`: the pseudo-values
``u_t = β_t (v_t − α_t S_{t−1}ᵀ k_t)`` solve the unit lower-triangular system
``(I + A) U = diag(β) V − diag(β e^G) K S_0``, ``A_{ti} = β_t L_{ti} k_tᵀ k_i`` (``i < t``), so
``U = Ũ − W S_0`` with ``Ũ = T diag(β) V`` and ``W = T diag(β e^G) K``, ``T = (I + A)⁻¹``; blocks
of ``DELTA_CHUNK = 32`` tokens: the intra-block products grow with ``C`` — ``5 C d``
multiply-adds per token beside the ``3 d²`` of the recurrence — and the loop over blocks, with
twice as many steps as at 64, still costs less than they save, ``benchmarks/README.md``) and the
fused CPU recurrence (:mod:`~attnreg.sequence.fused`)."""

from __future__ import annotations

import torch

from attnreg.core.validation import ArrayLike, check_positive_int
from attnreg.sequence.checked import Result, checked_result, scaled
from attnreg.sequence.fused_autograd import fused
from attnreg.sequence.inputs import check_qkv_for, check_scale, decay_of, per_token
from attnreg.sequence.tiling import (
    SEGMENT,
    batched,
    block_major,
    by_segments,
    channel_decay_matrix,
    channel_segment,
    decay_matrix,
    decayed,
    log_of,
    lower_inverse,
)

DELTA_CHUNK = 32  # the delta rule's blocks (module docstring)


def delta_rule(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    beta: float | ArrayLike,
    *,
    decay: float | ArrayLike | None = None,
    scale: float = 1.0,
    mode: str = "auto",
) -> torch.Tensor:
    """DeltaNet, and with ``decay`` Gated DeltaNet: ``S' = α_t S_{t−1}``,
    ``S_t = S' + k_t (β_t (v_t − S'ᵀ k_t))ᵀ``, ``o_t = S_tᵀ q_t`` (``S_0 = 0``).

    Regression: ``W_t = α_t W_{t−1} − β_t ∇_W ½‖W k_t − v_t‖²`` at ``α_t W_{t−1}``: **online least
    squares** (LMS / Widrow–Hoff, one gradient step of size ``β_t`` per token on the newest pair
    only) over linear maps; the decay is weight decay ``(1 − α_t)`` on ``W`` (Schlag et al. 2021,
    "Linear transformers are secretly fast weight programmers"; Yang et al. 2024,
    "Parallelizing linear transformers with the delta rule"; Yang, Kautz & Hatamizadeh 2025,
    "Gated Delta Networks"). The past pairs enter through the iterate, not through weights
    ``γ_{t,i}`` of one loss. Keys are used as given: DeltaNet L2-normalises them (the caller
    does, ``k / ‖k‖``), and the recurrence is stable when ``0 ≤ β_t ‖k_t‖² ≤ 2``
    (``I − β_t k_t k_tᵀ`` is then no expansion). ``beta ≥ 0``: a number, ``(H,)`` or ``(B, H, T)``.
    ``decay`` as in :func:`linear_attention`, one gate per key channel ``(B, H, T, d_k)``
    included: ``S' = Diag(α_t) S_{t−1}``, Kimi Delta Attention (KDA, Kimi Team 2025, "Kimi
    Linear"; fla's ``naive_recurrent_kda``), the LMS step taken after a per-coordinate weight
    decay of ``W`` (chunked: :func:`kda_chunked`).
    """
    qt, kt, vt, mode = check_qkv_for(mode, q, k, v)
    b = per_token("beta", beta, kt, low=0.0)
    alpha = decay_of(decay, kt, channels=True)

    def layer(qc: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, sc: float) -> Result:
        return delta_forms(qc, kc, vc, b, alpha, sc, mode)

    return checked_result(layer, qt, kt, vt, check_scale(scale), "delta_rule")


def delta_forms(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    alpha: torch.Tensor | None,
    scale: float,
    mode: str,
) -> Result:
    """The delta rule on validated inputs (``beta`` ``(B, H, T)``), queries scaled by
    ``scale``."""
    if mode == "fused":
        return fused(q, k, v, alpha, beta, True, scale)
    if mode == "chunk" and alpha is not None and alpha.ndim == 4:
        return kda_chunked(scaled(q, scale), k, v, beta, alpha.log()), None
    if mode == "chunk":
        return delta_chunked(scaled(q, scale), k, v, beta, log_of(alpha)), None
    return delta_recurrent(scaled(q, scale), k, v, beta, alpha)[0], None


def delta_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    decay: torch.Tensor | None,
    *,
    states: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The token loop, as the recurrence is defined: ``S' = α_t S_{t−1}`` (``decay`` ``(B, H,
    T)``, ``(B, H, T, d_k)`` or ``None``), ``S_t = S' + k_t (β_t (v_t − S'ᵀ k_t))ᵀ``,
    ``o_t = S_tᵀ q_t``, from ``S_0 = 0``. With ``states=True`` every ``S_t`` is returned too,
    stacked along the token axis (``(B, H, T, d_k, d_v)``: the modules' state hooks read them)."""
    s = k.new_zeros(*k.shape[:2], k.shape[-1], v.shape[-1])
    outs, kept = [], []
    for t in range(k.shape[2]):
        s = decayed(s, decay, t)
        key = k[:, :, t]
        error = v[:, :, t] - torch.einsum("bhk,bhkv->bhv", key, s)
        s = s + key[..., None] * (beta[:, :, t, None] * error)[:, :, None]
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, :, t], s))
        if states:
            kept.append(s)
    return torch.stack(outs, dim=2), torch.stack(kept, dim=2) if states else None


def delta_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    log_decay: torch.Tensor | None,
    chunk: int = DELTA_CHUNK,
    segment: int = SEGMENT,
) -> torch.Tensor:
    """The (gated) delta rule ``S_t = α_t S_{t−1} + k_t (β_t (v_t − α_t S_{t−1}ᵀ k_t))ᵀ``,
    ``o_t = S_tᵀ q_t``, by the WY / UT transform in blocks of ``chunk`` tokens. With ``G`` the
    cumulative log-decays of each block and ``L_{ti} = e^{G_t − G_i}`` (all 1 without decay),
    ``T = (I + A)⁻¹`` for ``A`` the part of ``diag(β) K Kᵀ ⊙ L`` strictly below the diagonal is
    formed for all blocks at once (:func:`lower_inverse`: one batched call, whose small
    products would cost more split by segment); the rest ``segment`` tokens at a time
    (:func:`_delta_segment`)."""
    check_positive_int("chunk", chunk)
    kb = block_major(k, chunk).contiguous()  # (N, B·H, C, d_k), once for all segments
    bb = block_major(beta, chunk).unsqueeze(-1).contiguous()
    g = decay = None
    if log_decay is not None:
        g = block_major(log_decay, chunk).cumsum(-1)
        decay = decay_matrix(g)
    inverse = ut_inverse(kb, bb, decay)
    state = q.new_zeros(q.shape[0] * q.shape[1], q.shape[-1], v.shape[-1])
    parts = [block_major(q, chunk), kb, block_major(v, chunk), bb, g, inverse, decay]
    return by_segments(_delta_segment, parts, state, q, segment)


def ut_inverse(k: torch.Tensor, beta: torch.Tensor, decay: torch.Tensor | None) -> torch.Tensor:
    """``T = (I + A)⁻¹`` per block, ``A`` the part of ``diag(β) K Kᵀ ⊙ L`` strictly below the
    diagonal (the UT transform of the delta rule), for keys ``k (…, C, d_k)``, ``beta (…, C, 1)``
    and decay matrices ``decay (…, C, C)`` (``None``: all 1), by :func:`lower_inverse`."""
    lower = beta * (k @ k.mT)
    if decay is not None:
        lower = lower * decay
    eye = torch.eye(k.shape[-2], dtype=lower.dtype, device=lower.device)
    return lower_inverse(lower.tril_(-1) + eye)


def _delta_segment(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bc: torch.Tensor,
    g: torch.Tensor | None,
    inverse: torch.Tensor,
    decay: torch.Tensor | None,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One segment from the entering state ``(B·H, d_k, d_v)``; returns its outputs and the
    state leaving it. Block-major ``(n, B·H, C, ·)`` parts: ``bc`` is ``β`` (``(…, C, 1)``),
    ``g`` the cumulative log-decays ``G`` and ``decay`` the matrices ``L`` (both ``None``
    without decay), ``inverse`` is ``T``. ``W = T diag(β e^G) K``, ``Ũ = T diag(β) V`` and the
    intra-block scores are formed for all blocks of the segment at once; the loop over blocks
    carries the state only (two products per block, ``u = Ũ − W S`` and ``S ← a S + K̃ᵀ u`` with
    ``K̃ = diag(e^{G_C − G}) K``); the outputs are two batched products after it,
    ``o = diag(e^G) Q S + (Q Kᵀ ⊙ L) u``."""
    scores = q @ k.mT
    t_beta = inverse * bc.mT  # T diag(β)
    if g is None or decay is None:
        scores, t_keys, q_read, k_write, block_decay = scores.tril_(), t_beta, q, k, None
    else:
        scores = scores * decay
        growth = g.exp()
        t_keys = t_beta * growth.unsqueeze(-2)
        q_read = q * growth.unsqueeze(-1)
        last = g[..., -1:]
        k_write = k * (last - g).exp().unsqueeze(-1)
        block_decay = last.exp().unsqueeze(-1)  # (n, B·H, 1, 1)
    w, u_local = t_keys @ k, t_beta @ v
    k_t = k_write.mT
    entering, pseudo = [], []
    for j in range(q.shape[0]):
        entering.append(state)
        u = torch.baddbmm(u_local[j], w[j], state, alpha=-1)
        pseudo.append(u)
        kept = state if block_decay is None else state * block_decay[j]
        state = torch.baddbmm(kept, k_t[j], u)
    inter = q_read @ torch.stack(entering)
    out = torch.baddbmm(batched(inter), batched(scores), batched(torch.stack(pseudo)))
    return out.view_as(inter), state


def kda_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    log_decay: torch.Tensor,
    chunk: int = DELTA_CHUNK,
) -> torch.Tensor:
    """KDA, the delta rule after one decay per key channel, ``S' = Diag(α_t) S_{t−1}``,
    ``S_t = S' + k_t (β_t (v_t − S'ᵀ k_t))ᵀ``, ``o_t = S_tᵀ q_t`` (``log_decay = log α``
    ``(B, H, T, d_k)``), by the WY / UT transform in blocks of ``chunk`` tokens. With ``G`` the
    cumulative log-decays of each block per channel and ``L_{ti,c} = e^{G_{t,c} − G_{i,c}}``,
    the state entering a block ``S_0`` gives ``S'_t = Diag(e^{G_t}) S_0 + Σ_{i<t} Diag(L_{ti})
    k_i u_iᵀ``, so the pseudo-values ``u_t`` solve ``(I + A) U = diag(β) (V − (K ⊙ e^G) S_0)``
    with ``A_{ti} = β_t Σ_c k_{t,c} k_{i,c} L_{ti,c}`` (``i < t``), ``o_t = S_0ᵀ (e^{G_t} ⊙
    q_t) + Σ_{i≤t} (Σ_c q_{t,c} k_{i,c} L_{ti,c}) u_i`` and the block leaves ``Diag(e^{G_C})
    S_0 + Σ_i (e^{G_C − G_i} ⊙ k_i) u_iᵀ``: the delta rule's chunked form with the products
    ``k_tᵀ k_i`` and ``q_tᵀ k_i`` weighted per channel — a ``C × C × d_k`` tensor per block
    (every exponent ≤ 0: nothing overflows whatever the gates), segments sized by
    :func:`~attnreg.sequence.tiling.channel_segment`."""
    check_positive_int("chunk", chunk)
    state = q.new_zeros(q.shape[0] * q.shape[1], q.shape[-1], v.shape[-1])
    parts = [block_major(x, chunk) for x in (q, k, v, log_decay)]
    parts.insert(3, block_major(beta, chunk).unsqueeze(-1))
    return by_segments(_kda_segment, parts, state, q, channel_segment(k, chunk))


def _kda_segment(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bc: torch.Tensor,
    log_decay: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One segment of :func:`kda_chunked` (block-major ``(n, B·H, C, ·)`` parts, ``bc`` is
    ``β`` ``(…, C, 1)``) from the entering state; returns its outputs and the state leaving
    it. As :func:`_delta_segment`, with the per-channel weights ``L``."""
    g = log_decay.cumsum(-2)
    weights = channel_decay_matrix(g)  # (n, B·H, C, C, d_k)
    keys = torch.einsum("...tc,...ic,...tic->...ti", k, k, weights)
    scores = torch.einsum("...tc,...ic,...tic->...ti", q, k, weights)
    eye = torch.eye(k.shape[-2], dtype=k.dtype, device=k.device)
    t_beta = lower_inverse((bc * keys).tril_(-1) + eye) * bc.mT  # T diag(β)
    growth = g.exp()
    w, u_local = t_beta @ (k * growth), t_beta @ v
    last = g[..., -1:, :]
    k_t = (k * (last - g).exp()).mT
    block_decay = last.exp().mT  # (n, B·H, d_k, 1): the block's decay of each state row
    entering, pseudo = [], []
    for j in range(q.shape[0]):
        entering.append(state)
        u = torch.baddbmm(u_local[j], w[j], state, alpha=-1)
        pseudo.append(u)
        state = torch.baddbmm(state * block_decay[j], k_t[j], u)
    return (q * growth) @ torch.stack(entering) + scores @ torch.stack(pseudo), state
