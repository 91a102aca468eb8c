"""The capacity study's claims ledger: each source's capacity law tested by the measured
``N_max(d)`` curves and the digits grid, against the thresholds below."""

from __future__ import annotations

import math
from typing import Any

from attnreg.studies.capacity.config import CapacityConfig
from attnreg.studies.capacity.curves import family_curve, fit_line
from attnreg.studies.capacity.families import HEBBIAN_ALPHA
from attnreg.studies.capacity.summary import (
    STRONG,
    dam_fits,
    digits_cells,
    hebbian_band,
    power_degrees,
)
from attnreg.studies.ledger import Claim

EXPONENT_GAP = 0.5
"""A dense associative memory's fitted log-log slope "is" ``n − 1`` within this."""
PINV_GAP = 0.05
"""The pseudo-inverse memory's searched ``N_max / d`` "is" 1 within this."""


def capacity_claims(rows: list[dict[str, Any]], config: CapacityConfig) -> list[Claim]:
    """The claims of Tang / Kohonen (``N_max = d``), Amit et al. (``0.138 d``), Krotov &
    Hopfield (``d^(n−1)``), Ramsauer et al. (exponential) and Millidge et al. (digits)."""
    out = []
    pinv = family_curve(rows, "pinv")
    if pinv:
        out.append(
            Claim(
                "Tang (regression as memory; Kohonen 1972)",
                "the regression (pseudo-inverse) memory recalls up to N = d patterns exactly",
                "|searched N_max / d − 1| (clean queries)",
                "<=",
                PINV_GAP,
                {f"d = {r['d']}": abs(r["n_max"] / r["d"] - 1) for r in pinv},
            )
        )
    band = {d: r for d, r in hebbian_band(rows).items() if d >= 200}
    if band:
        out.append(
            Claim(
                "Amit, Gutfreund & Sompolinsky 1985 (Hebbian Hopfield)",
                "the Hebbian network stores about 0.138 d patterns",
                "distance of 0.138 outside the measured band of N_max / d (0: inside)",
                "<=",
                0.0,
                {
                    f"d = {d}": max(
                        min(r.values()) - HEBBIAN_ALPHA, HEBBIAN_ALPHA - max(r.values()), 0
                    )
                    for d, r in band.items()
                },
            )
        )
    dam = dam_fits(rows)
    if dam:
        out.append(
            Claim(
                "Krotov & Hopfield 2016 (dense associative memory)",
                "a polynomial energy of degree n stores N_max ∝ d^(n−1) patterns",
                "|log-log slope of N_max(d) − (n − 1)|",
                "<=",
                EXPONENT_GAP,
                {f"n = {n}": abs(raw - (n - 1)) for n, (raw, _, _) in dam.items()},
            )
        )
    growth = {}
    for family in ("softmax", "softmax_sphere"):
        curve = [r for r in family_curve(rows, family) if r["n_max"] > 0]
        if len(curve) >= 3:
            _, r2 = fit_line([r["d"] for r in curve], [math.log2(r["n_max"]) for r in curve])
            growth[family] = r2
    if growth:
        out.append(
            Claim(
                "Ramsauer et al. 2021 (modern Hopfield networks)",
                "softmax retrieval stores exponentially many patterns in d",
                "R² of log2 N_max against d",
                ">=",
                config.min_softmax_growth_r2,
                growth,
            )
        )
    grid = digits_cells(rows)
    if grid:
        sims = [
            cells[(sim, sep)] > cells[("dot", sep)]
            for cells in grid.values()
            for sep in ("softmax", "max")
            for sim in ("euclidean", "manhattan")
        ]
        seps = [
            max(cells[(sim, sep)] for sep in STRONG) > cells[(sim, "identity")]
            for cells in grid.values()
            for sim in ("dot", "euclidean", "manhattan")
        ]
        source = "Millidge et al. 2022 (universal Hopfield networks)"
        out += [
            Claim(
                source,
                "on images, Euclidean and Manhattan similarity recall better than the dot product",
                "fraction of digits cells where they recall more than dot",
                ">=",
                1.0,
                {"": sum(sims) / len(sims)},
            ),
            Claim(
                source,
                "a stronger separation (power, softmax, max) recalls better than identity",
                "fraction of digits cells where the best strong separation beats identity",
                ">=",
                1.0,
                {"": sum(seps) / len(seps)},
            ),
        ]
    sweep = power_degrees(rows)
    if sweep:
        degrees = sorted({n for r in sweep.values() for n in r})
        out.append(
            Claim(
                "Millidge et al. 2022 (universal Hopfield networks)",
                "a higher power separates better: recall grows with the polynomial's degree",
                f"fraction of (query, similarity) cells recalling more at degree {degrees[-1]} "
                f"than at {degrees[0]}",
                ">=",
                1.0,
                {"": sum(r[degrees[-1]] > r[degrees[0]] for r in sweep.values()) / len(sweep)},
            )
        )
    return out
