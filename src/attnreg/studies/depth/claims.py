"""The depth study's claims ledger: how depth grows with κ (Giannou et al. 2025, Fu et al.
2024), what trained layers match (Fu et al. 2024), and the noise claims (Garg et al. 2022,
Akyürek et al. 2022, Vladymyrov et al. 2024), each tested by the study's rows against the
thresholds below (or the config's, where a check uses the same number).

The growth claims compare two lines fitted to the same atlas cells (layers against log κ̂ and
against κ̂). Fu et al.'s claims use their metric and their reading — the *trend* of the
best-matching step with the layer — against the null of exact GD iterates measured in the same
run, and are gated on their regime (:func:`fu_regime`)."""

from __future__ import annotations

import math
from typing import Any

from attnreg.studies.depth.config import DepthConfig
from attnreg.studies.depth.iterates import line_r2
from attnreg.studies.ledger import EMPIRICAL, IDENTITY, Claim, Quote, Regime
from attnreg.studies.paired import standard_error
from attnreg.studies.sources import AKYUREK, FU, GARG, GIANNOU, VLADYMYROV
from attnreg.thresholds import Threshold

FU_WORDS = Quote(
    FU,
    "Empirically, predictions from successive Transformer layers closely match different "
    "iterations of Newton's Method linearly, with each middle layer roughly computing 3 "
    "iterations; thus, Transformers and Newton's method converge at roughly the same rate.",
    "Abstract (NeurIPS 2024 version)",
)
FU_GD_WORDS = Quote(
    FU,
    "In contrast, Gradient Descent converges exponentially more slowly.",
    "Abstract (NeurIPS 2024 version)",
)
FU_REGIME = (
    "a 12-layer GPT-2 trained 500k steps on in-context linear regression (d = 20, N = 2d "
    "examples, x ~ N(0, Σ) with κ(Σ) ∈ {1, 100} and a random rotation of Σ per task); metric: "
    "cosine similarity of the error vectors over the prefixes, best match = argmax over Newton "
    "steps 1–23 and GD steps on a log grid to about 1,000, layers 1–2 excluded; the claim is "
    "the trend of the best-matching step with the layer"
)
FU_NEEDED = (
    "linear-attention stacks of ≥ 8 layers trained to convergence (loss flat over the last two "
    "plateau windows) and beating GD with as many steps as layers, d ≥ 10, N = 2d, a random "
    "rotation of Σ per task (the --full profile)"
)
GARG_REGIME = (
    "a 12-layer GPT-2 (8 heads, embedding 256) trained 500k steps on noiseless linear functions, "
    "d = 20, up to 40 in-context examples; metric: squared error / d against least squares, "
    "3-nearest neighbours and averaging"
)
AKYUREK_REGIME = (
    "Transformers trained on noisy linear regression over a grid of depths and widths "
    "(Section 4's figures); the claim is the large-depth, large-width end"
)
VLADYMYROV_REGIME = (
    "linear transformers (full or diagonal attention weights, FULL and DIAG) of 3 to 7 "
    "layers, D = 10, N = 20, σ ~ U(0, σ_max) per task with "
    "σ_max ∈ {1, 3, 5}, several seeds; metric: adjusted loss (loss − the oracle's) against "
    "ConstRR, AdaRR and TunedRR"
)
OWN = "attnreg's tolerance {name} (no source number)"

MATCH_Z = 2.0
"""A trained stack "matches" (is "comparable with", "converges to") a reference predictor on
the same tasks when its error exceeds the reference's by at most this many paired standard
errors of the difference (over tasks, plus the spread over seeds with 3 or more)."""
MATCH_ORIGIN = (
    "2 paired standard errors of (trained − {ref}) on the same test tasks{seeds}: a larger "
    "excess is a measured gap"
)


def _of(rows: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("kind") == kind]


def fit_preference(claimed: list[float], other: list[float], ys: list[float]) -> float:
    """``R²(ys ~ claimed) − R²(ys ~ other)``: how much more of the spread of ``ys`` a line in
    the claimed abscissa explains than a line in the other (two two-parameter fits of the same
    points; nan without three points or two distinct abscissae)."""
    if len(ys) < 3:
        return math.nan
    _, mine = line_r2(claimed, ys)
    _, theirs = line_r2(other, ys)
    return mine - theirs


DECADE = 10.0
"""A case needs its cells' κ̂ to span a decade, the unit the claims' log κ is read in: over
less, a line in κ̂ and a line in log κ̂ fit the same few points alike and the comparison
decides nothing."""


