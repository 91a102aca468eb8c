"""The depth study's claims ledger: how depth grows with κ (Giannou et al. 2025, Fu et al.
2024), what trained layers match (Fu et al. 2024), and the noise claims (Garg et al. 2022,
Akyürek et al. 2022, Vladymyrov et al. 2024), each tested by the study's rows against the
thresholds below (or the config's, where a check uses the same number)."""

from __future__ import annotations

import math
from typing import Any

from attnreg.studies.depth.config import DepthConfig
from attnreg.studies.ledger import EMPIRICAL, IDENTITY, Claim, Quote, Regime, Threshold
from attnreg.studies.sources import AKYUREK, FU, GARG, GIANNOU, VLADYMYROV

FU_WORDS = Quote(
    FU,
    "Empirically, predictions from successive Transformer layers closely match different "
    "iterations of Newton's Method linearly, with each middle layer roughly computing 3 "
    "iterations; thus, Transformers and Newton's method converge at roughly the same rate.",
    "Abstract (NeurIPS 2024 version)",
)
FU_REGIME = (
    "a 12-layer GPT-2 trained 500k steps on in-context linear regression (d = 20); metric: "
    "cosine similarity of the error vectors, best match over Newton steps and GD steps, "
    "layers 1–2 excluded; the claim is the trend of the best-matching Newton step with depth"
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
    "linear transformers of 3 to 7 layers, D = 10, N = 20, σ ~ U(0, σ_max) per task with "
    "σ_max ∈ {1, 3, 5}, several seeds; metric: adjusted loss (loss − the oracle's) against "
    "ConstRR, AdaRR and TunedRR"
)
OWN = "attnreg's tolerance {name} (no source number)"

SLOPE_FACTOR = 1.0
"""A fitted slope "grows like" the theory when ``|log₂(slope / theory slope)| ≤`` this: within
a factor of two."""
MATCH_DISTANCE = 0.1
"""A trained layer "is" an iterate when its prediction lies within this distance of it,
relative to the OLS prediction (Fu et al.'s protocol, :mod:`~attnreg.studies.depth.iterates`)."""
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


def slope_claims(rows: list[dict[str, Any]], eps: float, cap: int) -> list[Claim]:
    """Newton's and GD's fitted slopes (rows ``kind="slope"`` at ``eps``) against the theory's,
    one case per context size N."""
    slopes = [s for s in _of(rows, "slope") if s["eps"] == eps]
    out = []
    for method, quote, unit in (
        (
            "newton",
            Quote(
                GIANNOU,
                "Newton–Schulz stacks (a constant number of attention layers per Newton step) "
                "need a number of layers growing like log κ",
                "the main construction and its convergence bound",
                verbatim=False,
            ),
            "layers per decade of κ̂",
        ),
        (
            "gd",
            Quote(
                FU,
                "gradient-descent iterations need a number of steps growing like κ",
                "the convergence rates compared (GD's linear rate in κ)",
                verbatim=False,
            ),
            "layers per unit of κ̂",
        ),
    ):
        mine = [s for s in slopes if s["method"] == method]
        if not mine:
            continue
        values = {
            f"N = {s['n_ctx']}": abs(math.log2(s["slope"] / s["theory_slope"]))
            for s in mine
            if s["slope"] is not None and s["slope"] > 0 and s["theory_slope"]
        }
        out.append(
            Claim(
                quote,
                IDENTITY,
                f"|log₂(fitted / theory slope)|, {unit}, ε = {eps:g}",
                values,
                Threshold(
                    "<=",
                    SLOPE_FACTOR,
                    "a factor of two of the theory's slope (attnreg's; the theory gives the "
                    "order, not the constant)",
                ),
                untestable=""
                if values
                else f"every {method} cell reached the {cap}-layer cap: no slope to fit",
            )
        )
    return out


