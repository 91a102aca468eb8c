"""Figures of the compare study (matplotlib figures, written by the caller as PNG + SVG).

* ``compare_heatmaps_<mode>`` — side by side: the ridge hat matrix ``H = X(XᵀX+λI)⁻¹Xᵀ``, the
  attention matrices ``A`` of trained regression-like and softmax layers, the raw softmax
  scores ``QKᵀ`` (first rows/columns of the training set), and the learned ``W_q W_kᵀ``
  (regression-like; and whitening built in) against ``S⁻¹``. Each panel is divided by its
  largest absolute entry, so all share one colour scale ``[−1, 1]``.
* ``compare_effective_weights`` — grouped bars per feature: true ``w`` (synthetic), ridge
  ``β̂``, and the attention's effective weights ``M XᵀY / N`` (``M`` the effective
  ``W_q W_kᵀ`` in input coordinates; identity-separation variants only).
* ``compare_test_mse`` — test MSE of every trained cell (mean over seeds) per data mode, with
  the ridge and OLS test MSE as vertical lines.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from attnreg.data.regression import RegressionData
from attnreg.studies.common import FigureRecord

SERIES_COLOURS = {
    "true w": "black",
    "ridge β̂": "tab:orange",
    "regression-like": "tab:blue",
    "regression-like, whitened data": "tab:red",
    "whitening built in": "tab:green",
}


def _normalised(m: torch.Tensor) -> np.ndarray:
    a = m.detach().cpu().double().numpy()
    top = np.abs(a).max()
    return a / top if top > 0 else a


def heatmaps(
    mode: str,
    kept: dict[tuple[Any, ...], Any],
    extras: dict[str, torch.Tensor],
    rows_shown: int = 40,
) -> FigureRecord:
    """One row of labelled heatmaps for data mode ``mode`` (see module docstring)."""
    from attnreg.output import new_figure

    k = rows_shown
    panels: list[tuple[str, torch.Tensor]] = [("H = X(XᵀX+λI)⁻¹Xᵀ", extras["hat"][:k, :k])]
    cells = {
        ("regression", False, "separate", False): "regression-like",
        ("softmax", False, "separate", False): "softmax",
    }
    for key, label in cells.items():
        cell = kept.get((mode, *key))
        if cell is not None:
            panels.append((f"A ({label})", cell.matrices["weights"][:k, :k]))
    soft = kept.get((mode, "softmax", False, "separate", False))
    if soft is not None:
        panels.append(("QKᵀ/√d_k\n(softmax, raw scores)", soft.matrices["scores"][:k, :k]))
    reg = kept.get((mode, "regression", False, "separate", False))
    if reg is not None:
        panels.append(("W_q W_kᵀ\n(regression-like)", reg.matrices["metric"]))
    white = kept.get((mode, "whitened", False, "shared", False))
    if white is not None:
        panels.append(("W_q W_kᵀ effective\n(whitening built in)", white.matrices["metric"]))
    panels.append(("S⁻¹ (S = XᵀX/N)", extras["s_inv"]))
    # at most four panels a row: legible at 1366 px (≈ 13 inches at 150 dpi, shown at ~70 %)
    ncols = min(len(panels), 4)
    nrows = -(-len(panels) // ncols)
    fig, axes = new_figure(nrows, ncols, figsize=(3.0 * ncols, 3.4 * nrows), squeeze=False)
    flat = list(axes.flat)
    image = None
    for i, (ax, (title, mat)) in enumerate(zip(flat, panels, strict=False)):
        image = ax.imshow(_normalised(mat), cmap="RdBu_r", vmin=-1, vmax=1)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("key / column", fontsize=9)
        if i % ncols == 0:
            ax.set_ylabel("query / row", fontsize=9)
        ax.tick_params(labelsize=8)
    for ax in flat[len(panels) :]:
        ax.set_visible(False)
    assert image is not None
    fig.colorbar(image, ax=flat, shrink=0.8, label="entry / max |entry|")
    stem = f"compare_heatmaps_{mode}"
    return FigureRecord(
        name=stem,
        figure=fig,
        caption=(
            f"{mode}: H, A, QKᵀ (first {k} training rows) and W_q W_kᵀ vs S⁻¹, each divided by "
            "its max |entry| (compare config, first seed, layer norm off)."
        ),
    )


def effective_weights(
    kept: dict[tuple[Any, ...], Any],
    datasets: dict[str, RegressionData],
    extras: dict[str, dict[str, torch.Tensor]],
) -> FigureRecord:
    """Grouped bars: true ``w``, ridge ``β̂`` and the attention's ``M XᵀY / N`` per feature."""
    from attnreg.output import new_figure

    modes = list(datasets)
    fig, axes = new_figure(1, len(modes), figsize=(5 * len(modes), 3.6), squeeze=False)
    for ax, mode in zip(axes[0], modes, strict=True):
        data = datasets[mode]
        ax.set_prop_cycle(None)
        ridge = extras[mode]["ridge_beta"].cpu()
        series: list[tuple[str, np.ndarray]] = []
        if data.true_weights is not None:
            series.append(("true w", np.asarray(data.true_weights)))
        series.append(("ridge β̂", ridge[:, 0].numpy()))
        for key, label in (
            (("regression", False, "separate", False), "regression-like"),
            (("regression", True, "separate", False), "regression-like, whitened data"),
            (("whitened", False, "shared", False), "whitening built in"),
        ):
            cell = kept.get((mode, *key))
            if cell is not None and "beta" in cell.matrices:
                series.append((label, cell.matrices["beta"][:, 0].cpu().numpy()))
        width = 0.8 / len(series)
        idx = np.arange(data.d)
        for i, (label, values) in enumerate(series):
            offset = (i - (len(series) - 1) / 2) * width
            ax.bar(idx + offset, values, width, label=label, color=SERIES_COLOURS[label])
        ax.set_xticks(idx, data.feature_names, rotation=45, fontsize=8)
        ax.set_title(mode)
        ax.set_ylabel("coefficient")
        ax.axhline(0, color="black", linewidth=0.5)
    for ax in axes[0]:
        ax.legend(fontsize=9)
    return FigureRecord(
        name="compare_effective_weights",
        figure=fig,
        caption=(
            "Per-feature weights: true (synthetic), ridge λ = 1e-3, and trained "
            "identity-separation attention's M XᵀY/N (compare config, first seed, "
            "separate/shared W as labelled)."
        ),
    )


