"""Comba: the delta step whose prediction is read at ``p_t`` (Hu et al. 2025, "Comba: Improving
Bilinear RNNs with Closed-loop Control", arXiv 2506.02475; fla's ``comba``).

``S' = α_t S_{t−1}``, ``S_t = S' + k_t (β_t (v_t − S'ᵀ p_t))ᵀ``, ``o_t = S_tᵀ q_t``
(``S_0 = 0``). ``p_t = k_t`` is Gated DeltaNet (:func:`attnreg.sequence.delta_rule`).

Regression (attnreg's reading): with ``W = Sᵀ`` the step is
``W_t = α_t W_{t−1} + β_t (v_t − α_t W_{t−1} p_t) k_tᵀ``, the **least-mean-squares step of
instrumental-variable regression**: the error is measured at the regressor ``p_t`` and the map
moves along the instrument ``k_t`` (the recursive IV estimator's update, one step per token).
Only when ``p_t = k_t`` is it a gradient step on ``½‖W p_t − v_t‖²``.

Forms: :func:`comba_recurrent` (the token loop) and the fused CPU recurrence
(:mod:`~attnreg.sequence.fused`: the delta rule's kernel with the prediction read at ``p_t``).
"""

from __future__ import annotations

import torch

from attnreg.core.validation import ArrayLike
from attnreg.sequence.checked import Result, checked_result
from attnreg.sequence.fused_autograd import fused
from attnreg.sequence.inputs import (
    check_qkv,
    check_scale,
    choose_mode,
    decay_of,
    key_shaped,
    per_token,
)

FORMS = ("fused", "recurrent")
"""This layer's forms: ``mode="auto"`` picks the fused kernel on the CPU and the token loop
elsewhere (no chunked form yet)."""


def comba(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    p: ArrayLike,
    beta: float | ArrayLike,
    *,
    decay: float | ArrayLike | None = None,
    scale: float = 1.0,
    mode: str = "auto",
) -> torch.Tensor:
    """Comba (module docstring): ``q, k, p (B, H, T, d_k)``, ``v (B, H, T, d_v)`` →
    ``o (B, H, T, d_v)``. ``beta ≥ 0`` and ``decay`` ``α_t ∈ (0, 1]`` as in
    :func:`attnreg.sequence.delta_rule` (one per token: a number, ``(H,)`` or ``(B, H, T)``).
    ``mode``: ``"auto"``, ``"fused"`` or ``"recurrent"`` (no chunked form yet)."""
    qt, kt, vt = check_qkv(q, k, v)
    form = choose_mode(mode, kt, forms=FORMS)
    pt = key_shaped("p", p, kt)
    b = per_token("beta", beta, kt, low=0.0)
    alpha = decay_of(decay, kt)

    def layer(qc: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, sc: float) -> Result:
        if form == "fused":
            return fused(qc, kc, vc, alpha, b, True, sc, p=pt)
        return comba_recurrent(qc * sc, kc, vc, pt, b, alpha), None

    return checked_result(layer, qt, kt, vt, check_scale(scale), "comba")


def comba_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    p: torch.Tensor,
    beta: torch.Tensor,
    decay: torch.Tensor | None,
) -> torch.Tensor:
    """The recurrence as it is defined, one token at a time (``beta``, ``decay`` ``(B, H, T)``)."""
    b_, h, t_len, d_k = k.shape
    s = k.new_zeros(b_, h, d_k, v.shape[-1])
    outs = []
    for t in range(t_len):
        if decay is not None:
            s = decay[:, :, t, None, None] * s
        error = v[:, :, t] - torch.einsum("bhk,bhkv->bhv", p[:, :, t], s)
        s = s + k[:, :, t, :, None] * (beta[:, :, t, None] * error)[:, :, None]
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, :, t], s))
    return torch.stack(outs, dim=2)