def trained_claims(rows: list[dict[str, Any]], deepest: int, steps: int) -> list[Claim]:
    """Fu et al.'s two claims about trained layers, on every layer of the ``deepest``-layer
    stacks (rows ``kind="trained"``), one case per (κ, N)."""
    trained = [r for r in _of(rows, "trained") if r["layers"] == deepest]
    if not trained:
        return []
    cells = dict.fromkeys((r["kappa"], r["n_ctx"]) for r in trained)

    def nearest(cell: tuple[float, int], method: str) -> dict[int, float]:
        return {
            r["layer"]: r["match_error"]
            for r in trained
            if (r["kappa"], r["n_ctx"]) == cell and r["method"] == method
        }

    def case(cell: tuple[float, int]) -> str:
        return f"κ = {cell[0]:g}, N = {cell[1]}"

    newton = {case(c): nearest(c, "newton") for c in cells}
    gd = {case(c): nearest(c, "gd") for c in cells}
    regime = Regime(
        FU_REGIME,
        f"a {deepest}-layer linear-attention stack trained {steps} Adam steps; metric: "
        "relative distance of the predictions",
        False,
        "8–12-layer linear-attention stacks trained to convergence, d = 10–20, N = 2d, "
        "Fu's cosine metric and the best-match trend over the middle layers (--full profile)",
    )
    return [
        Claim(
            FU_WORDS,
            EMPIRICAL,
            "largest distance of a layer's prediction to its nearest Newton iterate, relative "
            "to OLS's",
            {c: max(layers.values()) for c, layers in newton.items()},
            Threshold("<=", MATCH_DISTANCE, OWN.format(name="MATCH_DISTANCE")),
            regime=regime,
        ),
        Claim(
            FU_WORDS,
            EMPIRICAL,
            "fraction of layers nearer their best Newton iterate than their best GD iterate",
            {
                c: sum(newton[c][layer] < gd[c][layer] for layer in layers) / len(layers)
                for c, layers in newton.items()
            },
            Threshold(">=", 1.0, "every layer"),
            regime=regime,
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
    standard errors. In the paper's regime only at D = 10, N = 20, σ_max ⊇ {1, 3, 5}, ≥ 3
    seeds, depths from ≤ 3 to ≥ 5, every run converged and below ConstRR."""
    match = _of(rows, "mixed_match")
    if not match:
        return None
    deep = [r for r in match if r["layers"] >= 5] or match
    depths = sorted({r["layers"] for r in match})
    smax = sorted({r["sigma_max"] for r in match})
    seeds, d, n, steps = (match[0][k] for k in ("seeds", "d", "n_ctx", "steps"))
    conv = all(r["converged"] for r in match)
    beats = all(r["beats_const"] for r in match)
    met = (
        d == 10
        and n == 20
        and {1.0, 3.0, 5.0} <= set(smax)
        and seeds >= 3
        and min(depths) <= 3
        and max(depths) >= 5
        and conv
        and beats
    )
    return Claim(
        VLADYMYROV_WORDS,
        EMPIRICAL,
        "(adjusted loss of the trained stack − TunedRR's) / paired standard error, adjusted "
        "loss = loss − the oracle's (ridge given each task's σ)",
        {f"σ_max = {r['sigma_max']:g}, L = {r['layers']}": r["z"] for r in deep},
        Threshold(
            "<=",
            MATCH_Z,
            MATCH_ORIGIN.format(ref="TunedRR", seeds=", over tasks and seeds"),
        ),
        regime=Regime(
            VLADYMYROV_REGIME,
            f"{depths} layers, D = {d}, N = {n}, σ_max ∈ {smax}, {seeds} seed(s), {steps} "
            f"Adam steps, {'converged' if conv else 'not all converged'}, "
            f"{'below' if beats else 'not all below'} ConstRR",
            met,
            ""
            if met
            else "stacks of 3 to 7 layers, D = 10, N = 20, σ_max ∈ {1, 3, 5}, 3 "
            "seeds, each trained to a loss plateau and below ConstRR (the full profile)",
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
    """Every claim the rows of ``cfg`` can test (kinds ``slope``, ``trained``, ``noise_curve``,
    ``mixed_noise``; a part without rows adds no claim)."""
    return (
        slope_claims(rows, middle_eps(cfg), cfg.cap)
        + trained_claims(rows, max(cfg.train_layers), cfg.steps)
        + noise_claims(rows, cfg)
    )
