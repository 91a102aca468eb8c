"""The measured answers of the capacity study about the energy family (growth laws of
``N_max(d)``, energy descent, the OLS-Transformer as one quadratic step, cost per retrieval)."""

from __future__ import annotations

from typing import Any

import numpy as np

from attnreg.studies.answers import summary_table
from attnreg.studies.capacity.config import CapacityConfig
from attnreg.studies.capacity.curves import family_curve, fit_line

ENERGY_LAWS = {
    "quadratic": "linear",
    "power3": "polynomial",
    "power4": "polynomial",
    "softmax": "exponential",
}


def growth_fits(curve: list[dict[str, Any]]) -> dict[str, float]:
    """The three growth laws fitted to one ``N_max(d)`` curve (rows with ``N_max > 0``):

    * linear ``N_max = c·d``: least squares through the origin, ``c = Σ N d / Σ d²``, with
      ``R²`` of that fit;
    * polynomial: slope and ``R²`` of ``ln N_max`` against ``ln d``;
    * exponential: slope (bits per dimension) and ``R²`` of ``log2 N_max`` against ``d``.
    """
    pts = [(float(r["d"]), float(r["n_max"])) for r in curve if r["n_max"] > 0]
    if len(pts) < 2:
        return {}
    d = np.array([p[0] for p in pts])
    n = np.array([p[1] for p in pts])
    c = float((n * d).sum() / (d * d).sum())
    total = float(((n - n.mean()) ** 2).sum())
    lin_r2 = 1.0 - float(((n - c * d) ** 2).sum()) / total if total > 0 else 1.0
    poly, poly_r2 = fit_line(list(np.log(d)), list(np.log(n)))
    expo, expo_r2 = fit_line(list(d), list(np.log2(n)))
    return {
        "linear_c": c,
        "linear_r2": lin_r2,
        "loglog_slope": poly,
        "loglog_r2": poly_r2,
        "bits_per_dim": expo,
        "exp_r2": expo_r2,
    }


def summarize_energy_family(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One table for the whole family: per separation ``F`` and read-out, the fitted laws of
    ``N_max(d)``; and one of ``N_max`` per ``d``."""
    fits_rows: list[list[Any]] = []
    curves: list[tuple[str, str, dict[int, float]]] = []
    first = None
    for key, law in ENERGY_LAWS.items():
        for readout in ("pattern", "state"):
            curve = family_curve(rows, f"energy:{key}@{readout}")
            if not curve:
                continue
            first = first or curve[0]
            fits = growth_fits(curve)
            curves.append((key, readout, {r["d"]: r["n_max"] for r in curve}))
            if fits:
                fits_rows.append(
                    [
                        key,
                        readout,
                        law,
                        fits["linear_c"],
                        fits["linear_r2"],
                        fits["loglog_slope"],
                        fits["bits_per_dim"],
                        fits["exp_r2"],
                    ]
                )
    if first is None:
        return {}
    ds = sorted({d for _, _, by_d in curves for d in by_d})
    table: list[list[Any]] = [
        [key, readout, *(by_d.get(d, "") for d in ds)] for key, readout, by_d in curves
    ]
    quadratic = next((f for f in fits_rows if f[0] == "quadratic" and f[1] == "pattern"), None)
    note = (
        f"The quadratic member is the regression (pseudo-inverse) memory: N_max = "
        f"{quadratic[3]:.3g} d here because each query is a stored pattern with "
        f"{first['query']}, which it must also correct; with clean queries its N_max is d (the "
        "pseudo-inverse row above)."
        if quadratic
        else ""
    )
    lead = (
        f"{first['model']}, whitened similarity G^-1/2 K ξ, ±1 patterns, {first['query']}, "
        f"ε = {first['epsilon']:g}, {first['seeds']} seeds."
    )
    return {
        "energy family: N_max(d)": summary_table(
            lead, ["F", "read-out"] + [f"d = {d}" for d in ds], table, note
        ),
        "energy family: growth laws fitted to N_max(d)": summary_table(
            "Fits of each curve: N_max = c·d, the log-log slope, and bits per dimension.",
            [
                "F",
                "read-out",
                "expected",
                "c",
                "R² (linear)",
                "log-log slope",
                "bits/dim",
                "R² (exp)",
            ],
            fits_rows,
        ),
    }


def summarize_energy_checks(
    rows: list[dict[str, Any]], config: CapacityConfig
) -> str | dict[str, Any]:
    checks = [r for r in rows if r["kind"] == "energy_check"]
    if not checks:
        return "not measured"
    worst = max(checks, key=lambda r: r["max_relative_increase"])
    ok = worst["max_relative_increase"] <= config.max_energy_increase
    return summary_table(
        f"{'Yes' if ok else 'NO'}: over {len(checks)} runs ({checks[0]['steps']} steps, d = "
        f"{checks[0]['d']}) no step raises E by more than {config.max_energy_increase:g} relative "
        f"(round-off bound 2(N + d)u = {worst['roundoff_bound']:.1e}).",
        ["F", "largest relative increase", "largest shortfall below ½‖Δξ‖²"],
        [
            [
                e,
                max(r["max_relative_increase"] for r in checks if r["energy"] == e),
                -min(0.0, min(r["min_relative_cccp_margin"] for r in checks if r["energy"] == e)),
            ]
            for e in ENERGY_LAWS
            if any(r["energy"] == e for r in checks)
        ],
    )


def summarize_ols_energy(rows: list[dict[str, Any]]) -> str | dict[str, Any]:
    ols = [r for r in rows if r["kind"] == "ols_energy"]
    if not ols:
        return "not measured"
    return summary_table(
        "OLSTransformer().fit(X, Y) on its own context is one step on the quadratic energy "
        "(patterns: the columns of X); E(y) = ½ yᵀ(I − P)y is ½ RSS.",
        [
            "N × d",
            "κ(X)",
            "forward vs step",
            "E vs ½ RSS (lstsq)",
            "E after / before",
            "error / bound",
        ],
        [
            [
                f"{r['n']} × {r['d']}",
                r["condition"],
                r["forward_vs_step"],
                r["energy_vs_half_rss"],
                r["energy_after_relative"],
                r["worst_error_over_bound"],
            ]
            for r in ols
        ],
    )


def summarize_energy_cost(rows: list[dict[str, Any]]) -> str | dict[str, Any]:
    cost = [r for r in rows if r["kind"] == "energy_cost"]
    if not cost:
        return "not measured"
    table = []
    for key in ENERGY_LAWS:
        mine = sorted((r for r in cost if r["energy"] == key), key=lambda r: r["d"])
        if mine:
            top = mine[-1]
            table.append(
                [
                    key,
                    top["d"],
                    top["n_max"],
                    top["seconds_per_retrieval"] * 1e6,
                    top["bytes_per_pattern"],
                ]
            )
    return summary_table(
        "One retrieval (one step, pattern read-out, one thread) at N_max, largest d.",
        ["F", "d", "N_max", "µs per retrieval", "bytes per pattern"],
        table,
    )
