"""The capacity curves ``N_max(d)`` of the capacity study's rows, and the straight-line fits its
summaries and claims read them with."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def fit_line(x: list[float], y: list[float]) -> tuple[float, float]:
    """Least-squares slope and R² of ``y`` against ``x``."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(xs) < 2:
        return math.nan, math.nan
    slope, intercept = np.polyfit(xs, ys, 1)
    resid = ys - (slope * xs + intercept)
    total = float(((ys - ys.mean()) ** 2).sum())
    return float(slope), 1.0 - float((resid**2).sum()) / total if total > 0 else 1.0


def family_curve(rows: list[dict[str, Any]], family: str) -> list[dict[str, Any]]:
    return sorted(
        (r for r in rows if r["kind"] == "capacity" and r["family"] == family),
        key=lambda r: r["d"],
    )
