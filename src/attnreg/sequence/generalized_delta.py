"""The generalized (diagonal-plus-low-rank) delta rule behind RWKV-7 (Peng et al. 2025, "RWKV-7
'Goose' with Expressive Dynamic State Evolution", arXiv 2503.14456; fla's
``generalized_delta_rule``, ``dplr_recurrence``).

``S_t = (Diag(α_t) + a_t b_tᵀ) S_{t−1} + k_t v_tᵀ``, ``o_t = S_tᵀ q_t`` (``S_0 = 0``), with
``a_t, b_t ∈ R^{d_k}`` free; ``b_tᵀ S_{t−1}`` reads the state before the decay. DeltaNet is the
case ``a_t = −β_t k_t``, ``b_t = k_t`` with the values ``β_t v_t`` (Gated DeltaNet, whose erase
acts on the decayed state, ``a_t = −α_t β_t k_t``); RWKV-7 the case ``a_t = −κ̂_t ⊙ â_t``,
``b_t = κ̂_t`` (the normalised removal key and the in-context learning rate).

Regression (attnreg's reading, not the paper's words): with ``W = Sᵀ`` the update is
``W_t = W_{t−1} Diag(α_t) + (W_{t−1} b_t) a_tᵀ + v_t k_tᵀ``. For ``a_t = −η_t ⊙ b_t`` the middle
term is the gradient step with per-coordinate rate ``η_t`` on ``½‖W b_t‖²`` (erasing what the
map stores along ``b_t``) and the last writes the pair ``(k_t, v_t)``: with ``k_t = η_t ⊙ b_t``
the two together are one preconditioned LMS step on ``½‖W b_t − v_t‖²`` after a
per-coordinate weight decay — online least squares whose erase and write keys may differ.

Forms: :func:`generalized_delta_recurrent` (the token loop), :func:`generalized_chunked`
(blocks of ``GENERALIZED_CHUNK`` tokens, the reads ``r_t = b_tᵀ S_{t−1}`` solved by one unit
lower-triangular system per block, as the delta rule's pseudo-values are) and the fused CPU
recurrence (:mod:`~attnreg.sequence.fused_generalized`).
"""

from __future__ import annotations

import torch

from attnreg.core.validation import ArrayLike
from attnreg.sequence.checked import Result, checked_result
from attnreg.sequence.fused_generalized import fused_generalized
from attnreg.sequence.inputs import check_qkv, check_scale, choose_mode, decay_of, key_shaped
from attnreg.sequence.tiling import (
    block_major,
    by_segments,
    channel_decay_matrix,
    channel_segment,
    decayed,
    lower_inverse,
)

FORMS = ("fused", "chunk", "recurrent")
"""This layer's forms: ``mode="auto"`` picks the fused kernel on the CPU and the chunked form
elsewhere."""

GENERALIZED_CHUNK = 32  # tokens per block of the chunked form (its C × C × d_k weights)


def generalized_delta_rule(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    a: ArrayLike,
    b: ArrayLike,
    *,
    decay: float | ArrayLike | None = None,
    scale: float = 1.0,
    mode: str = "auto",
) -> torch.Tensor:
    """The generalized delta rule (module docstring): ``q, k (B, H, T, d_k)``,
    ``v (B, H, T, d_v)``, ``a, b (B, H, T, d_k)`` → ``o (B, H, T, d_v)``.

    ``decay`` ``α_t ∈ (0, 1]``: a number, ``(H,)``, ``(B, H, T)`` or one per key channel
    ``(B, H, T, d_k)`` (RWKV-7's ``w``). ``a`` and ``b`` are any finite vectors: the transition
    ``Diag(α_t) + a_t b_tᵀ`` can expand (RWKV-7 keeps its eigenvalues in ``[−1, 1]`` by its
    choice of ``a`` and ``b``). ``mode``: ``"auto"``, ``"fused"``, ``"chunk"`` or
    ``"recurrent"``."""
    qt, kt, vt = check_qkv(q, k, v)
    form = choose_mode(mode, kt, forms=FORMS)
    at = key_shaped("a", a, kt)
    bt = key_shaped("b", b, kt)
    alpha = decay_of(decay, kt, channels=True)

    def layer(qc: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, sc: float) -> Result:
        if form == "fused":
            return fused_generalized((qc, kc, vc, at, bt), alpha, sc)
        if form == "chunk":
            return generalized_chunked(qc * sc, kc, vc, at, bt, channel_logs(alpha, kc)), None
        return generalized_delta_recurrent(qc * sc, kc, vc, at, bt, alpha), None

    return checked_result(layer, qt, kt, vt, check_scale(scale), "generalized_delta_rule")


