"""The ``depth`` study's summary answers — a short lead and small tables, every number from the
rows and every verdict from a :class:`~attnreg.studies.ledger.Claim` — and its checks
(thresholds: config fields)."""

from __future__ import annotations

import statistics
from typing import Any

from attnreg.studies.answers import summary_table
from attnreg.studies.depth.claims import AKYUREK, GARG, GIANNOU, VLADYMYROV, middle_eps
from attnreg.studies.depth.config import DepthConfig
from attnreg.studies.ledger import HOLDS, UNTESTABLE, Claim
from attnreg.studies.sources import Source
from attnreg.thresholds import check

Answer = dict[str, Any]


def fmt(value: float | None) -> str:
    """A number as the summary prints it (4 significant digits; ``cap`` for ``None``)."""
    return "cap" if value is None else f"{value:.4g}"


def _claim(claims: list[Claim], source: Source) -> Claim | None:
    return next((c for c in claims if c.source == source), None)


def atlas_summary(
    cfg: DepthConfig, rows: list[dict[str, Any]], slopes: list[dict[str, Any]]
) -> tuple[dict[str, Answer], list[dict[str, Any]]]:
    """Layers needed per (N, method) over κ, the fitted slopes against the theory and where
    they do not hold; the check on Newton's slope ratio."""
    eps = middle_eps(cfg)
    methods = list(dict.fromkeys(r["method"] for r in rows))
    table = []
    for n in cfg.atlas_n_ctx:
        for method in methods:
            mine = [
                r for r in rows if r["method"] == method and r["n_ctx"] == n and r["eps"] == eps
            ]
            table.append(
                [n, method]
                + [f"{fmt(r['layers_needed'])} ({fmt(r['theory_layers'])})" for r in mine]
            )
    out: dict[str, Answer] = {
        "atlas: layers to reach OLS": summary_table(
            f"Layers each fixed-weight stack needs to come within ε = {eps:g} of OLS, measured "
            f"(theory); d = {cfg.atlas_d}, cap {cfg.cap} layers.",
            ["N", "method", *(f"κ = {fmt(k)}" for k in cfg.kappas)],
            table,
        )
    }
    units = {"gd": "layers per unit of κ̂", "newton": "layers per decade of κ̂"}
    units["gd++"] = units["newton"]
    shown = [s for s in slopes if s["eps"] == eps and s["method"] in units]
    ratios = [
        s["slope"] / s["theory_slope"]
        for s in slopes
        if s["method"] == "newton" and s["slope"] is not None and s["theory_slope"]
    ]
    median = statistics.median(ratios) if ratios else None
    out["atlas: fitted slopes against the theory"] = summary_table(
        (
            f"Newton's slope / theory: median {fmt(median)} over {len(ratios)} (N, ε) groups."
            if median is not None
            else "Newton's slope: no (N, ε) group reached ε at two κ, so no slope."
        ),
        ["method", "unit", "N", "fitted slope", "theory", "cells fitted"],
        [
            [
                s["method"],
                units[s["method"]],
                s["n_ctx"],
                fmt(s["slope"]) if s["slope"] is not None else "none",
                fmt(s["theory_slope"]),
                s["points"],
            ]
            for s in sorted(shown, key=lambda s: list(units).index(s["method"]))
        ],
        note=_where_not(rows, eps),
    )
    if median is None:
        return out, []
    checks = [
        check("newton slope / theory, median (floor)", median, ">=", cfg.min_newton_slope_ratio),
        check("newton slope / theory, median (ceiling)", median, "<=", cfg.max_newton_slope_ratio),
    ]
    return out, checks


def _where_not(rows: list[dict[str, Any]], eps: float) -> str:
    """Where the slopes do not hold, from the atlas rows: GD's capped cells, and the
    preconditioned stack's κ̂ range and its spread of layers over κ at each N."""
    capped = [r for r in rows if r["method"] == "gd" and r["layers_needed"] is None]
    pre = [r for r in rows if r["method"] == "preconditioned"]
    if not pre:
        return ""
    seen = [r["kappa_sample"] for r in pre]
    spread = []
    for n in dict.fromkeys(r["n_ctx"] for r in pre):
        done = [r["layers_needed"] for r in pre if r["n_ctx"] == n and r["eps"] == eps]
        done = [v for v in done if v is not None]
        if len(done) > 1:
            spread.append(max(done) - min(done))
    depth = f"its layers vary by ≤ {max(spread)} over κ at fixed N" if spread else "capped"
    return (
        f"Where the slopes do not hold: gd is capped in {len(capped)} of "
        f"{sum(r['method'] == 'gd' for r in rows)} cells (fits use the cells below the cap); "
        f"preconditioned (Γ = Σ⁻¹) sees κ̂ from {fmt(min(seen))} to {fmt(max(seen))} and "
        f"{depth}; at N < d, κ̂ is on the range of XᵀX."
    )


