"""The measured answers of the capacity study: one sentence with numbers per claim."""

from __future__ import annotations

import math
from typing import Any

from attnreg.studies.answers import summary_table
from attnreg.studies.capacity.config import CapacityConfig
from attnreg.studies.capacity.curves import family_curve, fit_line
from attnreg.studies.capacity.energy_summary import (
    summarize_energy_checks,
    summarize_energy_cost,
    summarize_energy_family,
    summarize_ols_energy,
)
from attnreg.studies.capacity.families import HEBBIAN_ALPHA
from attnreg.thresholds import check

STRONG = ("power", "softmax", "max")


def _fmt(values: list[float]) -> str:
    return ", ".join(f"{v:.3g}" for v in values)


def summarize_pinv(rows: list[dict[str, Any]]) -> dict[str, Any]:
    checks = sorted((r for r in rows if r["kind"] == "pinv_check"), key=lambda r: r["d"])
    curve = {r["d"]: r["n_max"] for r in family_curve(rows, "pinv")}
    ok = all(r["exact_all_n_le_d"] and r["inexact_all_n_gt_d"] for r in checks)
    return summary_table(
        f"{'Yes' if ok else 'NO'}: exact recall of clean queries (relative error ≤ 1e-6) for "
        "every N ≤ d and for no N in (d, 2d].",
        ["d", "worst rate, N ≤ d", "best rate, N > d", "searched N_max"],
        [
            [r["d"], r["worst_rate_n_le_d"], r["best_rate_n_gt_d"], curve.get(r["d"], "")]
            for r in checks
        ],
    )


def hebbian_band(rows: list[dict[str, Any]]) -> dict[int, dict[float, float]]:
    """``N_max / d`` per ``d`` and success level ``eps`` of the Hebbian curves."""
    eps_values = sorted(
        {r["epsilon"] for r in rows if r["kind"] == "capacity" and r["family"].startswith("hebb")}
    )
    return {
        d: {
            eps: next(r["n_max"] / d for r in family_curve(rows, f"hebbian@{eps:g}") if r["d"] == d)
            for eps in eps_values
        }
        for d in sorted({r["d"] for r in rows if r.get("family", "").startswith("hebbian")})
    }


def summarize_hebbian(rows: list[dict[str, Any]]) -> str | dict[str, Any]:
    band = hebbian_band(rows)
    if not band:
        return "not measured"
    eps_values = sorted(next(iter(band.values())))
    inside = all(
        min(r.values()) <= HEBBIAN_ALPHA <= max(r.values()) for d, r in band.items() if d >= 200
    )
    return summary_table(
        f"0.138 d {'lies' if inside else 'does NOT lie'} inside the measured band for every "
        "d ≥ 200 (10 % flipped bits; success: a fixed point within 5 % wrong bits).",
        ["d"] + [f"N_max / d, success 1 − {e:g}" for e in eps_values],
        [[d] + [r[e] for e in eps_values] for d, r in band.items()],
    )


def dam_fits(rows: list[dict[str, Any]]) -> dict[int, tuple[float, float, float]]:
    """Per ``n``: the log-log slope of ``N_max``, of the theory curve, and of ``N_max · ln d``."""
    out = {}
    for n in (2, 3, 4):
        curve = [r for r in family_curve(rows, f"dam{n}") if r["n_max"] > 0]
        if len(curve) < 2:
            continue
        logd = [math.log(r["d"]) for r in curve]
        raw, _ = fit_line(logd, [math.log(r["n_max"]) for r in curve])
        corrected, _ = fit_line(logd, [math.log(r["n_max"] * math.log(r["d"])) for r in curve])
        theory, _ = fit_line(logd, [math.log(r["n_max_theory"]) for r in curve])
        out[n] = (raw, theory, corrected)
    return out


def summarize_dam(rows: list[dict[str, Any]]) -> str | dict[str, Any]:
    fits = dam_fits(rows)
    if not fits:
        return "not measured"
    gap = max(abs(raw - (n - 1)) for n, (raw, _, _) in fits.items())
    return summary_table(
        f"Fitted exponents within {gap:.2f} of n − 1 (d^(n−1)/ln d has a local slope below "
        "n − 1 at these d).",
        ["n", "log-log slope", "theory curve", "slope of N_max·ln d", "n − 1"],
        [[n, raw, theory, corrected, n - 1] for n, (raw, theory, corrected) in fits.items()],
    )


