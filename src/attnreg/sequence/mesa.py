"""The Mesa layer / MesaNet — decayed ridge regression solved exactly at every position —
in its forms side by side: :func:`mesa` (the public layer), :func:`mesa_recurrent` (the token
loop, one LU solve per token) and its block-parallel form, below.

Mesa's chunked form: ``o_t = H^{kv}_tᵀ (H^{kk}_t + Λ)⁻¹ q_t`` with
``H^{kk}_t = α_t H^{kk}_{t−1} + β_t k_t k_tᵀ`` and ``H^{kv}_t = α_t H^{kv}_{t−1} + β_t k_t v_tᵀ``
(von Oswald et al. 2023, "Uncovering mesa-optimization algorithms in Transformers"; von Oswald
et al. 2025, "MesaNet"), solved exactly at every position, in blocks of ``C`` tokens.

**Without decay: Woodbury on leading principal submatrices.** In a block entered with the
states ``S = H^{kk}_0``, ``P = H^{kv}_0``, with ``A = S + Λ``, the scaled keys and values
``Z = Γ^{1/2} K``, ``Ṽ = Γ^{1/2} V`` (``Γ = diag(β)``, rows ``i = 1 … C``) and ``Z_t`` the first t
rows of ``Z``, position t solves ``(A + Z_tᵀ Z_t) x_t = q_t``. By Woodbury,
``x_t = A⁻¹ q_t − A⁻¹ Z_tᵀ y_t`` with ``Ĉ_t y_t = Z_t A⁻¹ q_t``, where ``Ĉ_t`` is the leading
``t × t`` block of the one symmetric capacitance ``Ĉ = I + Z A⁻¹ Zᵀ`` (eigenvalues ≥ 1, so no
``β_t → 0`` breaks it). The Cholesky factor of a leading block is the leading block of
``L = chol(Ĉ)``, and so is its inverse: with ``G = Z A⁻¹ Qᵀ`` (``G_{it} = z_iᵀ A⁻¹ q_t``), column
t of ``Y = L⁻ᵀ triu(L⁻¹ G)`` is ``y_t`` padded with zeros (``(L⁻¹G)_{jt}`` for ``j ≤ t`` uses
rows ``≤ t`` of ``G`` only; ``triu`` drops the rows ``j > t``; ``L⁻ᵀ`` is upper triangular). Then
``z_iᵀ x_t = Y_{it}`` for ``i ≤ t`` (since ``(Ĉ Y)_{it} = G_{it}`` there), hence

``O = Q A⁻¹ P + Yᵀ (Ṽ − Z A⁻¹ P)``

— one ``d × d`` Cholesky of ``A`` and one ``C × C`` Cholesky of ``Ĉ`` per block, the rest block
matrix products (the triangular factors are inverted explicitly, by halves, so that the solves are
products too); no ``d × d`` matrix per token. The entering states are prefix sums of the blocks'
``Zᵀ Z`` and ``Zᵀ Ṽ``, so all blocks are computed at once (in segments of about ``SEGMENT_BYTES``).

**Accuracy.** Woodbury solves ``H^{kk}_t + Λ`` through the base ``A``: its rounding error exceeds
a direct solve's by up to the growth ``μ = λ_max(A⁻¹ (A + ZᵀZ)) = λ_max(Ĉ)`` of the system over
the block (large when the block's keys fill directions that ``S + Λ`` barely covers, e.g. a small
λ in the first block). Its bounds ``tr Ĉ − C + 1`` and ``‖Ĉ‖_∞`` (the largest absolute row sum)
cost nothing more; a block where the smaller exceeds ``MAX_GROWTH`` (or a Cholesky fails in
rounding) is solved per position instead.
Once the past keys dominate the block's, ``μ → 1`` and every block is blocked.

**With a per-token decay: one solve per position.** With ``a_t = Π α`` over the block,
``H^{kk}_t + Λ = a_t (S + Λ / a_t + Σ_{i≤t} (β_i / a_i) k_i k_iᵀ)``: the ridge is not decayed,
so the base ``S + Λ / a_t`` changes at every token and the capacitances of different positions
are different matrices, not nested leading blocks of one. No factorisation is shared between
positions (even a scalar λ, which diagonalises the base once, leaves a ``min(t, d)``-sized
factorisation per token), so each position's ``H^{kk}_t + Λ`` is formed (the recursion stepped
through the block's positions, all blocks of a segment at once) and solved by LU with partial
pivoting (batched; as fast as PyTorch's batched Cholesky solve at these sizes), a segment of
blocks of about ``SEGMENT_BYTES`` at a time.
"""

