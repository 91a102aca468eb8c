"""Every sequence layer is a regression: the public layer functions.

One contract: ``layer(q, k, v, …) -> o`` with ``q, k (B, H, T, d_k)``, ``v (B, H, T, d_v)`` and
``o (B, H, T, d_v)``; position t uses only the tokens ``i ≤ t``. Inputs may be torch tensors or
numpy arrays, float32 or float64 (computed in the widest of the three); per-token parameters
(``beta``, ``decay``) are numbers, per-head constants ``(H,)`` or ``(B, H, T)`` tensors. A
``decay`` is the factor ``α_t ∈ (0, 1]`` applied to the state before token t is written. The
queries are scaled by ``scale`` (default 1) and by nothing else. ``mode="fused"`` computes the
compiled token recurrence (:mod:`attnreg.sequence.fused`, for the layers whose state update is
diagonal plus rank one, differentiable), ``mode="chunk"`` the block-parallel form,
``mode="recurrent"`` the token-loop reference; all give the same numbers up to rounding.
``mode="auto"`` (default) picks by :func:`attnreg.sequence.inputs.choose_mode`: fused on the CPU,
chunk on an accelerator (and chunk for a layer without a fused form).

Each layer's output is ``o_t = f̂_t(q_t)``, the read-out at the query of a regression fitted to
the past pairs ``(k_i, v_i)``, ``i ≤ t`` (Wang, Shi & Fox 2025, "Test-time regression",
arXiv 2501.12352); the docstrings state the regression weights ``γ_{t,i}``, the function class
and the optimiser. Written with the map ``W`` (``d_v × d_k``) the states below are ``S = Wᵀ``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from attnreg.core.scaling import underflow_error, underflowed, unit_scale
from attnreg.core.validation import (
    ArrayLike,
    check_finite_result,
    check_flag,
    check_positive,
)
from attnreg.sequence.chunked import (
    delta_chunked,
    diagonal_chunked,
    linear_chunked,
)
from attnreg.sequence.fused_autograd import fused
from attnreg.sequence.inputs import (
    check_finite_qkv,
    check_lam,
    check_qkv,
    check_qkv_for,
    check_scale,
    choose_mode,
    per_token,
)
from attnreg.sequence.mesa_blocked import mesa_chunked
from attnreg.sequence.recurrent import (
    delta_recurrent,
    diagonal_longhorn_recurrent,
    linear_recurrent,
    mesa_recurrent,
)
from attnreg.sequence.smoothers import local_linear, softmax_fused


def decay_of(
    decay: float | ArrayLike | None, like: torch.Tensor, *, channels: bool = False
) -> torch.Tensor | None:
    """``α_t`` as ``(B, H, T)`` (``None`` without decay), checked in ``(0, 1]``; with
    ``channels`` also ``(B, H, T, d_k)``, one factor per key channel (``S' = Diag(α_t) S``)."""
    if decay is None:
        return None
    return per_token("decay", decay, like, low=0.0, high=1.0, open_low=True, channels=channels)


def chunk_decay(alpha: torch.Tensor | None) -> torch.Tensor | None:
    """The chunked forms' log-decays: one per token only (per-channel decays have no chunked
    form yet: a ``ValueError`` naming ``mode``)."""
    if alpha is not None and alpha.ndim == 4:
        raise ValueError(
            "mode: the chunked form takes one decay per token; per-channel decays "
            "(B, H, T, d_k) run in mode='fused' (CPU) or mode='recurrent'"
        )
    return _log(alpha)


def _log(alpha: torch.Tensor | None) -> torch.Tensor | None:
    return None if alpha is None else alpha.log()


Result = tuple[torch.Tensor, torch.Tensor | None]
"""A layer's output ``o`` and, when the computation produced it (the fused kernel does, while
writing ``o``), the largest ``|o|`` of each batch element and head (``(B, H)``, NaN where
``o`` has one)."""
Layer = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float], Result]
"""``layer(q, k, v, scale)``: a layer's computation with its parameters fixed, queries scaled by
``scale``."""