def _match(r: dict[str, Any]) -> str:
    return f"{r['best_match']} ({fmt(r['match_error'])})"


def trained_summary(
    cfg: DepthConfig, rows: list[dict[str, Any]]
) -> tuple[dict[str, Answer], list[dict[str, Any]]]:
    """Per (κ, N): each layer of the deepest stack's best-matching iterate of every method, the
    loss against depth beside each method's loss against its iterations, and Fu et al.'s trend
    (:func:`fu_table`); the depth check."""
    checks = []
    trained = [r for r in rows if r["kind"] == "trained"]
    deepest = max(cfg.train_layers)
    methods = list(dict.fromkeys(r["method"] for r in trained))
    matches, losses = [], []
    for kappa, n in dict.fromkeys((r["kappa"], r["n_ctx"]) for r in trained):
        cell = [r for r in trained if (r["kappa"], r["n_ctx"]) == (kappa, n)]
        for layer in range(1, deepest + 1):
            by = {r["method"]: r for r in cell if r["layers"] == deepest and r["layer"] == layer}
            near = min(by.values(), key=lambda r: r["match_error"])
            cosine = f"{near['residual_cosine']:.3f}"
            matches.append(
                [fmt(kappa), n, layer, *(_match(by[m]) for m in methods), near["method"], cosine]
            )
        final = {
            r["layers"]: r["loss"]
            for r in cell
            if r["layer"] == r["layers"] and r["method"] == methods[0]
        }
        its = [r for r in rows if r["kind"] == "iterate" and (r["kappa"], r["n_ctx"]) == (kappa, n)]
        iter_loss = {(r["method"], r["iterate"]): r["loss"] for r in its}
        for depth in sorted(final):
            losses.append(
                [fmt(kappa), n, depth, fmt(final[depth])]
                + [fmt(iter_loss[(m, depth)]) for m in methods]
            )
        if min(final) != max(final):
            checks.append(
                check(
                    f"trained {max(final)}-layer / 1-layer loss (κ = {fmt(kappa)}, N = {n})",
                    final[max(final)] / final[min(final)],
                    "<=",
                    cfg.max_depth_loss_ratio,
                )
            )
    out: dict[str, Answer] = {
        "trained layers: the nearest iterate of each method": summary_table(
            f"Each layer ℓ of the trained {deepest}-layer stacks: the nearest iterate k of each "
            "method, with its distance relative to the OLS prediction, k (distance); the nearest "
            "method and its residual cosine.",
            ["κ", "N", "ℓ", *(f"{m}: k (distance)" for m in methods), "nearest", "cosine"],
            matches,
        ),
        "trained layers: loss against depth": summary_table(
            "The trained L-layer stack's loss (0.5 × MSE on the query) beside each method's "
            "loss after k = L iterates.",
            ["κ", "N", "L", "trained", *(f"{m}, k = L" for m in methods)],
            losses,
        ),
    }
    trends = [r for r in rows if r["kind"] == "fu_trend"]
    if trends:
        out["trained layers: Fu et al.'s trend"] = fu_table(trends)
    return out, checks


def fu_table(trends: list[dict[str, Any]]) -> Answer:
    """Per (κ, N), the deepest stack by Fu et al.'s metric: the best Newton and GD step of every
    layer, the Newton trend's slope and R² beside the null's (exact GD iterates), GD's log-log
    slope, and the run's convergence and loss against GD's."""
    t = trends[0]
    return summary_table(
        f"The {t['layers']}-layer stacks by Fu et al.'s metric (cosine of the error vectors; "
        "best match = argmax): Newton and GD step per layer; the Newton steps' line over "
        f"layers {t['middle_layers'][0]}–{t['middle_layers'][-1]} (slope ± bootstrap standard "
        "error, R²) against the null, exact GD iterates matched the same way; the GD steps' "
        "log-log slope (1: linear).",
        [
            "κ",
            "N",
            "seed",
            "Newton step per layer",
            "GD step per layer",
            "slope",
            "R²",
            "null: Newton steps",
            "null slope",
            "null R²",
            "GD log-log slope",
            "converged",
            "loss (GD, k = L)",
        ],
        [
            [
                fmt(r["kappa"]),
                r["n_ctx"],
                r.get("seed", 0),
                " ".join(str(v) for v in r["best_newton"]),
                " ".join(str(v) for v in r["best_gd"]),
                f"{fmt(r['newton_slope'])} ± {r['newton_slope_se']:.2g}",
                fmt(r["newton_r2"]),
                " ".join(str(v) for v in r["null_newton"]),
                fmt(r["null_slope"]),
                fmt(r["null_r2"]),
                f"{fmt(r['gd_loglog'])} ± {r['gd_loglog_se']:.2g}",
                f"{'yes' if r['converged'] else 'no'} ({r['loss_fall']:+.2%} last window)",
                f"{fmt(r['loss'])} ({fmt(r['gd_loss'])})",
            ]
            for r in trends
        ],
    )


