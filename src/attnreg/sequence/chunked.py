"""Block-parallel (chunked) forms of the recurrent layers: a few matrix products per block of
``C`` tokens instead of one Python step per token, and no ``T × T`` matrix beyond one block.

The sequence is cut into ``N = ⌈T/C⌉`` blocks (the last one zero-padded: a zero key and value
after the end change no earlier output). Within a block, with ``G_t = Σ_{j≤t} log α_j`` counted
from the block's start and the state ``S_0`` entering it,

``S_t = e^{G_t} S_0 + Σ_{i≤t} e^{G_t − G_i} k_i u_iᵀ``

where ``u_i = v_i`` for linear attention. Every decay factor is ``e^{(≤ 0)}``, so nothing
overflows whatever the gates. The intra-block terms of all blocks are computed at once; only the
``d_k × d_v`` state is carried from block to block, by a loop over the ``N`` blocks.

* **linear attention** (Katharopoulos et al. 2020; RetNet, Sun et al. 2023; GLA, Yang et al.
  2024; the chunkwise form of Yang et al. 2024, "Gated Linear Attention Transformers"):
  ``O = diag(e^G) Q S_0 + (Q Kᵀ ⊙ L) V`` with ``L_{ti} = e^{G_t − G_i}`` for ``i ≤ t``.
* **delta rule** (the WY / UT-transform form of Yang et al. 2024, "Parallelizing Linear
  Transformers with the Delta Rule over Sequence Length"): the pseudo-values
  ``u_t = β_t (v_t − α_t S_{t−1}ᵀ k_t)`` solve the unit lower-triangular system
  ``(I + A) U = diag(β) V − diag(β e^G) K S_0``, ``A_{ti} = β_t L_{ti} k_tᵀ k_i`` (``i < t``),
  so ``U = Ũ − W S_0`` with ``Ũ = (I + A)⁻¹ diag(β) V`` and ``W = (I + A)⁻¹ diag(β e^G) K`` from one
  triangular solve per block.
* **Mesa** (von Oswald et al. 2025, MesaNet): ``H^{kk}_t = e^{G_t} H^{kk}_0 + Σ_{i≤t} L_{ti} β_i
  k_i k_iᵀ`` is formed for every position of a group of blocks and ``(H^{kk}_t + Λ) x_t = q_t`` is
  solved exactly (batched Cholesky; LU where Cholesky breaks down numerically); then
  ``o_t = e^{G_t} H^{kv}_0ᵀ x_t + Σ_{i≤t} L_{ti} β_i (k_iᵀ x_t) v_i``.
"""

from __future__ import annotations

import torch
from torch.nn.functional import pad

CHUNK = 64
MESA_GROUP_BYTES = 64 * 2**20


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


def linear_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_decay: torch.Tensor | None,
    chunk: int = CHUNK,
) -> torch.Tensor:
    """``S_t = α_t S_{t−1} + k_t v_tᵀ``, ``o_t = S_tᵀ q_t`` (``log_decay = log α``, ``(B, H, T)``
    or ``None``) in blocks of ``chunk`` tokens."""
    t_len = q.shape[2]
    qc, kc, vc = (blocks(x, chunk) for x in (q, k, v))
    g, decay = _log_decays(log_decay, q, chunk)
    intra = ((qc @ kc.mT) * decay) @ vc
    last = g[..., -1:]
    writes = (kc * (last - g).exp().unsqueeze(-1)).mT @ vc  # (B, H, N, d_k, d_v)
    entering = _carry(writes, last.squeeze(-1).exp())
    inter = (qc * g.exp().unsqueeze(-1)) @ entering
    return unblock(intra + inter, t_len)


def _carry(writes: torch.Tensor, block_decay: torch.Tensor) -> torch.Tensor:
    """The state entering each block: ``S^{(0)} = 0``, ``S^{(n+1)} = a_n S^{(n)} + W_n``."""
    state = torch.zeros_like(writes[:, :, 0])
    entering = []
    for n in range(writes.shape[2]):
        entering.append(state)
        state = block_decay[:, :, n, None, None] * state + writes[:, :, n]
    return torch.stack(entering, dim=2)


