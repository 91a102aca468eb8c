"""Block-parallel (chunked) forms of the recurrent layers: a few matrix products per block of
``C`` tokens instead of one Python step per token, and no ``T × T`` matrix beyond one block.

The sequence is cut into ``N = ⌈T/C⌉`` blocks (the last one zero-padded: a zero key and value
after the end change no earlier output). Within a block, with ``G_t = Σ_{j≤t} log α_j`` counted
from the block's start and the state ``S_0`` entering it,

``S_t = e^{G_t} S_0 + Σ_{i≤t} e^{G_t − G_i} k_i u_iᵀ``

where ``u_i = v_i`` for linear attention. Every decay factor is ``e^{(≤ 0)}``, so nothing
overflows whatever the gates. The intra-block terms of all blocks of a segment (``SEGMENT``
tokens, so that a segment's temporaries stay in cache) are computed at once; only the
``d_k × d_v`` state is carried from block to block and from segment to segment.

* **linear attention** (Katharopoulos et al. 2020; RetNet, Sun et al. 2023; GLA, Yang et al.
  2024; the chunkwise form of Yang et al. 2024, "Gated Linear Attention Transformers"):
  ``O = diag(e^G) Q S_0 + (Q Kᵀ ⊙ L) V`` with ``L_{ti} = e^{G_t − G_i}`` for ``i ≤ t``.
* **delta rule** (the WY / UT-transform form of Yang et al. 2024, "Parallelizing Linear
  Transformers with the Delta Rule over Sequence Length"): the pseudo-values
  ``u_t = β_t (v_t − α_t S_{t−1}ᵀ k_t)`` solve the unit lower-triangular system
  ``(I + A) U = diag(β) V − diag(β e^G) K S_0``, ``A_{ti} = β_t L_{ti} k_tᵀ k_i`` (``i < t``),
  so ``U = Ũ − W S_0`` with ``Ũ = (I + A)⁻¹ diag(β) V`` and ``W = (I + A)⁻¹ diag(β e^G) K`` from one
  triangular solve per block.
* **Longhorn's diagonal approximation**: linear attention with one decay per key coordinate,
  ``a_t = 1 − ε_t k_t ⊙ k_t``; the intra-block scores carry ``e^{G_{tj} − G_{ij}}`` per coordinate.

Mesa's chunked form is in :mod:`attnreg.sequence.mesa_blocked`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch.nn.functional import pad

CHUNK = 64
SEGMENT = 512


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


def _log_decays(
    log_decay: torch.Tensor | None, like: torch.Tensor, chunk: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``G`` (``(B, H, N, C)``, cumulative log-decay from each block's start) and the decay
    matrix ``L`` (``(B, H, N, C, C)``: ``e^{G_t − G_i}`` for ``i ≤ t``, 0 above)."""
    b, h, t_len = like.shape[:3]
    if log_decay is None:
        log_decay = like.new_zeros(b, h, t_len)
    g = blocks(log_decay, chunk).cumsum(-1)
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=like.device).tril()
    diff = (g[..., :, None] - g[..., None, :]).masked_fill(~causal, -torch.inf)
    return g, diff.exp()