from __future__ import annotations

import torch

from attnreg.core.validation import ArrayLike
from attnreg.sequence.checked import Result, checked_result, scaled
from attnreg.sequence.inputs import (
    check_lam,
    check_qkv,
    check_scale,
    choose_mode,
    decay_of,
    per_token,
)
from attnreg.sequence.tiling import (
    CHUNK,
    SEGMENT_BYTES,
    blocks,
    carry_states,
    log_of,
    lower_inverse,
    unblock,
)

MAX_GROWTH = 64.0  # above it, a block's Woodbury error may exceed a direct solve's too much


def mesa(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    beta: float | ArrayLike,
    *,
    decay: float | ArrayLike | None = None,
    lam: float | ArrayLike,
    scale: float = 1.0,
    mode: str = "auto",
) -> torch.Tensor:
    """The Mesa layer / MesaNet: ``H^{kk}_t = α_t H^{kk}_{t−1} + β_t k_t k_tᵀ``,
    ``H^{kv}_t = α_t H^{kv}_{t−1} + β_t k_t v_tᵀ``, ``o_t = H^{kv}_tᵀ (H^{kk}_t + Λ)⁻¹ q_t``.

    Regression: ``W_t = argmin_W Σ_{i≤t} γ_{t,i} ‖W k_i − v_i‖² + Σ_j λ_j ‖W e_j‖²`` with
    ``γ_{t,i} = β_i Π_{i<j≤t} α_j``: **decayed weighted ridge regression solved exactly** at every
    position over linear maps (von Oswald et al. 2023, "Uncovering mesa-optimization
    algorithms in Transformers"; von Oswald et al. 2025, "MesaNet"). ``Λ = diag(λ)``, ``lam`` a
    number or ``(H, d_k)`` (MesaNet's convention), every ``λ > 0``. Both modes solve exactly
    (no conjugate-gradient truncation). Without decay (``decay=None`` or all 1) the chunked form
    is blocked: Woodbury on the leading principal submatrices of one ``C × C`` capacitance per
    block, no ``d_k × d_k`` matrix per token; with a decay (the ridge is not decayed, so no
    factorisation is shared between positions) it solves ``(H^{kk}_t + Λ) x = q_t`` per position
    by LU (:mod:`attnreg.sequence.mesa`). With ``β = 1``, no decay and one λ it is
    :func:`attnreg.estimators.causal_ridge`.
    """
    qt, kt, vt = check_qkv(q, k, v)
    b = per_token("beta", beta, kt, low=0.0)
    alpha = decay_of(decay, kt)
    lam_t = check_lam(lam, kt)
    mode = choose_mode(mode, kt, forms=("chunk", "recurrent"))

    def layer(qc: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, sc: float) -> Result:
        qs = scaled(qc, sc)
        if mode == "chunk":
            return mesa_chunked(qs, kc, vc, b, log_of(alpha), lam_t), None
        return mesa_recurrent(qs, kc, vc, b, alpha, lam_t)[0], None

    return checked_result(layer, qt, kt, vt, check_scale(scale), "mesa")


def mesa_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    decay: torch.Tensor | None,
    lam: torch.Tensor,
    *,
    states: bool = False,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
    """``H^{kk}_t = α_t H^{kk}_{t−1} + β_t k_t k_tᵀ``,
    ``H^{kv}_t = α_t H^{kv}_{t−1} + β_t k_t v_tᵀ``, ``o_t = H^{kv}_tᵀ (H^{kk}_t + Λ)⁻¹ q_t`` with
    ``Λ = diag(lam)`` (``lam (H, d_k)``); one LU solve per token.
    ``states=True`` also returns ``(H^{kk}, H^{kv})``, each stacked over t."""
    b, h, t_len, d_k = k.shape
    reg = torch.diag_embed(lam)  # (H, d_k, d_k)
    kk = k.new_zeros(b, h, d_k, d_k)
    kv = k.new_zeros(b, h, d_k, v.shape[-1])
    outs, kept_kk, kept_kv = [], [], []
    for t in range(t_len):
        if decay is not None:
            kk, kv = decay[:, :, t, None, None] * kk, decay[:, :, t, None, None] * kv
        key = beta[:, :, t, None] * k[:, :, t]
        kk = kk + key[..., None] * k[:, :, t, None, :]
        kv = kv + key[..., None] * v[:, :, t, None, :]
        outs.append(ridge_readout(kk, kv, q[:, :, t], reg))
        if states:
            kept_kk.append(kk)
            kept_kv.append(kv)
    out = torch.stack(outs, dim=2)
    return out, (torch.stack(kept_kk, 2), torch.stack(kept_kv, 2)) if states else None