def delta_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    log_decay: torch.Tensor | None,
    chunk: int = CHUNK,
) -> torch.Tensor:
    """The (gated) delta rule ``S_t = α_t S_{t−1} + k_t (β_t (v_t − α_t S_{t−1}ᵀ k_t))ᵀ``,
    ``o_t = S_tᵀ q_t``, by the WY / UT transform in blocks of ``chunk`` tokens."""
    t_len, d_v = q.shape[2], v.shape[-1]
    qc, kc, vc = (blocks(x, chunk) for x in (q, k, v))
    bc = blocks(beta, chunk)
    g, decay = _log_decays(log_decay, q, chunk)
    strict = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril(-1)
    eye = torch.eye(chunk, dtype=q.dtype, device=q.device)
    system = eye + (bc.unsqueeze(-1) * (kc @ kc.mT) * decay).masked_fill(~strict, 0)
    rhs = torch.cat([bc.unsqueeze(-1) * vc, (bc * g.exp()).unsqueeze(-1) * kc], dim=-1)
    solved = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)
    u_local, w = solved[..., :d_v], solved[..., d_v:]
    scores = (qc @ kc.mT) * decay
    q_decayed = qc * g.exp().unsqueeze(-1)
    last = g[..., -1:]
    k_decayed = kc * (last - g).exp().unsqueeze(-1)
    block_decay = last.squeeze(-1).exp()
    state = q.new_zeros(*q.shape[:2], q.shape[-1], d_v)
    outs = []
    for n in range(qc.shape[2]):
        u = u_local[:, :, n] - w[:, :, n] @ state
        outs.append(q_decayed[:, :, n] @ state + scores[:, :, n] @ u)
        state = block_decay[:, :, n, None, None] * state + k_decayed[:, :, n].mT @ u
    return unblock(torch.stack(outs, dim=2), t_len)


def mesa_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    log_decay: torch.Tensor | None,
    lam: torch.Tensor,
    chunk: int = CHUNK,
) -> torch.Tensor:
    """``o_t = H^{kv}_tᵀ (H^{kk}_t + diag(λ))⁻¹ q_t`` with the decayed, β-weighted second moments
    ``H^{kk}_t``, ``H^{kv}_t`` (``lam (H, d_k)``), an exact solve per position, in blocks of
    ``chunk`` tokens and groups of blocks of about ``MESA_GROUP_BYTES``."""
    t_len, d_k = q.shape[2], q.shape[-1]
    qc, kc, vc = (blocks(x, chunk) for x in (q, k, v))
    bc = blocks(beta, chunk)
    g, decay = _log_decays(log_decay, q, chunk)
    last = g[..., -1:]
    k_weighted = kc * (bc * (last - g).exp()).unsqueeze(-1)
    block_decay = last.squeeze(-1).exp()
    kk0 = _carry(k_weighted.mT @ kc, block_decay)  # (B, H, N, d_k, d_k) entering each block
    kv0 = _carry(k_weighted.mT @ vc, block_decay)
    mix = decay * bc.unsqueeze(-2)  # L_{ti} β_i
    reg = torch.diag_embed(lam)[:, None, None]  # (H, 1, 1, d_k, d_k)
    b, h, n_blocks = qc.shape[:3]
    per_block = b * h * chunk * d_k * d_k * q.element_size() * 3
    step = max(1, MESA_GROUP_BYTES // per_block)
    outs = []
    for start in range(0, n_blocks, step):
        part = slice(start, start + step)
        kp, gp = kc[:, :, part], g[:, :, part]
        outer = (kp.unsqueeze(-1) * kp.unsqueeze(-2)).flatten(-2)  # (B, H, n, C, d_k²)
        intra = (mix[:, :, part] @ outer).unflatten(-1, (d_k, d_k))
        kk = gp.exp()[..., None, None] * kk0[:, :, part, None] + intra
        x = _spd_solve(kk + reg, qc[:, :, part].unsqueeze(-1)).squeeze(-1)
        inter = (x * gp.exp().unsqueeze(-1)) @ kv0[:, :, part]
        outs.append(inter + ((x @ kp.mT) * mix[:, :, part]) @ vc[:, :, part])
    return unblock(torch.cat(outs, dim=2), t_len)


def _spd_solve(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a⁻¹ b`` for symmetric positive definite ``a``: Cholesky, and LU with partial pivoting
    for any matrix whose Cholesky factorisation breaks down in floating point."""
    factor, info = torch.linalg.cholesky_ex(a)
    x = torch.cholesky_solve(b, factor)
    failed = info != 0
    if bool(failed.any()):
        x = torch.where(failed[..., None, None], torch.linalg.solve(a, b), x)
    return x
