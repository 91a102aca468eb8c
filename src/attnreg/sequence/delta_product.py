"""DeltaProduct: ``n_h`` delta-rule steps per token (Siems et al. 2025, "DeltaProduct: Improving
State-Tracking in Linear RNNs via Householder Products", arXiv 2502.10297; fla's
``gated_delta_product``).

``S' = α_t S_{t−1}``, then for ``j = 1 … n_h``:
``S ← S + k_{t,j} (β_{t,j} (v_{t,j} − Sᵀ k_{t,j}))ᵀ``; ``o_t = Sᵀ q_t`` (``S_0 = 0``). The state
transition of a token is the product ``Π_j (I − β_{t,j} k_{t,j} k_{t,j}ᵀ)`` of ``n_h``
generalised Householder matrices.

Regression: ``n_h`` steps of **online least squares** (LMS, step ``β_{t,j}`` on
``½‖W k_{t,j} − v_{t,j}‖²``, each from the iterate the previous step left) per token after one
weight decay ``(1 − α_t)`` of ``W = Sᵀ``: the delta rule taken ``n_h`` times per token over
the token's own ``n_h`` key–value pairs. ``n_h = 1`` is :func:`attnreg.sequence.delta_rule`.

Forms: ``mode="recurrent"`` is :func:`delta_product_recurrent`, the recurrence written token by
token; ``"fused"`` and ``"chunk"`` run the delta rule's forms on the sequence of ``T · n_h``
sub-tokens (the decay on each token's first sub-token, the query read at its last), which is
the same recurrence.
"""

from __future__ import annotations

import torch

from attnreg.core.tasks import result_dtype
from attnreg.core.validation import ArrayLike, as_tensor
from attnreg.sequence.checked import Result, checked_result
from attnreg.sequence.delta_rule import delta_forms
from attnreg.sequence.inputs import check_finite_qkv, check_scale, choose_mode, decay_of, per_token
from attnreg.sequence.tiling import decayed


def delta_product(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    beta: float | ArrayLike,
    *,
    decay: float | ArrayLike | None = None,
    scale: float = 1.0,
    mode: str = "auto",
) -> torch.Tensor:
    """DeltaProduct (module docstring): ``q (B, H, T, d_k)``, ``k (B, H, T, n_h, d_k)``,
    ``v (B, H, T, n_h, d_v)`` → ``o (B, H, T, d_v)``.

    ``beta ≥ 0``: a number, a per-head constant ``(H,)`` or one per step ``(B, H, T, n_h)``.
    ``decay`` ``α_t ∈ (0, 1]``, applied once per token before its steps: a number, ``(H,)``,
    ``(B, H, T)`` or one per key channel ``(B, H, T, d_k)``. Keys
    are used as given (DeltaProduct L2-normalises each ``k_{t,j}``); each step is no expansion
    when ``0 ≤ β_{t,j} ‖k_{t,j}‖² ≤ 2``. ``mode`` as in :func:`attnreg.sequence.delta_rule`.
    """
    qt, kt, vt = check_steps(q, k, v)
    b_, h, t_len, n_h, d_k = kt.shape
    flat_k = kt.reshape(b_, h, t_len * n_h, d_k)
    flat_v = vt.reshape(b_, h, t_len * n_h, vt.shape[-1])
    form = choose_mode(mode, flat_k)
    check_finite_qkv(qt, kt, vt)
    steps = per_token("beta", _per_step(beta, kt), flat_k, low=0.0)
    alpha = decay_of(decay, qt, channels=True)

    def layer(qc: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, sc: float) -> Result:
        if form == "recurrent":
            k5 = kc.reshape(kt.shape)
            v5 = vc.reshape(vt.shape)
            out = delta_product_recurrent(qc * sc, k5, v5, steps.reshape(kt.shape[:4]), alpha)
            return out, None
        out, largest = delta_forms(
            _at_last_step(qc, n_h), kc, vc, steps, _on_first_step(alpha, n_h), sc, form
        )
        return out[:, :, n_h - 1 :: n_h], largest

    return checked_result(layer, qt, flat_k, flat_v, check_scale(scale), "delta_product")