def ridge_readout(
    kk: torch.Tensor, kv: torch.Tensor, q: torch.Tensor, reg: torch.Tensor
) -> torch.Tensor:
    """``H^{kv}ᵀ (H^{kk} + Λ)⁻¹ q`` by an LU solve, for ``kk (…, d_k, d_k)``, ``kv (…, d_k, d_v)``,
    ``q (…, d_k)`` and ``reg = Λ`` broadcastable to ``kk``; a singular system is a
    ``ValueError`` naming ``lam`` (:func:`solve_ridge`)."""
    x = solve_ridge(kk + reg, q.unsqueeze(-1))
    return (kv.mT @ x).squeeze(-1)


def solve_ridge(systems: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
    """``(H^{kk}_t + Λ)⁻¹ rhs`` by LU with partial pivoting (``torch.linalg.solve`` batching).

    ``H^{kk}_t`` has rank at most ``min(t, d_k)``: in the directions the keys do not span only
    ``Λ`` keeps the system invertible. A ``Λ`` below the rounding of ``H^{kk}_t`` (e.g.
    ``lam=1e-17`` against unit keys, ``T < d_k``) leaves it singular in floating point: that is a
    ``ValueError`` naming ``lam`` (too small for the rank of the keys), never a raw
    ``torch.linalg.LinAlgError`` and never an answer made of rounding noise.

    Singular in floating point: LU stopped at an exact zero pivot, or a pivot of the factors is
    at most ``d_k · u`` times the largest (``u`` the unit roundoff). Where only ``Λ`` covers a
    direction and ``Λ`` is below ``H^{kk}``'s rounding, the last pivots are that rounding
    (1e-16 against 1 for ``lam=1e-17``, unit keys, ``T < d_k``), exactly zero on some CPUs and
    not on others, and the solve would return that noise amplified 1e16-fold."""
    x, info = torch.linalg.solve_ex(systems, rhs)
    with torch.no_grad():  # the pivots alone (solve_ex's own backward is the cheaper one)
        size = torch.linalg.lu_factor_ex(systems)[0].diagonal(dim1=-2, dim2=-1).abs()
    unit = torch.finfo(systems.dtype).eps / 2
    noise = size.amin(dim=-1) <= systems.shape[-1] * unit * size.amax(dim=-1)
    if bool((info != 0).any()) or bool(noise.any()):
        raise ValueError(
            "lam: the ridge system H^{kk}_t + diag(lam) is singular in "
            f"{str(systems.dtype).removeprefix('torch.')}: lam is too small for the rank of the "
            "keys (fewer tokens than d_k, or dependent keys, leave directions that only lam "
            "covers); use a larger lam"
        )
    return x


def mesa_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    log_decay: torch.Tensor | None,
    lam: torch.Tensor,
    chunk: int = CHUNK,
) -> torch.Tensor:
    """``o_t = H^{kv}_tᵀ (H^{kk}_t + diag(λ))⁻¹ q_t`` (``lam (H, d_k)``, ``log_decay = log α``
    ``(B, H, T)`` or ``None``), exact at every position: the blocked Woodbury form when there is
    no decay (``None`` or all ``α = 1``), one solve per position otherwise (module docstring)."""
    if log_decay is None or not bool(log_decay.any()):
        return mesa_woodbury(q, k, v, beta, lam, chunk)
    return mesa_per_position(q, k, v, beta, log_decay, lam, chunk)


