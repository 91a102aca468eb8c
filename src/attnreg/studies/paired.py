"""Paired comparisons of two predictors (or memories, or settings) measured on the same draws:
the one way the studies turn two columns of errors into a number of standard errors.

``standard_error(values)`` is the standard error of a mean (the sample standard deviation,
``ddof = 1``, over ``√n``; NaN for fewer than two values); ``paired_difference(a, b)`` is the
mean of ``a − b`` and its standard error;
``in_standard_errors(mean, se)`` is ``mean / se``, with ``se = 0`` read as exact agreement (0)
or an exact gap (±∞); ``paired_z(a, b)`` is the two together.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

Values = Sequence[float] | np.ndarray | torch.Tensor


def _array(values: Values) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        return values.detach().to(torch.float64).cpu().numpy().ravel()
    return np.asarray(values, dtype=float).ravel()


def standard_error(values: Values) -> float:
    """The standard error of the mean of ``values`` (``ddof = 1``); NaN for fewer than two."""
    a = _array(values)
    return float(a.std(ddof=1) / math.sqrt(a.size)) if a.size > 1 else math.nan


def paired_difference(a: Values, b: Values) -> tuple[float, float]:
    """The mean of ``a − b`` over the paired draws and its standard error."""
    diff = _array(a) - _array(b)
    return (float(diff.mean()) if diff.size else math.nan), standard_error(diff)


def in_standard_errors(mean: float, se: float) -> float:
    """``mean / se``; with ``se = 0``, 0 when ``mean = 0`` (identical draws) else ±∞."""
    if se == 0:
        return 0.0 if mean == 0 else math.copysign(math.inf, mean)
    return mean / se


def paired_z(a: Values, b: Values) -> float:
    """``mean(a − b) / SE(a − b)`` over paired draws (:func:`paired_difference`)."""
    return in_standard_errors(*paired_difference(a, b))