def checked_result(
    layer: Layer, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, name: str
) -> torch.Tensor:
    """``layer(q, k, v, scale)``'s output unless it overflowed (:func:`check_finite_result`) or
    underflowed: the estimators' policy (:func:`attnreg.core.scaling.underflowed`), per batch
    element and head (the heads are separate regressions) — a head whose output is entirely
    zero or subnormal while ``layer`` on ``scale · q``, ``k``, ``v`` rescaled to unit magnitude
    (per batch element and head) is not is a ``ValueError`` naming ``q``, ``k`` and the head
    (inputs so small that ``q·k`` and ``k·k`` underflow, e.g. ``q, k ~ 1e-200`` in float64).
    Both checks read the largest ``|o|`` per batch element and head from the layer's
    :data:`Result` when it has it."""
    out, largest = layer(q, k, v, scale)
    if largest is not None and not bool(torch.isfinite(largest).all()):
        check_finite_qkv(q, k, v)  # the fused form's inputs are checked only now
    out = check_finite_result(out, name, largest)
    if out.numel() == 0:
        return out
    per_head = out.detach().abs().amax(dim=(-2, -1)) if largest is None else largest
    if not bool((per_head < torch.finfo(out.dtype).tiny).any()):
        return out
    unit_query_scale = 0.0 if scale == 0 else 1.0  # unit magnitude takes the scale's away too
    with torch.no_grad():
        unit = layer(q / unit_scale(q), k / unit_scale(k), v / unit_scale(v), unit_query_scale)[0]
    bad = underflowed(out.flatten(0, 1), unit.flatten(0, 1))
    if bool(bad.any()):
        b, h = divmod(int(bad.nonzero()[0, 0]), out.shape[1])
        cause = (
            "q and k are so small that the products q·k (and k·k) underflow "
            f"(batch element {b}, head {h})"
        )
        raise underflow_error(name, None, out.dtype, cause)
    return out


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
    (GLA's / Mamba-2's scalar gate: Yang et al. 2024, Dao & Gu 2024). Normalised, it is the
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
        return _linear(qc, kc, vc, alpha, normalize, sc, mode)

    return checked_result(layer, qt, kt, vt, s, "linear_attention")


