"""Memory density vs generalisation: the energy family read as an in-context regression operator.

The compare study's section ``density``. Tang's point — "associative memories memorise,
regression generalises" — measured on the compare study's data modes. Each operator stores the
training rows ``X (N, d)`` as keys with their targets ``Y (N, 1)`` as values and predicts a
query ``x*`` by

``ŷ(x*) = Σ_i w_i(x*) y_i``,   ``w(x*) = sep(s(x*))``,   ``s_i(x*) = x*ᵀ S⁺ x_i``,

the whitened similarity with ``S = XᵀX/N`` from the context rows (pseudo-inverse). The
separations ``sep`` are the energy family's, from linear to exponential density (Millidge et
al. 2022's Universal Hopfield form; Krotov & Hopfield 2016; Ramsauer et al. 2021):

* ``identity`` — ``w_i = s_i / N``, so ``ŷ = x*ᵀ (XᵀX)⁺ XᵀY``: the OLS prediction, i.e. the row
  of the hat matrix (ridge's with λ → 0). In the energy family ``F(s) = s²/2``;
* ``power n`` — ``w_i = sign(s_i)ⁿ |s_i|ⁿ / Σ_j |s_j|ⁿ``: Universal Hopfield's polynomial
  separation ``sⁿ`` normalised so that ``Σ_i |w_i| = 1`` (even ``n``: non-negative weights
  summing to one, a weighted mean of the ``y_i``; odd ``n``: signed). In the energy family
  ``F(s) = s^{n+1}/(n+1)`` (Krotov & Hopfield's dense associative memory);
* ``softmax`` — ``w = softmax(β s)`` (modern Hopfield; ``F(s) = β⁻¹ exp(β s)`` normalised),
  ``β = m/√d`` with ``m`` from ``config.beta_multipliers`` chosen on a validation split of the
  training rows (fit rows as the context, ``S`` from them, validation rows as queries), then
  applied with all training rows as the context.

Weights and predictions are computed by the attention core (:func:`density_attention`).

Measured per data mode and separation: the *recall* error — the training rows queried against
a memory that holds them, ``mean_i (ŷ(x_i) − y_i)²`` (a memory that memorises recalls its
values, error → 0) — the mean weight a training row puts on itself, and the *test* MSE (test
rows as queries), beside ridge's (λ = ``config.ridge``). All on the first seed's data.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from attnreg.core import associate
from attnreg.core.validation import check_choice
from attnreg.data.regression import RegressionData
from attnreg.estimators import Ridge
from attnreg.studies.answers import summary_table
from attnreg.studies.common import FigureRecord, Section
from attnreg.studies.compare.config import CompareConfig
from attnreg.studies.compare.metrics import mse

SECTION = "density"
SEED_TAG = 2  # the section's stream: numpy SeedSequence([config.seed, SEED_TAG])

SEPARATIONS = ("identity", "power", "softmax")
QUESTION = "memory density: do associative memories memorise, and regression generalise?"

Predictor = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float], torch.Tensor]


def density_attention(
    x_ctx: torch.Tensor,
    y_ctx: torch.Tensor,
    x_query: torch.Tensor,
    separation: str,
    power: int = 2,
    beta: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ŷ, w)``: the prediction ``ŷ(x*) = Σ_i w_i(x*) y_i`` (``(M, dy)``) and the weights
    ``w (M, N)`` for ``X (N, d)``, ``Y (N, dy)``, ``X* (M, d)`` (module docstring), both from
    the attention core (:func:`attnreg.core.associate`, whitened dot).

    The core's whitened metric is ``(XᵀX)⁺ = S⁺/N``, so its similarity is ``s/N``: identity
    separation gives ``w = s/N``; ``"power"`` is the core's ``power`` (even ``n``) or
    ``signed_power`` (odd ``n``) separation with ``normalize``, i.e. ``sⁿ / Σ_j |s_j|ⁿ``, which
    does not depend on the factor ``1/N``; ``"softmax"`` takes ``β N`` as the core's β."""
    check_choice("separation", separation, SEPARATIONS)
    core_separation, normalize, core_beta = separation, False, 1.0
    if separation == "power":
        core_separation, normalize = ("signed_power" if power % 2 else "power"), True
    elif separation == "softmax":
        core_beta = beta * x_ctx.shape[-2]
    prediction, weights = associate(
        x_query,
        x_ctx,
        y_ctx,
        similarity="whitened_dot",
        separation=core_separation,
        beta=core_beta,
        power=power,
        normalize=normalize,
        return_weights=True,
    )
    return prediction, weights


