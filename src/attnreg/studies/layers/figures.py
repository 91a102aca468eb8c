"""Figures of the ``layers`` study: loss against context position for every trained layer
beside the estimator that explains it, and recall against N/d for the memories."""

from __future__ import annotations

from typing import Any

from attnreg.output import new_figure
from attnreg.studies.common import FigureRecord
from attnreg.studies.layers.config import LayersConfig
from attnreg.studies.layers.memory import memories


def _curve(rows: list[dict[str, Any]], kind: str, model: str) -> tuple[list[int], list[float]]:
    mine = [
        r for r in rows if r["kind"] == "position" and r["tasks"] == kind and r["model"] == model
    ]
    return [r["n"] for r in mine], [r["loss"] for r in mine]


def positions_figure(cfg: LayersConfig, rows: list[dict[str, Any]]) -> FigureRecord:
    """``layers_positions``: loss against context position (rows ``kind="position"``), every
    trained layer beside the estimator that explains it and the references."""
    kinds, layers = cfg.tasks, cfg.layers
    fig, axes = new_figure(
        len(kinds),
        len(layers),
        figsize=(2.6 * len(layers), 2.5 * len(kinds)),
        squeeze=False,
        sharex=True,
    )
    for i, kind in enumerate(kinds):
        refs = list(
            dict.fromkeys(
                r["model"]
                for r in rows
                if r["kind"] == "position" and r["tasks"] == kind and r["role"] == "reference"
            )
        )
        for j, layer in enumerate(layers):
            ax = axes[i][j]
            ax.plot(*_curve(rows, kind, layer), color="C0", lw=2, label=f"trained {layer}")
            family = [
                r["model"]
                for r in rows
                if r["kind"] == "position"
                and r["tasks"] == kind
                and r["role"] == "family"
                and r["model"].startswith(f"{layer}: ")
            ]
            for name in dict.fromkeys(family):
                ax.plot(
                    *_curve(rows, kind, name),
                    color="C3",
                    ls="--",
                    lw=1.5,
                    label=name.split(": ", 1)[1],
                )
            for ref, style in zip(refs, (":", "-.", (0, (1, 3))), strict=False):
                ax.plot(*_curve(rows, kind, ref), color="k", ls=style, lw=1, label=ref)
            ax.set_yscale("log")
            # OLS is exact from n = d on (≈ 1e-30): the axis stops two decades below the layer
            ax.set_ylim(bottom=0.01 * min(_curve(rows, kind, layer)[1]))
            ax.set_title(f"{kind}: {layer}", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.legend(fontsize=5)
            if i == len(kinds) - 1:
                ax.set_xlabel("context pairs n", fontsize=7)
        axes[i][0].set_ylabel("0.5 × MSE", fontsize=7)
    fig.subplots_adjust(left=0.06, right=0.99, bottom=0.1, top=0.93, wspace=0.3, hspace=0.3)
    return FigureRecord(
        "layers_positions",
        f"Loss against context position: each trained layer (solid), the estimator explain names "
        f"for it (dashed, parameter fitted at n = {cfg.n_ctx}) and the references (attnreg layers, "
        f"seed {cfg.seed}, d {cfg.d}, {cfg.steps} steps)",
        fig,
    )


def memory_figure(cfg: LayersConfig, rows: list[dict[str, Any]]) -> FigureRecord:
    """``layers_memory``: recall against N/d for every memory (rows ``kind="memory"``)."""
    mem = [r for r in rows if r["kind"] == "memory"]
    rhos = cfg.memory_rhos
    fig, axes = new_figure(2, len(rhos), figsize=(3.2 * len(rhos), 5.2), squeeze=False, sharex=True)
    for j, rho in enumerate(rhos):
        for c, m in enumerate(memories(cfg)):
            mine = sorted(
                (r for r in mem if r["memory"] == m and r["rho"] == rho), key=lambda r: r["n"]
            )
            ratio = [r["n_over_d"] for r in mine]
            axes[0][j].plot(
                ratio,
                [max(r["mean_error"], 1e-20) for r in mine],
                "o-",
                color=f"C{c}",
                ms=3,
                label=m,
            )
            axes[1][j].plot(ratio, [r["recall"] for r in mine], "o-", color=f"C{c}", ms=3, label=m)
        axes[0][j].set_yscale("log")
        axes[0][j].set_title(f"ρ = {rho:g}", fontsize=9)
        for ax in (axes[0][j], axes[1][j]):
            ax.axvline(1.0, color="grey", lw=0.8, ls=":")
            ax.tick_params(labelsize=7)
        axes[1][j].set_xlabel("N / d", fontsize=8)
    axes[0][0].set_ylabel("mean relative squared error", fontsize=8)
    axes[1][0].set_ylabel(f"recalled (error ≤ {cfg.recall_eps:g})", fontsize=8)
    axes[0][0].legend(fontsize=6)
    fig.subplots_adjust(left=0.1, right=0.98, bottom=0.1, top=0.94, wspace=0.3, hspace=0.15)
    return FigureRecord(
        "layers_memory",
        f"Recall of N stored pairs against N/d for unit keys with correlation ρ "
        f"(d = {cfg.memory_d}, {cfg.memory_trials} draws; attnreg layers, seed {cfg.seed})",
        fig,
    )
