"""The fused recurrence as a ``torch.autograd.Function``: forward by
:func:`attnreg.sequence.fused.fused_forward` (keeping the state every ``CHUNK`` tokens), backward
by the reverse-time pass :func:`attnreg.sequence.fused.fused_backward` over those states (as
fla's ``fused_recurrent`` does). Memory kept for the backward: ``⌈T / CHUNK⌉ · d_k · d_v`` per
head.
"""

from __future__ import annotations

from typing import Any

import torch

from attnreg.sequence.fused import fused_backward, fused_forward

CHUNK = 64  # tokens between stored states; the backward recomputes one chunk's states at a time


class FusedRecurrence(torch.autograd.Function):
    """``o = FusedRecurrence.apply(q, k, v, alpha, beta, delta)``: the family of
    :mod:`attnreg.sequence.fused` (``alpha (B, H, T)``, ``(B, H, T, d_k)`` or ``None``;
    ``beta (B, H, T)`` or ``None``), differentiable in every tensor argument."""

    @staticmethod
    def forward(
        ctx: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        alpha: torch.Tensor | None,
        beta: torch.Tensor | None,
        delta: bool,
    ) -> torch.Tensor:
        grad = any(ctx.needs_input_grad[:5])
        out, kept = fused_forward(q, k, v, alpha, beta, delta, keep=CHUNK if grad else 0)
        if kept is not None:
            ctx.save_for_backward(q, k, v, alpha, beta, kept)
        ctx.delta = delta
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> Any:
        q, k, v, alpha, beta, kept = ctx.saved_tensors
        dq, dk, dv, dalpha, dbeta = fused_backward(
            q, k, v, alpha, beta, ctx.delta, grad_out, kept, CHUNK
        )
        if alpha is not None:
            dalpha = dalpha.reshape(alpha.shape)
        return (
            dq,
            dk,
            dv,
            dalpha if alpha is not None else None,
            dbeta if beta is not None else None,
            None,
        )


def fused(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    alpha: torch.Tensor | None,
    beta: torch.Tensor | None,
    delta: bool,
) -> torch.Tensor:
    """``S_t = Diag(α_t) S_{t−1} + k_t u_tᵀ``,
    ``u_t = β_t (v_t − [delta] (Diag(α_t) S_{t−1})ᵀ k_t)``, ``o_t = S_tᵀ q_t`` (shapes in
    :class:`FusedRecurrence`), differentiable."""
    out: torch.Tensor = FusedRecurrence.apply(q, k, v, alpha, beta, delta)
    return out