def validation_split(n: int, fraction: float, rng: np.random.Generator) -> tuple[Any, Any]:
    """``(fit, validation)`` row indices: a seeded permutation, ``max(1, round(fraction·n))``
    validation rows."""
    perm = rng.permutation(n)
    n_val = max(1, round(fraction * n))
    return perm[n_val:], perm[:n_val]


def validated_beta(
    x: torch.Tensor,
    y: torch.Tensor,
    predict: Predictor,
    multipliers: list[float],
    fraction: float,
    rng: np.random.Generator,
) -> tuple[float, list[tuple[float, float]]]:
    """The inverse temperature ``β = m/√d`` (``m`` in ``multipliers``) with the least
    validation MSE: ``predict(x_fit, y_fit, x_val, β)`` against ``y_val`` on a seeded split of
    the rows (:func:`validation_split`). Returns ``(β, [(β, validation MSE), …])``; ties go
    to the smaller β."""
    fit, val = validation_split(x.shape[0], fraction, rng)
    fit_t, val_t = torch.as_tensor(fit), torch.as_tensor(val)
    scale = 1 / math.sqrt(x.shape[1])
    path = [
        (m * scale, mse(predict(x[fit_t], y[fit_t], x[val_t], m * scale), y[val_t]))
        for m in sorted(multipliers)
    ]
    best = min(path, key=lambda bv: bv[1] if math.isfinite(bv[1]) else math.inf)
    return best[0], path


def _operators(cfg: CompareConfig) -> list[tuple[str, str, int]]:
    """``(label, separation, power)`` of every operator measured."""
    ops = [("identity (OLS)", "identity", 1)]
    ops += [(f"power {n}", "power", int(n)) for n in cfg.density_powers]
    return [*ops, ("softmax", "softmax", 1)]


