"""Exact rescaling by powers of two, so that regression stays exact at extreme magnitudes.

Least squares is scale-equivariant: ``ŷ(aX, bY, aX*) = b · ŷ(X, Y, X*)``, and ridge with λ
becomes ridge with ``λ/a²``. A design of magnitude 1e±300 makes ``XᵀX`` overflow or underflow,
so the regression layers divide each task's data by ``s = 2^e`` (``e`` the binary exponent of its
largest magnitude) before they build their weights, and multiply the answer back. Division by a
power of two is exact in binary floating point (IEEE 754) unless a value leaves the normal range,
so data of ordinary magnitude (within ``2^±(maxexp/4)``, :func:`ordinary_limit`: about 1e±77 in
float64, 4e±9 in float32) is left as it is and the numbers do not change.

The contract: the answer is that of the **given** problem (ridge with the given λ, not with λ
scaled along with the data), computed without intermediate over- or underflow; where that
answer itself lies outside the float range — ridge on a tiny design, ``ŷ ≈ x* XᵀY / λ`` — the
caller gets a ``ValueError``, never zeros, Inf or NaN.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch


def ordinary_limit(dtype: torch.dtype, power: int = 1) -> int:
    """The exponent ``L = ⌊maxexp / (4·power)⌋`` that bounds ordinary magnitudes in ``dtype``;
    ``maxexp`` is the dtype's maximum exponent, its largest finite value lies just below
    ``2^maxexp`` (1024 in float64, 128 in float32).

    Why a quarter: the regression and memory kernels form products of up to four data-sized
    factors (a Gram matrix ``XᵀX`` times data, the square of a Gram, ``|s|ⁿ⁻¹`` for a state
    whose entries are squared through the patterns), so numbers within ``2^±L`` keep every
    such product inside ``2^±maxexp``, the normal range. ``power`` shares the budget out for a
    ``power``-th power: ``|x|^power`` of an ``x`` within ``2^±(L/power)`` stays within ``2^±L``.
    This is the one threshold of the package's rescaling (:func:`power_of_two_scale` and the
    memories' energies): about 1e±77 in float64 and 4e±9 in float32."""
    maxexp = int(math.log2(torch.finfo(dtype).max)) + 1
    return maxexp // (4 * power)


def is_ordinary(maxima: torch.Tensor, limit: int) -> bool:
    """Whether every entry of ``maxima`` (non-negative magnitudes) has a binary exponent ``e``
    in ``[−limit, limit]`` (``x = m·2ᵉ``, ``m ∈ [0.5, 1)``, as :func:`torch.frexp`), i.e. lies in
    ``[2^(−limit−1), 2^limit)``; a zero does not. Such data are used as given."""
    low, high = torch.aminmax(maxima.detach())
    return 2.0 ** (-limit - 1) <= float(low) and float(high) < 2.0**limit


def power_of_two_scale(x: torch.Tensor) -> torch.Tensor:
    """Per task ``s = 2^e`` (shape ``(B, 1, 1)`` for ``x`` of shape ``(B, N, k)``) with
    ``max |x / s|`` in ``[0.5, 1)`` when that maximum's exponent lies outside
    ``±``:func:`ordinary_limit`, else 1 (:func:`is_ordinary`)."""
    limit = ordinary_limit(x.dtype)
    if _surely_ordinary(x, limit):
        return x.new_ones((*x.shape[:-2], 1, 1))
    return _exact_scale(x, limit)


def _exact_scale(x: torch.Tensor, limit: int) -> torch.Tensor:
    """:func:`power_of_two_scale` from the exact per-task maximum (:func:`_largest`)."""
    biggest = _largest(x)
    if is_ordinary(biggest, limit):  # the usual case: all 1
        return torch.ones_like(biggest)
    _, exponent = torch.frexp(biggest)
    extreme = (biggest > 0) & ((exponent > limit) | (exponent < -limit))
    exponent = torch.where(extreme, exponent, torch.zeros_like(exponent))
    return torch.ldexp(torch.ones_like(biggest), exponent)


