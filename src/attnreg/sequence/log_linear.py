"""Log-linear attention: linear attention whose past is split into Fenwick-tree segments, each
with its own weight (Guo et al. 2025, "Log-Linear Attention", arXiv 2506.04761; fla's
``log_linear_attn``), in its two forms side by side: :func:`log_linear_recurrent` (the token
loop of the paper's recurrent form: ``O(log t)`` segment states) and :func:`log_linear_chunked`
(blocks of ``C = 2^c`` tokens: inside a block the ``C × C`` weighted products, across blocks
the states of the blocks' own Fenwick segments).

The prefix ``[0, t)`` splits by the binary digits of ``t``: for each set bit ``b`` the segment of
the ``2^b`` positions whose digits above ``b`` agree with ``t``'s; the token ``i`` lies at level
``ℓ(t, i) = b + 1`` (``b`` the highest bit where ``i`` and ``t`` differ) and ``t`` itself at
level 0. ``o_t = Σ_{i≤t} λ_{t, ℓ(t,i)} (Π_{i<j≤t} α_j) (q_tᵀ k_i) v_i``. The segments move
like a binary counter: after token ``t`` its pair joins, with every segment of the levels
where ``t`` has a one bit below its lowest zero bit, the segment of that zero bit's level.

Regression: ``o_t = W_t q_t`` with ``W_t`` **one gradient step of size 1** from ``W = 0`` on the
weighted least-squares loss ``½ Σ_{i≤t} γ_{t,i} ‖W k_i − v_i‖²``, ``γ_{t,i} = λ_{t, ℓ(t,i)}
Π_{i<j≤t} α_j``: :func:`attnreg.sequence.linear_attention`'s estimator with weights that the
query sets per segment, ``O(log t)`` of them, coarser the further back. ``λ ≡ 1`` is (decayed)
linear attention.
"""

from __future__ import annotations

import math

import torch

from attnreg.core.validation import ArrayLike, as_tensor
from attnreg.sequence.checked import Result, checked_result, scaled
from attnreg.sequence.inputs import check_qkv, check_scale, choose_mode, decay_of
from attnreg.sequence.tiling import CHUNK, blocks, decay_matrix, decayed, unblock

FORMS = ("chunk", "recurrent")
"""Log-linear attention's forms (``mode`` values besides ``"auto"``, which picks ``chunk``)."""


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
    mode: str = "auto",
) -> torch.Tensor:
    """Log-linear attention (module docstring): ``q, k (B, H, T, d_k)``, ``v (B, H, T, d_v)``,
    ``level_weights`` ``λ (B, H, T, L)`` with ``L ≥`` :func:`levels` ``(T)`` (the weight query
    ``t`` gives each level; extra levels are unused) → ``o (B, H, T, d_v)``. ``decay``
    ``α_t ∈ (0, 1]``: a number, ``(H,)`` or ``(B, H, T)``. ``mode``: ``"auto"`` or ``"chunk"``
    (:func:`log_linear_chunked`, never a ``T × T`` matrix beyond one block) or
    ``"recurrent"`` (:func:`log_linear_recurrent`)."""
    qt, kt, vt = check_qkv(q, k, v)
    form = choose_mode(mode, kt, forms=FORMS)
    lam = _level_weights(level_weights, kt)
    alpha = decay_of(decay, kt)

    def layer(qc: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, sc: float) -> Result:
        if form == "chunk":
            log_decay = None if alpha is None else alpha.log()
            return log_linear_chunked(scaled(qc, sc), kc, vc, lam, log_decay), None
        return log_linear_recurrent(scaled(qc, sc), kc, vc, lam, alpha), None

    return checked_result(layer, qt, kt, vt, check_scale(scale), "log_linear_attention")


