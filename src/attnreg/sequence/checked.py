"""What every sequence layer's result goes through: the ``Result`` of a computation (its
output and, when the computation produced it, the largest ``|o|`` per batch element and head)
and :func:`checked_result`, the estimators' overflow and underflow policy per head; and
:func:`scaled`, the query scale applied once."""

from __future__ import annotations

from collections.abc import Callable

import torch

from attnreg.core.results import check_finite_result
from attnreg.core.scaling import underflow_error, underflowed, unit_scale
from attnreg.sequence.inputs import check_finite_qkv

Result = tuple[torch.Tensor, torch.Tensor | None]
"""A layer's output ``o`` and, when the computation produced it (the fused kernel does, while
writing ``o``), the largest ``|o|`` of each batch element and head (``(B, H)``, NaN where
``o`` has one)."""

Layer = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float], Result]
"""``layer(q, k, v, scale)``: a layer's computation with its parameters fixed, queries scaled by
``scale``."""


def checked_result(
    layer: Layer, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, name: str
) -> torch.Tensor:
    """``layer(q, k, v, scale)``'s output unless it overflowed (:func:`check_finite_result`) or
    underflowed: the estimators' policy (:func:`attnreg.core.scaling.underflowed`), per batch
    element and head (the heads are separate regressions) — a head whose output is entirely
    zero or subnormal while ``layer`` on ``scale · q``, ``k``, ``v`` rescaled to unit magnitude
    (per batch element and head) is not is a ``ValueError`` naming ``q``, ``k`` and the head
    (inputs so small that ``q·k`` and ``k·k`` underflow, e.g. ``q, k ~ 1e-200`` in float64).
    Both checks read the largest ``|o|`` per batch element and head from the layer's
    :data:`Result` when it has it."""
    out, largest = layer(q, k, v, scale)
    if largest is not None and not bool(torch.isfinite(largest).all()):
        check_finite_qkv(q, k, v)  # the fused form's inputs are checked only now
    out = check_finite_result(out, name, largest)
    if out.numel() == 0:
        return out
    per_head = out.detach().abs().amax(dim=(-2, -1)) if largest is None else largest
    if not bool((per_head < torch.finfo(out.dtype).tiny).any()):
        return out
    unit_query_scale = 0.0 if scale == 0 else 1.0  # unit magnitude takes the scale's away too
    with torch.no_grad():
        unit = layer(q / unit_scale(q), k / unit_scale(k), v / unit_scale(v), unit_query_scale)[0]
    bad = underflowed(out.flatten(0, 1), unit.flatten(0, 1))
    if bool(bad.any()):
        b, h = divmod(int(bad.nonzero()[0, 0]), out.shape[1])
        cause = (
            "q and k are so small that the products q·k (and k·k) underflow "
            f"(batch element {b}, head {h})"
        )
        raise underflow_error(name, None, out.dtype, cause)
    return out


def scaled(q: torch.Tensor, scale: float) -> torch.Tensor:
    return q if scale == 1 else q * scale
