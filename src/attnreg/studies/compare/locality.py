"""Global vs local: how many context rows an attention row draws on, and how far away they are.

The compare study's section ``locality``. For one query ``x*`` with weights ``a ∈ R^N`` over the
context rows ``x_i`` (``ŷ(x*) = Σ_i a_i y_i``):

* participation ratio ``PR(a) = (Σ_i |a_i|)² / Σ_i a_i²`` ∈ ``[1, N]`` — the effective number of
  rows the query draws on (1: one row; N: all rows equally);
* relative distance ``(Σ_i |a_i| ‖x_i − x*‖ / Σ_i |a_i|) / mean_i ‖x_i − x*‖`` — the weighted
  mean Euclidean distance (input coordinates) of the rows it draws on, relative to the mean
  distance to all rows (< 1: it draws on nearby rows; ≈ 1: on rows regardless of distance).

Operators, context = the training rows ``X (N, d)``, queries = the test rows:

* ``ridge hat`` — ``x*ᵀ (XᵀX + λI)⁻¹ Xᵀ`` (λ = ``config.ridge``): the regression, the global
  operator wojiao-yc contrasts attention with;
* ``regression-like`` — ``x*ᵀ Xᵀ / N`` (``W_q W_kᵀ = I``);
* ``whitened`` — ``x*ᵀ S⁻¹ Xᵀ / N``, ``S = XᵀX/N`` (pseudo-inverse; the OLS hat row);
* ``softmax`` — ``softmax(x*ᵀ Xᵀ / √d)`` (no learned projections);
* ``softmax, trained`` and ``softmax, initial`` — the weights on the test queries of the
  softmax attention layer the study trains on this data mode (separate ``W_q``, ``W_k``, no
  whitening, no layer norm, first seed), after training and at its random initialisation.

The closed-form attention operators are computed by the attention core (their weights read
from it); the ridge hat is the estimator's closed form; the trained layers' weights are read
from their hooks (:func:`~attnreg.studies.compare.train.train_cell`).

The remark ("Attention operates locally", about attention as trained) is read on the trained
softmax layer: per test query, ``log PR(trained softmax) − log PR(ridge hat)``, paired over the
queries (:func:`~attnreg.studies.paired.paired_z`); local = more than two
paired standard errors below the hat matrix's.

Both measures are invariant to a positive rescaling of ``a``, so the operators' ``1/N`` factors
do not matter. Rows: one per data mode × operator with the median and quartiles of PR and the
median relative distance over the queries.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from attnreg.core import associate
from attnreg.core.validation import check_choice
from attnreg.data.regression import RegressionData
from attnreg.studies.answers import summary_table
from attnreg.studies.common import FigureRecord, Section
from attnreg.studies.compare.config import CompareConfig
from attnreg.studies.compare.metrics import hat_matrix
from attnreg.studies.compare.tang_retrieval import Z_LIMIT
from attnreg.studies.ledger import REMARK, Claim
from attnreg.studies.paired import paired_z
from attnreg.studies.quotes import WOJIAO_LOCAL
from attnreg.thresholds import Threshold

SECTION = "locality"
QUESTION = "global or local: how many context rows does a query's attention row draw on?"
OPERATORS = ("ridge hat", "regression-like", "whitened", "softmax")
TRAINED = ("softmax, trained", "softmax, initial")
Trained = dict[str, dict[str, torch.Tensor]]
"""Per data mode, the trained softmax layer's test-query weights: ``{"softmax, trained": (M,
N), "softmax, initial": (M, N)}``."""


def participation_ratio(a: torch.Tensor) -> torch.Tensor:
    """``PR(a) = (Σ_i |a_i|)² / Σ_i a_i²`` over the last axis (``(…, N)`` → ``(…)``); NaN for
    an all-zero row."""
    return a.abs().sum(-1) ** 2 / (a * a).sum(-1)


def relative_distance(a: torch.Tensor, x_ctx: torch.Tensor, x_query: torch.Tensor) -> torch.Tensor:
    """``(Σ_i |a_i| ‖x_i − x*‖ / Σ_i |a_i|) / mean_i ‖x_i − x*‖`` per query: weights
    ``a (M, N)``, context ``(N, d)``, queries ``(M, d)`` → ``(M,)``."""
    dist = torch.cdist(x_query, x_ctx)
    w = a.abs()
    return (w * dist).sum(-1) / w.sum(-1) / dist.mean(-1)


def operator_weights(
    name: str, x_ctx: torch.Tensor, x_query: torch.Tensor, ridge: float
) -> torch.Tensor:
    """The ``(M, N)`` weights of the operator ``name`` (module docstring). The ridge hat is the
    closed form :func:`~attnreg.studies.compare.metrics.hat_matrix`; the attention operators'
    weights are read from the attention core (:func:`attnreg.core.associate`,
    ``return_weights``): dot similarity with ``β = 1/N``, whitened dot with the core's metric
    ``(XᵀX)⁺ = S⁻¹/N``, and scaled dot with softmax."""
    check_choice("operator", name, OPERATORS)
    if name == "ridge hat":
        return hat_matrix(x_ctx, ridge, x_query)
    similarity, separation, beta = {
        "regression-like": ("dot", "identity", 1.0 / x_ctx.shape[0]),
        "whitened": ("whitened_dot", "identity", 1.0),
        "softmax": ("scaled_dot", "softmax", 1.0),
    }[name]
    values = x_ctx.new_zeros(x_ctx.shape[0], 1)  # the weights do not depend on the values
    _, weights = associate(
        x_query,
        x_ctx,
        values,
        similarity=similarity,
        separation=separation,
        beta=beta,
        return_weights=True,
    )
    return weights


def measure_mode(
    data: RegressionData, cfg: CompareConfig, trained: dict[str, torch.Tensor] | None = None
) -> tuple[list[dict[str, Any]], dict[str, dict[str, np.ndarray]]]:
    """Rows (one per operator) and the per-query values (for the figure and the claim) on one
    data mode; ``trained``: the trained layer's weights (:data:`Trained`), if any."""
    x, xq = torch.from_numpy(data.x_train), torch.from_numpy(data.x_test)
    n = x.shape[0]
    rows, values = [], {}
    weights = {name: operator_weights(name, x, xq, cfg.ridge) for name in OPERATORS}
    weights |= {k: v.detach().to("cpu", torch.float64) for k, v in (trained or {}).items()}
    for name, a in weights.items():
        pr = participation_ratio(a).numpy()
        rel = relative_distance(a, x, xq).numpy()
        values[name] = {"pr": pr, "rel": rel}
        q25, med, q75 = np.quantile(pr, [0.25, 0.5, 0.75])
        rows.append(
            {
                "section": SECTION,
                "data": data.name,
                "operator": name,
                "n_context": n,
                "queries": int(xq.shape[0]),
                "pr_median": float(med),
                "pr_q25": float(q25),
                "pr_q75": float(q75),
                "pr_median_fraction": float(med / n),
                "rel_distance_median": float(np.median(rel)),
            }
        )
    return rows, values


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return summary_table(
        "Per test query: participation ratio PR = (Σ|a_i|)²/Σa_i² as % of N (medians), and the "
        "weighted distance of the rows drawn on relative to the mean distance.",
        ["data", "N", "operator", "PR (% of N)", "distance ×"],
        [
            [
                r["data"],
                int(r["n_context"]),
                r["operator"],
                f"{100 * r['pr_median_fraction']:.0f} %",
                float(r["rel_distance_median"]),
            ]
            for r in rows
        ],
    )