def measure_mode(
    data: RegressionData, cfg: CompareConfig, rng: np.random.Generator
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rows (one per separation) and the softmax β path (recall and test MSE per β, for the
    figure only: β itself is chosen on the validation split) on one data mode."""
    x = torch.from_numpy(data.x_train)
    y = torch.from_numpy(data.y_train)
    xt, yt = torch.from_numpy(data.x_test), torch.from_numpy(data.y_test)
    ridge_test = mse(Ridge(cfg.ridge).predict(x, y, xt), yt)
    n = x.shape[0]

    def soft(xc: torch.Tensor, yc: torch.Tensor, xq: torch.Tensor, beta: float) -> torch.Tensor:
        return density_attention(xc, yc, xq, "softmax", beta=beta)[0]

    beta, val_path = validated_beta(x, y, soft, cfg.beta_multipliers, cfg.validation_fraction, rng)
    rows = []
    for label, separation, power in _operators(cfg):
        b = beta if separation == "softmax" else 1.0
        recalled, w_train = density_attention(x, y, x, separation, power, b)
        predicted, _ = density_attention(x, y, xt, separation, power, b)
        test, recall = mse(predicted, yt), mse(recalled, y)
        rows.append(
            {
                "section": SECTION,
                "data": data.name,
                "separation": label,
                "power": power if separation == "power" else None,
                "beta": beta if separation == "softmax" else None,
                "n_context": n,
                "recall_mse": recall,
                "self_weight": float(torch.diagonal(w_train).mean()),
                "test_mse": test,
                "ridge_test_mse": ridge_test,
                "test_mse_vs_ridge": test / ridge_test,
                "test_over_recall": test / recall if recall > 0 else math.inf,
            }
        )
    path = []
    for b, val in val_path:
        path.append(
            {
                "data": data.name,
                "beta": b,
                "validation_mse": val,
                "recall_mse": mse(density_attention(x, y, x, "softmax", beta=b)[0], y),
                "test_mse": mse(density_attention(x, y, xt, "softmax", beta=b)[0], yt),
            }
        )
    return rows, path


def _summary(rows: list[dict[str, Any]], path: list[dict[str, Any]]) -> dict[str, Any]:
    table = []
    for r in rows:
        table.append(
            [
                r["data"],
                r["separation"] + (f" (β = {r['beta']:.3g})" if r["beta"] is not None else ""),
                float(r["recall_mse"]),
                float(r["test_mse"]),
                float(r["ridge_test_mse"]),
                float(r["self_weight"]),
                float(r["test_over_recall"]),
            ]
        )
    floors = {
        mode: min(
            [r["recall_mse"] for r in rows if r["data"] == mode]
            + [p["recall_mse"] for p in path if p["data"] == mode]
        )
        for mode in dict.fromkeys(r["data"] for r in rows)
    }
    return summary_table(
        "Whitened similarity x*ᵀS⁺x_i with sharper separations: recall MSE on the stored "
        "training rows against test MSE. Lowest recall MSE of any separation or β: "
        + ", ".join(f"{m} {v:.3f}" for m, v in floors.items())
        + ".",
        [
            "data",
            "separation",
            "recall MSE",
            "test MSE",
            "ridge test MSE",
            "self weight",
            "test / recall",
        ],
        table,
        note="A memory that recalled its stored rows would reach recall MSE 0; with the dot "
        "similarity a longer row in the query's direction outscores the row itself, and the OLS "
        "row puts only the leverage d/N on it.",
    )


def figure(rows: list[dict[str, Any]], path: list[dict[str, Any]]) -> FigureRecord:
    """Per data mode: recall MSE (x) against test MSE (y) for each separation, the softmax
    path over β as a line, ridge's test MSE as a horizontal line."""
    from attnreg.output import new_figure

    modes = list(dict.fromkeys(r["data"] for r in rows))
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

    fig, axes = new_figure(
        1, len(modes), figsize=(4.4 * len(modes), 3.8), squeeze=False, layout="constrained"
    )
    markers = {"identity (OLS)": "s", "softmax": "*"}
    for ax, mode in zip(axes[0], modes, strict=True):
        p = [r for r in path if r["data"] == mode]
        ax.plot(
            [r["recall_mse"] for r in p],
            [r["test_mse"] for r in p],
            color="grey",
            linewidth=0.8,
            marker=".",
            label="softmax, β grid",
        )
        for r in (r for r in rows if r["data"] == mode):
            ax.scatter(
                r["recall_mse"],
                r["test_mse"],
                marker=markers.get(r["separation"], "o"),
                s=60,
                zorder=3,
                label=r["separation"],
            )
        ax.axhline(
            next(r["ridge_test_mse"] for r in rows if r["data"] == mode),
            color="black",
            linestyle=":",
            label="ridge (test)",
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            axis.set_major_formatter(FormatStrFormatter("%g"))
            axis.set_minor_formatter(NullFormatter())
        ax.set(xlabel="recall MSE on the stored rows", ylabel="test MSE", title=mode)
        ax.legend(fontsize=9)
    return FigureRecord(
        name="compare_density",
        figure=fig,
        caption=(
            "Recall error on the stored training rows against test error, per separation "
            "(identity = OLS, normalised powers, softmax with β chosen on a validation split; "
            "grey: softmax over the β grid), first seed (compare config: density_powers, "
            "beta_multipliers)."
        ),
    )


def section(cfg: CompareConfig, datasets: dict[str, RegressionData]) -> Section:
    """The density section (module docstring); empty when ``cfg.density`` is off."""
    if not cfg.density or not datasets:
        return Section()
    rng = np.random.default_rng([cfg.seed, SEED_TAG])
    rows: list[dict[str, Any]] = []
    path: list[dict[str, Any]] = []
    for data in datasets.values():
        r, p = measure_mode(data, cfg, rng)
        rows += r
        path += p
    return Section(
        rows=rows,
        summary={QUESTION: _summary(rows, path)},
        figures=[figure(rows, path)],
        tables={"compare_density_beta_path": path},
    )