def test_mse_chart(rows: list[dict[str, Any]]) -> FigureRecord:
    """Test MSE per trained cell (a dot per cell) and data mode, ridge/OLS as lines."""
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

    from attnreg.output import new_figure

    modes = list(dict.fromkeys(r["data"] for r in rows))
    cells = list(
        dict.fromkeys(
            (r["variant"], r["whitening"], r["qk"], r["layernorm"])
            for r in rows
            if r["variant"] not in ("ridge", "ols")
        )
    )
    colours = {"softmax": "tab:orange", "regression": "tab:blue", "whitened": "tab:green"}
    fig, axes = new_figure(
        1,
        len(modes),
        figsize=(3.2 * len(modes) + 2, 0.17 * len(cells) + 1.8),
        squeeze=False,
        sharey=True,
    )
    for ax, mode in zip(axes[0], modes, strict=True):
        values, labels, cols = [], [], []
        for v, w, q, ln in cells:
            sel = [
                r["test_mse"]
                for r in rows
                if r["data"] == mode
                and (r["variant"], r["whitening"], r["qk"], r["layernorm"]) == (v, w, q, ln)
            ]
            values.append(float(np.mean(sel)) if sel else np.nan)
            labels.append(f"{v} w={int(w)} {q} ln={int(ln)}")
            cols.append(colours.get(v, "grey"))
        ax.scatter(values, np.arange(len(cells)), c=cols, s=14, zorder=3)
        for name, style in (("ridge", "-"), ("ols", ":")):
            base = [r["test_mse"] for r in rows if r["data"] == mode and r["variant"] == name]
            if base:
                ax.axvline(float(np.mean(base)), color="black", linestyle=style, label=name)
        ax.set_yticks(np.arange(len(cells)), labels, fontsize=8)
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.grid(axis="y", linewidth=0.3)
        ax.set_xlabel("test MSE (log scale)")
        ax.set_title(mode)
        ax.legend(fontsize=9)
    axes[0][0].invert_yaxis()
    return FigureRecord(
        name="compare_test_mse",
        figure=fig,
        caption=(
            "Test MSE (mean over seeds) of every variant × whitening × qk × layer norm, with ridge "
            "(λ = 1e-3) and OLS (compare config)."
        ),
    )


def make_figures(
    rows: list[dict[str, Any]],
    kept: dict[tuple[Any, ...], Any],
    baselines: dict[str, dict[str, torch.Tensor]],
    datasets: dict[str, RegressionData],
) -> list[FigureRecord]:
    """Every figure of the compare study (the OLS-Transformer's are made separately)."""
    records = [heatmaps(mode, kept, baselines[mode]) for mode in datasets]
    records.append(effective_weights(kept, datasets, baselines))
    records.append(test_mse_chart(rows))
    return records
