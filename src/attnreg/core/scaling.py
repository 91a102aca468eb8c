"""Exact rescaling by powers of two, so that regression stays exact at extreme magnitudes.

Least squares is scale-equivariant: ``ŷ(aX, bY, aX*) = b · ŷ(X, Y, X*)``, and ridge with λ
becomes ridge with ``λ/a²``. A design of magnitude 1e±300 makes ``XᵀX`` overflow or underflow,
so the regression layers divide each task's data by ``s = 2^e`` (``e`` the binary exponent of its
largest magnitude) before they build their weights, and multiply the answer back. Division by a
power of two is exact in binary floating point (IEEE 754) unless a value leaves the normal range,
so data of ordinary magnitude (within ``2^±(maxexp/4)``: about 1e±77 in float64, 4e±9 in
float32) is left as it is and the numbers do not change.
"""

from __future__ import annotations

import math

import torch


def power_of_two_scale(x: torch.Tensor) -> torch.Tensor:
    """Per task ``s = 2^e`` (shape ``(B, 1, 1)`` for ``x`` of shape ``(B, N, k)``) with
    ``max |x / s|`` in ``[0.5, 1)`` when that maximum lies outside ``2^±(maxexp/4)``, else 1."""
    biggest = x.detach().abs().amax(dim=(-2, -1), keepdim=True)
    _, exponent = torch.frexp(biggest)
    limit = int(math.log2(torch.finfo(x.dtype).max)) // 4
    extreme = (biggest > 0) & ((exponent > limit) | (exponent < -limit))
    exponent = torch.where(extreme, exponent, torch.zeros_like(exponent))
    return torch.ldexp(torch.ones_like(biggest), exponent)


def rescale_tasks(
    x: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(X/s, Y/t, s, t)`` with the per-task powers of two of :func:`power_of_two_scale`
    (the inputs themselves, unchanged, when every scale is 1)."""
    sx, sy = power_of_two_scale(x), power_of_two_scale(y)
    if bool((sx != 1).any()):
        x = x / sx
    if bool((sy != 1).any()):
        y = y / sy
    return x, y, sx, sy


def rescaled_ridge(ridge: float, sx: torch.Tensor) -> float | torch.Tensor:
    """λ for data divided by ``s``: ridge on ``X/s`` equals ridge on ``X`` with ``λ/s²`` (per
    task, ``(B,)``). Past √(largest float) (1e154 in float64) the ridge prediction on the
    rescaled data (``|X/s| < 1``) is zero to that relative precision, so ``λ/s²`` is capped
    there: no overflow and no subnormal whitened Gram matrix."""
    if ridge == 0 or not bool((sx != 1).any()):
        return ridge
    return (ridge / sx.reshape(-1).square()).clamp(max=torch.finfo(sx.dtype).max ** 0.5)
