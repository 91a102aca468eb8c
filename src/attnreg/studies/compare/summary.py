"""The compare study's summary: the blog's open questions answered with measured numbers.

Every answer names the rows it is computed from (data mode, variant, switches; mean over the
seeds, geometric mean over the cells a ratio is pooled across) so that the config re-creates it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from attnreg.studies.common import check
from attnreg.studies.compare.config import CompareConfig
from attnreg.studies.compare.ols_transformer import OLSTransformerResult

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


def _vs_ridge(rows: list[Row], cfg: CompareConfig) -> str:
    ridge = _mean(rows, "test_mse", data="synthetic", variant="ridge")
    parts = []
    for variant, white, label in (
        ("regression", True, "data-whitened regression-like"),
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
            parts.append(f"{label}, qk={qk}: {m:.4f} ({100 * (m / ridge - 1):+.1f} %)")
    return f"ridge test MSE {ridge:.4f}; trained, layer norm off: " + "; ".join(parts)


def _inverse_covariance(rows: list[Row], cfg: CompareConfig) -> str:
    lines = []
    for mode in cfg.data_modes:
        vals = ", ".join(
            f"{qk} {_corr(rows, data=mode, variant='regression', whitening=False, qk=qk, layernorm=False):.3f}"  # noqa: E501
            for qk in cfg.qk
        )
        lines.append(f"{mode}: {vals}")
    text = (
        "correlation (cosine after the best scale) of the learned W_q W_kᵀ with S⁻¹, "
        "regression-like attention, no whitening, no layer norm — " + "; ".join(lines)
    )
    if "whitened" in cfg.variants and "shared" in cfg.qk and False in cfg.whitening:
        built_in = ", ".join(
            f"{m} {_corr(rows, data=m, variant='whitened', whitening=False, qk='shared', layernorm=False):.4f}"  # noqa: E501
            for m in cfg.data_modes
        )
        text += (
            "; with whitening built in (whitened variant, shared W) the effective matrix is S⁻¹ "
            f"up to the key ridge: corr {built_in}"
        )
    return text + (
        ". Only M XᵀY is identified by the fit (ŷ = X* M XᵀY/N), so a trained M need not be S⁻¹."
    )


def _whitening_effect(rows: list[Row], cfg: CompareConfig) -> str:
    parts = []
    for variant in cfg.variants:
        num, den = {"variant": variant, "whitening": True}, {"variant": variant, "whitening": False}
        pooled = _ratio(
            rows, num, den, {"data": cfg.data_modes, "qk": cfg.qk, "layernorm": [False]}
        )
        per = ", ".join(
            f"{m} {_ratio(rows, num, den, {'data': [m], 'qk': cfg.qk, 'layernorm': [False]}):.3f}"
            for m in cfg.data_modes
        )
        parts.append(f"{variant}: ×{pooled:.3f} ({per})")
    return (
        "test MSE with data whitening / without (geometric mean over data modes and qk, layer "
        "norm off; < 1 means whitening helps) — " + "; ".join(parts)
    )


def _single_vs_factors(rows: list[Row], cfg: CompareConfig) -> str:
    parts = []
    for mode in cfg.data_modes:
        pool: dict[str, list[Any]] = {
            "variant": list(cfg.variants),
            "whitening": list(cfg.whitening),
            "layernorm": [False],
            "data": [mode],
        }
        ratios = [
            f"{qk}/separate ×{_ratio(rows, {'qk': qk}, {'qk': 'separate'}, pool):.3f}"
            for qk in ("single", "shared")
            if qk in cfg.qk
        ]
        parts.append(f"{mode}: " + ", ".join(ratios))
    return (
        "test MSE ratio (geometric mean over variants and whitening, layer norm off; ≈ 1 means "
        "as good) — " + "; ".join(parts)
    )


def _layernorm_vs_whitening(rows: list[Row], cfg: CompareConfig) -> str:
    parts = []
    for mode in cfg.data_modes:
        pool = {"variant": list(cfg.variants), "qk": list(cfg.qk), "data": [mode]}
        neither = {"layernorm": False, "whitening": False}
        ln = _ratio(rows, {"layernorm": True, "whitening": False}, neither, pool)
        wh = _ratio(rows, {"layernorm": False, "whitening": True}, neither, pool)
        parts.append(f"{mode}: layer norm ×{ln:.3f}, whitening ×{wh:.3f}")
    return (
        "test MSE relative to neither (geometric mean over variants and qk) — "
        + "; ".join(parts)
        + ". Layer norm standardises each row across its features; it does not decorrelate "
        "features, so it stands in for whitening only where the two ratios agree."
    )


def _shift_text(ols_tf: OLSTransformerResult) -> str:
    def short(model: str) -> str:
        return "refit" if "refit" in model else model.split(" ")[0]

    parts = []
    for name in ols_tf.final:
        for kind in ("mean", "scale", "covariance"):
            sel = [r for r in ols_tf.shifts if r["data"] == name and r["shift"] == kind]
            if not sel:
                continue
            top = max(r["magnitude"] for r in sel)
            low = min(r["magnitude"] for r in sel)
            at_top = {short(r["model"]): r["mse_to_truth"] for r in sel if r["magnitude"] == top}
            at_low = {short(r["model"]): r["mse_to_truth"] for r in sel if r["magnitude"] == low}
            parts.append(
                f"{name} {kind} m={top:g}: trained {at_top['trained']:.3g} (m={low:g}: "
                f"{at_low['trained']:.3g}), constructed-frozen {at_top['constructed']:.3g} "
                f"(m={low:g}: {at_low['constructed']:.3g}), refit {at_top['refit']:.3g}"
            )
    return "; ".join(parts)


def summarise(
    rows: list[Row],
    training: list[Row],
    sklearn_gap: float,
    ols_tf: OLSTransformerResult | None,
    cfg: CompareConfig,
    probe: dict[str, dict[str, float]] | None = None,
) -> dict[str, str]:
    """Answers (sentences with numbers) keyed by question; see the module docstring."""
    out: dict[str, str] = {
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
        out["... and when W_q W_kᵀ is identified (k targets at once)?"] = (
            f"regression-like attention on the synthetic inputs (κ(Σ) = {cfg.condition:g}) with "
            f"k = {k} random targets as values, {cfg.probe_steps} Adam steps: corr with S⁻¹ "
            + "; ".join(
                f"{name} {v['corr']:.3f} (test MSE ×{v['test_mse_ratio']:.3f} ridge's)"
                for name, v in probe.items()
            )
            + ". Whitening in front makes the fit well conditioned, so the effective "
            "S^{-1/2} W_q W_kᵀ S^{-1/2} approaches S⁻¹ in the same number of steps."
        )
    if set(cfg.whitening) == {False, True}:
        out["does whitening help test MSE?"] = _whitening_effect(rows, cfg)
    if "separate" in cfg.qk and len(cfg.qk) > 1:
        out["does one matrix W train as well as two factors?"] = _single_vs_factors(rows, cfg)
    if set(cfg.layernorm) == {False, True} and set(cfg.whitening) == {False, True}:
        out["does layer normalisation stand in for whitening?"] = _layernorm_vs_whitening(rows, cfg)
    if ols_tf is not None:
        f = ols_tf.final
        out["trained OLS-Transformer: functional convergence"] = "; ".join(
            f"{name}: relative MSE to the OLS fit {v['rel_mse_to_ols_train']:.2e} (train), "
            f"{v['rel_mse_to_ols_test']:.2e} (test queries) after {int(v['steps'])} Adam steps; "
            + (
                f"first below 1e-3 at step {int(v['first_step_below_1e-3'])}"
                if v["first_step_below_1e-3"] >= 0
                else "never below 1e-3"
            )
            for name, v in f.items()
        )
        out["trained OLS-Transformer: structural convergence"] = (
            "; ".join(
                f"{name}: distance after the best scale W_Q W_Kᵀ {v['qk_distance']:.3f}, "
                f"W_V W_P {v['vp_distance']:.3f}"
                for name, v in f.items()
            )
            + ". With d = 1 the scale is the only freedom, so function implies structure; with "
            "d > 1 one data set identifies only the product W_Q W_Kᵀ (XᵀX/N) W_V W_P = β̂."
        )
        out["trained OLS-Transformer: shift sensitivity (MSE to X* w)"] = _shift_text(ols_tf)
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