def summarize_softmax(rows: list[dict[str, Any]], family: str) -> str | dict[str, Any]:
    curve = [r for r in family_curve(rows, family) if r["n_max"] > 0]
    if len(curve) < 2:
        return "not measured"
    slope, r2 = fit_line([r["d"] for r in curve], [math.log2(r["n_max"]) for r in curve])
    theory = math.isfinite(curve[-1]["n_max_theory"])
    return summary_table(
        f"{curve[0]['model']}, {curve[0]['patterns']} patterns, {curve[0]['query']}: log2 N_max "
        f"grows by {slope:.2f} bits per dimension (R² = {r2:.3f}).",
        ["d", "N_max"] + (["nearest-pattern estimate"] if theory else []),
        [[r["d"], r["n_max"]] + ([r["n_max_theory"]] if theory else []) for r in curve],
    )


def digits_cells(rows: list[dict[str, Any]]) -> dict[tuple[str, int], dict[tuple[str, str], float]]:
    grid = [r for r in rows if r["kind"] == "recall"]
    return {
        (query, n): {
            (r["similarity"], r["separation"]): r["recall"]
            for r in grid
            if r["query"] == query and r["n"] == n
        }
        for query in sorted({r["query"] for r in grid})
        for n in sorted({r["n"] for r in grid})
    }


def power_of(rows: list[dict[str, Any]]) -> int:
    """The degree of the digits grid's power separation."""
    return int(next(r["power"] for r in rows if r["kind"] == "recall"))


def summarize_digits(rows: list[dict[str, Any]]) -> dict[str, Any]:
    grid = digits_cells(rows)
    if not grid:
        return {}
    sims: list[list[Any]] = []
    seps: list[list[Any]] = []
    for (query, n), cells in grid.items():
        for sep in ("softmax", "max"):
            sims.append(
                [f"{query}, N = {n}", sep]
                + [cells[(sim, sep)] for sim in ("euclidean", "manhattan", "dot")]
            )
        for sim in ("dot", "euclidean", "manhattan"):
            seps.append(
                [f"{query}, N = {n}", sim, cells[(sim, "identity")]]
                + [cells[(sim, sep)] for sep in STRONG]
            )
    sims_win = all(float(r[2]) > float(r[4]) and float(r[3]) > float(r[4]) for r in sims)
    sep_win = all(max(float(v) for v in r[3:]) > float(r[2]) for r in seps)
    return {
        "digits: Euclidean and Manhattan beat dot": summary_table(
            f"{'Yes' if sims_win else 'NO'} (recall fraction).",
            ["queries", "separation", "euclidean", "manhattan", "dot"],
            sims,
        ),
        "digits: stronger separation beats identity": summary_table(
            f"{'Yes' if sep_win else 'NO'} (recall fraction; best of power/softmax/max vs "
            "identity).",
            ["queries", "similarity", "identity", *STRONG],
            seps,
            note=power_note(rows),
        ),
    }


def power_degrees(rows: list[dict[str, Any]]) -> dict[tuple[str, str], dict[int, float]]:
    """Recall of the power separation per (query, similarity) and degree (rows
    ``kind="power_degree"``)."""
    out: dict[tuple[str, str], dict[int, float]] = {}
    for r in rows:
        if r["kind"] == "power_degree":
            out.setdefault((r["query"], r["similarity"]), {})[r["power"]] = r["recall"]
    return out


def power_note(rows: list[dict[str, Any]]) -> str:
    """Why the power column reads what it does, from the degree sweep: the recall at the
    grid's degree and at the sweep's best degree."""
    sweep = power_degrees(rows)
    degree = power_of(rows)
    at_grid = [r[degree] for r in sweep.values() if degree in r and math.isfinite(r[degree])]
    best = [
        (v, n) for r in sweep.values() for n, v in r.items() if math.isfinite(v) and n != degree
    ]
    if not at_grid or not best:
        return ""
    top, top_n = max(best)
    head = f"power is (β·s)^{degree} normalised over the stored images (β cancels): "
    if max(at_grid) >= top:
        return head + (
            f"at degree {degree} it recalls up to {max(at_grid):.2f} of the queries, no less "
            "than at the other degrees measured (table: power against its degree)."
        )
    return head + (
        f"at degree {degree} it recalls at most {max(at_grid):.2f} of the queries (every image "
        f"keeps a share of the weight, so the retrieval is a blend); at degree {top_n} up to "
        f"{top:.2f} (table: power against its degree)."
    )


def summarize_power_degrees(rows: list[dict[str, Any]]) -> dict[str, Any]:
    sweep = power_degrees(rows)
    if not sweep:
        return {}
    degrees = sorted({n for r in sweep.values() for n in r})
    n = next(r["n"] for r in rows if r["kind"] == "power_degree")
    grows = sum(r[degrees[-1]] > r[degrees[0]] for r in sweep.values())
    return {
        "digits: the power separation against its degree": summary_table(
            f"Recall fraction of (β·s)^n, N = {n} digits: higher than at n = {degrees[0]} at "
            f"n = {degrees[-1]} in {grows} of {len(sweep)} (query, similarity) cells "
            "(Millidge et al.: higher powers approach max).",
            ["queries", "similarity", *(f"n = {d}" for d in degrees)],
            [
                [query, sim, *(r.get(d, math.nan) for d in degrees)]
                for (query, sim), r in sweep.items()
            ],
            note="Blank: the weights sⁿ leave the float64 range."
            if any(not math.isfinite(v) for r in sweep.values() for v in r.values())
            else "",
        )
    }