def unscaled(x: torch.Tensor) -> bool:
    """Whether :func:`power_of_two_scale` of ``x`` is 1 for every task (data used as given)."""
    limit = ordinary_limit(x.dtype)
    return _surely_ordinary(x, limit) or bool((_exact_scale(x, limit) == 1).all())


def _surely_ordinary(x: torch.Tensor, limit: int) -> bool:
    """A one-pass sufficient test that every task's ``max |x|`` is ordinary
    (:func:`is_ordinary`: in ``[2^(−limit−1), 2^limit)``).

    Per task ``max |x| ≤ ‖x‖₂ ≤ √(Nk) · max |x|``; the 2-norm (one reduction, no temporary,
    about 1.6× faster than the max and min of :func:`_largest`) is tested against
    ``[2^−limit · √(Nk), 2^(limit−1))``, a factor 2 inside the range on each side for its
    rounding. An overflowed or underflowed norm fails the test, and the caller then takes the
    exact per-task maximum."""
    if x.numel() == 0:
        return False
    norms = torch.linalg.vector_norm(x.detach(), dim=(-2, -1))
    low, high = torch.aminmax(norms)
    size = x.shape[-2] * x.shape[-1]
    return float(high) < 2.0 ** (limit - 1) and float(low) >= 2.0**-limit * size**0.5


def unit_scale(x: torch.Tensor) -> torch.Tensor:
    """Per task ``s = 2^e`` (``(B, 1, 1)``) with ``max |x / s|`` in ``[0.5, 1)``, whatever the
    magnitude (1 for an all-zero task)."""
    _, exponent = torch.frexp(_largest(x))
    return torch.ldexp(torch.ones_like(x[..., :1, :1]), exponent)


def row_exponents(x: torch.Tensor) -> torch.Tensor:
    """Per row (last axis) the exponent ``e`` with ``max|row| / 2ᵉ`` in ``[0.5, 1)``; 0 for a
    zero row. Shape ``(…, M, 1)``."""
    _, e = torch.frexp(x.abs().amax(-1, keepdim=True))
    return e


def _largest(x: torch.Tensor) -> torch.Tensor:
    """``max |x|`` per task, ``(B, 1, 1)``, from max and min: no ``|x|`` temporary (about 8×
    faster than ``vector_norm(ord=inf)`` over two dimensions on the CPU)."""
    flat = x.detach()
    return torch.maximum(
        flat.amax(dim=(-2, -1), keepdim=True), -flat.amin(dim=(-2, -1), keepdim=True)
    )


@dataclass(frozen=True)
class Rescaling:
    """How a batch of tasks was rescaled (:func:`rescale_tasks`): the context inputs were divided
    by ``x = 2^ex`` (``(B, 1, 1)``), ``ridge`` is the λ to use on the rescaled data, and an
    answer computed in the rescaled units is multiplied by ``mantissa · 2^shift`` (both
    ``(B, 1, 1)``; the mantissa is 1 unless λ was capped) to be in the caller's units."""

    x: torch.Tensor
    shift: torch.Tensor
    mantissa: torch.Tensor
    ridge: float | torch.Tensor
    active: bool
    """Whether any task was rescaled (``x ≠ 1``, ``shift ≠ 0`` or ``mantissa ≠ 1`` somewhere);
    else the data are used as given."""

    def queries(self, xq: torch.Tensor) -> torch.Tensor:
        """Inputs (e.g. another context) in the rescaled units: ``xq / x``."""
        return xq / self.x if bool((self.x != 1).any()) else xq

    def answer(
        self,
        xq: torch.Tensor,
        forward: Callable[[torch.Tensor], torch.Tensor],
        name: str = "predict",
    ) -> torch.Tensor:
        """``forward`` — a map linear in the queries, on the rescaled tasks — applied to the
        queries ``xq`` (``(B, M, d)``), in the caller's units.

        The queries get their own power of two ``2^eq`` (:func:`unit_scale`): ``xq / x`` alone
        over- or underflows when the queries and the context are at opposite extremes. The
        answer is ``forward(xq / 2^eq) · mantissa`` times ``2^(shift + eq − ex)``, applied by
        :func:`times_power_of_two` (exact). Data of ordinary magnitude are passed to
        ``forward`` as they are. An answer that is zero or subnormal everywhere in a task while
        its rescaled value is not is below the float range: ``ValueError``
        (:func:`underflow_error`), never silent zeros."""
        if xq.numel() == 0 or (not self.active and unscaled(xq)):
            return forward(xq)
        sq = unit_scale(xq)
        scaled = forward(xq / sq)
        if bool((self.mantissa != 1).any()):
            scaled = scaled * self.mantissa
        out = times_power_of_two(scaled, self.shift + exponent(sq) - exponent(self.x))
        lost = underflowed(out, scaled)
        if bool(lost.any()):
            raise underflow_error(name, int(lost.nonzero()[0, 0]), out.dtype, RIDGE_UNDERFLOW)
        return out


