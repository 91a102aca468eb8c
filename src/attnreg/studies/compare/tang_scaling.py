"""Tang's claim B: 1/√d_k scaling handles feature scale, not correlation.

The compare study's section ``tang``, part ``scaling`` (part ``retrieval``, the
correlated-pattern claim, is :mod:`~attnreg.studies.compare.tang_retrieval`). Inputs
``x ~ N(0, D R D)`` in ``d = config.tang_scale_d`` dimensions, four scenarios: ``iid``
(``D = R = I``), ``unequal variances`` (variances geometric from ``1/√r`` to ``√r``, ``r`` =
``config.tang_variance_ratio``, ``R = I``), ``correlated`` (``D = I``, ``R`` equicorrelated
with ``ρ`` = ``config.tang_rho``), ``both``. Targets ``y = Σ_j u_j x_j / D_jj + σ ε``
(``u ~ N(0, I_d)``, ``σ`` = ``config.noise``); ``config.tang_scale_n_train`` training and
``config.n_test`` test rows, the same standard-normal draws in every scenario (they differ only
in ``D`` and ``R``). The inputs are preprocessed by training statistics: ``none``;
``standardised`` (per feature ``(x − μ_j)/σ_j``); ``whitened`` (``(x − μ) S^{-1/2}``, ZCA,
``S`` the training covariance). Two attention regressors with the inputs as queries and keys,
the targets as values and no learned projection (``d_k = d``), both computed by the attention
core (:class:`attnreg.core.Attention`, :func:`attnreg.core.associate`):

* identity separation (regression-like), ``ŷ* = c · x̃*ᵀ X̃ᵀ Y / N`` with ``c = 1`` and with the
  best global scale ``c`` (least squares on a validation split of the training rows);
* softmax, ``ŷ* = softmax(β x̃*ᵀ X̃ᵀ) Y`` with ``β = 1/√d_k`` as written (Vaswani et al. 2017)
  and with the best single ``β = m/√d_k`` on the validation split (``m`` in
  ``config.beta_multipliers``).

No global scale can do better than the validated one. The identity operator is
``ŷ* = c x*ᵀ Σ̂ w`` with ``Σ̂`` the preprocessed inputs' covariance, and for Gaussian inputs the
softmax average tilts the input distribution, ``E_w[x] ≈ β Σ x*``, so ``ŷ ≈ β x*ᵀ Σ w``: one
scalar can undo a global scale of ``Σ`` but not unequal variances or correlations;
standardising makes the variances equal, whitening makes ``Σ = I``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from attnreg.core import Attention, associate
from attnreg.data.regression import RegressionData
from attnreg.estimators import Ridge
from attnreg.models.regressors import symmetric_whitening
from attnreg.studies.common import FigureRecord, Section
from attnreg.studies.compare.config import CompareConfig
from attnreg.studies.compare.density import validated_beta, validation_split
from attnreg.studies.compare.metrics import mse
from attnreg.studies.compare.tang_retrieval import SECTION, SEED_TAG

QUESTION = "Tang: does 1/√d_k scaling handle feature scale and correlation?"
SCENARIOS = ("iid", "unequal variances", "correlated", "both")
PREPROCESSING = ("none", "standardised", "whitened")


def scenario_data(
    scenario: str, cfg: CompareConfig, draws: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> RegressionData:
    """The scenario's training and test rows (module docstring, part (b)) from the common
    draws ``(z (n, d), ε (n,), u (d,))``: ``x = z Cᵀ`` with ``C Cᵀ = D R D``, ``y = (x / D) u +
    σ ε``. Every scenario uses the same draws, so they differ only in ``D`` and ``R``."""
    z, eps, u = draws
    d = z.shape[1]
    ratio = cfg.tang_variance_ratio if scenario in ("unequal variances", "both") else 1.0
    rho = cfg.tang_rho if scenario in ("correlated", "both") else 0.0
    sd = np.sqrt(ratio ** np.linspace(-0.5, 0.5, d))
    sigma = ((1 - rho) * np.eye(d) + rho * np.ones((d, d))) * np.outer(sd, sd)
    x = z @ np.linalg.cholesky(sigma).T
    y = (x / sd) @ u + cfg.noise * eps
    n = cfg.tang_scale_n_train
    return RegressionData(
        scenario,
        x[:n],
        y[:n, None],
        x[n:],
        y[n:, None],
        [f"x{i}" for i in range(d)],
        true_weights=u / sd,
        covariance=sigma,
    )


def preprocess(kind: str, x_train: torch.Tensor, *others: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``x_train`` and ``others`` preprocessed by the training rows' statistics: ``none``,
    ``standardised`` (``(x − μ)/σ`` per feature) or ``whitened`` (``(x − μ) S^{-1/2}``,
    :func:`attnreg.models.regressors.symmetric_whitening` of the centred rows)."""
    if kind == "none":
        return (x_train, *others)
    mu = x_train.mean(0)
    if kind == "standardised":
        sd = x_train.std(0, unbiased=False)
        return tuple((t - mu) / sd for t in (x_train, *others))
    if kind == "whitened":
        lmat = symmetric_whitening((x_train - mu)[None])[0]
        return tuple((t - mu) @ lmat for t in (x_train, *others))
    raise ValueError(f"kind: unknown value {kind!r}; valid: {PREPROCESSING}")


