"""The depth study's claims ledger: how depth grows with κ (Giannou et al. 2025, Fu et al.
2024), what trained layers match (Fu et al. 2024), and the noise claims (Garg et al. 2022,
Akyürek et al. 2022, Vladymyrov et al. 2024), each tested by the study's rows against the
thresholds below (or the config's, where a check uses the same number)."""

from __future__ import annotations

import math
from typing import Any

from attnreg.studies.depth.config import DepthConfig
from attnreg.studies.ledger import Claim

GIANNOU = "Giannou et al. 2025 (arXiv 2403.03183)"
FU = "Fu et al. 2024 (arXiv 2310.17086)"
GARG = "Garg et al. 2022 (arXiv 2208.01066)"
AKYUREK = "Akyürek et al. 2022 (arXiv 2211.15661)"
VLADYMYROV = "Vladymyrov et al. 2024 (arXiv 2402.14180)"

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
    for method, source, words, unit in (
        (
            "newton",
            f"{GIANNOU}; {FU}",
            "Newton–Schulz stacks (two attention layers per Newton step) need a number of layers "
            "growing like log κ",
            "layers per decade of κ̂",
        ),
        (
            "gd",
            FU,
            "gradient-descent stacks need a number of layers growing like κ",
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
                source,
                words,
                f"|log₂(fitted / theory slope)|, {unit}, ε = {eps:g}",
                "<=",
                SLOPE_FACTOR,
                values,
                untestable=""
                if values
                else f"every {method} cell reached the {cap}-layer cap: no slope to fit",
            )
        )
    return out


def trained_claims(rows: list[dict[str, Any]], deepest: int) -> list[Claim]:
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
    return [
        Claim(
            FU,
            f"each trained layer computes Newton iterates (the {deepest}-layer stack, every layer)",
            "largest distance of a layer's prediction to its nearest Newton iterate, relative to "
            "OLS's",
            "<=",
            MATCH_DISTANCE,
            {c: max(layers.values()) for c, layers in newton.items()},
        ),
        Claim(
            FU,
            "trained layers are nearer Newton's iterates than gradient descent's",
            "fraction of layers nearer their best Newton iterate than their best GD iterate",
            ">=",
            1.0,
            {
                c: sum(newton[c][layer] < gd[c][layer] for layer in layers) / len(layers)
                for c, layers in newton.items()
            },
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
                GARG,
                "min-norm least squares from k < d noiseless points errs by (d − k)/d",
                "largest |measured − (d − k)/d| over k < d, in standard errors",
                "<=",
                cfg.max_curve_z,
                {"": max(abs(r["error"] - r["theory"]) / r["stderr"] for r in below)},
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
                AKYUREK,
                "ridge with λ = σ²/τ² is the Bayes-optimal prediction: no trained stack beats it",
                "smallest (trained − Bayes ridge error) over k, in standard errors",
                ">=",
                BAYES_Z,
                {"": min(gaps)},
            )
        )
    total = {r["estimator"]: r for r in _of(rows, "mixed_noise") if r["bin"] == "all"}
    if "trained" in total and "tuned_ridge" in total:
        out.append(
            Claim(
                VLADYMYROV,
                "linear transformers trained with a noise level drawn per task, σ ~ U(0, σ_max), "
                "match or surpass ridge tuned to each task's noise level",
                "error of the trained stack / ridge tuned per σ",
                "<=",
                MATCH_RATIO,
                {"": total["trained"]["error"] / total["tuned_ridge"]["error"]},
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
        + trained_claims(rows, max(cfg.train_layers))
        + noise_claims(rows, cfg)
    )
