"""The ``"diag"`` variant of :class:`attnreg.models.TrainableLSA` (Vladymyrov et al. 2024's
diagonal attention, four scalars ``ω`` per layer) computed from the context moments: per layer
``S_xx = (1/N) Σ x_i x_iᵀ``, ``S_xy = (1/N) Σ x_i y_iᵀ``, ``S_yy = (1/N) Σ y_i y_iᵀ`` and
``x ← x + ω_xx x S_xx + ω_xy y S_xyᵀ``, ``y ← y + ω_yx x S_xy + ω_yy y S_yy`` for every token.
It is the same layer as the model's two-head attention (``forward_predict``, through the
attention core), in ``O((N + M) d²)`` per layer instead of the heads' ``(N + M) × N`` scores:
the training loop's fast path (tested against the core's path and a numpy loop)."""

from __future__ import annotations

import torch


def moments_predict(
    omega: torch.Tensor, x_ctx: torch.Tensor, y_ctx: torch.Tensor, x_query: torch.Tensor
) -> torch.Tensor:
    """``(B, M, dy)``: minus the queries' ``y`` after the last layer (module docstring), for
    ``omega (L, 4)``, one row ``(ω_xx, ω_xy, ω_yx, ω_yy)`` per layer."""
    n = x_ctx.shape[1]
    x = torch.cat([x_ctx, x_query], dim=1)
    y = torch.cat([y_ctx, y_ctx.new_zeros(*x_query.shape[:-1], y_ctx.shape[-1])], dim=1)
    for w in omega.to(x.dtype):
        xc, yc = x[:, :n], y[:, :n]
        s_xx, s_xy, s_yy = xc.mT @ xc / n, xc.mT @ yc / n, yc.mT @ yc / n
        x, y = (
            x + w[0] * (x @ s_xx) + w[1] * (y @ s_xy.mT),
            y + w[2] * (x @ s_xy) + w[3] * (y @ s_yy),
        )
    return -y[:, n:]