def softmax_regression(
    x_ctx: torch.Tensor, y_ctx: torch.Tensor, x_query: torch.Tensor, beta: float
) -> torch.Tensor:
    """``softmax(β X* Xᵀ) Y``: ``(N, d)``, ``(N, dy)``, ``(M, d)`` → ``(M, dy)`` (the core's dot
    similarity with softmax separation)."""
    out = associate(x_query, x_ctx, y_ctx, separation="softmax", beta=beta)
    assert isinstance(out, torch.Tensor)
    return out


def linear_regression_attention(
    x_ctx: torch.Tensor, y_ctx: torch.Tensor, x_query: torch.Tensor, scale: float = 1.0
) -> torch.Tensor:
    """Regression-like attention without projections, ``c · X* Xᵀ Y / N`` → ``(M, dy)``: the
    core's dot similarity, identity separation and context mean, times ``c`` (any sign)."""
    out = Attention("dot", "identity")(x_query[None], x_ctx[None], y_ctx[None], mean=True)[0]
    return out * scale if scale != 1.0 else out


def best_scale(x: torch.Tensor, y: torch.Tensor, fit: Any, val: Any) -> float:
    """The least-squares global scale ``c* = ⟨p, y_val⟩ / ⟨p, p⟩`` of
    ``p = linear_regression_attention(X_fit, Y_fit, X_val)`` on the validation rows."""
    p = linear_regression_attention(x[fit], y[fit], x[val])
    return float((p * y[val]).sum() / (p * p).sum())


def scaling_rows(cfg: CompareConfig) -> list[dict[str, Any]]:
    """One row per scenario × preprocessing × (separation, scale rule)."""
    rng = np.random.default_rng([cfg.seed, SEED_TAG, 1])
    d, n = cfg.tang_scale_d, cfg.tang_scale_n_train + cfg.n_test
    draws = (rng.standard_normal((n, d)), rng.standard_normal(n), rng.standard_normal(d))
    rows = []
    for scenario in SCENARIOS:
        data = scenario_data(scenario, cfg, draws)
        x, y = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train)
        xt, yt = torch.from_numpy(data.x_test), torch.from_numpy(data.y_test)
        ridge = mse(Ridge(cfg.ridge).predict(x, y, xt), yt)
        split = [cfg.seed, SEED_TAG, 2]  # one validation split for every cell
        fit, val = validation_split(
            x.shape[0], cfg.validation_fraction, np.random.default_rng(split)
        )
        for kind in PREPROCESSING:
            xp, xtp = preprocess(kind, x, xt)
            beta, _ = validated_beta(
                xp,
                y,
                softmax_regression,
                cfg.beta_multipliers,
                cfg.validation_fraction,
                np.random.default_rng(split),
            )
            cells = (
                ("identity", "1/N", 1.0, linear_regression_attention),
                ("identity", "validated", best_scale(xp, y, fit, val), linear_regression_attention),
                ("softmax", "1/sqrt(d_k)", 1 / math.sqrt(d), softmax_regression),
                ("softmax", "validated", beta, softmax_regression),
            )
            for separation, rule, value, fn in cells:
                test = mse(fn(xp, y, xtp, value), yt)
                rows.append(
                    {
                        "section": SECTION,
                        "part": "scaling",
                        "scenario": scenario,
                        "preprocessing": kind,
                        "separation": separation,
                        "scale_rule": rule,
                        "scale": value,
                        "test_mse": test,
                        "ridge_test_mse": ridge,
                        "test_mse_vs_ridge": test / ridge,
                    }
                )
    return rows


def _get(rows: list[dict[str, Any]], scenario: str, kind: str, sep: str, rule: str) -> float:
    return float(
        next(
            r["test_mse"]
            for r in rows
            if (r["scenario"], r["preprocessing"], r["separation"], r["scale_rule"])
            == (scenario, kind, sep, rule)
        )
    )