def gd_rate(kappa: float) -> float:
    """GD's κ in the exact form its rate takes: ``1/ln((κ + 1)/(κ − 1))`` layers per unit of
    ``ln(1/ε)`` (≈ κ/2 for large κ; 0 at κ = 1), the abscissa "grows like κ" is fitted on."""
    return 0.0 if kappa <= 1 else 1.0 / math.log((kappa + 1) / (kappa - 1))


SLOPE_ORIGIN = (
    "0: lines in log κ̂ and in κ̂ explain the layers needed equally well; the claimed growth "
    "must explain at least as much (R² of the same cells of the atlas's fixed-weight stacks)"
)


def slope_claims(rows: list[dict[str, Any]], eps: float, cap: int) -> list[Claim]:
    """Newton's layers grow like log κ (Giannou et al.), GD's like κ: per context size N, the
    atlas cells (rows ``kind="atlas"`` at ``eps``) that reached ε, the claimed growth's line
    against the other's (:func:`fit_preference`; GD's κ in its rate's exact form,
    :func:`gd_rate`), one case per N with at least three cells spanning a :data:`DECADE`."""
    atlas = [r for r in _of(rows, "atlas") if r["eps"] == eps]
    out = []
    for method, quote, claimed in (
        (
            "newton",
            Quote(
                GIANNOU,
                "Newton–Schulz stacks (a constant number of attention layers per Newton step) "
                "need a number of layers growing like log κ",
                "the main construction and its convergence bound",
                verbatim=False,
            ),
            "log κ̂",
        ),
        (
            "gd",
            Quote(
                FU,
                "gradient-descent iterations need a number of steps growing like κ",
                "the convergence rates compared (GD's linear rate in κ)",
                verbatim=False,
            ),
            "κ̂ (as GD's rate has it, 1/ln((κ̂ + 1)/(κ̂ − 1)))",
        ),
    ):
        mine = [r for r in atlas if r["method"] == method]
        if not mine:
            continue
        values = {}
        for n in dict.fromkeys(r["n_ctx"] for r in mine):
            done = [r for r in mine if r["n_ctx"] == n and r["layers_needed"] is not None]
            kappa = [float(r["kappa_sample"]) for r in done]
            if len(done) < 3 or max(kappa) < DECADE * min(kappa):
                continue
            logs = [math.log10(k) for k in kappa]
            ys = [float(r["layers_needed"]) for r in done]
            pref = (
                fit_preference(logs, kappa, ys)
                if method == "newton"
                else fit_preference([gd_rate(k) for k in kappa], logs, ys)
            )
            if math.isfinite(pref):
                values[f"N = {n}"] = pref
        other = "κ̂" if method == "newton" else "log κ̂"
        out.append(
            Claim(
                quote,
                IDENTITY,
                f"R² of the layers needed on {claimed} minus R² on {other}, over the cells "
                f"that reached ε = {eps:g} (at least three, spanning a decade of κ̂)",
                values,
                Threshold(">=", 0.0, SLOPE_ORIGIN),
                untestable=""
                if values
                else f"no context size has three {method} cells spanning a decade of κ̂ below "
                f"the {cap}-layer cap",
            )
        )
    return out


def over_seeds(trends: list[dict[str, Any]]) -> str:
    """``"; 3 seeds per cell, Newton-step slope 0.8 ± 0.1 (κ = 1), …"``: the trend's slope, mean
    ± standard error over the seeds of each cell (empty with one seed)."""
    if len({r.get("seed", 0) for r in trends}) < 2:
        return ""
    cells: dict[float, list[float]] = {}
    for r in trends:
        cells.setdefault(r["kappa"], []).append(float(r["newton_slope"]))
    n = min(len(v) for v in cells.values())
    parts = []
    for kappa, v in cells.items():
        parts.append(f"{sum(v) / len(v):.3g} ± {standard_error(v):.2g} (κ = {kappa:g})")
    return f"; {n} seeds per cell, Newton-step slope over seeds {', '.join(parts)}"


