"""The compare study's summary: the blog's open questions answered with measured numbers.

Every answer names the rows it is computed from (data mode, variant, switches; mean over the
seeds, geometric mean over the cells a ratio is pooled across) so that the config re-creates it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from attnreg.studies.answers import summary_table
from attnreg.studies.compare.config import CompareConfig
from attnreg.studies.compare.in_context import answer
from attnreg.studies.compare.ols_transformer import OLSTransformerResult
from attnreg.studies.compare.tang_retrieval import Z_LIMIT
from attnreg.studies.ledger import OPEN, REMARK, Claim, Quote
from attnreg.studies.paired import standard_error
from attnreg.studies.quotes import TAN_ZHAO_MEMORIES, TANG_TRAINABLE_METRIC
from attnreg.studies.sources import ATTNREG
from attnreg.thresholds import Threshold, check

Row = dict[str, Any]


def _select(rows: Iterable[Row], **match: Any) -> list[Row]:
    return [r for r in rows if all(r.get(k) == v for k, v in match.items())]


def _mean(rows: Iterable[Row], key: str, **match: Any) -> float:
    values = [float(r[key]) for r in _select(rows, **match)]
    return sum(values) / len(values) if values else math.nan


def _geomean(values: list[float]) -> float:
    good = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in good) / len(good)) if good else math.nan


def _ratio(
    rows: list[Row], num: dict[str, Any], den: dict[str, Any], pool: dict[str, list[Any]]
) -> float:
    """Geometric mean over the pooled cells of ``mean test MSE(num) / mean test MSE(den)``."""
    combos: list[dict[str, Any]] = [{}]
    for key, values in pool.items():
        combos = [c | {key: v} for c in combos for v in values]
    ratios = [
        _mean(rows, "test_mse", **(c | num)) / _mean(rows, "test_mse", **(c | den)) for c in combos
    ]
    return _geomean(ratios)


def _corr(rows: list[Row], **match: Any) -> float:
    return _mean(rows, "wqwk_invcov_corr", **match)


def _vs_ridge(rows: list[Row], cfg: CompareConfig) -> dict[str, Any]:
    ridge = _mean(rows, "test_mse", data="synthetic", variant="ridge")
    table = []
    for variant, white, label in (
        ("regression", True, "regression-like, data whitened"),
        ("whitened", False, "built-in whitened"),
    ):
        if variant not in cfg.variants or white not in cfg.whitening:
            continue
        for qk in cfg.qk:
            m = _mean(
                rows,
                "test_mse",
                data="synthetic",
                variant=variant,
                whitening=white,
                qk=qk,
                layernorm=False,
            )
            table.append([label, qk, m, f"{100 * (m / ridge - 1):+.1f} %"])
    return summary_table(
        f"Synthetic data, trained, layer norm off; ridge test MSE {ridge:.4f}.",
        ["attention", "qk", "test MSE", "vs ridge"],
        table,
    )


def _inverse_covariance(rows: list[Row], cfg: CompareConfig) -> dict[str, Any]:
    table: list[list[Any]] = [
        ["regression-like", mode]
        + [
            _corr(rows, data=mode, variant="regression", whitening=False, qk=qk, layernorm=False)
            for qk in cfg.qk
        ]
        for mode in cfg.data_modes
    ]
    if "whitened" in cfg.variants and "shared" in cfg.qk and False in cfg.whitening:
        for mode in cfg.data_modes:
            corr = _corr(
                rows, data=mode, variant="whitened", whitening=False, qk="shared", layernorm=False
            )
            table.append(
                ["whitened (built in)", mode] + [corr if qk == "shared" else "" for qk in cfg.qk]
            )
    return summary_table(
        "Cosine (after the best scale) of the learned W_q W_kᵀ with S⁻¹; no data whitening, "
        "layer norm off.",
        ["attention", "data"] + [f"qk = {qk}" for qk in cfg.qk],
        table,
        note="Only M XᵀY is identified by the fit (ŷ = X* M XᵀY/N, M = W_q W_kᵀ), so a trained "
        "M need not be S⁻¹; with whitening built in, the effective matrix is S⁻¹ up to the key "
        "ridge.",
    )


def _whitening_effect(rows: list[Row], cfg: CompareConfig) -> dict[str, Any]:
    table = []
    for variant in cfg.variants:
        num, den = {"variant": variant, "whitening": True}, {"variant": variant, "whitening": False}
        pooled = _ratio(
            rows, num, den, {"data": cfg.data_modes, "qk": cfg.qk, "layernorm": [False]}
        )
        per = [
            _ratio(rows, num, den, {"data": [m], "qk": cfg.qk, "layernorm": [False]})
            for m in cfg.data_modes
        ]
        table.append([variant, pooled, *per])
    return summary_table(
        "Test MSE with data whitening / without (geometric mean over qk, layer norm off; < 1: "
        "whitening helps).",
        ["variant", "all data", *cfg.data_modes],
        table,
    )


def _single_vs_factors(rows: list[Row], cfg: CompareConfig) -> dict[str, Any]:
    shown = [qk for qk in ("single", "shared") if qk in cfg.qk]
    table = []
    for mode in cfg.data_modes:
        pool: dict[str, list[Any]] = {
            "variant": list(cfg.variants),
            "whitening": list(cfg.whitening),
            "layernorm": [False],
            "data": [mode],
        }
        table.append([mode] + [_ratio(rows, {"qk": qk}, {"qk": "separate"}, pool) for qk in shown])
    return summary_table(
        "Test MSE ratio (geometric mean over variants and whitening, layer norm off; ≈ 1: as "
        "good).",
        ["data"] + [f"{qk} / separate" for qk in shown],
        table,
    )


def _layernorm_vs_whitening(rows: list[Row], cfg: CompareConfig) -> dict[str, Any]:
    table = []
    for mode in cfg.data_modes:
        pool = {"variant": list(cfg.variants), "qk": list(cfg.qk), "data": [mode]}
        neither = {"layernorm": False, "whitening": False}
        ln = _ratio(rows, {"layernorm": True, "whitening": False}, neither, pool)
        wh = _ratio(rows, {"layernorm": False, "whitening": True}, neither, pool)
        table.append([mode, ln, wh])
    return summary_table(
        "Test MSE relative to neither (geometric mean over variants and qk).",
        ["data", "layer norm", "whitening"],
        table,
        note="Layer norm standardises each row across its features; it does not decorrelate "
        "features, so it stands in for whitening only where the two ratios agree.",
    )


def _shift_table(ols_tf: OLSTransformerResult) -> dict[str, Any]:
    def short(model: str) -> str:
        return "refit" if "refit" in model else model.split(" ")[0]

    table = []
    for name in ols_tf.final:
        for kind in ("mean", "scale", "covariance"):
            sel = [r for r in ols_tf.shifts if r["data"] == name and r["shift"] == kind]
            if not sel:
                continue
            for m in sorted({min(r["magnitude"] for r in sel), max(r["magnitude"] for r in sel)}):
                at = {short(r["model"]): r["mse_to_truth"] for r in sel if r["magnitude"] == m}
                table.append([name, kind, m, at["trained"], at["constructed"], at["refit"]])
    return summary_table(
        "MSE to the noise-free X* w on a shifted context and queries (weights trained or "
        "constructed on the unshifted data), at the smallest and largest shift m.",
        ["data", "shift", "m", "trained", "constructed, frozen", "refit (OLS)"],
        table,
    )


def _functional(ols_tf: OLSTransformerResult) -> dict[str, Any]:
    return summary_table(
        "Relative MSE of the trained OLS-Transformer to the OLS fit.",
        ["data", "train", "test queries", "Adam steps", "first step below 1e-3"],
        [
            [
                name,
                v["rel_mse_to_ols_train"],
                v["rel_mse_to_ols_test"],
                int(v["steps"]),
                int(v["first_step_below_1e-3"]) if v["first_step_below_1e-3"] >= 0 else "never",
            ]
            for name, v in ols_tf.final.items()
        ],
    )


def _structural(ols_tf: OLSTransformerResult) -> dict[str, Any]:
    return summary_table(
        "Relative distance of the trained weights to the constructed ones, after the best scale.",
        ["data", "W_Q W_Kᵀ", "W_V W_P"],
        [[name, v["qk_distance"], v["vp_distance"]] for name, v in ols_tf.final.items()],
        note="With d = 1 the scale is the only freedom, so function implies structure; with "
        "d > 1 one data set identifies only the product W_Q W_Kᵀ (XᵀX/N) W_V W_P = β̂.",
    )


def summarise(
    rows: list[Row],
    training: list[Row],
    sklearn_gap: float,
    ols_tf: OLSTransformerResult | None,
    cfg: CompareConfig,
    probe: dict[str, dict[str, float]] | None = None,
) -> dict[str, Any]:
    """Answers (a short sentence, or a lead sentence with a table) keyed by question; see the
    module docstring."""
    out: dict[str, Any] = {
        "ridge rows vs scikit-learn": (
            f"max |ŷ_ridge − ŷ_sklearn| = {sklearn_gap:.2e} over the train and test rows of every "
            f"data mode and seed (scikit-learn Ridge(alpha={cfg.ridge}, fit_intercept=False, "
            "solver='cholesky') on the same split)"
        )
    }
    if "synthetic" in cfg.data_modes:
        out["whitened regression-like attention vs ridge (synthetic)"] = _vs_ridge(rows, cfg)
    if "regression" in cfg.variants:
        out["does the trained W_q W_kᵀ learn the inverse covariance?"] = _inverse_covariance(
            rows, cfg
        )
    if probe:
        k = int(next(iter(probe.values()))["targets"])
        out["... and when W_q W_kᵀ is identified (k targets at once)?"] = summary_table(
            f"Regression-like attention on the synthetic inputs (κ(Σ) = {cfg.condition:g}) with "
            f"k = {k} random targets as values, {cfg.probe_steps} Adam steps.",
            ["preprocessing", "corr with S⁻¹", "test MSE / ridge's"],
            [[name, v["corr"], v["test_mse_ratio"]] for name, v in probe.items()],
            note="Whitening in front makes the fit well conditioned, so the effective "
            "S^{-1/2} W_q W_kᵀ S^{-1/2} approaches S⁻¹ in the same number of steps.",
        )
    if set(cfg.whitening) == {False, True}:
        out["does whitening help test MSE?"] = _whitening_effect(rows, cfg)
    if "separate" in cfg.qk and len(cfg.qk) > 1:
        out["does one matrix W train as well as two factors?"] = _single_vs_factors(rows, cfg)
    if set(cfg.layernorm) == {False, True} and set(cfg.whitening) == {False, True}:
        out["does layer normalisation stand in for whitening?"] = _layernorm_vs_whitening(rows, cfg)
    if ols_tf is not None:
        out["trained OLS-Transformer: functional convergence"] = _functional(ols_tf)
        out["trained OLS-Transformer: structural convergence"] = _structural(ols_tf)
        out["trained OLS-Transformer: shift sensitivity (MSE to X* w)"] = _shift_table(ols_tf)
    stuck = sum(bool(t["stuck"]) for t in training)
    early = sum(t["stopped"] == "patience" for t in training)
    median = sorted(t["steps_run"] for t in training)[len(training) // 2] if training else 0
    out["training"] = (
        f"{len(training)} trained cells; {early} stopped early on the validation MSE, "
        f"{stuck} ended on a training-loss plateau; median steps {median}"
    )
    return out


def checks(rows: list[Row], sklearn_gap: float, cfg: CompareConfig) -> list[dict[str, Any]]:
    """Pass/fail: ridge matches scikit-learn (``cfg.max_sklearn_gap``), and on the synthetic
    data trained whitened regression-like attention (data-whitened, layer norm off) reaches a
    test MSE within ``cfg.max_whitened_vs_ridge`` times ridge's for every qk mode."""
    out = [check("max |ridge − scikit-learn|", sklearn_gap, "<=", cfg.max_sklearn_gap)]
    if "synthetic" in cfg.data_modes and "regression" in cfg.variants and True in cfg.whitening:
        ridge = _mean(rows, "test_mse", data="synthetic", variant="ridge")
        worst = max(
            _mean(
                rows,
                "test_mse",
                data="synthetic",
                variant="regression",
                whitening=True,
                qk=qk,
                layernorm=False,
            )
            for qk in cfg.qk
        )
        out.append(
            check(
                "whitened regression-like test MSE / ridge's (synthetic)",
                worst / ridge,
                "<=",
                cfg.max_whitened_vs_ridge,
            )
        )
    return out


