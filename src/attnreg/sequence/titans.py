"""The linear memory of Titans: online least squares with momentum ("surprise") and weight decay
(Behrouz, Zhong & Mirrokni 2025, "Titans: Learning to Memorize at Test Time", arXiv
2501.00663, eqs. 13–14, with a linear memory ``M`` and the loss ``½‖Mᵀ k_t − v_t‖²``).

``Σ_t = μ_t Σ_{t−1} − θ_t ∇ℓ_t(M_{t−1})``, ``∇ℓ_t(M) = k_t (Mᵀ k_t − v_t)ᵀ``,
``M_t = α_t M_{t−1} + Σ_t``, ``o_t = M_tᵀ q_t`` (``M_0 = Σ_0 = 0``). The paper writes the forget
gate as ``1 − α_t``; here ``decay`` is the factor kept, ``α_t ∈ (0, 1]``, as for every layer of
:mod:`attnreg.sequence`. The paper's loss has no ``½``: its ``θ_t`` is half of ours.

Regression: **online least squares by heavy-ball momentum with weight decay** over linear maps:
with a constant ``θ`` it is ``torch.optim.SGD(lr=θ, momentum=μ)`` taking one step per token on
that token's squared error, the map multiplied by ``α_t`` before the step. It is
:func:`attnreg.sequence.momentum_delta_rule` with ``p = k``, ``β = 1``, ``η = θ``.
"""

from __future__ import annotations

import torch

from attnreg.core.validation import ArrayLike
from attnreg.sequence.checked import Result, checked_result
from attnreg.sequence.fused_momentum import fused_momentum
from attnreg.sequence.inputs import check_qkv, check_scale, choose_mode, per_token

FORMS = ("fused", "recurrent")
"""This layer's forms: ``mode="auto"`` picks the fused kernel on the CPU and the token loop
elsewhere (no chunked form yet)."""


def titans(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    lr: float | ArrayLike,
    momentum: float | ArrayLike,
    decay: float | ArrayLike,
    scale: float = 1.0,
    mode: str = "auto",
) -> torch.Tensor:
    """Titans' linear memory (module docstring): ``q, k (B, H, T, d_k)``, ``v (B, H, T, d_v)``
    → ``o (B, H, T, d_v)``. ``lr`` ``θ_t ≥ 0``, ``momentum`` ``μ_t ∈ [0, 1]`` and ``decay``
    ``α_t ∈ (0, 1]``: each a number, ``(H,)`` or ``(B, H, T)``. ``mode``: ``"auto"``,
    ``"fused"`` (the momentum delta rule's kernel, :mod:`~attnreg.sequence.fused_momentum`,
    with ``p = k``, ``β = 1``, ``η = θ`` and the surprise ``Σ = −M``) or ``"recurrent"`` (the
    token loop, :func:`titans_recurrent`); the paper's memory MLP, its LayerNorm and its
    chunked parallel form are not part of this layer."""
    qt, kt, vt = check_qkv(q, k, v)
    form = choose_mode(mode, kt, forms=FORMS)
    theta = per_token("lr", lr, kt, low=0.0)
    mu = per_token("momentum", momentum, kt, low=0.0, high=1.0)
    if decay is None:
        raise ValueError("decay: Titans' forget gate is required (1.0 keeps the whole memory)")
    alpha = per_token("decay", decay, kt, low=0.0, high=1.0, open_low=True)

    def layer(qc: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, sc: float) -> Result:
        if form == "fused":
            return fused_momentum(qc, kc, kc, vc, (alpha, torch.ones_like(theta), theta, mu), sc)
        return titans_recurrent(qc * sc, kc, vc, theta, mu, alpha), None

    return checked_result(layer, qt, kt, vt, check_scale(scale), "titans")


def titans_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lr: torch.Tensor,
    momentum: torch.Tensor,
    decay: torch.Tensor,
) -> torch.Tensor:
    """The recurrence as it is defined, one token at a time (per-token parameters
    ``(B, H, T)``)."""
    b_, h, t_len, d_k = k.shape
    memory = k.new_zeros(b_, h, d_k, v.shape[-1])
    surprise = torch.zeros_like(memory)
    outs = []
    for t in range(t_len):
        key = k[:, :, t]
        error = torch.einsum("bhk,bhkv->bhv", key, memory) - v[:, :, t]
        grad = key[..., None] * error[:, :, None]
        surprise = momentum[:, :, t, None, None] * surprise - lr[:, :, t, None, None] * grad
        memory = decay[:, :, t, None, None] * memory + surprise
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, :, t], memory))
    return torch.stack(outs, dim=2)