def fu_regime(trends: list[dict[str, Any]]) -> Regime:
    """The run's scale against Fu et al.'s (rows ``kind="fu_trend"``, one per cell): met when
    every cell's stack has ≥ 8 layers, d ≥ 10, N = 2d, a rotation of Σ per task, converged and
    beating GD with as many steps as layers."""
    t = trends[0]
    done = sum(r["converged"] for r in trends)
    beats = sum(r["loss"] < r["gd_loss"] for r in trends)
    kappas = ", ".join(dict.fromkeys(f"{r['kappa']:g}" for r in trends))
    run = (
        f"{t['layers']}-layer linear-attention stacks, d = {t['d']}, "
        f"N = {', '.join(str(n) for n in dict.fromkeys(r['n_ctx'] for r in trends))}, "
        f"κ = {kappas}, {t['steps']} Adam steps"
        + (" (each stack grown from the shallower)" if t.get("grown") else "")
        + ", "
        + ("a random rotation of Σ per task" if t["rotation"] else "one Σ for every task")
        + f"{over_seeds(trends)}; converged in {done} of {len(trends)} runs, below GD's loss "
        f"after {t['layers']} steps in {beats}; metric: cosine of the error vectors over N "
        "queries per task"
    )
    met = all(
        r["layers"] >= 8
        and r["d"] >= 10
        and r["n_ctx"] == 2 * r["d"]
        and r["rotation"]
        and r["converged"]
        and r["loss"] < r["gd_loss"]
        for r in trends
    )
    return Regime(FU_REGIME, run, met, FU_NEEDED)


def trained_claims(rows: list[dict[str, Any]], deepest: int, steps: int) -> list[Claim]:
    """Fu et al.'s two claims about trained layers, by their metric, on the deepest stack of
    every (κ, N) cell (rows ``kind="fu_trend"``), one case per cell: the best-matching Newton
    step grows linearly with the layer (against the null of exact GD iterates), and the
    best-matching GD step grows faster than linearly."""
    trends = [r for r in _of(rows, "fu_trend") if r["layers"] == deepest]
    if not trends:
        return []
    return fu_claims(trends)


def fu_claims(trends: list[dict[str, Any]]) -> list[Claim]:
    """The two claims from rows ``kind="fu_trend"`` (:func:`fu_regime` gates them)."""
    regime = fu_regime(trends)
    few = [r for r in trends if len(r["middle_layers"]) < 3]
    untestable = (
        f"a {trends[0]['layers']}-layer stack has fewer than three layers to fit a trend over"
        if few
        else ""
    )

    seeds = len({r.get("seed", 0) for r in trends})

    def case(r: dict[str, Any]) -> str:
        name = f"κ = {r['kappa']:g}, N = {r['n_ctx']}"
        return f"{name}, seed {r.get('seed', 0)}" if seeds > 1 else name

    def level(name: str) -> str:
        return (
            f"a one-sided paired bootstrap test at the conventional 5 % level: the share of the "
            f"{trends[0]['replicates']} replicates over the evaluation tasks (and the full "
            f"sample) in which {name}"
        )

    layers = (
        "layers 3–L (Fu et al. exclude 1–2)"
        if trends[0]["middle_layers"][0] == 3
        else "every layer (too shallow to exclude 1–2)"
    )
    return [
        Claim(
            FU_WORDS,
            EMPIRICAL,
            "share of bootstrap replicates in which the best-matching Newton step (Fu et al.'s "
            "cosine of the error vectors) does not grow along a line that beats exact GD "
            f"iterates' (slope ≤ 0, or R² not above GD's), over {layers}",
            {case(r): r["trend_beaten"] for r in trends},
            Threshold(
                "<=",
                0.05,
                level(
                    "the trend's slope is not positive or exact GD iterates (the null, measured "
                    "in the same run: their best Newton step grows like log ℓ) fit a line at "
                    "least as well"
                ),
            ),
            regime=regime,
            untestable=untestable,
        ),
        Claim(
            FU_GD_WORDS,
            EMPIRICAL,
            "share of bootstrap replicates in which the best-matching GD step does not grow "
            f"faster than linearly with the layer (log-log slope ≤ 1), over {layers}",
            {case(r): r["gd_beaten"] for r in trends},
            Threshold(
                "<=",
                0.05,
                level(
                    "the best GD step's log-log slope against the layer is not above 1, exact "
                    "GD iterates' own (linear growth, measured in the same run)"
                ),
            ),
            regime=regime,
            reading="GD converging exponentially more slowly than the layers means the GD "
            "step that best matches layer ℓ grows faster than linearly in ℓ",
            untestable=untestable,
        ),
    ]


