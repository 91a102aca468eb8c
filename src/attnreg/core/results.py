"""The result policy's overflow half: a computation whose finite inputs give a non-finite answer
is a ``ValueError`` (:func:`check_finite_result`; the underflow half is
:func:`attnreg.core.scaling.check_underflow`)."""

from __future__ import annotations

import math

import torch


def check_finite_result(
    out: torch.Tensor, name: str = "predict", largest: torch.Tensor | None = None
) -> torch.Tensor:
    """Return ``out`` if every entry is finite; else a ``ValueError``: the inputs were finite
    (they are checked on entry), so the computation overflowed at this input scale.
    ``largest``: the largest ``|out|`` per task (NaN where a task has a NaN), when the
    computation produced it (a fused kernel does, while writing ``out``): then ``out`` is not
    read again."""
    if largest is not None:
        finite = bool(torch.isfinite(largest).all())
    else:
        finite = not out.numel() or math.isfinite(float(out.detach().sum()))
    if not finite:
        if not bool(torch.isfinite(out).all()):
            raise ValueError(
                f"{name}: the result overflowed (inf/NaN) although the inputs are finite: the "
                "inputs or parameters are too large for this computation in "
                f"{str(out.dtype).removeprefix('torch.')}; rescale the inputs"
            )
    return out