def noise_summary(
    cfg: DepthConfig,
    curve: list[dict[str, Any]],
    mixed: list[dict[str, Any]],
    claims: list[Claim],
    noiseless: list[dict[str, Any]] | None = None,
) -> tuple[dict[str, Answer], list[dict[str, Any]]]:
    """The error curves per context size beside OLS / min-norm, the Bayes-optimal ridge and
    ``(d − k)/d``; the stack trained on noiseless tasks against least squares (Garg et al.),
    the stacks against the Bayes ridge by depth and width (Akyürek et al.) and the mixed-noise
    comparison with ConstRR, AdaRR and TunedRR (Vladymyrov et al.), each led by its claim's
    verdict."""
    d = cfg.noise_d
    by = {(r["estimator"], r["n_ctx"]): r for r in curve if r["kind"] == "noise_curve"}
    below = [r for k, r in by.items() if k[0] == "ols_noiseless" and r["n_ctx"] < d]
    z = max((abs(r["error"] - r["theory"]) / r["stderr"] for r in below), default=0.0)
    ratio = [
        by[("trained", k)]["error"] / by[("bayes_ridge", k)]["error"]
        for k in cfg.noise_n_ctx
        if ("bayes_ridge", k) in by
    ]
    span = f"; trained / Bayes ridge {min(ratio):.3f} to {max(ratio):.3f}" if ratio else ""
    noiseless = noiseless or []

    def err(name: str, k: int, key: str = "error") -> str:
        return fmt(by[(name, k)][key]) if (name, k) in by else "–"

    out: dict[str, Answer] = {}
    checks = []
    if curve:  # the "noise" part ran
        out["noise: error against the context size"] = summary_table(
            f"Error E(ŷ − y)²/d, d = {d}, σ = {cfg.sigma:g}, τ = {cfg.tau:g}, the trained "
            f"{cfg.noise_layers}-layer stack: the noiseless min-norm curve is within {z:.2f} "
            f"standard errors of (d − k)/d at k < d{span}.",
            ["k", "trained", "Bayes ridge", "OLS", "min-norm, σ = 0", "(d − k)/d"],
            [
                [
                    k,
                    err("trained", k),
                    err("bayes_ridge", k),
                    err("ols", k),
                    err("ols_noiseless", k),
                    err("ols_noiseless", k, "theory") if k < d else "0",
                ]
                for k in cfg.noise_n_ctx
            ],
        )
        checks.append(
            check("min-norm curve vs (d − k)/d, standard errors", z, "<=", cfg.max_curve_z)
        )
    out |= _noiseless_table(noiseless, claims)
    out |= _bayes_table(curve, claims)
    out |= _mixed_tables(mixed, claims)
    return out, checks


def lead(claims: list[Claim], slopes: list[dict[str, Any]], cfg: DepthConfig) -> str:
    """The one-paragraph answer: the sources the measurement contradicts first, then Newton's
    and GD's fitted slopes at the middle ε."""
    eps = middle_eps(cfg)
    mine = [s for s in slopes if s["eps"] == eps and s["slope"] is not None]

    def span(method: str) -> str:
        vals = [s["slope"] for s in mine if s["method"] == method]
        if not vals:
            return "no slope (every cell capped)"
        theory = [s["theory_slope"] for s in mine if s["method"] == method]
        lo, hi = fmt(min(theory)), fmt(max(theory))
        return f"{fmt(min(vals))}–{fmt(max(vals))} (theory {lo if lo == hi else f'{lo}–{hi}'})"

    failed = [c for c in claims if c.contradicted()]
    sources = ", ".join(dict.fromkeys(c.source.short() for c in failed))
    head = (
        f"Contradicted, in full or in part: {len(failed)} of {len(claims)} claims ({sources})."
        if failed
        else f"No measurement contradicts the {len(claims)} claims tested."
    )
    newton = _claim(claims, GIANNOU)
    if newton is None or newton.verdict() == UNTESTABLE:
        grows = "have no fitted slope"
    else:
        grows = "grow" if newton.verdict() == HOLDS else "do NOT all grow"
    return (
        f"{head} Newton's layers {grows} like log κ at ε = {eps:g}: {span('newton')} per "
        f"decade of κ̂; GD's {span('gd')} per unit of κ̂."
    )


