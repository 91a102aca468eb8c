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
from dataclasses import dataclass

import torch


def power_of_two_scale(x: torch.Tensor) -> torch.Tensor:
    """Per task ``s = 2^e`` (shape ``(B, 1, 1)`` for ``x`` of shape ``(B, N, k)``) with
    ``max |x / s|`` in ``[0.5, 1)`` when that maximum lies outside ``2^±(maxexp/4)``, else 1."""
    biggest = _largest(x)
    limit = int(math.log2(torch.finfo(x.dtype).max)) // 4
    low, high = torch.aminmax(biggest)
    if float(high) < 2.0**limit and float(low) >= 2.0 ** (-limit):  # the usual case: all 1
        return torch.ones_like(biggest)
    _, exponent = torch.frexp(biggest)
    extreme = (biggest > 0) & ((exponent > limit) | (exponent < -limit))
    exponent = torch.where(extreme, exponent, torch.zeros_like(exponent))
    return torch.ldexp(torch.ones_like(biggest), exponent)


def unit_scale(x: torch.Tensor) -> torch.Tensor:
    """Per task ``s = 2^e`` (``(B, 1, 1)``) with ``max |x / s|`` in ``[0.5, 1)``, whatever the
    magnitude (1 for an all-zero task)."""
    _, exponent = torch.frexp(_largest(x))
    return torch.ldexp(torch.ones_like(x[..., :1, :1]), exponent)


def row_exponents(x: torch.Tensor) -> torch.Tensor:
    """Per row (last axis) the exponent ``e`` with ``max|row| / 2ᵉ`` in ``[0.5, 1)``; 0 for a
    zero row. Shape ``(…, M, 1)``."""
    _, exponent = torch.frexp(x.abs().amax(-1, keepdim=True))
    return exponent


def ldexp(x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """``x · 2^shift`` (``shift`` integer, broadcast), in factors of at most ``2^±1000`` so that
    no float64 power of two overflows on the way: exact wherever the result is a normal number
    (float64; in float32 only for ``|shift| ≤ 126``, the range of its powers of two)."""
    shift = shift.to(torch.int64)
    while bool((shift != 0).any()):
        part = shift.clamp(-1000, 1000)
        x = x * torch.pow(2.0, part.to(x.dtype))
        shift = shift - part
    return x


def _largest(x: torch.Tensor) -> torch.Tensor:
    """``max |x|`` per task, ``(B, 1, 1)``, from max and min: no ``|x|`` temporary (about 8×
    faster than ``vector_norm(ord=inf)`` over two dimensions on the CPU)."""
    flat = x.detach()
    return torch.maximum(
        flat.amax(dim=(-2, -1), keepdim=True), -flat.amin(dim=(-2, -1), keepdim=True)
    )


@dataclass(frozen=True)
class Rescaling:
    """How a batch of tasks was rescaled: queries are divided by ``x`` (``(B, 1, 1)``), outputs
    multiplied by ``output``, and ``ridge`` is the λ to use on the rescaled data."""

    x: torch.Tensor
    output: torch.Tensor
    ridge: float | torch.Tensor

    def queries(self, xq: torch.Tensor) -> torch.Tensor:
        """Queries in the rescaled units."""
        return xq / self.x if bool((self.x != 1).any()) else xq

    def outputs(self, out: torch.Tensor) -> torch.Tensor:
        """Predictions back in the caller's units."""
        return out * self.output if bool((self.output != 1).any()) else out


def rescale_tasks(
    x: torch.Tensor, y: torch.Tensor, ridge: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor, Rescaling]:
    """``(X/s, Y/t, rescaling)`` with the per-task powers of two of :func:`power_of_two_scale`.

    Ridge on ``X/s`` is ridge with ``λ/s²``. When that leaves the float range (λ dwarfs ``XᵀX``
    by more than √(largest float), e.g. tiny X), λ/s² is capped at ``c = √(largest float)`` and
    the outputs are multiplied by ``c·s²/λ``: in that regime every direction's ridge factor is
    ``1/(e + λ/s²) = (c·s²/λ) / (e + c)`` up to a relative ``e/c < 10⁻¹⁵⁴`` (float64). The
    output factor ``t·c·s²/λ`` is formed from the exponents, so it does not over- or
    underflow unless the answer itself does."""
    sx, sy = power_of_two_scale(x), power_of_two_scale(y)
    if bool((sx != 1).any()):
        x = x / sx
    if bool((sy != 1).any()):
        y = y / sy
    cap = float(torch.finfo(x.dtype).max ** 0.5)
    lam: float | torch.Tensor = ridge
    output = sy
    if ridge > 0 and bool((sx != 1).any()):
        wanted = ridge / sx.square()  # inf where it overflows: then it is capped too
        capped = wanted > cap
        lam = wanted.clamp(max=cap).reshape(-1)
        if bool(capped.any()):
            ex, ey = power_of_two_exponent(sx), power_of_two_exponent(sy)
            shift = ey + torch.where(capped, 2 * ex, torch.zeros_like(ex))
            mantissa = torch.where(capped, torch.full_like(sx, cap / ridge), torch.ones_like(sx))
            half = torch.div(shift, 2, rounding_mode="floor")
            output = torch.ldexp(torch.ldexp(mantissa, half), shift - half)
    return x, y, Rescaling(sx, output, lam)


def power_of_two_exponent(s: torch.Tensor) -> torch.Tensor:
    """``e`` of an exact power of two ``s = 2^e``."""
    _, exponent = torch.frexp(s)
    return exponent - 1