Answers = tuple[dict[str, Any], list[dict[str, Any]]]
"""A section's summary answers and its checks."""


def pinv_summary(rows: list[dict[str, Any]], searched: list[dict[str, Any]]) -> Answers:
    """The pseudo-inverse exactness check (rows ``kind="pinv_check"``) beside the searched
    ``N_max`` (``searched``: the searches' rows): its table, and the check that the memory is
    exact exactly up to ``N = d`` at every ``d``."""
    pinv = [r for r in rows if r["kind"] == "pinv_check"]
    exact = sum(bool(r["exact_all_n_le_d"] and r["inexact_all_n_gt_d"]) for r in pinv)
    answer = summarize_pinv(rows + searched)
    summary = {"pseudo-inverse memory: exact for N <= d, not for N > d": answer}
    return summary, [check("pseudo-inverse: d with capacity exactly d", exact, ">=", len(pinv))]


def search_summary(rows: list[dict[str, Any]], config: CapacityConfig) -> Answers:
    """The capacity searches (rows ``kind="capacity"``): Hebbian, dense associative memory,
    softmax and the energy family answered with the measured numbers; the check that
    softmax's ``log2 N_max`` is linear in ``d`` (±1 patterns; R² at least
    ``config.min_softmax_growth_r2``)."""
    summary: dict[str, Any] = {
        "Hebbian capacity at 10% flips near 0.138 d": summarize_hebbian(rows),
        "dense associative memory: exponent near n - 1": summarize_dam(rows),
        "softmax: log N_max linear in d (±1 patterns)": summarize_softmax(rows, "softmax"),
        "softmax: log N_max linear in d (sphere patterns)": summarize_softmax(
            rows, "softmax_sphere"
        ),
    }
    summary.update(summarize_energy_family(rows))
    checks = []
    curve = [r for r in family_curve(rows, "softmax") if r["n_max"] > 0]
    if len(curve) >= 3:
        _, r2 = fit_line([r["d"] for r in curve], [math.log2(r["n_max"]) for r in curve])
        checks.append(
            check("softmax: R² of log2 N_max against d", r2, ">=", config.min_softmax_growth_r2)
        )
    return summary, checks


def descent_summary(rows: list[dict[str, Any]], config: CapacityConfig) -> Answers:
    """The energy family's descent, the OLS-Transformer as one quadratic step and the cost
    (rows ``kind="energy_check"``, ``"ols_energy"``, ``"energy_cost"``); the checks that no
    step raises its energy by more than ``config.max_energy_increase`` (relative), nor falls
    short of the concave–convex descent ``½‖Δξ‖²`` by more than ``config.max_cccp_shortfall``,
    and that the OLS-Transformer's forward pass is one quadratic step within
    ``config.max_ols_error_over_bound`` times its error bound."""
    summary = {
        "energy family: retrieval never increases E_F": summarize_energy_checks(rows, config),
        "OLS-Transformer: its forward pass is one quadratic-energy step": summarize_ols_energy(
            rows
        ),
        "energy family: cost per retrieval and per stored pattern": summarize_energy_cost(rows),
    }
    checks = []
    descent = [r for r in rows if r["kind"] == "energy_check"]
    if descent:
        checks.append(
            check(
                "energy family: largest relative energy increase per step",
                max(r["max_relative_increase"] for r in descent),
                "<=",
                config.max_energy_increase,
            )
        )
        checks.append(
            check(
                "energy family: largest relative shortfall below the concave-convex descent",
                -min(r["min_relative_cccp_margin"] for r in descent),
                "<=",
                config.max_cccp_shortfall,
            )
        )
    ols = [r for r in rows if r["kind"] == "ols_energy"]
    if ols:
        checks.append(
            check(
                "OLS-Transformer vs one quadratic step: error / bound",
                max(r["worst_error_over_bound"] for r in ols),
                "<=",
                config.max_ols_error_over_bound,
            )
        )
    return summary, checks


def digits_summary(rows: list[dict[str, Any]]) -> Answers:
    """The Universal Hopfield grid on digits and the power separation's degrees (rows
    ``kind="recall"`` and ``"power_degree"``); no checks."""
    return {**summarize_digits(rows), **summarize_power_degrees(rows)}, []