CONVERGED = 1e-3
"""The trained OLS-Transformer "converges to OLS" when its relative MSE to the OLS fit on the
test queries is at most this."""


def claims(
    rows: list[Row],
    ols_tf: OLSTransformerResult | None,
    cfg: CompareConfig,
    in_context: dict[str, Any] | None = None,
) -> list[Claim]:
    """Tang's open question on ``W_q W_kᵀ`` (answered by the in-context training,
    :mod:`~attnreg.studies.compare.in_context`), attnreg's question whether the
    OLS-Transformer trains to OLS (:data:`CONVERGED`), and Tan & Zhao's slow-memory remark
    (paired z over the test queries, :data:`~attnreg.studies.compare.tang_retrieval.Z_LIMIT`)."""
    del rows
    out = []
    if in_context is not None:
        trained = in_context["trained"]
        out.append(
            Claim(
                TANG_TRAINABLE_METRIC,
                OPEN,
                "cosine with Σ⁻¹ of W_q W_kᵀ trained in context across tasks with one Σ; the null "
                "(random initialisations, the identity) and the loss's minimiser beside it",
                {
                    "trained": float(np.mean(trained)),
                    "null, 95th percentile of |cos|": float(
                        np.quantile(np.abs(in_context["null"]), 0.95)
                    ),
                    "identity": float(in_context["identity"]),
                    "minimiser ((N+1)/N Σ + tr Σ/N I)⁻¹": float(in_context["optimal"]),
                },
                errors={"trained": standard_error(trained)},
                answer=answer(in_context),
            )
        )
    if ols_tf is None:
        return out
    rel = {name: v["rel_mse_to_ols_test"] for name, v in ols_tf.final.items()}
    reached = [n for n, v in rel.items() if v <= CONVERGED]
    out.append(
        Claim(
            Quote(
                ATTNREG,
                "does the OLS-Transformer's architecture, trained from a random start, learn OLS?",
                "attnreg's question (Tan & Zhao construct the weights; they do not train them)",
                verbatim=False,
            ),
            OPEN,
            "relative MSE to the OLS fit on test queries",
            rel,
            answer=(
                f"Reached OLS (relative MSE ≤ {CONVERGED:g}) on {', '.join(reached)}"
                if reached
                else f"Not within {CONVERGED:g} relative MSE of OLS on any data set"
            )
            + f" of {len(rel)}.",
        )
    )
    out.append(
        Claim(
            TAN_ZHAO_MEMORIES,
            REMARK,
            "squared error to X* w at the largest shift, frozen constructed weights minus "
            "refitted (OLS) (paired z over the test queries)",
            dict(ols_tf.frozen_vs_refit),
            Threshold(
                ">=",
                Z_LIMIT,
                f"{Z_LIMIT:g} paired standard errors over the test queries (Z_LIMIT)",
            ),
            reading="weights are slow memory: frozen at the old context's values they do not "
            "follow a shifted context, while the refitted layer (OLS) does — the frozen error "
            "exceeds the refitted one by more than two paired standard errors",
        )
    )
    return out
