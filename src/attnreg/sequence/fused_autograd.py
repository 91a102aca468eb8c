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
    """``o, largest = FusedRecurrence.apply(q, k, v, alpha, beta, delta, scale, p)``: the family
    of :mod:`attnreg.sequence.fused` (``alpha (B, H, T)``, ``(B, H, T, d_k)`` or ``None``;
    ``beta (B, H, T)`` or ``None``; ``p (B, H, T, d_k)`` or ``None`` (the prediction read at
    ``k``); ``o_t = scale · S_tᵀ q_t``), differentiable in every tensor argument; ``largest``
    (``(B, H)``, the largest ``|o|`` per batch element and head) is not."""

    @staticmethod
    def forward(
        ctx: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        alpha: torch.Tensor | None,
        beta: torch.Tensor | None,
        delta: bool,
        scale: float,
        p: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        grad = any(ctx.needs_input_grad[:5]) or ctx.needs_input_grad[7]
        out, largest, kept = fused_forward(
            q, k, v, alpha, beta, delta, scale=scale, keep=CHUNK if grad else 0, p=p
        )
        if kept is not None:
            ctx.save_for_backward(q, k, v, alpha, beta, kept, p)
        ctx.delta = delta
        ctx.scale = scale
        ctx.mark_non_differentiable(largest)
        return out, largest

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor, _grad_largest: torch.Tensor) -> Any:
        q, k, v, alpha, beta, kept, p = ctx.saved_tensors
        # o is linear in scale: the gradients of ⟨g, scale · o'⟩ are those of ⟨scale · g, o'⟩
        grad = grad_out if ctx.scale == 1 else grad_out * ctx.scale
        dq, dk, dv, dalpha, dbeta, dp = fused_backward(
            q, k, v, alpha, beta, ctx.delta, grad, kept, CHUNK, p=p
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
            None,
            dp,
        )


def fused(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    alpha: torch.Tensor | None,
    beta: torch.Tensor | None,
    delta: bool,
    scale: float = 1.0,
    p: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``S_t = Diag(α_t) S_{t−1} + k_t u_tᵀ``,
    ``u_t = β_t (v_t − [delta] (Diag(α_t) S_{t−1})ᵀ p_t)`` (``p = k`` when ``None``),
    ``o_t = scale · S_tᵀ q_t`` (shapes in
    :class:`FusedRecurrence`), differentiable; returns ``o`` and the largest ``|o|`` of each
    batch element and head (``(B, H)``, NaN where ``o`` has a NaN), computed while ``o`` is
    written."""
    out, largest = FusedRecurrence.apply(q, k, v, alpha, beta, delta, float(scale), p)
    return out, largest