def _linear(
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
    elif mode == "chunk":
        out = linear_chunked(_scaled(q, scale), k, v, chunk_decay(alpha))
    else:
        out = linear_recurrent(_scaled(q, scale), k, v, alpha)[0]
    if normalize:
        return normalized(out[..., :d_v], out[..., d_v:]), None
    return out, largest


def _scaled(q: torch.Tensor, scale: float) -> torch.Tensor:
    return q if scale == 1 else q * scale


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
    decay of ``W`` (no chunked form yet: ``mode='fused'`` or ``'recurrent'``).
    """
    qt, kt, vt, mode = check_qkv_for(mode, q, k, v)
    b = per_token("beta", beta, kt, low=0.0)
    alpha = decay_of(decay, kt, channels=True)

    def layer(qc: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, sc: float) -> Result:
        return _delta(qc, kc, vc, b, alpha, sc, mode)

    return checked_result(layer, qt, kt, vt, check_scale(scale), "delta_rule")


def _delta(
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
    if mode == "chunk":
        return delta_chunked(_scaled(q, scale), k, v, beta, chunk_decay(alpha)), None
    return delta_recurrent(_scaled(q, scale), k, v, beta, alpha)[0], None


def longhorn_step(beta: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``ε_t = β_t / (1 + β_t k_tᵀ k_t)`` (``(B, H, T)``): the step of the implicit update; where
    ``β_t k_tᵀ k_t`` overflows, the same value as ``1 / (1/β_t + k_tᵀ k_t)``. For keys beyond
    ``HUGE_KEY`` ``k_tᵀ k_t`` nears overflow and ``ε_t`` underflow: see :func:`longhorn_terms`."""
    squares = (k * k).sum(-1)
    denominator = 1 + beta * squares
    eps = beta / denominator
    overflow = torch.isinf(denominator)
    if bool(overflow.any()):
        eps = torch.where(overflow, 1 / (1 / beta + squares), eps)
    return eps


HUGE_KEY = 2.0**256  # beyond it ‖k‖² nears the float64 range and ε = O(1/‖k‖²) underflows


def longhorn_terms(
    beta: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per token ``(k'_t, γ_t, v'_t)`` with ``γ_t k'_t k'_tᵀ = ε_t k_t k_tᵀ`` and
    ``γ_t k'_t v'_tᵀ = ε_t k_t v_tᵀ``: Longhorn's update written as a delta-rule step (and its
    diagonal as decayed linear attention) in a representable order.

    Keys of magnitude at most ``HUGE_KEY``: ``(k_t, ε_t, v_t)`` (:func:`longhorn_step`). Beyond:
    the unit key ``k'_t = k_t / ‖k_t‖``, ``v'_t = v_t / ‖k_t‖`` and
    ``γ_t = ε_t ‖k_t‖² = 1 / (1 + 1/(β_t ‖k_t‖²))`` (in ``[0, 1)``), with ``‖k_t‖`` computed from
    ``k_t / 2^e`` (``2^e ≥ max |k_t|``): neither ``‖k_t‖²`` (which overflows for ``k ~ 1e200``)
    nor ``ε_t`` (which underflows) is formed."""
    _, e = torch.frexp(k.detach().abs().amax(-1))
    power = torch.ldexp(torch.ones_like(beta), e)  # 2^e ≥ max |k_t| per token
    big = power > HUGE_KEY
    if not bool(big.any()):
        return k, longhorn_step(beta, k), v
    # ε of the other tokens; the huge keys are zeroed there so that no branch holds inf or NaN
    eps = longhorn_step(beta, torch.where(big.unsqueeze(-1), torch.zeros_like(k), k))
    unit = k / power.unsqueeze(-1)
    n = torch.linalg.vector_norm(unit, dim=-1)  # in [1/2, √d_k]: no over- or underflow
    ones = torch.ones_like(n)
    n = torch.where(big, n, ones)
    norm = power * n  # ‖k_t‖
    safe = torch.where(big, beta, ones)  # no inf in the branch not taken (its gradient is 0·inf)
    gamma = 1 / (1 + (1 / (safe * norm)) / norm)
    keys = torch.where(big.unsqueeze(-1), unit / n.unsqueeze(-1), k)
    values = torch.where(big.unsqueeze(-1), v / power.unsqueeze(-1) / n.unsqueeze(-1), v)
    return keys, torch.where(big, gamma, eps), values


def longhorn(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    beta: float | ArrayLike,
    *,
    scale: float = 1.0,
    diagonal: bool = False,
    mode: str = "auto",
) -> torch.Tensor:
    """Longhorn: ``S_t = (I − ε_t k_t k_tᵀ) S_{t−1} + ε_t k_t v_tᵀ``,
    ``ε_t = β_t / (1 + β_t k_tᵀ k_t)``, ``o_t = S_tᵀ q_t`` (``S_0 = 0``).

    Regression: ``W_t = argmin_W ‖W − W_{t−1}‖²_F + β_t ‖W k_t − v_t‖²``: **implicit (proximal)
    online least squares** over linear maps, one exact proximal step per token (Liu et al. 2024,
    "Longhorn: state space models are amortized online learners"). It is the delta rule with
    the step ``ε_t`` (:func:`delta_rule`, so the chunked form is the WY form), stable for every
    ``β_t ≥ 0`` since ``ε_t k_tᵀ k_t < 1``. ``diagonal=True`` is the paper's approximation
    ``I − ε_t k_t k_tᵀ ≈ diag(1 − ε_t k_t ⊙ k_t)`` (linear attention with one decay per key
    coordinate).
    """
    qt, kt, vt, mode = check_qkv_for(mode, q, k, v)
    b = per_token("beta", beta, kt, low=0.0)
    check_flag("diagonal", diagonal)

    def layer(qc: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, sc: float) -> Result:
        keys, step, values = longhorn_terms(b, kc, vc)
        if not diagonal:
            return _delta(qc, keys, values, step, None, sc, mode)
        if mode == "fused":
            decay = 1 - step.unsqueeze(-1) * keys * keys
            return fused(qc, keys, values, decay, step, False, sc)
        if mode == "chunk":
            return diagonal_chunked(_scaled(qc, sc), keys, values, step), None
        return diagonal_longhorn_recurrent(_scaled(qc, sc), keys, values, step)[0], None

    return checked_result(layer, qt, kt, vt, check_scale(scale), "longhorn")


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
    by LU (:mod:`attnreg.sequence.mesa_blocked`). With ``β = 1``, no decay and one λ it is
    :func:`attnreg.estimators.causal_ridge`.
    """
    qt, kt, vt = check_qkv(q, k, v)
    b = per_token("beta", beta, kt, low=0.0)
    alpha = decay_of(decay, kt)
    lam_t = check_lam(lam, kt)
    mode = choose_mode(mode, kt, fused=False)

    def layer(qc: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, sc: float) -> Result:
        qs = _scaled(qc, sc)
        if mode == "chunk":
            return mesa_chunked(qs, kc, vc, b, _log(alpha), lam_t), None
        return mesa_recurrent(qs, kc, vc, b, alpha, lam_t)[0], None

    return checked_result(layer, qt, kt, vt, check_scale(scale), "mesa")


def softmax_attention(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, *, scale: float = 1.0
) -> torch.Tensor:
    """Causal softmax attention ``o_t = Σ_{i≤t} w_{t,i} v_i``, ``w_{t,i} = softmax_{i≤t}(scale ·
    q_tᵀ k_i)``.

    Regression: ``o_t = argmin_b Σ_{i≤t} w_{t,i} ‖v_i − b‖²``: the **Nadaraya–Watson
    (local-constant) kernel smoother** with the exponential kernel ``γ_{t,i} = e^{scale · q_tᵀ
    k_i}`` (Nadaraya 1964, Watson 1964; Vaswani et al. 2017), solved in closed form (the
    weighted mean). Computed by PyTorch's fused ``scaled_dot_product_attention(is_causal=True)``
    (the attention core has no causal mask); no ``T × T`` matrix is held. ``scale=1/√d_k`` is
    Transformer attention.
    """
    qt, kt, vt = check_qkv(q, k, v)
    out = softmax_fused(qt, kt, vt, check_scale(scale))
    return check_finite_result(out, "softmax_attention")


def local_linear_attention(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, *, lam: float, scale: float = 1.0
) -> torch.Tensor:
    """Local linear attention: the intercept ``b̂_t`` of
    ``min_{b, W} Σ_{i≤t} w_{t,i} ‖v_i − b − W (k_i − q_t)‖² + λ ‖W‖²_F`` with the softmax weights
    ``w_{t,i} = softmax_{i≤t}(scale · q_tᵀ k_i)``.

    Regression: **kernel-weighted local-linear (affine) ridge regression** centred at the query,
    solved in closed form, ``b̂_t = v̄_t + Σ^{vk}_t (Σ^{kk}_t + λI)⁻¹ (q_t − k̄_t)`` with the weighted
    means and centred covariances of the past keys and values (Zuo et al. 2025, "Local linear
    attention", arXiv 2510.01450): softmax attention is its local-constant special case (``W = 0``).
    The fit at the query ``q_t`` itself is unscaled; ``scale`` enters the weights only. ``lam > 0``.
    Computed directly (``O(T² d_k²)`` work, queries in blocks of bounded memory).
    """
    qt, kt, vt = check_qkv(q, k, v)
    out = local_linear(qt, kt, vt, check_positive("lam", lam), check_scale(scale))
    return check_finite_result(out, "local_linear_attention")
