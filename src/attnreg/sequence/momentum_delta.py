"""The momentum delta rule: gradient descent with momentum on the delta rule's loss, in fla's
convention (fla's ``momentum_delta_rule``, ``recurrent_momentum_delta_rule_ref``).

``e_t = S_{t−1}ᵀ p_t − v_t``, ``M_t = μ_t M_{t−1} + η_t k_t e_tᵀ``,
``S_t = α_t S_{t−1} − β_t M_t``, ``o_t = S_tᵀ q_t`` (``S_0 = M_0 = 0``).

Regression: with ``p_t = k_t``, ``η_t k_t e_tᵀ`` is ``η_t`` times the gradient of
``½‖S_{t−1}ᵀ k_t − v_t‖²`` at the state before the token, so the layer is **online least squares
by heavy-ball momentum** (momentum ``μ_t``, step ``β_t``) after a weight decay ``1 − α_t`` —
``torch.optim.SGD(momentum=μ)`` stepping the map one token at a time. With ``p_t ≠ k_t`` the
error is read at ``p_t`` and the step taken along ``k_t``, the instrumental-variable form
(attnreg's reading, as for :func:`attnreg.sequence.comba`). ``μ ≡ 0``, ``η ≡ 1`` and ``p = k``
give the delta rule with the erase read before the decay.

Forms: :func:`momentum_delta_recurrent` (the token loop) and the fused CPU recurrence of the
pair ``(S, M)`` (:mod:`~attnreg.sequence.fused_momentum`).
"""

from __future__ import annotations

import torch

from attnreg.core.validation import ArrayLike
from attnreg.sequence.checked import Result, checked_result
from attnreg.sequence.fused_momentum import fused_momentum
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


def momentum_delta_rule(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    p: ArrayLike,
    beta: float | ArrayLike,
    eta: float | ArrayLike,
    *,
    momentum: float | ArrayLike,
    decay: float | ArrayLike | None = None,
    scale: float = 1.0,
    mode: str = "auto",
) -> torch.Tensor:
    """The momentum delta rule (module docstring): ``q, k, p (B, H, T, d_k)``,
    ``v (B, H, T, d_v)`` → ``o (B, H, T, d_v)``. ``beta ≥ 0`` (the step), ``eta ≥ 0`` (the
    gradient's scale), ``momentum`` ``μ_t ∈ [0, 1]`` and ``decay`` ``α_t ∈ (0, 1]``: each a
    number, ``(H,)`` or ``(B, H, T)``. ``mode``: ``"auto"``, ``"fused"`` or ``"recurrent"``."""
    qt, kt, vt = check_qkv(q, k, v)
    form = choose_mode(mode, kt, forms=FORMS)
    pt = key_shaped("p", p, kt)
    steps = per_token("beta", beta, kt, low=0.0)
    rates = per_token("eta", eta, kt, low=0.0)
    mu = per_token("momentum", momentum, kt, low=0.0, high=1.0)
    alpha = decay_of(decay, kt)

    def layer(qc: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, sc: float) -> Result:
        if form == "fused":
            gates = (torch.ones_like(steps) if alpha is None else alpha, steps, rates, mu)
            return fused_momentum(qc, kc, pt, vc, gates, sc)
        return momentum_delta_recurrent(qc * sc, kc, vc, pt, steps, rates, mu, alpha), None

    return checked_result(layer, qt, kt, vt, check_scale(scale), "momentum_delta_rule")


def momentum_delta_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    p: torch.Tensor,
    beta: torch.Tensor,
    eta: torch.Tensor,
    momentum: torch.Tensor,
    decay: torch.Tensor | None,
) -> torch.Tensor:
    """The recurrence as it is defined, one token at a time (per-token parameters
    ``(B, H, T)``)."""
    b_, h, t_len, d_k = k.shape
    s = k.new_zeros(b_, h, d_k, v.shape[-1])
    m = torch.zeros_like(s)
    outs = []
    for t in range(t_len):
        error = torch.einsum("bhk,bhkv->bhv", p[:, :, t], s) - v[:, :, t]
        push = (eta[:, :, t, None] * k[:, :, t])[..., None] * error[:, :, None]
        m = momentum[:, :, t, None, None] * m + push
        if decay is not None:
            s = decay[:, :, t, None, None] * s
        s = s - beta[:, :, t, None, None] * m
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, :, t], s))
    return torch.stack(outs, dim=2)