RIDGE_UNDERFLOW = (
    "the answer of this ridge problem is below the float range (λ much larger than XᵀX gives "
    "about x* XᵀY / λ; to keep the answer at the data's scale, scale λ by the square of the "
    "inputs' scale)"
)


def rescale_tasks(
    x: torch.Tensor, y: torch.Tensor, ridge: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor, Rescaling]:
    """``(X/s, Y/t, rescaling)`` with the per-task powers of two of :func:`power_of_two_scale`.

    The answer stays that of the **given** problem, ridge with the given λ on ``X``: ridge on
    ``X/s`` is ridge with ``λ/s²``, and the outputs are multiplied by ``t``. When ``λ/s²``
    leaves the float range (λ dwarfs ``XᵀX`` by more than √(largest float), e.g. tiny X, or a
    λ beyond √(largest float): then every task is brought to unit magnitude), it is
    capped at ``c = √(largest float)`` and the outputs are multiplied by ``t·c·s²/λ`` as well:
    in that regime every direction's ridge factor is ``1/(e + λ/s²) = (c·s²/λ) / (e + c)`` up
    to a relative ``e/c < 10⁻¹⁵⁴`` (float64). The output factor is kept as a mantissa and a
    power of two (:class:`Rescaling`), so it neither over- nor underflows; the answer itself
    may (``ŷ ≈ x* XᵀY / λ`` for a tiny design), and then :meth:`Rescaling.answer` raises."""
    cap = float(torch.finfo(x.dtype).max ** 0.5)
    # λ past √(largest float) is capped, which is exact only on unit-magnitude data
    sx = unit_scale(x) if ridge > cap else power_of_two_scale(x)
    sy = power_of_two_scale(y)
    scaled_x, scaled_y = bool((sx != 1).any()), bool((sy != 1).any())
    if scaled_x:
        x = x / sx
    if scaled_y:
        y = y / sy
    lam: float | torch.Tensor = ridge
    shift = exponent(sy) if scaled_y else torch.zeros_like(sy, dtype=torch.int32)
    mantissa = torch.ones_like(sx)
    active = scaled_x or scaled_y
    if ridge > 0 and (scaled_x or ridge > cap):
        wanted = ridge / sx.square()  # inf where it overflows: then it is capped too
        capped = wanted > cap
        lam = wanted.clamp(max=cap).reshape(-1)
        if bool(capped.any()):
            # c·s²/λ = (mc/mr)·2^(kc − kr + 2ex) with c = mc·2^kc, λ = mr·2^kr: no overflow
            mc, kc = math.frexp(cap)
            mr, kr = math.frexp(ridge)
            mantissa = torch.where(capped, torch.full_like(sx, mc / mr), mantissa)
            shift = shift + torch.where(capped, kc - kr + 2 * exponent(sx), 0)
            active = active or bool((shift != 0).any() or (mantissa != 1).any())
    return x, y, Rescaling(sx, shift, mantissa, lam, active)


