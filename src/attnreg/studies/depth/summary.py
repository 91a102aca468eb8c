"""The ``depth`` study's summary answers (short lead plus small text tables, numbers from the
rows) and checks (thresholds: config fields)."""

from __future__ import annotations

import statistics
from typing import Any

from attnreg.studies.common import check
from attnreg.studies.depth.config import DepthConfig


def fmt(value: float | None) -> str:
    """A number as the summary prints it (4 significant digits; ``cap`` for ``None``)."""
    return "cap" if value is None else f"{value:.4g}"


def middle_eps(cfg: DepthConfig) -> float:
    """The tolerance the figure and the summary tables show (the middle of ``cfg.eps``)."""
    return sorted(cfg.eps)[len(cfg.eps) // 2]


def atlas_summary(
    cfg: DepthConfig, rows: list[dict[str, Any]], slopes: list[dict[str, Any]]
) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """Layers needed per N (a row per method over κ), the fitted slopes and where they do not
    hold; the check on Newton's slope ratio."""
    eps = middle_eps(cfg)
    kappas = " / ".join(fmt(k) for k in cfg.kappas)
    out: dict[str, str] = {
        "atlas": (
            f"layers each fixed-weight stack needs to come within ε = {eps:g} of OLS "
            f"(d = {cfg.atlas_d}, κ = {kappas}; cap {cfg.cap} layers)"
        )
    }
    for n in cfg.atlas_n_ctx:
        cells = []
        for method in dict.fromkeys(r["method"] for r in rows):
            mine = [
                r for r in rows if r["method"] == method and r["n_ctx"] == n and r["eps"] == eps
            ]
            got = " / ".join(fmt(r["layers_needed"]) for r in mine)
            theory = " / ".join(fmt(r["theory_layers"]) for r in mine)
            cells.append(f"{method} {got} (theory {theory})")
        out[f"atlas N = {n}"] = "; ".join(cells)
    for method, unit in (("gd", "κ̂"), ("newton", "log₁₀ κ̂"), ("gd++", "log₁₀ κ̂")):
        mine = [s for s in slopes if s["method"] == method and s["eps"] == eps]
        cells = [
            f"N = {s['n_ctx']}: {fmt(s['slope'])} (theory {fmt(s['theory_slope'])}, "
            f"{s['points']} points)"
            for s in mine
        ]
        out[f"slope {method} (layers per {unit}, ε = {eps:g})"] = "; ".join(cells)
    capped = [r for r in rows if r["method"] == "gd" and r["layers_needed"] is None]
    pre = sorted({round(r["kappa_sample"], 3) for r in rows if r["method"] == "preconditioned"})
    out["where the slopes do not hold"] = (
        f"gd reaches the cap in {len(capped)} of "
        f"{sum(r['method'] == 'gd' for r in rows)} cells (its layers grow like κ̂, so a fit uses "
        f"only the cells below the cap); preconditioned (Γ = Σ⁻¹) sees κ̂ in "
        f"{fmt(min(pre))}…{fmt(max(pre))} whatever κ is, so its depth has no κ slope; "
        "at N < d κ̂ is the condition number on the range of XᵀX, not κ"
    )
    ratios = [
        s["slope"] / s["theory_slope"]
        for s in slopes
        if s["method"] == "newton" and s["slope"] is not None and s["theory_slope"]
    ]
    if not ratios:
        out["newton slope / theory"] = "no (N, ε) group reached ε at two κ: no slope"
        return out, []
    median = statistics.median(ratios)
    checks = [
        check("newton slope / theory, median (floor)", median, ">=", cfg.min_newton_slope_ratio),
        check("newton slope / theory, median (ceiling)", median, "<=", cfg.max_newton_slope_ratio),
    ]
    out["newton slope / theory"] = f"median {fmt(median)} over {len(ratios)} (N, ε) groups"
    return out, checks


def trained_summary(
    cfg: DepthConfig, rows: list[dict[str, Any]]
) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """Per (κ, N): each layer of the deepest stack's best-matching method and iterate, and the
    loss against depth beside each method's loss against its iterations; the depth check."""
    out: dict[str, str] = {}
    checks = []
    trained = [r for r in rows if r["kind"] == "trained"]
    deepest = max(cfg.train_layers)
    for kappa, n in dict.fromkeys((r["kappa"], r["n_ctx"]) for r in trained):
        cell = [r for r in trained if (r["kappa"], r["n_ctx"]) == (kappa, n)]
        parts = []
        for method in dict.fromkeys(r["method"] for r in cell):
            mine = sorted(
                (r for r in cell if r["layers"] == deepest and r["method"] == method),
                key=lambda r: r["layer"],
            )
            matches = ", ".join(
                f"ℓ{r['layer']}→{r['best_match']} ({fmt(r['match_error'])})" for r in mine
            )
            parts.append(f"{method} {matches}")
        best = min(
            (r for r in cell if r["layers"] == deepest and r["layer"] == deepest),
            key=lambda r: r["match_error"],
        )
        parts.append(
            f"last layer closest to {best['method']} iterate {best['best_match']} "
            f"(relative distance {fmt(best['match_error'])}, residual cosine "
            f"{best['residual_cosine']:.3f})"
        )
        key = f"which iterate each layer of the {deepest}-layer stack matches"
        out[f"{key} (relative distance), κ = {fmt(kappa)}, N = {n}"] = "; ".join(parts)
        final = {
            r["layers"]: r["loss"]
            for r in cell
            if r["layer"] == r["layers"] and r["method"] == "gd"
        }
        its = [r for r in rows if r["kind"] == "iterate" and (r["kappa"], r["n_ctx"]) == (kappa, n)]
        iter_loss = {(r["method"], r["iterate"]): r["loss"] for r in its}
        depth_text = " / ".join(f"{fmt(final[L])}" for L in sorted(final))
        method_text = "; ".join(
            f"{m} " + " / ".join(fmt(iter_loss[(m, L)]) for L in sorted(final))
            for m in dict.fromkeys(r["method"] for r in its)
        )
        out[
            f"loss by depth L = {', '.join(map(str, sorted(final)))}, κ = {fmt(kappa)}, N = {n}"
        ] = f"trained {depth_text}; methods at k = L iterates: {method_text}"
        if min(final) != max(final):
            checks.append(
                check(
                    f"trained {max(final)}-layer / 1-layer loss (κ = {fmt(kappa)}, N = {n})",
                    final[max(final)] / final[min(final)],
                    "<=",
                    cfg.max_depth_loss_ratio,
                )
            )
    return out, checks


def noise_summary(
    cfg: DepthConfig, curve: list[dict[str, Any]], mixed: list[dict[str, Any]]
) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """The error curves at a few context sizes, the min-norm curve against ``(d − k)/d``, and
    whether the mixed-noise stack beats ridge tuned per noise level."""
    d = cfg.noise_d
    by = {(r["estimator"], r["n_ctx"]): r for r in curve}
    parts = []
    for k in cfg.noise_n_ctx:
        t, b, o = by[("trained", k)], by.get(("bayes_ridge", k)), by[("ols", k)]
        bayes = fmt(b["error"]) if b else "–"
        parts.append(
            f"k = {k}: trained {fmt(t['error'])} · Bayes ridge {bayes} · OLS {fmt(o['error'])}"
        )
    out = {
        f"noise σ = {cfg.sigma:g}, τ = {cfg.tau:g}, d = {d}: error E(ŷ − y)²/d": "; ".join(parts)
    }
    noiseless = [r for r in curve if r["estimator"] == "ols_noiseless"]
    below = [r for r in noiseless if r["n_ctx"] < d]
    z = max((abs(r["error"] - r["theory"]) / r["stderr"] for r in below), default=0.0)
    above = max((r["error"] for r in noiseless if r["n_ctx"] >= d), default=0.0)
    out["min-norm (σ = 0) against (d − k)/d"] = (
        "; ".join(f"k = {r['n_ctx']}: {fmt(r['error'])} vs {fmt(r['theory'])}" for r in below)
        + f" (largest gap {z:.2f} standard errors); k ≥ d: at most {above:.1e} (rounding)"
    )
    ratio_k = [
        by[("trained", k)]["error"] / by[("bayes_ridge", k)]["error"]
        for k in cfg.noise_n_ctx
        if ("bayes_ridge", k) in by
    ]
    if ratio_k:
        out["trained stack / Bayes-optimal ridge"] = (
            f"from {min(ratio_k):.3f} to {max(ratio_k):.3f} over k (≥ 1 up to Monte-Carlo error: "
            "nothing beats the posterior mean)"
        )
    total = {r["estimator"]: r for r in mixed if r["bin"] == "all"}
    t, tuned, const = total["trained"], total["tuned_ridge"], total["const_ridge"]
    verdict = "beats" if t["error"] + 2 * t["stderr"] < tuned["error"] else "does not beat"
    tuned_by_bin = {r["bin"]: r["error"] for r in mixed if r["estimator"] == "tuned_ridge"}
    bins = "; ".join(
        f"σ ∈ {r['bin']}: trained {fmt(r['error'])} vs tuned {fmt(tuned_by_bin[r['bin']])}"
        for r in mixed
        if r["estimator"] == "trained" and r["bin"] != "all"
    )
    out["mixed noise σ ~ U(0, σ_max) (Vladymyrov et al. 2024)"] = (
        f"the trained {cfg.noise_layers}-layer stack {verdict} ridge tuned per noise level "
        "(Vladymyrov et al. report linear transformers matching or surpassing it): "
        f"{fmt(t['error'])} vs {fmt(tuned['error'])} (ratio {t['error'] / tuned['error']:.3f}); "
        f"one λ = {const['const_lambda']:.3g} for all: {fmt(const['error'])}. {bins}"
    )
    checks = [check("min-norm curve vs (d − k)/d, standard errors", z, "<=", cfg.max_curve_z)]
    return out, checks


def lead(summary_rows: dict[str, list[dict[str, Any]]], cfg: DepthConfig) -> str:
    """The one-sentence answer: the slopes' ranges, the last trained layer's nearest method,
    and the mixed-noise ratio (from the rows ``atlas``/``slope``/``trained``/``mixed``)."""
    eps = middle_eps(cfg)
    slopes = [s for s in summary_rows["slope"] if s["eps"] == eps and s["slope"] is not None]

    def span(method: str) -> str:
        vals = [s["slope"] for s in slopes if s["method"] == method]
        theory = [s["theory_slope"] for s in slopes if s["method"] == method]
        if not vals:
            return "no slope (every cell capped)"
        lo, hi = fmt(min(theory)), fmt(max(theory))
        return f"{fmt(min(vals))}–{fmt(max(vals))} (theory {lo if lo == hi else f'{lo}–{hi}'})"

    deepest = max(cfg.train_layers)
    last = [r for r in summary_rows["trained"] if r["layers"] == deepest and r["layer"] == deepest]
    best = min(last, key=lambda r: r["match_error"])
    total = {r["estimator"]: r["error"] for r in summary_rows["mixed"] if r["bin"] == "all"}
    return (
        f"At ε = {eps:g}: Newton needs {span('newton')} more layers per decade of κ̂, GD "
        f"{span('gd')} more per unit of κ̂ until the {cfg.cap}-layer cap; the last layer of "
        f"the trained {deepest}-layer stacks is nearest {best['method']} iterate "
        f"{best['best_match']} yet {fmt(best['match_error'])} away (relative); under mixed "
        f"noise the trained stack's error is {total['trained'] / total['tuned_ridge']:.3f} × "
        "ridge tuned per noise level."
    )
