"""The tiling the block-parallel forms share, in one vocabulary: a **block** is ``C``
consecutive tokens (the unit of the intra-block matrix products; the sequence is zero-padded to
whole blocks, and a zero key and value after the end change no earlier output), a **segment**
is the run of blocks processed together (about ``SEGMENT`` tokens, or ``SEGMENT_BYTES`` of
temporaries, so that a segment's temporaries stay in cache); only the ``d_k × d_v`` state is
carried from block to block and from segment to segment. Within a block, with
``G_t = Σ_{j≤t} log α_j`` counted from the block's start, the decays between positions are
``L_{ti} = e^{G_t − G_i}`` (every factor ``e^{(≤ 0)}``: nothing overflows whatever the gates).

Each layer's chunked form is in its own module (:mod:`~attnreg.sequence.linear_attention`,
:mod:`~attnreg.sequence.delta_rule`, :mod:`~attnreg.sequence.longhorn`,
:mod:`~attnreg.sequence.mesa`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch.nn.functional import pad

CHUNK = 64  # tokens per block (linear attention, Longhorn's diagonal form, Mesa)

SEGMENT = 512  # tokens per segment

SEGMENT_BYTES = 64 * 2**20  # temporaries per segment, where a form sizes them in bytes

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


def decay_matrix(g: torch.Tensor) -> torch.Tensor:
    """``L_{ti} = e^{G_t − G_i}`` for ``i ≤ t``, 0 above (``g (…, C)`` -> ``(…, C, C)``)."""
    chunk = g.shape[-1]
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=g.device).tril()
    return (g[..., :, None] - g[..., None, :]).masked_fill_(~causal, -torch.inf).exp()


def channel_decay_matrix(g: torch.Tensor) -> torch.Tensor:
    """``L_{ti,c} = e^{G_{t,c} − G_{i,c}}`` for ``i ≤ t``, 0 above, one decay per key channel
    (``g (…, C, d_k)`` -> ``(…, C, C, d_k)``; every exponent ≤ 0)."""
    chunk = g.shape[-2]
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=g.device).tril()
    diff = g.unsqueeze(-2) - g.unsqueeze(-3)
    return diff.masked_fill_(~causal[..., None], -torch.inf).exp()


def channel_segment(like: torch.Tensor, chunk: int) -> int:
    """The segment (in tokens, whole blocks, at most ``SEGMENT``) of a form whose blocks hold
    ``C × C × d_k`` weights (:func:`channel_decay_matrix`) for inputs like ``like``
    ``(B, H, T, d_k)``: about ``SEGMENT_BYTES`` of them per tensor."""
    b, h, _, d_k = like.shape
    per_block = b * h * chunk * chunk * d_k * like.element_size()
    return chunk * max(1, min(SEGMENT // chunk, SEGMENT_BYTES // per_block))


def block_major(x: torch.Tensor, chunk: int) -> torch.Tensor:
    """``(B, H, T, …) -> (N, B·H, C, …)`` (zero-padded blocks, block axis first): a view of a
    contiguous ``x``, whose slices along the block axis :func:`by_segments` copies to
    contiguous parts."""
    return blocks(x, chunk).flatten(0, 1).transpose(0, 1)


def by_segments(
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


def batched(x: torch.Tensor) -> torch.Tensor:
    """``(n, B·H, r, c) -> (n·B·H, r, c)`` (a view of a contiguous tensor) for ``bmm``."""
    return x.flatten(0, 1)


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


def log_of(alpha: torch.Tensor | None) -> torch.Tensor | None:
    return None if alpha is None else alpha.log()


def decayed(state: torch.Tensor, decay: torch.Tensor | None, t: int) -> torch.Tensor:
    """``α_t ⊙ S`` for a token loop's state ``(B, H, d_k, d_v)``: ``decay`` one factor per token
    ``(B, H, T)`` or one per key channel ``(B, H, T, d_k)`` (``Diag(α_t) S``); ``None``: ``S``."""
    if decay is None:
        return state
    a = decay[:, :, t]
    return (a[..., None, None] if a.ndim == 2 else a[..., None]) * state