def _segment_blocks(per_block: int, n_blocks: int) -> int:
    """Blocks per segment: about ``SEGMENT_BYTES`` of temporaries, at least one block."""
    return max(1, min(n_blocks, SEGMENT_BYTES // per_block))


def mesa_woodbury(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    lam: torch.Tensor,
    chunk: int = CHUNK,
) -> torch.Tensor:
    """Mesa without decay by Woodbury on leading principal submatrices (module docstring); a
    block whose growth bound exceeds ``MAX_GROWTH`` (or whose Cholesky fails) is solved per
    position instead."""
    (b, h, t_len), d_k, d_v = q.shape[:3], q.shape[-1], v.shape[-1]
    qc, kc, vc = (blocks(x, chunk) for x in (q, k, v))
    root = blocks(beta, chunk).sqrt().unsqueeze(-1)
    zc, wc = root * kc, root * vc
    # [H^{kk}_0 | H^{kv}_0] entering each block: prefix sums of the blocks' [ZᵀZ | ZᵀṼ]
    sums = zc.mT @ torch.cat([zc, wc], dim=-1)
    states = carry_states(sums, sums.new_ones(sums.shape[:3]), torch.zeros_like(sums[:, :, 0]))[0]
    n_blocks = qc.shape[2]
    # the temporaries of _woodbury_blocks: A, L_A, L_A⁻¹; [Z; Q] L_A⁻ᵀ; [Ĉ | G], L, L⁻¹, Y and
    # one product; [Z; Q] A⁻¹ P and the output
    per_block = 3 * d_k * d_k + 2 * chunk * d_k + 6 * chunk * chunk + 3 * chunk * d_v
    per_block *= b * h * q.element_size()
    step = _segment_blocks(per_block, n_blocks)
    outs = []
    for start in range(0, n_blocks, step):
        part = slice(start, start + step)
        args = (qc[:, :, part], zc[:, :, part], wc[:, :, part], states[:, :, part])
        out, bad = _woodbury_blocks(*args, lam)
        if bool(bad.any()):
            reg = lam[:, None].expand((*bad.shape, d_k))[bad].unsqueeze(-2)
            q_b, z_b, w_b, s_b = (x[bad] for x in args)
            ones = torch.ones(chunk, chunk, dtype=q.dtype, device=q.device).tril()
            kk_b, kv_b = s_b[..., :d_k], s_b[..., d_k:]
            out[bad] = _positions(q_b, z_b, z_b, w_b, ones[-1], ones, ones[-1], (kk_b, kv_b), reg)
        outs.append(out)
    return unblock(torch.cat(outs, dim=2), t_len)


def _woodbury_blocks(
    q: torch.Tensor, z: torch.Tensor, w: torch.Tensor, states: torch.Tensor, lam: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``O = Q A⁻¹ P + Yᵀ (Ṽ − Z A⁻¹ P)`` for blocks ``(B, H, n, C, ·)`` of queries ``q``, scaled
    keys ``z`` and values ``w``, entered with ``[S | P] = states`` (``(B, H, n, d_k, d_k + d_v)``),
    and the blocks ``(B, H, n)`` to solve per position instead: a failed Cholesky or the growth
    bound ``min(tr Ĉ − C + 1, ‖Ĉ‖_∞) ≥ λ_max(Ĉ)`` above ``MAX_GROWTH``."""
    chunk, d_k = q.shape[-2:]
    base = states[..., :d_k].clone()
    base.diagonal(dim1=-2, dim2=-1).add_(lam[:, None])  # A = S + Λ
    factor, info_a = torch.linalg.cholesky_ex(base)
    inv_a = lower_inverse(factor)
    both = torch.cat([z, q], dim=-2) @ inv_a.mT  # [Z; Q] L_A⁻ᵀ
    zl = both[..., :chunk, :]
    scores = zl @ both.mT  # [Z A⁻¹ Zᵀ | Z A⁻¹ Qᵀ]
    cap = scores[..., :chunk]
    cap.diagonal(dim1=-2, dim2=-1).add_(1.0)  # Ĉ = I + Z A⁻¹ Zᵀ
    trace = cap.diagonal(dim1=-2, dim2=-1).sum(-1) - (chunk - 1)
    growth = torch.minimum(trace, cap.abs().sum(-1).amax(-1))  # ≥ λ_max(Ĉ)
    low, info_c = torch.linalg.cholesky_ex(cap)
    inv = lower_inverse(low)
    y = inv.mT @ (inv @ scores[..., chunk:]).triu_()
    read = both @ (inv_a @ states[..., d_k:])  # [Z; Q] A⁻¹ P
    bad = (info_a != 0) | (info_c != 0) | ~(growth <= MAX_GROWTH)
    return read[..., chunk:, :] + y.mT @ (w - read[..., :chunk, :]), bad


def mesa_per_position(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    log_decay: torch.Tensor | None,
    lam: torch.Tensor,
    chunk: int = CHUNK,
) -> torch.Tensor:
    """Mesa with a decay, one LU solve per position (module docstring): within a block
    with cumulative log-decay ``G_t`` and entering states ``H^{kk}_0``, ``H^{kv}_0``,
    ``H^{kk}_t = e^{G_t} H^{kk}_0 + Σ_{i≤t} e^{G_t − G_i} β_i k_i k_iᵀ`` and
    ``o_t = e^{G_t} H^{kv}_0ᵀ x_t + Σ_{i≤t} e^{G_t − G_i} β_i (k_iᵀ x_t) v_i``."""
    (b, h, t_len), d_k = q.shape[:3], q.shape[-1]
    qc, kc, vc = (blocks(x, chunk) for x in (q, k, v))
    bc = blocks(beta, chunk)
    lg = q.new_zeros(b, h, t_len) if log_decay is None else log_decay
    g = blocks(lg, chunk).cumsum(-1)  # (B, H, N, C); every difference below is ≤ 0
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    mix = (g[..., :, None] - g[..., None, :]).masked_fill(~causal, -torch.inf).exp()
    mix = mix * bc.unsqueeze(-2)  # e^{G_t − G_i} β_i
    last = g[..., -1:]
    kw = kc * (bc * (last - g).exp()).unsqueeze(-1)
    writes = torch.cat([kw.mT @ kc, kw.mT @ vc], dim=-1)  # [H^{kk} | H^{kv}] writes per block
    states = carry_states(writes, last.squeeze(-1).exp(), torch.zeros_like(writes[:, :, 0]))[0]
    kk0, kv0 = states[..., :d_k], states[..., d_k:]
    n_blocks = qc.shape[2]
    per_block = b * h * chunk * d_k * d_k * q.element_size() * 3
    step = _segment_blocks(per_block, n_blocks)
    reg = lam[:, None, None].expand(b, h, n_blocks, 1, d_k)
    alpha = blocks(lg, chunk).exp()
    outs = []
    for start in range(0, n_blocks, step):
        part = slice(start, start + step)
        q_p, k_p, v_p, mix_p, g_p, a_p, b_p = (
            x[:, :, part] for x in (qc, kc, vc, mix, g, alpha, bc)
        )
        kb_p, entering = k_p * b_p.unsqueeze(-1), (kk0[:, :, part], kv0[:, :, part])
        outs.append(
            _positions(q_p, k_p, kb_p, v_p, a_p, mix_p, g_p.exp(), entering, reg[:, :, part])
        )
    return unblock(torch.cat(outs, dim=2), t_len)


def _positions(
    q: torch.Tensor,
    k: torch.Tensor,
    kb: torch.Tensor,
    v: torch.Tensor,
    alpha: torch.Tensor,
    mix: torch.Tensor,
    decay: torch.Tensor,
    entering: tuple[torch.Tensor, torch.Tensor],
    reg: torch.Tensor,
) -> torch.Tensor:
    """One LU solve per position for blocks ``(…, C, ·)`` entered with ``kk0, kv0 = entering``
    (``(…, d_k, ·)``): ``H_t = α_t H_{t−1} + (β_t k_t) k_tᵀ`` from ``kk0`` (``kb = β k``) is
    stepped through the ``C`` positions of every block at once (``d_k²`` multiply-adds per
    position, against ``C d_k²`` for one product of the mixing matrix with every ``k_i k_iᵀ``);
    ``x_t = (H_t + Λ)⁻¹ q_t`` (``reg`` = λ ``(…, 1, d_k)``) and
    ``o_t = decay_t kv0ᵀ x_t + Σ_i mix_{ti} (k_iᵀ x_t) v_i`` (``mix_{ti} = (a_t / a_i) β_i``,
    ``decay_t = a_t``, ``a`` the decay accumulated over the block)."""
    kk0, kv0 = entering
    ridge = torch.diag_embed(reg.squeeze(-2))
    state, systems = kk0, []
    for c in range(k.shape[-2]):
        state = torch.addcmul(
            alpha[..., c, None, None] * state, kb[..., c, :, None], k[..., c, None, :]
        )
        systems.append(state + ridge)
    x = solve_ridge(torch.stack(systems, dim=-3), q)  # singular: ValueError naming lam
    return (x * decay.unsqueeze(-1)) @ kv0 + ((x @ k.mT) * mix) @ v