GARG_WORDS = Quote(
    GARG,
    "the trained model is able to learn unseen linear functions from in-context examples with "
    "performance comparable to the optimal least squares estimator",
    "Abstract",
)
AKYUREK_WORDS = Quote(
    AKYUREK,
    "trained in-context learners closely match the predictors computed by gradient descent, "
    "ridge regression, and exact least-squares regression, transitioning between different "
    "predictors as transformer depth and dataset noise vary, and converging to Bayesian "
    "estimators for large widths and depths",
    "Abstract",
)
VLADYMYROV_WORDS = Quote(
    VLADYMYROV,
    "Among the baselines, only tuned exact Ridge Regression solution (TUNEDRR) is comparable "
    "with linear transformers.",
    "Figure 1, caption",
)


def garg_claim(rows: list[dict[str, Any]]) -> Claim | None:
    """Garg et al.: the stack trained on noiseless tasks (rows ``kind="noiseless_curve"``)
    against min-norm least squares on the same tasks, one case per context size ``k``: the
    excess in paired standard errors. In Garg et al.'s regime only when the run is at their
    dimension and depth, converged, and beats averaging (their weakest baseline) at every k."""
    curve = _of(rows, "noiseless_curve")
    if not curve:
        return None
    first = curve[0]
    d, layers, steps = first["d"], first["layers"], first["steps"]
    conv = all(r["converged"] for r in curve)
    beats = all(r["error"] < r["averaging_error"] for r in curve)
    met = d == 20 and layers >= 12 and conv and beats
    return Claim(
        GARG_WORDS,
        EMPIRICAL,
        "(trained − least squares error) / paired standard error, per k (noiseless tasks; "
        "least squares' error ≈ (d − k)/d below d, ≈ 0 above)",
        {f"k = {r['n_ctx']}": r["z"] for r in curve},
        Threshold("<=", MATCH_Z, MATCH_ORIGIN.format(ref="least squares", seeds="")),
        regime=Regime(
            GARG_REGIME,
            f"a {layers}-layer linear-attention stack, d = {d}, {steps} Adam steps, "
            f"{'converged' if conv else 'not converged'} (loss plateau), "
            f"{'below' if beats else 'not below'} averaging at every k",
            met,
            ""
            if met
            else "a stack of ≥ 12 layers at d = 20 trained to a loss plateau and below "
            "averaging at every k (the full profile: noiseless_layers = 12, noiseless_d = 20)",
        ),
    )


def _bayes_case(r: dict[str, Any]) -> str:
    return f"L = {r['layers']}, H = {r['heads']} (ratio {r['ratio']:.3f} ± {r['ratio_se']:.2g})"


def akyurek_claim(rows: list[dict[str, Any]]) -> Claim | None:
    """Akyürek et al.: the trained stacks (rows ``kind="bayes"``) against the Bayes-optimal
    ridge on the same tasks, pooled over the context sizes; one case per width at the largest
    depth (the claim's "large widths and depths" end), its excess in paired standard errors
    (the case names the error ratio ± its standard error). In the paper's regime only with a
    grid of ≥ 3 depths up to ≥ 8 layers and ≥ 2 widths, every stack converged and the deepest
    below OLS."""
    bayes = _of(rows, "bayes")
    if not bayes:
        return None
    deepest = max(r["layers"] for r in bayes)
    top = [r for r in bayes if r["layers"] == deepest]
    depths = sorted({r["layers"] for r in bayes})
    widths = sorted({r["heads"] for r in bayes})
    conv = all(r["converged"] for r in bayes)
    beats = all(r["error"] < r["ols_error"] for r in top)
    met = len(depths) >= 3 and deepest >= 8 and len(widths) >= 2 and conv and beats
    d, sigma, steps = bayes[0]["d"], bayes[0]["sigma"], bayes[0]["steps"]
    return Claim(
        AKYUREK_WORDS,
        EMPIRICAL,
        "(trained − Bayes ridge error) / paired standard error over every k, at the largest "
        "depth (ratio to the Bayes error ± its standard error in each case)",
        {_bayes_case(r): r["z"] for r in top},
        Threshold("<=", MATCH_Z, MATCH_ORIGIN.format(ref="Bayes ridge λ = σ²/τ²", seeds="")),
        regime=Regime(
            AKYUREK_REGIME,
            f"linear-attention stacks of {depths} layers × {widths} heads, d = {d}, σ = "
            f"{sigma:g}, {steps} Adam steps, {'converged' if conv else 'not all converged'}",
            met,
            ""
            if met
            else "≥ 3 depths up to ≥ 8 layers and ≥ 2 widths, each trained to a loss "
            "plateau, the deepest below OLS (the full profile)",
        ),
    )