def _lead(claims: list[Claim], source: Source) -> str:
    """The claim's verdict in a few words (its reason and regimes are in the ledger)."""
    claim = _claim(claims, source)
    return f"{source.short()}: {claim.verdict_text()} (ledger)." if claim else "Not measured."


def _pm(value: float, se: float) -> str:
    return f"{value:.4g} ± {se:.2g}"


def _noiseless_table(rows: list[dict[str, Any]], claims: list[Claim]) -> dict[str, Answer]:
    if not rows:
        return {}
    first = rows[0]
    return {
        "noise: trained on noiseless tasks against least squares (Garg et al. 2022)": (
            summary_table(
                f"{_lead(claims, GARG)} The {first['layers']}-layer stack trained on noiseless "
                f"tasks, d = {first['d']}, against min-norm least squares on the same tasks.",
                ["k", "trained", "least squares", "averaging", "τ²(d − k)/d", "excess (SE)"],
                [
                    [
                        r["n_ctx"],
                        _pm(r["error"], r["stderr"]),
                        _pm(r["ols_error"], r["ols_stderr"]),
                        fmt(r["averaging_error"]),
                        fmt(r["theory"]),
                        f"{r['z']:.3g}",
                    ]
                    for r in rows
                ],
            )
        )
    }


def _bayes_table(rows: list[dict[str, Any]], claims: list[Claim]) -> dict[str, Answer]:
    bayes = [r for r in rows if r["kind"] == "bayes"]
    if not bayes:
        return {}
    return {
        "noise: trained stacks against the Bayes ridge (Akyürek et al. 2023)": summary_table(
            f"{_lead(claims, AKYUREK)} Errors pooled over every context size; prediction "
            "differences E(ŷ − ŷ_ref)²/d to ridge λ = σ²/τ², OLS and one tuned GD step.",
            [
                "L",
                "H",
                "trained",
                "Bayes ridge",
                "ratio",
                "excess (SE)",
                "Δ ridge",
                "Δ OLS",
                "Δ GD",
                "converged",
            ],
            [
                [
                    r["layers"],
                    r["heads"],
                    fmt(r["error"]),
                    fmt(r["bayes_error"]),
                    _pm(r["ratio"], r["ratio_se"]),
                    f"{r['z']:.3g}",
                    fmt(r["spd_bayes_ridge"]),
                    fmt(r["spd_ols"]),
                    fmt(r["spd_gd"]),
                    "yes" if r["converged"] else "no",
                ]
                for r in bayes
            ],
        )
    }


def _mixed_tables(rows: list[dict[str, Any]], claims: list[Claim]) -> dict[str, Answer]:
    match = [r for r in rows if r["kind"] == "mixed_match"]
    if not match:
        return {}
    names = ("trained", "const_rr", "ada_rr", "tuned_rr", "oracle")
    cells = {
        (r["sigma_max"], r["layers"], r["bin"], r["estimator"]): r["error"]
        for r in rows
        if r["kind"] == "mixed_noise"
    }
    keys = list(
        dict.fromkeys(
            (r["sigma_max"], r["layers"], r["bin"]) for r in rows if r["kind"] == "mixed_noise"
        )
    )
    return {
        "noise: σ ~ U(0, σ_max) per task (Vladymyrov et al. 2024)": summary_table(
            f"{_lead(claims, VLADYMYROV)} Adjusted loss = loss − the oracle's (ridge given "
            "each task's σ); the trained stacks averaged over seeds.",
            [
                "σ_max",
                "L",
                "seeds",
                "trained",
                "ConstRR",
                "AdaRR",
                "TunedRR",
                "trained − TunedRR",
                "excess (SE)",
                "converged",
            ],
            [
                [
                    fmt(r["sigma_max"]),
                    r["layers"],
                    r["seeds"],
                    *(fmt(r[f"adjusted_{n}"]) for n in names[:4]),
                    _pm(r["diff"], r["diff_se"]),
                    f"{r['z']:.3g}",
                    "yes" if r["converged"] else "no",
                ]
                for r in match
            ],
        ),
        "noise: mixed-noise errors per σ bin": summary_table(
            "Error E(ŷ − y)²/d per σ bin of each predictor (the trained stack averaged over "
            "seeds).",
            ["σ_max", "L", "σ bin", "trained", "ConstRR", "AdaRR", "TunedRR", "oracle"],
            [[fmt(a), b, c, *(fmt(cells[(a, b, c, n)]) for n in names)] for a, b, c in keys],
        ),
    }