def delta_product_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    decay: torch.Tensor | None,
) -> torch.Tensor:
    """The recurrence as it is defined, token by token and step by step: ``q (B, H, T, d_k)``,
    ``k (B, H, T, n_h, d_k)``, ``v (B, H, T, n_h, d_v)``, ``beta (B, H, T, n_h)``, ``decay``
    ``(B, H, T)``, ``(B, H, T, d_k)`` or ``None``."""
    b_, h, t_len, n_h, d_k = k.shape
    s = k.new_zeros(b_, h, d_k, v.shape[-1])
    outs = []
    for t in range(t_len):
        s = decayed(s, decay, t)
        for j in range(n_h):
            key = k[:, :, t, j]
            error = v[:, :, t, j] - torch.einsum("bhk,bhkv->bhv", key, s)
            s = s + key[..., None] * (beta[:, :, t, j, None] * error)[..., None, :]
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, :, t], s))
    return torch.stack(outs, dim=2)


def check_steps(
    q: ArrayLike, k: ArrayLike, v: ArrayLike
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``q (B, H, T, d_k)``, ``k (B, H, T, n_h, d_k)`` and ``v (B, H, T, n_h, d_v)`` in one dtype,
    with agreeing shapes (finiteness is checked by the caller)."""
    qt = as_tensor("q", q, ndim=(4,), finite=False)
    kt = as_tensor("k", k, ndim=(5,), finite=False)
    vt = as_tensor("v", v, ndim=(5,), finite=False)
    if kt.shape[:3] != qt.shape[:3] or kt.shape[-1] != qt.shape[-1]:
        raise ValueError(
            f"k must be (B, H, T, n_h, d_k) with q's (B, H, T) and d_k: q {tuple(qt.shape)}, "
            f"k {tuple(kt.shape)}"
        )
    if vt.shape[:4] != kt.shape[:4]:
        raise ValueError(
            f"v must agree with k on (B, H, T, n_h): k {tuple(kt.shape)}, v {tuple(vt.shape)}"
        )
    dtype = result_dtype(qt, kt, vt)
    return qt.to(dtype), kt.to(dtype), vt.to(dtype)


def _per_step(beta: float | ArrayLike, k: torch.Tensor) -> float | ArrayLike:
    """``beta`` with one value per step ``(B, H, T, n_h)`` flattened to the sub-token sequence
    ``(B, H, T · n_h)``; other shapes are left to :func:`per_token`."""
    if getattr(beta, "ndim", 0) != 4:
        return beta
    b_, h, t_len, n_h = k.shape[:4]
    if tuple(beta.shape) != (b_, h, t_len, n_h):  # type: ignore[union-attr]
        raise ValueError(
            f"beta: a per-step value must have shape (B, H, T, n_h) = {(b_, h, t_len, n_h)}, "
            f"got {tuple(beta.shape)}"  # type: ignore[union-attr]
        )
    return beta.reshape(b_, h, t_len * n_h)  # type: ignore[union-attr]


def _at_last_step(q: torch.Tensor, n_h: int) -> torch.Tensor:
    """Queries on the sub-token sequence: ``q_t`` at token t's last step, zero elsewhere."""
    b_, h, t_len, d_k = q.shape
    subs = q.new_zeros(b_, h, t_len, n_h, d_k)
    subs = torch.cat([subs[:, :, :, : n_h - 1], q.unsqueeze(3)], dim=3)
    return subs.reshape(b_, h, t_len * n_h, d_k)


def _on_first_step(alpha: torch.Tensor | None, n_h: int) -> torch.Tensor | None:
    """Decays on the sub-token sequence: ``α_t`` at token t's first step, 1 elsewhere."""
    if alpha is None or n_h == 1:
        return alpha
    b_, h, t_len = alpha.shape[:3]
    ones = torch.ones_like(alpha).unsqueeze(3).expand(*alpha.shape[:3], n_h - 1, *alpha.shape[3:])
    subs = torch.cat([alpha.unsqueeze(3), ones], dim=3)
    return subs.reshape(b_, h, t_len * n_h, *alpha.shape[3:])