def vladymyrov_claim(rows: list[dict[str, Any]]) -> Claim | None:
    """Vladymyrov et al.: per (σ_max, depth ≥ 5 — the deeper stacks of the paper's 3 to 7, at
    which it reports linear transformers level with TunedRR; every depth if none reaches 5) the
    trained stack's adjusted loss against TunedRR's (rows ``kind="mixed_match"``), in paired
    standard errors. The run is in the paper's regime at D = 10, N = 20, σ_max ⊇ {1, 3, 5},
    ≥ 3 seeds and depths from ≤ 3 to ≥ 5; within it a cell is judged only where every seed's
    run converged and the stack is below ConstRR (the weakest baseline): the other cells are
    named as below the regime, with no verdict."""
    match = _of(rows, "mixed_match")
    if not match:
        return None
    deep = [r for r in match if r["layers"] >= 5] or match
    at = " at depth ≥ 5" if deep is not match else ""
    depths = sorted({r["layers"] for r in match})
    smax = sorted({r["sigma_max"] for r in match})
    seeds, d, n, steps = (match[0][k] for k in ("seeds", "d", "n_ctx", "steps"))
    model = "DIAG (the paper's diagonal attention, ω per layer)"
    if match[0].get("variant", "full") != "diag":
        model = "full key-query and value products"
    grown = " (each deeper stack grown from the shallower)" if match[0].get("grown") else ""

    def case(r: dict[str, Any]) -> str:
        return f"σ_max = {r['sigma_max']:g}, L = {r['layers']}"

    scale = (
        d == 10
        and n == 20
        and {1.0, 3.0, 5.0} <= set(smax)
        and seeds >= 3
        and min(depths) <= 3
        and max(depths) >= 5
    )
    conv = [case(r) for r in deep if r["converged"]]
    beats = [case(r) for r in deep if r["beats_const"]]
    unmet = tuple(case(r) for r in deep if not (r["converged"] and r["beats_const"]))
    met = scale and len(unmet) < len(deep)
    needed = (
        "stacks of 3 to 7 layers, D = 10, N = 20, σ_max ∈ {1, 3, 5}, 3 seeds, each trained to "
        "a loss plateau and below ConstRR (the full profile)"
    )
    return Claim(
        VLADYMYROV_WORDS,
        EMPIRICAL,
        "(adjusted loss of the trained stack − TunedRR's) / paired standard error, adjusted "
        "loss = loss − the oracle's (ridge given each task's σ)",
        {case(r): r["z"] for r in deep},
        Threshold(
            "<=",
            MATCH_Z,
            MATCH_ORIGIN.format(ref="TunedRR", seeds=", over tasks and seeds"),
        ),
        regime=Regime(
            VLADYMYROV_REGIME,
            f"linear-attention stacks of {depths} layers, {model}, in "
            f"{match[0].get('dtype', 'float32')}, D = {d}, N = {n}, σ_max ∈ {smax}, {seeds} "
            f"seed(s), {steps} Adam steps{grown}; of the {len(deep)} cells{at}, every seed "
            f"converged in {len(conv)} and the stack is below ConstRR in {len(beats)}",
            met,
            "" if met and not unmet else needed,
            unmet if met else (),
        ),
    )


def noise_claims(rows: list[dict[str, Any]], cfg: DepthConfig | None = None) -> list[Claim]:
    """The trained stack against least squares on noiseless tasks (Garg et al.), against the
    Bayes-optimal ridge by depth and width (Akyürek et al.) and against TunedRR under mixed
    noise (Vladymyrov et al.); a part without rows adds no claim."""
    claims = (garg_claim(rows), akyurek_claim(rows), vladymyrov_claim(rows))
    return [c for c in claims if c is not None]


def middle_eps(cfg: DepthConfig) -> float:
    """The tolerance the figure, the summary tables and the slope claims use (the middle of
    ``cfg.eps``)."""
    return sorted(cfg.eps)[len(cfg.eps) // 2]


def depth_claims(rows: list[dict[str, Any]], cfg: DepthConfig) -> list[Claim]:
    """Every claim the rows of ``cfg`` can test (kinds ``atlas``, ``fu_trend``, ``noise_curve``,
    ``mixed_noise``; a part without rows adds no claim)."""
    return (
        slope_claims(rows, middle_eps(cfg), cfg.cap)
        + trained_claims(rows, max(cfg.train_layers), cfg.steps)
        + noise_claims(rows, cfg)
    )