def exponent(s: torch.Tensor) -> torch.Tensor:
    """``e`` of an exact power of two ``s = 2^e`` (an integer tensor of ``s``'s shape)."""
    _, e = torch.frexp(s)
    return e - 1


def times_power_of_two(x: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """``x · 2^e`` (``e`` integer, broadcast against ``x``), exact unless the result leaves the
    normal range: applied in steps of at most ``2^±(maxexp − 2)`` so that no factor over- or
    underflows; every intermediate lies between ``x`` and the result."""
    limit = int(math.log2(torch.finfo(x.dtype).max)) - 1
    left = e
    while bool((left != 0).any()):
        step = left.clamp(-limit, limit)
        x = x * torch.ldexp(torch.ones_like(step, dtype=x.dtype), step)
        left = left - step
    return x


def underflowed(out: torch.Tensor, scaled: torch.Tensor) -> torch.Tensor:
    """Per task (``(B,)``): every entry of ``out`` is zero or subnormal while ``scaled`` (the
    same answer in rescaled units) has a normal entry — the answer is below the float range."""
    tiny = torch.finfo(out.dtype).tiny
    lost = (out.detach().abs() < tiny).flatten(1).all(dim=1)
    return lost & (scaled.detach().abs() >= tiny).flatten(1).any(dim=1)


def underflow_error(
    name: str,
    task: int | None,
    dtype: torch.dtype,
    cause: str = "the inputs are too small for this computation",
) -> ValueError:
    """The error of an answer below the float range (:func:`underflowed`); ``task`` is the
    first such task of a batch (``None``: not batched)."""
    kind = str(dtype).removeprefix("torch.")
    where = "" if task is None else f" for task {task}"
    return ValueError(
        f"{name}: the result underflowed{where} (every entry is zero or subnormal, "
        "although the answer on the same inputs rescaled to unit magnitude is not zero): "
        f"{cause} in {kind}; rescale the inputs"
    )


def check_underflow(
    out: torch.Tensor,
    compute: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    x_ctx: torch.Tensor,
    y_ctx: torch.Tensor,
    x_query: torch.Tensor,
    name: str = "predict",
    cause: str = "the inputs are too small for this computation",
) -> torch.Tensor:
    """Return ``out`` (``(B, M, dy)``) unless a task's answer underflowed; else ``ValueError``
    naming ``name`` and ``cause`` and asking to rescale the inputs.

    A task underflowed when every entry of its answer is zero or subnormal while ``compute``
    (the same prediction, on checked batched tensors) on its inputs rescaled by powers of two to
    unit magnitude has a normal entry: the answer is not zero, it is below the floating range
    at this input scale (e.g. one GD step, ``(η/N) x* XᵀY``, is of order ``s³`` for inputs of
    magnitude ``s = 1e-300``). A genuinely zero answer (``y = 0``, queries orthogonal to the
    context) is zero at unit scale too and is returned. ``compute`` runs only when some task's
    answer is entirely zero or subnormal. Sequence-layer inputs ``(B, H, T, d)`` are rescaled
    per batch element and head, and a task is a batch element.
    """
    if out.numel() == 0:
        return out
    tiny = torch.finfo(out.dtype).tiny
    # the largest magnitude of each task's answer (amax of |out|: 4x faster than comparing
    # every |entry| with tiny, 8x faster than vector_norm(ord=inf), measured at P8's size)
    largest = out.detach().flatten(1).abs().amax(dim=1)
    if not bool((largest < tiny).any()):
        return out
    with torch.no_grad():
        unit = compute(
            x_ctx / unit_scale(x_ctx), y_ctx / unit_scale(y_ctx), x_query / unit_scale(x_query)
        )
    bad = underflowed(out, unit)
    if bool(bad.any()):
        raise underflow_error(name, int(bad.nonzero()[0, 0]), out.dtype, cause)
    return out
