"""Block-parallel (chunked) forms of the recurrent layers: a few matrix products per block of
``C`` tokens instead of one Python step per token, and no ``T × T`` matrix beyond one block.

The sequence is cut into ``N = ⌈T/C⌉`` blocks (the last one zero-padded: a zero key and value
after the end change no earlier output). Within a block, with ``G_t = Σ_{j≤t} log α_j`` counted
from the block's start and the state ``S_0`` entering it,

``S_t = e^{G_t} S_0 + Σ_{i≤t} e^{G_t − G_i} k_i u_iᵀ``

where ``u_i = v_i`` for linear attention. Every decay factor is ``e^{(≤ 0)}``, so nothing
overflows whatever the gates. The intra-block terms of all blocks of a segment (``SEGMENT``
tokens, so that a segment's temporaries stay in cache) are computed at once, on block-major
copies ``(n, B·H, C, ·)`` (block ``j`` of every head is one contiguous batch of the products);
only the ``d_k × d_v`` state is carried from block to block and from segment to segment.

* **linear attention** (Katharopoulos et al. 2020; RetNet, Sun et al. 2023; GLA, Yang et al.
  2024; the chunkwise form of Yang et al. 2024, "Gated Linear Attention Transformers"):
  ``O = diag(e^G) Q S_0 + (Q Kᵀ ⊙ L) V`` with ``L_{ti} = e^{G_t − G_i}`` for ``i ≤ t``.
* **delta rule** (the WY / UT-transform form of Yang et al. 2024, "Parallelizing Linear
  Transformers with the Delta Rule over Sequence Length"): the pseudo-values
  ``u_t = β_t (v_t − α_t S_{t−1}ᵀ k_t)`` solve the unit lower-triangular system
  ``(I + A) U = diag(β) V − diag(β e^G) K S_0``, ``A_{ti} = β_t L_{ti} k_tᵀ k_i`` (``i < t``),
  so ``U = Ũ − W S_0`` with ``Ũ = T diag(β) V`` and ``W = T diag(β e^G) K``, ``T = (I + A)⁻¹``
  from :func:`lower_inverse` (batched products, all blocks at once). Blocks of
  ``DELTA_CHUNK = 32`` tokens: the intra-block products grow with ``C`` (``5 C d`` multiply-adds
  per token beside the ``3 d²`` of the recurrence), and the loop over blocks, with twice as
  many steps as at 64, still costs less than they save (``benchmarks/README.md``).
* **Longhorn's diagonal approximation**: linear attention with one decay per key coordinate,
  ``a_t = 1 − ε_t k_t ⊙ k_t``; the intra-block scores carry ``e^{G_{tj} − G_{ij}}`` per coordinate.

Mesa's chunked form is in :mod:`attnreg.sequence.mesa_blocked`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch.nn.functional import pad

from attnreg.core.validation import check_positive_int

CHUNK = 64
DELTA_CHUNK = 32  # the delta rule's blocks (module docstring)
SEGMENT = 512
BASE = 8  # lower_inverse solves triangular systems at this size


def blocks(x: torch.Tensor, chunk: int) -> torch.Tensor:
    """``(B, H, T, …) -> (B, H, N, C, …)``, zero-padding T to a multiple of ``chunk``."""
    t_len = x.shape[2]
    extra = -t_len % chunk
    if extra:
        widths = [0, 0] * (x.ndim - 3) + [0, extra]
        x = pad(x, widths)
    return x.reshape(*x.shape[:2], -1, chunk, *x.shape[3:])


def unblock(x: torch.Tensor, t_len: int) -> torch.Tensor:
    """``(B, H, N, C, d) -> (B, H, T, d)``, dropping the padding."""
    return x.reshape(*x.shape[:2], -1, x.shape[-1])[:, :, :t_len]


def _decay_matrix(g: torch.Tensor) -> torch.Tensor:
    """``L_{ti} = e^{G_t − G_i}`` for ``i ≤ t``, 0 above (``g (…, C)`` -> ``(…, C, C)``)."""
    chunk = g.shape[-1]
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=g.device).tril()
    return (g[..., :, None] - g[..., None, :]).masked_fill_(~causal, -torch.inf).exp()


def block_major(x: torch.Tensor, chunk: int) -> torch.Tensor:
    """``(B, H, T, …) -> (N, B·H, C, …)`` (zero-padded blocks, block axis first): a view of a
    contiguous ``x``, whose slices along the block axis :func:`_by_segments` copies to
    contiguous parts."""
    return blocks(x, chunk).flatten(0, 1).transpose(0, 1)


def _by_segments(
    step: Callable[..., tuple[torch.Tensor, torch.Tensor]],
    parts: Sequence[torch.Tensor | None],
    state: torch.Tensor,
    like: torch.Tensor,
    segment: int,
) -> torch.Tensor:
    """Run ``step(*slices, state) -> (out, state)`` over the blocks, ``segment // C`` blocks at
    a time, and return the outputs as ``(B, H, T, d_v)`` (``B, H, T`` those of ``like``).

    ``parts`` are block-major ``(N, B·H, C, …)`` (:func:`block_major`) or ``None`` (passed
    through). Each slice is made contiguous (a copy of a view, nothing for a tensor already
    block-major), so that block ``j`` of all heads, ``slice[j]``, is one operand of a batched
    product; ``out`` is ``(n, B·H, C, d_v)``."""
    b, h, t_len = like.shape[:3]
    n_blocks, chunk = next(p.shape[:3:2] for p in parts if p is not None)
    per = max(1, segment // chunk)
    out = None
    for start in range(0, n_blocks, per):
        span = slice(start, start + per)
        slices = [None if p is None else p[span].contiguous() for p in parts]
        piece, state = step(*slices, state)
        if out is None:
            out = piece.new_empty(b * h, n_blocks, chunk, piece.shape[-1])
        out[:, span] = piece.transpose(0, 1)
    assert out is not None  # n_blocks ≥ 1: the inputs are checked non-empty
    return out.view(b, h, n_blocks * chunk, -1)[:, :, :t_len]


def _batched(x: torch.Tensor) -> torch.Tensor:
    """``(n, B·H, r, c) -> (n·B·H, r, c)`` (a view of a contiguous tensor) for ``bmm``."""
    return x.flatten(0, 1)


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
    return _by_segments(_linear_segment, parts, state, q, segment)


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
        out = torch.baddbmm(_batched(q @ entering), _batched(scores.tril_()), _batched(v))
        return out.view(*q.shape[:-1], -1), entering[-1] + writes[-1]
    g = log_decay.cumsum(-1)
    last = g[..., -1:]
    writes = (k * (last - g).exp().unsqueeze(-1)).mT @ v
    entering, state = carry_states(writes, last.squeeze(-1).exp(), state, dim=0)
    inter = (q * g.exp().unsqueeze(-1)) @ entering
    out = torch.baddbmm(_batched(inter), _batched(scores * _decay_matrix(g)), _batched(v))
    return out.view_as(inter), state


def carry_states(
    writes: torch.Tensor, block_decay: torch.Tensor, state: torch.Tensor, dim: int = 2
) -> tuple[torch.Tensor, torch.Tensor]:
    """The state entering each block, ``S^{(n+1)} = a_n ⊙ S^{(n)} + W_n`` from ``S^{(0)} = state``
    (stacked along the block axis ``dim``), and the state after the last block. ``writes`` has
    the blocks on axis ``dim`` and the ``·×·`` state last; ``block_decay`` one factor per block
    (``writes.shape[:-2]``), or one per block and state row (``writes.shape[:-1]``)."""
    extra = writes.ndim - block_decay.ndim
    factors = block_decay[(..., *([None] * extra))]
    entering = []
    for n in range(writes.shape[dim]):
        entering.append(state)
        state = torch.addcmul(writes.select(dim, n), factors.select(dim, n), state)
    return torch.stack(entering, dim=dim), state


def diagonal_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    eps: torch.Tensor,
    chunk: int = CHUNK,
    segment: int = SEGMENT,
) -> torch.Tensor:
    """Longhorn's diagonal approximation ``S_t = diag(a_t) S_{t−1} + ε_t k_t v_tᵀ``,
    ``a_t = 1 − ε_t k_t ⊙ k_t``, ``o_t = S_tᵀ q_t``: linear attention with one decay per key
    coordinate. Within a block ``o_t = S_0ᵀ (e^{G_t} ⊙ q_t) + Σ_{i≤t} (Σ_j q_{tj} ε_i k_{ij}
    e^{G_{tj} − G_{ij}}) v_i`` with ``G = cumsum log a`` per coordinate: the scores are a
    ``C × C × d_k`` product per block (every exponent ≤ 0)."""
    state = q.new_zeros(q.shape[0] * q.shape[1], q.shape[-1], v.shape[-1])
    parts = [block_major(x, chunk) for x in (q, k, v, eps)]
    return _by_segments(_diagonal_segment, parts, state, q, segment)


def _diagonal_segment(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    eps: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One segment of :func:`diagonal_chunked` (block-major) from the entering state."""
    chunk = q.shape[-2]
    k_eps = k * eps.unsqueeze(-1)
    g = torch.log1p(-k_eps * k).cumsum(-2)  # (n, B·H, C, d_k), log a summed in the block
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    diff = (g.unsqueeze(-2) - g.unsqueeze(-3)).masked_fill(~causal[..., None], -torch.inf)
    scores = (q.unsqueeze(-2) * k_eps.unsqueeze(-3) * diff.exp()).sum(-1)  # (…, C, C)
    last = g[..., -1:, :]
    writes = (k_eps * (last - g).exp()).mT @ v
    entering, state = carry_states(writes, last.squeeze(-2).exp(), state, dim=0)
    return (q * g.exp()) @ entering + scores @ v, state


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
        decay = _decay_matrix(g)
    inverse = ut_inverse(kb, bb, decay)
    state = q.new_zeros(q.shape[0] * q.shape[1], q.shape[-1], v.shape[-1])
    parts = [block_major(q, chunk), kb, block_major(v, chunk), bb, g, inverse, decay]
    return _by_segments(_delta_segment, parts, state, q, segment)


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
    out = torch.baddbmm(_batched(inter), _batched(scores), _batched(torch.stack(pseudo)))
    return out.view_as(inter), state


def lower_inverse(low: torch.Tensor) -> torch.Tensor:
    """``L⁻¹`` of lower triangular ``low (…, s, s)`` with a non-zero diagonal, by halves:
    ``[[A, 0], [B, C]]⁻¹ = [[A⁻¹, 0], [−C⁻¹ B A⁻¹, C⁻¹]]`` (equal halves inverted together), down
    to ``BASE`` rows, inverted by triangular solves: most of the work is batched matrix products,
    which are faster than one triangular solve per ``s × s`` matrix."""
    size = low.shape[-1]
    if size <= BASE:
        eye = torch.eye(size, dtype=low.dtype, device=low.device).expand_as(low)
        return torch.linalg.solve_triangular(low, eye, upper=False)
    half = size // 2
    if size % 2:
        first, second = lower_inverse(low[..., :half, :half]), lower_inverse(low[..., half:, half:])
    else:
        first, second = lower_inverse(torch.stack([low[..., :half, :half], low[..., half:, half:]]))
    out = low.new_zeros(low.shape)
    out[..., :half, :half] = first
    out[..., half:, half:] = second
    out[..., half:, :half] = -(second @ (low[..., half:, :half] @ first))
    return out