def _segments(
    step: Callable[..., tuple[torch.Tensor, torch.Tensor]],
    tensors: Sequence[torch.Tensor | None],
    state: torch.Tensor,
    segment: int,
) -> torch.Tensor:
    """Run ``step(*slices, state) -> (out, state)`` over segments of ``segment`` tokens (the
    token axis is 2; the first tensor is ``q``) and concatenate the outputs."""
    length = tensors[0].shape[2] if tensors[0] is not None else 0
    outs = []
    for start in range(0, length, segment):
        part = [None if t is None else t[:, :, start : start + segment] for t in tensors]
        out, state = step(*part, state)
        outs.append(out)
    return torch.cat(outs, dim=2)


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
    state = q.new_zeros(*q.shape[:2], q.shape[-1], v.shape[-1])

    def step(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lg: torch.Tensor | None, s: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return _linear_segment(q, k, v, lg, s, chunk)

    return _segments(step, [q, k, v, log_decay], state, segment)


def _linear_segment(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_decay: torch.Tensor | None,
    state: torch.Tensor,
    chunk: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One segment from the entering state; returns its outputs and the state leaving it."""
    t_len = q.shape[2]
    qc, kc, vc = (blocks(x, chunk) for x in (q, k, v))
    if log_decay is None:
        totals = (kc.mT @ vc).cumsum(2) + state.unsqueeze(2)  # state after each block
        entering = torch.cat([state.unsqueeze(2), totals[:, :, :-1]], 2)
        out = qc @ entering + (qc @ kc.mT).tril() @ vc
        return unblock(out, t_len), totals[:, :, -1]
    g, decay = _log_decays(log_decay, q, chunk)
    last = g[..., -1:]
    writes = (kc * (last - g).exp().unsqueeze(-1)).mT @ vc
    entering, state = _carry(writes, last.squeeze(-1).exp(), state)
    inter = (qc * g.exp().unsqueeze(-1)) @ entering
    return unblock(inter + ((qc @ kc.mT) * decay) @ vc, t_len), state


def _carry(
    writes: torch.Tensor, block_decay: torch.Tensor, state: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The state entering each block, ``S^{(n+1)} = a_n ⊙ S^{(n)} + W_n`` from ``S^{(0)} = state``
    (stacked, ``(B, H, N, ·, ·)``), and the state after the last block. ``block_decay``: one
    factor per block ``(B, H, N)``, or one per block and state row ``(B, H, N, d_k)``."""
    factors = block_decay[..., None, None] if block_decay.ndim == 3 else block_decay[..., None]
    entering = []
    for n in range(writes.shape[2]):
        entering.append(state)
        state = torch.addcmul(writes[:, :, n], factors[:, :, n], state)
    return torch.stack(entering, dim=2), state


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
    state = q.new_zeros(*q.shape[:2], q.shape[-1], v.shape[-1])

    def step(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, e: torch.Tensor, s: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return _diagonal_segment(q, k, v, e, s, chunk)

    return _segments(step, [q, k, v, eps], state, segment)


def _diagonal_segment(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    eps: torch.Tensor,
    state: torch.Tensor,
    chunk: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One segment of :func:`diagonal_chunked` from the entering state."""
    t_len = q.shape[2]
    qc, kc, vc = (blocks(x, chunk) for x in (q, k, v))
    k_eps = kc * blocks(eps, chunk).unsqueeze(-1)
    g = torch.log1p(-k_eps * kc).cumsum(-2)  # (B, H, N, C, d_k), log a summed in the block
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    diff = (g.unsqueeze(-2) - g.unsqueeze(-3)).masked_fill(~causal[..., None], -torch.inf)
    scores = (qc.unsqueeze(-2) * k_eps.unsqueeze(-3) * diff.exp()).sum(-1)  # (…, C, C)
    last = g[..., -1:, :]
    writes = (k_eps * (last - g).exp()).mT @ vc
    entering, state = _carry(writes, last.squeeze(-2).exp(), state)
    out = (qc * g.exp()) @ entering + scores @ vc
    return unblock(out, t_len), state


def delta_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    log_decay: torch.Tensor | None,
    chunk: int = CHUNK,
    segment: int = SEGMENT,
) -> torch.Tensor:
    """The (gated) delta rule ``S_t = α_t S_{t−1} + k_t (β_t (v_t − α_t S_{t−1}ᵀ k_t))ᵀ``,
    ``o_t = S_tᵀ q_t``, by the WY / UT transform in blocks of ``chunk`` tokens, ``segment``
    tokens at a time."""
    state = q.new_zeros(*q.shape[:2], q.shape[-1], v.shape[-1])

    def step(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        b: torch.Tensor,
        lg: torch.Tensor | None,
        s: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return _delta_segment(q, k, v, b, lg, s, chunk)

    return _segments(step, [q, k, v, beta, log_decay], state, segment)


def _delta_segment(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    log_decay: torch.Tensor | None,
    state: torch.Tensor,
    chunk: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One segment from the entering state; returns its outputs and the state leaving it. The
    loop over blocks carries the state only (two products per block); the outputs of all
    blocks are formed after it."""
    t_len, d_v = q.shape[2], v.shape[-1]
    qc, kc, vc = (blocks(x, chunk) for x in (q, k, v))
    bc = blocks(beta, chunk).unsqueeze(-1)
    lower = bc * (kc @ kc.mT)
    scores = qc @ kc.mT
    if log_decay is None:
        k_scaled, q_decayed, k_decayed, block_decay = bc * kc, qc, kc, None
        scores = scores.tril()
    else:
        g, decay = _log_decays(log_decay, q, chunk)
        lower, scores = lower * decay, scores * decay
        k_scaled, q_decayed = bc * g.exp().unsqueeze(-1) * kc, qc * g.exp().unsqueeze(-1)
        last = g[..., -1:]
        k_decayed, block_decay = kc * (last - g).exp().unsqueeze(-1), last.squeeze(-1).exp()
    # (I + A) with A strictly lower: the unit diagonal is implied (unitriangular), not read
    solved = torch.linalg.solve_triangular(
        lower.tril(-1), torch.cat([bc * vc, k_scaled], dim=-1), upper=False, unitriangular=True
    )
    u_local, w = solved[..., :d_v], solved[..., d_v:]
    entering, pseudo = [], []
    for n in range(qc.shape[2]):
        u = u_local[:, :, n] - w[:, :, n] @ state
        entering.append(state)
        pseudo.append(u)
        state = k_decayed[:, :, n].mT @ u + (
            state if block_decay is None else block_decay[:, :, n, None, None] * state
        )
    out = q_decayed @ torch.stack(entering, 2) + scores @ torch.stack(pseudo, 2)
    return unblock(out, t_len), state
