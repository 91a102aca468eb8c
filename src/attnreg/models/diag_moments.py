"""The ``"diag"`` variant of :class:`attnreg.models.TrainableLSA` (Vladymyrov et al. 2024's
diagonal attention, four scalars ``ω`` per layer) computed from the context moments.

Per layer, with ``S_xx = (1/N) Σ x_i x_iᵀ``, ``S_xy = (1/N) Σ x_i y_iᵀ``, ``S_yy = (1/N) Σ y_i
y_iᵀ`` over the context tokens, every token (context and queries) moves by
``x ← x + ω_xx x S_xx + ω_xy y S_xyᵀ``, ``y ← y + ω_yx x S_xy + ω_yy y S_yy``. In the row
convention ``z = (x, y)`` that is one matrix for every token of a task, ``z ← z A`` with

    A = I + Ω ⊙ S,   S = (1/N) Z_ctxᵀ Z_ctx = [[S_xx, S_xy], [S_yx, S_yy]],
    Ω = [[ω_xx, ω_yx], [ω_xy, ω_yy]]   (each ω on its block),

so the next layer's moments are ``Aᵀ S A`` and only ``S`` (``(d + dy)²`` per task) and the
query tokens are carried from layer to layer: ``O(N (d + dy)²)`` once, then ``O((d + dy)³ +
M (d + dy)²)`` per layer — no context token after the first moments, and no ``(N + M) × N``
scores as in the model's two-head attention (``forward_predict``, through the attention core),
which computes the same layer. The training loop's fast path (tested against the core's path
and a numpy loop of the token update)."""

from __future__ import annotations

import torch


def moments_predict(
    omega: torch.Tensor, x_ctx: torch.Tensor, y_ctx: torch.Tensor, x_query: torch.Tensor
) -> torch.Tensor:
    """``(B, M, dy)``: minus the queries' ``y`` after the last layer (module docstring), for
    ``omega (L, 4)``, one row ``(ω_xx, ω_xy, ω_yx, ω_yy)`` per layer; ``x_ctx (B, N, d)``,
    ``y_ctx (B, N, dy)``, ``x_query (B, M, d)``."""
    n, d = x_ctx.shape[1], x_ctx.shape[2]
    z = torch.cat([x_ctx, y_ctx], dim=-1)
    s = z.mT @ z / n
    q = torch.cat([x_query, x_query.new_zeros(*x_query.shape[:-1], y_ctx.shape[-1])], dim=-1)
    eye = torch.eye(z.shape[-1], dtype=z.dtype, device=z.device)
    block = torch.zeros_like(eye, dtype=torch.long)
    block[:d, d:], block[d:, :d], block[d:, d:] = 2, 1, 3  # ω_yx, ω_xy, ω_yy; ω_xx on [:d, :d]
    for w in omega.to(z.dtype):
        a = eye + w[block] * s
        s, q = a.mT @ s @ a, q @ a
    return -q[..., d:]