def generalized_delta_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    decay: torch.Tensor | None,
) -> torch.Tensor:
    """The recurrence as it is defined, one token at a time: ``S ← Diag(α_t) S + a_t (b_tᵀ S)
    + k_t v_tᵀ`` (``b_tᵀ S`` from the state before the token), ``o_t = Sᵀ q_t``."""
    b_, h, t_len, d_k = k.shape
    s = k.new_zeros(b_, h, d_k, v.shape[-1])
    outs = []
    for t in range(t_len):
        read = torch.einsum("bhk,bhkv->bhv", b[:, :, t], s)
        s = decayed(s, decay, t)
        s = s + a[:, :, t, :, None] * read[:, :, None] + k[:, :, t, :, None] * v[:, :, t, None]
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, :, t], s))
    return torch.stack(outs, dim=2)


def channel_logs(alpha: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    """``log α`` with one value per key channel (``(B, H, T, d_k)``, ``like``'s shape): a decay
    per token repeated over the channels, none as zeros."""
    if alpha is None:
        return torch.zeros_like(like)
    logs = alpha.log()
    return logs if logs.ndim == 4 else logs[..., None].expand_as(like)


def generalized_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    log_decay: torch.Tensor,
    chunk: int = GENERALIZED_CHUNK,
) -> torch.Tensor:
    """The generalized delta rule in blocks of ``chunk`` tokens (``log_decay = log α``
    ``(B, H, T, d_k)``). With ``G`` the cumulative log-decays of each block per channel, the
    reads ``r_t = b_tᵀ S_{t−1}`` and the block's entering state ``S_0``:
    ``S_t = Diag(e^{G_t}) S_0 + Σ_{i≤t} Diag(e^{G_t − G_i}) (a_i r_i + k_i v_iᵀ)``, so
    ``(I − A_{ba}) R = (B ⊙ e^{G_{t−1}}) S_0 + A_{bk} V`` with ``A_{xy}[t, i] = Σ_c x_{t,c}
    y_{i,c} e^{G_{t−1,c} − G_{i,c}}`` (``i < t``), one unit lower-triangular system per block
    (:func:`~attnreg.sequence.tiling.lower_inverse`); then ``o_t = S_0ᵀ (e^{G_t} ⊙ q_t) +
    Σ_{i≤t} (P_{qa}[t, i] r_i + P_{qk}[t, i] v_i)``, ``P_{xy}[t, i] = Σ_c x_{t,c} y_{i,c}
    e^{G_{t,c} − G_{i,c}}`` (``i ≤ t``), and the block leaves
    ``Diag(e^{G_C}) S_0 + Σ_i (e^{G_C − G_i} ⊙ a_i) r_i + (e^{G_C − G_i} ⊙ k_i) v_iᵀ``. The
    weights are ``C × C × d_k`` tensors (every exponent ≤ 0), segments sized by
    :func:`~attnreg.sequence.tiling.channel_segment`."""
    state = q.new_zeros(q.shape[0] * q.shape[1], q.shape[-1], v.shape[-1])
    parts = [block_major(x, chunk) for x in (q, k, v, a, b, log_decay)]
    return by_segments(_generalized_segment, parts, state, q, channel_segment(k, chunk))


def _generalized_segment(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    log_decay: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One segment of :func:`generalized_chunked` (block-major ``(n, B·H, C, ·)`` parts) from
    the entering state; returns its outputs and the state leaving it."""
    g = log_decay.cumsum(-2)
    before = g - log_decay  # G_{t−1}: the reads see the state before token t's decay
    written = channel_decay_matrix(g)  # e^{G_t − G_i}, i ≤ t
    chunk = g.shape[-2]
    earlier = torch.ones(chunk, chunk, dtype=torch.bool, device=g.device).tril(-1)
    read = (before.unsqueeze(-2) - g.unsqueeze(-3)).masked_fill_(~earlier[..., None], -torch.inf)
    read = read.exp()  # e^{G_{t−1} − G_i}, i < t

    def pairs(x: torch.Tensor, y: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        return torch.einsum("...tc,...ic,...tic->...ti", x, y, weights)

    eye = torch.eye(chunk, dtype=g.dtype, device=g.device)
    inverse = lower_inverse(eye - pairs(b, a, read))
    w = inverse @ (b * before.exp())
    r_local = inverse @ (pairs(b, k, read) @ v)
    to_end = (g[..., -1:, :] - g).exp()
    a_t, local_write = (a * to_end).mT, (k * to_end).mT @ v
    block_decay = g[..., -1:, :].exp().mT  # (n, B·H, d_k, 1)
    entering, reads = [], []
    for j in range(q.shape[0]):
        entering.append(state)
        r = torch.baddbmm(r_local[j], w[j], state)
        reads.append(r)
        state = torch.baddbmm(local_write[j] + state * block_decay[j], a_t[j], r)
    out = (q * g.exp()) @ torch.stack(entering) + pairs(q, a, written) @ torch.stack(reads)
    return out + pairs(q, k, written) @ v, state
