"""The "Everything is matter" conventions as written, beside attnreg's.

The compare study's section ``conventions``. The blog pipeline writes three conventions that
attnreg replaces by its own (documentation: the Mathematics page and the *Everything is
matter* tutorial):

============================  =================================  ==========================
                              attnreg                            "Everything is matter"
============================  =================================  ==========================
regression-like scores        ``X* M Xᵀ / N``                    ``X* M Xᵀ / √d_k``
effective weights reported    ``β_N = M XᵀY / N``                ``β_d = M XᵀY / d_features``
ridge baseline                λ = ``config.ridge``               λ = 1e-3
============================  =================================  ==========================

(``M = W_q W_kᵀ``, ``d_k = d``). The layer itself applies ``ŷ* = x*ᵀ β_layer`` with
``β_layer = M XᵀY · c`` (``c = 1/N`` or ``1/√d_k``), so attnreg's reported weights are the
layer's (``β_N = β_layer``) while the blog's are ``β_d = β_layer · √d_k / d`` — its bars are
``1/√d`` of what the layer applies (and of ridge's ``β̂`` when the layer matches ridge).

For each data mode a regression-like layer (:class:`attnreg.models.regressors.
AttentionRegression`, separate ``W_q``, ``W_k``, no data whitening, no layer norm) is trained in
each convention with the compare study's recipe (:func:`attnreg.studies.compare.train.
train_cell`: full-batch Adam, ``config.steps``, ``config.lr``, gradient clip 1, early stopping on
the leave-one-out MSE of a validation split of the training rows, best weights restored; same
initial weights for both conventions). The blog's layer is attnreg's with its output multiplied
by ``N/√d_k``. Rows: train and test MSE, the cosine of the test predictions with ridge's, the
cosine of the reported effective weights with ridge's ``β̂`` and their norm ratio, the norm of
the layer's own coefficients against ``‖β̂‖``, ``‖M‖_F`` and the training steps.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from attnreg.core.threads import torch_threads
from attnreg.data.regression import RegressionData
from attnreg.estimators import Ridge
from attnreg.models.regressors import AttentionRegression
from attnreg.studies.answers import summary_table
from attnreg.studies.common import FigureRecord, Section
from attnreg.studies.compare.config import CompareConfig
from attnreg.studies.compare.metrics import cosine, mse
from attnreg.studies.compare.train import fit_recipe, split_rows

SECTION = "conventions"
BLOG_RIDGE = 1e-3
QUESTION = '"Everything is matter" conventions as written: what changes?'
# name: (score scaling, effective-weights divisor)
CONVENTIONS = {
    "attnreg": ("1/N", "N"),
    "everything-is-matter": ("1/sqrt(d_k)", "d_features"),
}


def score_factor(convention: str, n: int, d_k: int) -> float:
    """The factor on the raw scores ``X* M Xᵀ``: ``1/N`` (attnreg) or ``1/√d_k`` (blog)."""
    return 1 / n if convention == "attnreg" else 1 / math.sqrt(d_k)


def effective_weights(
    metric: torch.Tensor, x: torch.Tensor, y: torch.Tensor, divisor: float
) -> torch.Tensor:
    """``M XᵀY / divisor`` (``(d, d)``, ``(N, d)``, ``(N, dy)`` → ``(d, dy)``): divisor ``N``
    for attnreg's convention, ``d_features`` for the blog's."""
    return metric @ (x.mT @ y) / divisor


def convention_forward(
    model: AttentionRegression,
    convention: str,
    x_query: torch.Tensor,
    x_ctx: torch.Tensor,
    y_ctx: torch.Tensor,
    exclude_self: bool = False,
) -> torch.Tensor:
    """``X* M Xᵀ Y · c`` with ``c`` of the convention: the model's own output (``c = 1/N``)
    times ``N · score_factor`` (``N`` = the number of context rows)."""
    out = model(x_query, x_ctx, y_ctx, exclude_self=exclude_self)
    n = x_ctx.shape[-2]
    return out * (n * score_factor(convention, n, model.d_k))


def train_convention(
    data: RegressionData, convention: str, cfg: CompareConfig, seed: int
) -> tuple[AttentionRegression, Any]:
    """Train the regression-like layer in ``convention`` with the compare recipe (module
    docstring); returns the model (best weights) and the
    :class:`~attnreg.training_config.TrainResult`."""
    x, y = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train)
    fit, val = split_rows(x.shape[0], cfg.validation_fraction, seed)
    model = AttentionRegression(
        data.d, "regression", False, "separate", False, init_scale=cfg.init_scale, seed=seed
    )
    yf, yv = y[fit], y[val]

    def loss_fn(step: int) -> torch.Tensor:
        return ((convention_forward(model, convention, x, x, y)[fit] - yf) ** 2).mean()

    def eval_fn() -> float:
        pred = convention_forward(model, convention, x, x, y, exclude_self=True)
        return mse(pred[val], yv)

    result = fit_recipe(model, loss_fn, eval_fn, cfg, seed)
    return model, result


def measure_mode(data: RegressionData, cfg: CompareConfig) -> list[dict[str, Any]]:
    """One row per convention on one data mode (module docstring)."""
    x, y = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train)
    xt, yt = torch.from_numpy(data.x_test), torch.from_numpy(data.y_test)
    n, d = x.shape
    rows = []
    for convention, (scaling, divisor_name) in CONVENTIONS.items():
        lam = cfg.ridge if convention == "attnreg" else BLOG_RIDGE
        ridge = Ridge(lam)
        ridge_test = ridge.predict(x, y, xt)
        eye = torch.eye(d, dtype=x.dtype)
        beta_ridge = torch.linalg.solve(x.mT @ x + lam * eye, x.mT @ y)
        model, result = train_convention(data, convention, cfg, cfg.seed)
        with torch.no_grad(), torch_threads(cfg.threads):
            train_pred = convention_forward(model, convention, x, x, y)
            test_pred = convention_forward(model, convention, xt, x, y)
            metric = model.effective_metric(x)[0]
        reported = effective_weights(metric, x, y, n if divisor_name == "N" else d)
        layer = metric @ (x.mT @ y) * score_factor(convention, n, model.d_k)
        rows.append(
            {
                "section": SECTION,
                "data": data.name,
                "convention": convention,
                "score_scaling": scaling,
                "weights_divisor": divisor_name,
                "ridge_lambda": lam,
                "train_mse": mse(train_pred, y),
                "test_mse": mse(test_pred, yt),
                "ridge_test_mse": mse(ridge_test, yt),
                "cos_to_ridge": cosine(test_pred, ridge_test),
                "weights_cos_to_ridge": cosine(reported, beta_ridge),
                "weights_norm_vs_ridge": float(reported.norm() / beta_ridge.norm()),
                "layer_weights_norm_vs_ridge": float(layer.norm() / beta_ridge.norm()),
                "qk_norm": float(metric.norm()),
                "best_step": result.best_step,
                "steps_run": result.steps_run,
            }
        )
    return rows


def _summary(rows: list[dict[str, Any]], datasets: dict[str, RegressionData]) -> dict[str, Any]:
    table, gaps = [], []
    for mode in dict.fromkeys(r["data"] for r in rows):
        a = next(r for r in rows if r["data"] == mode and r["convention"] == "attnreg")
        b = next(r for r in rows if r["data"] == mode and r["convention"] != "attnreg")
        n, d = datasets[mode].x_train.shape
        gaps.append(abs(b["test_mse"] / a["test_mse"] - 1))
        table.append(
            [
                mode,
                f"{a['test_mse']:.4f} / {b['test_mse']:.4f}",
                f"{a['cos_to_ridge']:.4f} / {b['cos_to_ridge']:.4f}",
                f"{a['best_step']} / {b['best_step']}",
                f"×{b['qk_norm'] / a['qk_norm']:.3g} (√d_k/N = {math.sqrt(d) / n:.3g})",
                f"{a['weights_norm_vs_ridge']:.3f} / {b['weights_norm_vs_ridge']:.3f} / "
                f"{b['layer_weights_norm_vs_ridge']:.3f} (√d_k/d = {1 / math.sqrt(d):.3f})",
            ]
        )
    lams = sorted({r["ridge_lambda"] for r in rows})
    return summary_table(
        "attnreg (scores /N, weights M XᵀY/N) / the blog as written (scores /√d_k, weights "
        f"M XᵀY/d_features), same recipe and initial weights: test MSE differs by at most "
        f"{100 * max(gaps):.1f} %.",
        [
            "data",
            "test MSE",
            "cosine with ridge",
            "best step",
            "‖W_q W_kᵀ‖, blog / attnreg",
            "weights / ridge's: /N, /d_features, the blog layer's own",
        ],
        table,
        note="The learned W_q W_kᵀ absorbs the score scale; the blog's reported weights are "
        "√d_k/d of the coefficients its layer applies. Ridge λ: "
        + ("1e-3 in both" if lams == [BLOG_RIDGE] else ", ".join(f"{v:g}" for v in lams))
        + ".",
    )


def figure(rows: list[dict[str, Any]]) -> FigureRecord:
    """Left: per data mode, ``‖weights‖ / ‖β̂_ridge‖`` of the reported effective weights in
    each convention and of the coefficients the blog-convention layer applies (bars). Right:
    the test MSE relative to ridge's per convention (points)."""
    import numpy as np

    from attnreg.output import new_figure

    modes = list(dict.fromkeys(r["data"] for r in rows))
    pick = {
        c: [next(r for r in rows if r["data"] == m and r["convention"] == c) for m in modes]
        for c in CONVENTIONS
    }
    blog = "everything-is-matter"
    fig, axes = new_figure(1, 2, figsize=(11, 3.8), squeeze=False, layout="constrained")
    idx = np.arange(len(modes))
    width = 0.27
    bars = [
        ("attnreg: M XᵀY/N (= the layer's)", [r["weights_norm_vs_ridge"] for r in pick["attnreg"]]),
        ("blog: M XᵀY/d_features", [r["weights_norm_vs_ridge"] for r in pick[blog]]),
        ("blog layer's own: M XᵀY/√d_k", [r["layer_weights_norm_vs_ridge"] for r in pick[blog]]),
    ]
    for i, (label, values) in enumerate(bars):
        axes[0][0].bar(idx + (i - 1) * width, values, width, label=label)
    axes[0][0].axhline(1, color="black", linewidth=0.6)
    axes[0][0].set(ylabel="‖weights‖ / ‖ridge β̂‖", title="effective weights")
    axes[0][0].legend(fontsize=9, loc="lower right")
    for i, (convention, (scaling, _)) in enumerate(CONVENTIONS.items()):
        axes[0][1].plot(
            idx + (i - 0.5) * 0.2,
            [r["test_mse"] / r["ridge_test_mse"] for r in pick[convention]],
            "o",
            markersize=8,
            label=f"{convention} (scores × {scaling})",
        )
    axes[0][1].axhline(1, color="black", linewidth=0.6)
    axes[0][1].set(ylabel="test MSE / ridge's", title="trained layer")
    axes[0][1].legend(fontsize=9)
    for ax in axes[0]:
        ax.set_xticks(idx, modes)
    return FigureRecord(
        name="compare_conventions",
        figure=fig,
        caption=(
            "Norm of the reported effective weights (M XᵀY/N vs M XᵀY/d_features) and of the "
            "blog-convention layer's own coefficients relative to ridge's β̂, and the test MSE "
            "relative to ridge's, for the layer trained with scores /N and /√d_k (compare "
            "config: steps, lr, first seed)."
        ),
    )


def section(cfg: CompareConfig, datasets: dict[str, RegressionData]) -> Section:
    """The conventions section (module docstring); empty when ``cfg.conventions`` is off."""
    if not cfg.conventions or not datasets:
        return Section()
    rows = [row for data in datasets.values() for row in measure_mode(data, cfg)]
    return Section(rows=rows, summary={QUESTION: _summary(rows, datasets)}, figures=[figure(rows)])
