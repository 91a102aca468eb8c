"""How a measured capacity curve ``N_max(d)`` grows, with the uncertainty of its seeds: the
two tests the capacity claims use.

Each capacity row holds ``N_max`` per seed (``n_max_per_seed``); the search that found it stops
within ``max(1, ⌊N/64⌋)`` patterns (:func:`~attnreg.studies.capacity.sweeps.search_capacity`),
a uniform uncertainty of that width on each value. Resampling the seeds at every ``d``
(a bootstrap with a fixed generator) gives the spread over seeds; the resolution adds its own
variance. Both are deterministic for a given set of rows.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

RESOLUTION = 1 / 64
"""The capacity search's relative stopping width (:data:`Family.rtol`)."""
BOOTSTRAP = 1000
"""Resamples of the seeds."""


def per_seed(row: dict[str, Any]) -> np.ndarray:
    """The row's ``N_max`` of every seed."""
    return np.array([float(v) for v in str(row["n_max_per_seed"]).split(";")], dtype=float)


def usable(curve: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The points of ``curve`` where every seed stored at least one pattern (a log exists)."""
    return [r for r in curve if per_seed(r).min() > 0]


def _resamples(curve: list[dict[str, Any]], seed: int) -> np.ndarray:
    """``(BOOTSTRAP, len(curve))``: the mean ``log N_max`` at each d over seeds drawn with
    replacement; row 0 is the measured mean."""
    rng = np.random.default_rng(seed)
    out = np.empty((BOOTSTRAP, len(curve)))
    for j, row in enumerate(curve):
        logs = np.log(per_seed(row))
        picks = rng.integers(0, len(logs), size=(BOOTSTRAP, len(logs)))
        out[:, j] = logs[picks].mean(axis=1)
        out[0, j] = logs.mean()
    return out


def _rss(x: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Residual sum of squares of the least-squares line of each row of ``ys`` against ``x``."""
    design = np.stack([np.ones_like(x), x], axis=1)
    coef, *_ = np.linalg.lstsq(design, ys.T, rcond=None)
    return ((ys.T - design @ coef) ** 2).sum(axis=0)


def exponential_preference(curve: list[dict[str, Any]], seed: int = 0) -> float:
    """The share of seed resamples in which ``log N_max`` is fitted better by a line in ``d``
    (exponential growth, ``N_max ∝ e^{b d}``) than by a line in ``log d`` (a power law,
    ``N_max ∝ d^c``): two models with two parameters each, compared by their residuals."""
    points = usable(curve)
    if len(points) < 3:
        return math.nan
    d = np.array([float(r["d"]) for r in points])
    ys = _resamples(points, seed)
    return float(np.mean(_rss(d, ys) < _rss(np.log(d), ys)))


def trend_against(
    curve: list[dict[str, Any]], theory: list[float], seed: int = 0
) -> tuple[float, float]:
    """The slope of the distance ``|log(N_max / theory)|`` against ``log d`` and its standard
    error (the seeds' bootstrap spread and the search's resolution, added in variance). A
    large-d formula that the measurement approaches (or follows up to a constant factor)
    leaves a slope at or below 0; one that the measurement leaves behind, a positive slope."""
    points = [(r, t) for r, t in zip(curve, theory, strict=True) if per_seed(r).min() > 0]
    if len(points) < 3:
        return math.nan, math.nan
    x = np.log([float(r["d"]) for r, _ in points])
    ys = np.abs(_resamples([r for r, _ in points], seed) - np.log([t for _, t in points]))
    weights = (x - x.mean()) / ((x - x.mean()) ** 2).sum()
    slopes = ys @ weights
    widths = [max(1.0, math.floor(RESOLUTION * r["n_max"])) / r["n_max"] for r, _ in points]
    resolution = np.array(
        [
            math.log1p(w) / math.sqrt(12 * len(per_seed(r)))
            for (r, _), w in zip(points, widths, strict=True)
        ]
    )
    variance = float(np.var(slopes[1:])) + float((weights**2 * resolution**2).sum())
    return float(slopes[0]), math.sqrt(variance)