def log_pr_gap(values: dict[str, dict[str, np.ndarray]]) -> float:
    """Paired z over the test queries of ``log PR(softmax, trained) − log PR(ridge hat)``."""
    return paired_z(np.log(values["softmax, trained"]["pr"]), np.log(values["ridge hat"]["pr"]))


def claims(values: dict[str, dict[str, dict[str, np.ndarray]]]) -> list[Claim]:
    """wojiao-yc's locality remark on the trained softmax layers (module docstring), per data
    mode that has one."""
    gaps = {mode: log_pr_gap(v) for mode, v in values.items() if "softmax, trained" in v}
    if not gaps:
        return []
    return [
        Claim(
            WOJIAO_LOCAL,
            REMARK,
            "log participation ratio of the trained softmax layer's test-query rows minus the "
            "ridge hat matrix's (paired z over the test queries)",
            gaps,
            Threshold(
                "<=",
                -Z_LIMIT,
                f"{Z_LIMIT:g} paired standard errors below the hat matrix's, over the test "
                "queries (Z_LIMIT)",
            ),
            reading="operates locally (regression globally) = the trained softmax attention "
            "row of a query draws on fewer context rows than the regression's hat-matrix row",
        )
    ]


def figure(
    rows: list[dict[str, Any]], values: dict[str, dict[str, dict[str, np.ndarray]]]
) -> FigureRecord:
    """Box plots per data mode: PR / N (top) and relative distance (bottom) per operator."""
    from attnreg.output import new_figure

    modes = list(values)
    fig, axes = new_figure(2, len(modes), figsize=(4.6 * len(modes), 7), squeeze=False)
    for j, mode in enumerate(modes):
        n = next(r["n_context"] for r in rows if r["data"] == mode)
        ops = list(values[mode])
        axes[0][j].boxplot([values[mode][o]["pr"] / n for o in ops], showfliers=False)
        axes[1][j].boxplot([values[mode][o]["rel"] for o in ops], showfliers=False)
        axes[0][j].set_title(f"{mode} (N = {n})", fontsize=10)
        axes[0][j].set_ylim(0, 1)
        axes[1][j].axhline(1, color="black", linewidth=0.5)
        for i in (0, 1):
            axes[i][j].set_xticks(range(1, len(ops) + 1), ops, rotation=35, ha="right", fontsize=9)
    axes[0][0].set_ylabel("participation ratio / N")
    axes[1][0].set_ylabel("weighted distance / mean distance")
    fig.tight_layout()
    return FigureRecord(
        name="compare_locality",
        figure=fig,
        caption=(
            "Per test query, the participation ratio of its weights over the training rows "
            "(/N) and the relative distance of the rows it draws on, for the ridge hat matrix "
            "closed-form regression-like, whitened and softmax attention, and the softmax layer "
            "the study trains, after training and at its initialisation (compare config, first "
            "seed)."
        ),
    )


def section(
    cfg: CompareConfig, datasets: dict[str, RegressionData], trained: Trained | None = None
) -> Section:
    """The locality section (module docstring); empty when ``cfg.locality`` is off.
    ``trained``: the trained softmax layers' weights per data mode (:data:`Trained`); without
    them the remark is not judged (no claim)."""
    if not cfg.locality or not datasets:
        return Section()
    rows: list[dict[str, Any]] = []
    values: dict[str, dict[str, dict[str, np.ndarray]]] = {}
    for mode, data in datasets.items():
        r, v = measure_mode(data, cfg, (trained or {}).get(mode))
        rows += r
        values[mode] = v
    return Section(
        rows=rows,
        summary={QUESTION: _summary(rows)},
        figures=[figure(rows, values)],
        claims=claims(values),
    )