def _summary(rows: list[dict[str, Any]], cfg: CompareConfig) -> str:
    parts = []
    ratios: dict[str, list[float]] = {kind: [] for kind in PREPROCESSING}
    soft: dict[str, list[float]] = {kind: [] for kind in PREPROCESSING}
    for r in rows:
        if r["separation"] == "identity" and r["scale_rule"] == "validated":
            ratios[r["preprocessing"]].append(r["test_mse_vs_ridge"])
        if r["separation"] == "softmax" and r["scale_rule"] == "1/sqrt(d_k)":
            soft[r["preprocessing"]].append(r["test_mse_vs_ridge"])
    for scenario in SCENARIOS:
        sel = [r for r in rows if r["scenario"] == scenario]
        cells = []
        for sep, rules in (("identity", ("validated",)), ("softmax", ("1/sqrt(d_k)", "validated"))):
            vals = ", ".join(
                f"{kind} " + " / ".join(f"{_get(sel, scenario, kind, sep, r):.3f}" for r in rules)
                for kind in PREPROCESSING
            )
            cells.append(f"{sep}: {vals}")
        parts.append(f"{scenario} (ridge {sel[0]['ridge_test_mse']:.3f}) — " + "; ".join(cells))
    return (
        f"attention regression on d_k = {cfg.tang_scale_d} inputs, {cfg.tang_scale_n_train} "
        "training rows, test MSE per preprocessing — identity separation c·X*XᵀY/N with the "
        "best global scale c; softmax(β X*Xᵀ)Y with β = 1/√d_k / the best global β (validation "
        f"split); variance ratio {cfg.tang_variance_ratio:g}, correlation ρ = {cfg.tang_rho:g}: "
        + " | ".join(parts)
        + ". Test MSE / ridge's over the four scenarios, identity with the best scale: "
        + ", ".join(
            f"{kind} {min(ratios[kind]):.2f}–{max(ratios[kind]):.2f}" for kind in PREPROCESSING
        )
        + "; softmax with β = 1/√d_k: "
        + ", ".join(f"{kind} {min(soft[kind]):.2f}–{max(soft[kind]):.2f}" for kind in PREPROCESSING)
        + ". A global scale acts on every direction alike (ŷ ≈ β x*ᵀΣw for Gaussian inputs), "
        "so it cannot undo unequal variances or correlation."
    )


def figure(rows: list[dict[str, Any]]) -> FigureRecord:
    """Test MSE / ridge's per scenario and preprocessing, one panel per (separation, rule)."""
    from attnreg.output import new_figure

    panels = [
        ("identity", "validated", "identity, best global scale c"),
        ("softmax", "1/sqrt(d_k)", "softmax, β = 1/√d_k"),
        ("softmax", "validated", "softmax, best global β"),
    ]
    fig, axes = new_figure(1, 3, figsize=(13, 3.6), squeeze=False, sharey=True)
    idx = np.arange(len(SCENARIOS))
    width = 0.27
    for ax, (sep, rule, title) in zip(axes[0], panels, strict=True):
        for i, kind in enumerate(PREPROCESSING):
            values = [
                next(
                    r["test_mse_vs_ridge"]
                    for r in rows
                    if (r["scenario"], r["preprocessing"], r["separation"], r["scale_rule"])
                    == (s, kind, sep, rule)
                )
                for s in SCENARIOS
            ]
            ax.bar(idx + (i - 1) * width, values, width, label=kind)
        ax.axhline(1, color="black", linewidth=0.6)
        ax.set_xticks(idx, [sc.replace(" ", "\n") for sc in SCENARIOS], fontsize=7)
        ax.set_yscale("log")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("test MSE / ridge's")
    fig.suptitle("Attention regression: what a global scale, standardising and whitening fix")
    return FigureRecord(
        name="compare_tang_scaling",
        figure=fig,
        caption=(
            "Test MSE of attention regression (no learned projections) relative to ridge's, per "
            "input scenario and preprocessing (compare config: tang_scale_d, "
            "tang_scale_n_train, tang_variance_ratio, tang_rho, noise, beta_multipliers)."
        ),
    )


def section(cfg: CompareConfig, datasets: dict[str, RegressionData]) -> Section:
    """The tang section's scaling part (module docstring); empty when ``cfg.tang`` is off.
    Its data are its own (``datasets`` is not used)."""
    del datasets
    if not cfg.tang:
        return Section()
    rows = scaling_rows(cfg)
    return Section(rows=rows, summary={QUESTION: _summary(rows, cfg)}, figures=[figure(rows)])