def log_linear_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lam: torch.Tensor,
    decay: torch.Tensor | None,
) -> torch.Tensor:
    """The token loop, as the recurrent form is defined: one state ``S^{(ℓ)} = Σ γ k_i v_iᵀ``
    per level ``ℓ ≥ 1`` of the current token's segments, each decayed by ``α_t``, then
    ``o_t = λ_{t,0} (q_tᵀ k_t) v_t + Σ_ℓ λ_{t,ℓ} S^{(ℓ)ᵀ} q_t``; the token's pair then carries
    into the segments like a binary counter (module docstring)."""
    states: dict[int, torch.Tensor] = {}
    outs = []
    for t in range(k.shape[2]):
        states = {level: decayed(s, decay, t) for level, s in states.items()}
        qt, kt, vt = q[:, :, t], k[:, :, t], v[:, :, t]
        out = (lam[:, :, t, 0] * (qt * kt).sum(-1))[..., None] * vt
        for level, s in states.items():
            out = out + lam[:, :, t, level, None] * torch.einsum("bhk,bhkv->bhv", qt, s)
        outs.append(out)
        carry_in(states, t, kt[..., None] * vt[..., None, :])
    return torch.stack(outs, dim=2)


def log_linear_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lam: torch.Tensor,
    log_decay: torch.Tensor | None,
    chunk: int = CHUNK,
) -> torch.Tensor:
    """Log-linear attention in blocks of ``C`` tokens (``chunk``, a power of two, at most the
    power of two that covers ``T``). Blocks start at multiples of ``C``, so a pair ``(t, i)``
    in one block has the level of ``(t mod C, i mod C)`` (at most ``c = log₂ C``: the block's
    ``C × C`` weights ``λ_{t,ℓ} L_{ti}``, ``L_{ti} = e^{G_t − G_i}``), and a pair across
    blocks ``n > m`` the level ``c + ℓ(n, m)``: the earlier blocks are the Fenwick segments of
    the block index ``n``, one state each (the blocks' writes ``Σ_i e^{G_C − G_i} k_i v_iᵀ``
    carried like the token loop's pairs, every state decayed by each block's ``e^{G_C}``),
    read as ``Σ_ℓ λ_{t,c+ℓ} S^{(ℓ)ᵀ} (e^{G_t} q_t)``."""
    t_len = k.shape[2]
    chunk = min(chunk, 1 << max(t_len - 1, 0).bit_length())
    if chunk & (chunk - 1):
        raise ValueError(f"chunk: must be a power of two, got {chunk}")
    c = chunk.bit_length() - 1
    qb, kb, vb, lb = (blocks(x, chunk) for x in (q, k, v, lam))  # (B, H, N, C, ·)
    gb = None if log_decay is None else blocks(log_decay, chunk).cumsum(-1)
    index = _fenwick_levels(chunk, k.device).expand(*lb.shape[:2], chunk, chunk)
    states: dict[int, torch.Tensor] = {}
    outs = []
    for n in range(qb.shape[2]):
        qn, kn, vn, ln = qb[:, :, n], kb[:, :, n], vb[:, :, n], lb[:, :, n]
        weights = ln.gather(-1, index).tril()
        q_read, k_write, block_decay = qn, kn, None
        if gb is not None:
            g = gb[:, :, n]
            weights = weights * decay_matrix(g)
            q_read = qn * g.exp()[..., None]
            k_write = kn * (g[..., -1:] - g).exp()[..., None]
            block_decay = g[..., -1].exp()[..., None, None]
        out = (weights * (qn @ kn.mT)) @ vn
        for level, s in states.items():
            out = out + ln[..., c + level, None] * (q_read @ s)
        outs.append(out)
        if block_decay is not None:
            states = {level: s * block_decay for level, s in states.items()}
        carry_in(states, n, k_write.mT @ vn)
    return unblock(torch.stack(outs, dim=2), t_len)


def carry_in(states: dict[int, torch.Tensor], position: int, write: torch.Tensor) -> None:
    """The Fenwick segments' binary counter, in place: after ``position`` (a token, or a
    block) its ``write`` joins the states of the levels where ``position`` has one bits below
    its lowest zero bit, and the sum becomes the state of that zero bit's level (level ``b + 1``
    for bit ``b``); the levels above keep theirs."""
    level = 1
    while position >> (level - 1) & 1:
        write = write + states.pop(level)
        level += 1
    states[level] = write


def _fenwick_levels(t_len: int, device: torch.device | None = None) -> torch.Tensor:
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
