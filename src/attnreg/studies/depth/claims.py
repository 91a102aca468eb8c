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
VLADYMYROV_REGIME = (
    "linear transformers of 3 to 7 layers, D = 10, N = 20, σ ~ U(0, σ_max) per task with "
    "σ_max ∈ {1, 3, 5}, several seeds; metric: adjusted loss (loss − oracle) against ConstRR, "
    "AdaRR and TunedRR (ridge with σ̂² estimated from the context)"
)
OWN = "attnreg's tolerance {name} (no source number)"

SLOPE_FACTOR = 1.0
"""A fitted slope "grows like" the theory when ``|log₂(slope / theory slope)| ≤`` this: within
a factor of two."""
MATCH_DISTANCE = 0.1
"""A trained layer "is" an iterate when its prediction lies within this distance of it,
relative to the OLS prediction (Fu et al.'s protocol, :mod:`~attnreg.studies.depth.iterates`)."""
MATCH_RATIO = 1.05
"""The trained stack "matches" ridge tuned per noise level when its error is at most this
multiple of the ridge's."""
BAYES_Z = -3.0
"""No estimator beats the posterior mean: the trained stack's error minus the Bayes ridge's,
in standard errors of the difference, is at least this at every context size."""


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


def noise_claims(rows: list[dict[str, Any]], cfg: DepthConfig) -> list[Claim]:
    """The noiseless min-norm curve (Garg et al.), the Bayes-optimal ridge (Akyürek et al.)
    and the mixed-noise comparison (Vladymyrov et al.)."""
    out = []
    curve = _of(rows, "noise_curve")
    by = {(r["estimator"], r["n_ctx"]): r for r in curve}
    below = [r for r in curve if r["estimator"] == "ols_noiseless" and r["n_ctx"] < r["d"]]
    if below:
        out.append(
            Claim(
                Quote(
                    GARG,
                    "a Transformer trained on noiseless linear functions matches least squares "
                    "(min-norm) from k in-context examples, whose error is (d − k)/d for k < d",
                    "Section 4, Figure 2",
                    verbatim=False,
                ),
                EMPIRICAL,
                "largest |measured − (d − k)/d| over k < d, in standard errors",
                {"": max(abs(r["error"] - r["theory"]) / r["stderr"] for r in below)},
                Threshold("<=", cfg.max_curve_z, OWN.format(name="max_curve_z")),
                untestable="the run compares least squares with its own theory; no model "
                "trained on noiseless tasks is compared with it",
            )
        )
    gaps = [
        (t["error"] - b["error"]) / math.hypot(t["stderr"], b["stderr"])
        for (name, k), t in by.items()
        if name == "trained" and (b := by.get(("bayes_ridge", k))) is not None
    ]
    if gaps:
        out.append(
            Claim(
                Quote(
                    AKYUREK,
                    "trained in-context learners approach the Bayes-optimal estimator (ridge "
                    "with λ = σ²/τ²) on noisy linear regression",
                    "Section 4",
                    verbatim=False,
                ),
                EMPIRICAL,
                "smallest (trained − Bayes ridge error) over k, in standard errors",
                {"": min(gaps)},
                Threshold("<=", -BAYES_Z, "3 standard errors of the paired difference"),
                untestable="beating the Bayes-optimal ridge is impossible by construction; "
                "the ratio to it by depth and width is not measured yet",
            )
        )
    total = {r["estimator"]: r for r in _of(rows, "mixed_noise") if r["bin"] == "all"}
    if "trained" in total and "tuned_ridge" in total:
        out.append(
            Claim(
                Quote(
                    VLADYMYROV,
                    "linear transformers of 5 or more layers trained with a noise level drawn "
                    "per task match TunedRR, ridge with σ̂² estimated from the context",
                    "Section 5, mixed noise variance",
                    verbatim=False,
                ),
                EMPIRICAL,
                "error of the trained stack / ridge given each task's true σ",
                {"": total["trained"]["error"] / total["tuned_ridge"]["error"]},
                Threshold("<=", MATCH_RATIO, OWN.format(name="MATCH_RATIO")),
                regime=Regime(
                    VLADYMYROV_REGIME,
                    f"{cfg.noise_layers} layers, {cfg.noise_steps} steps, one seed, against "
                    "ridge given the true σ (the oracle)",
                    False,
                    "stacks of 3 to 7 layers, several seeds, ConstRR/AdaRR/TunedRR and the "
                    "adjusted loss (--full profile)",
                ),
            )
        )
    return out


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
