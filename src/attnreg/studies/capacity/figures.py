"""Figures of the capacity study: N_max(d) per family with theory, the Universal Hopfield grids,
and corrupted digit queries next to their retrievals."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from attnreg.core.scores import UHN_SEPARATIONS
from attnreg.memory import GRID_SIMILARITIES
from attnreg.output import new_figure
from attnreg.studies.capacity.config import CapacityConfig
from attnreg.studies.capacity.families import DIGITS_PANEL_CELLS
from attnreg.studies.common import FigureRecord

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _curve(rows: list[dict[str, Any]], family: str) -> tuple[np.ndarray, ...]:
    sel = sorted(
        (r for r in rows if r["kind"] == "capacity" and r["family"] == family),
        key=lambda r: r["d"],
    )
    d = np.array([r["d"] for r in sel], dtype=float)
    n = np.array([r["n_max"] for r in sel], dtype=float)
    sd = np.array([r["n_max_std"] for r in sel], dtype=float)
    theory = np.array([r["n_max_theory"] for r in sel], dtype=float)
    return d, n, sd, theory


def _positive(values: np.ndarray) -> np.ndarray:
    return np.where(values > 0, values, np.nan)


def _d_ticks(ax: Any) -> None:
    """Label a logarithmic ``d`` axis at the plotted ``d`` values, in plain numbers, each at
    least 1.4 × the previous one, and nothing else: base-10 minor labels (2×10¹, 3×10¹, …)
    overlap on a range of one or two decades."""
    from matplotlib.ticker import FixedLocator, FormatStrFormatter, NullFormatter

    values = sorted(
        {float(x) for line in ax.get_lines() for x in np.asarray(line.get_xdata(), dtype=float)}
    )
    ticks: list[float] = []
    for x in values:
        if math.isfinite(x) and x > 0 and (not ticks or x >= 1.4 * ticks[-1]):
            ticks.append(x)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def capacity_figure(rows: list[dict[str, Any]]) -> Figure:
    """``N_max`` against ``d`` for each family, with the theory curves."""
    fig, axes = new_figure(2, 3, figsize=(15, 8.5))
    ax = axes[0, 0]
    d, n, sd, _ = _curve(rows, "pinv")
    if len(d):
        ax.errorbar(d, _positive(n), yerr=sd, fmt="o", label="measured (exact recall)")
        ax.plot(d, d, "k--", label="theory: d")
    ax.set(xscale="log", yscale="log", title="pseudo-inverse (regression) memory")
    ax = axes[0, 1]
    heb = sorted({r["epsilon"] for r in rows if r.get("family", "").startswith("hebbian")})
    if heb:
        mid = heb[len(heb) // 2]
        d, n, sd, theory = _curve(rows, f"hebbian@{mid:g}")
        _, low, _, _ = _curve(rows, f"hebbian@{heb[0]:g}")
        _, high, _, _ = _curve(rows, f"hebbian@{heb[-1]:g}")
        ax.fill_between(
            d,
            _positive(low),
            _positive(high),
            alpha=0.25,
            label=f"success {1 - heb[-1]:g} .. {1 - heb[0]:g}",
        )
        ax.errorbar(d, _positive(n), yerr=sd, fmt="o", label=f"measured (eps = {mid:g})")
        ax.plot(d, theory, "k--", label="theory: 0.138 d")
        ax.plot(d, d / (2 * np.log(d)), "k:", label="error-free: d / (2 ln d)")
    ax.set(xscale="log", yscale="log", title="Hebbian Hopfield, 10% flipped bits")
    ax = axes[0, 2]
    for power, color in ((2, "C0"), (3, "C1"), (4, "C2")):
        d, n, sd, theory = _curve(rows, f"dam{power}")
        if len(d):
            ax.errorbar(d, _positive(n), yerr=sd, fmt="o", color=color, label=f"n = {power}")
            ax.plot(d, theory, "--", color=color)
    ax.set(
        xscale="log",
        yscale="log",
        title="dense associative memory F(x) = x^n\n(dashed: d^(n-1) / (2 (2n-3)!! ln d))",
    )
    for ax, family, title in (
        (axes[1, 0], "softmax", "softmax modern Hopfield, ±1 patterns"),
        (axes[1, 1], "softmax_sphere", "softmax modern Hopfield, sphere patterns"),
    ):
        d, n, sd, theory = _curve(rows, family)
        if len(d):
            ax.errorbar(d, _positive(n), yerr=sd, fmt="o", label="measured")
            if np.isfinite(theory).any():
                ax.plot(d, theory, "k--", label="nearest-pattern estimate")
            ax.plot(d, 2 ** (d / 2), "k:", label="2^(d/2) (Demircigil et al.)")
        ax.set(yscale="log", title=title)
    ax = axes[1, 2]
    for family, label in (
        ("pinv", "pseudo-inverse"),
        ("dam3", "DAM n = 3"),
        ("softmax", "softmax (±1)"),
    ):
        d, n, _, _ = _curve(rows, family)
        if len(d):
            ax.plot(d, _positive(n), "o-", label=label)
    ax.set(xscale="log", yscale="log", title="linear → polynomial → exponential")
    for ax in axes.flat:
        if ax.get_xscale() == "log":
            _d_ticks(ax)
        ax.set_xlabel("d")
        ax.set_ylabel("N_max")
        ax.legend(fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig


ENERGY_STYLE = (
    ("quadratic", "C0", "s^2/2 (projection)"),
    ("power3", "C1", "|s|^3/3"),
    ("power4", "C2", "|s|^4/4"),
    ("softmax", "C3", "softmax, beta = beta0 sqrt N"),
)


def energy_family_figure(rows: list[dict[str, Any]]) -> Figure:
    """The energy family ``E_F = −Σ F(s_i) + ½ξᵀξ`` with one whitened similarity: ``N_max(d)``
    per ``F`` on log–log and on semi-log axes (pattern read-out), and at the state read-out."""
    fig, axes = new_figure(1, 3, figsize=(15, 4.6))
    for key, color, label in ENERGY_STYLE:
        d, n, sd, theory = _curve(rows, f"energy:{key}@pattern")
        if len(d):
            for ax in axes[:2]:
                ax.errorbar(d, _positive(n), yerr=sd, fmt="o-", color=color, label=label)
                ax.plot(d, _positive(theory), ":", color=color)
        d, n, sd, _ = _curve(rows, f"energy:{key}@state")
        if len(d):
            axes[2].errorbar(d, _positive(n), yerr=sd, fmt="s-", color=color, label=label)
    quad, *_ = _curve(rows, "energy:quadratic@pattern")
    if len(quad):
        axes[2].plot(quad, quad, "k--", label="d (clean-query capacity of P)")
    axes[0].set(
        xscale="log",
        yscale="log",
        title="pattern read-out K^T F'(s): log-log\n(dotted: d/2, Krotov-Hopfield, nearest "
        "pattern)",
    )
    axes[1].set(yscale="log", title="pattern read-out: semi-log (exponential = straight line)")
    axes[2].set(
        xscale="log",
        yscale="log",
        title="state read-out K~^T F'(s) (the step itself):\nwhitened attractors cap it near d",
    )
    for ax in axes:
        if ax.get_xscale() == "log":
            _d_ticks(ax)
        ax.set_xlabel("d")
        ax.set_ylabel("N_max")
        ax.legend(fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle("one energy family, one whitened similarity s = G^-1/2 K xi, only F varies")
    fig.tight_layout()
    return fig


def energy_cost_figure(rows: list[dict[str, Any]]) -> Figure:
    """Efficiency against memory density: time per retrieval and state bytes per stored
    pattern, each against ``N_max``, one point per energy family and ``d``."""
    cost = [r for r in rows if r["kind"] == "energy_cost"]
    fig, axes = new_figure(1, 2, figsize=(11, 4.4))
    for key, color, label in ENERGY_STYLE:
        mine = sorted((r for r in cost if r["energy"] == key), key=lambda r: r["d"])
        if not mine:
            continue
        n = np.array([r["n_max"] for r in mine])
        us = np.array([r["seconds_per_retrieval"] * 1e6 for r in mine])
        per = np.array([r["bytes_per_pattern"] for r in mine])
        for ax, y in ((axes[0], us), (axes[1], per)):
            ax.plot(n, y, "o-", color=color, label=label)
            for r, x, v in zip(mine, n, y, strict=True):
                ax.annotate(
                    f"d={r['d']}", (x, v), fontsize=6, xytext=(3, 3), textcoords="offset points"
                )
    axes[0].set(
        xscale="log",
        yscale="log",
        xlabel="N_max (patterns stored at capacity)",
        ylabel="µs per retrieval (one step, one thread)",
        title="efficiency: time per retrieval",
    )
    axes[1].set(
        xscale="log",
        yscale="log",
        xlabel="N_max (patterns stored at capacity)",
        ylabel="bytes of retrieval state per stored pattern",
        title="memory density: bytes per pattern",
    )
    for ax in axes:
        ax.legend(fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig


def grid_figure(rows: list[dict[str, Any]]) -> Figure:
    """Heatmaps of the Universal Hopfield grid: digits recall per (query, N), random N_max."""
    recall = [r for r in rows if r["kind"] == "recall"]
    panels = sorted({(r["query"], r["n"]) for r in recall})
    power = next((int(r["power"]) for r in recall), None)  # the grid's degree
    fig, axes = new_figure(1, len(panels) + 1, figsize=(4.2 * (len(panels) + 1), 4))
    axes = np.atleast_1d(axes)
    for ax, (query, n) in zip(axes, panels, strict=False):
        cells = {
            (r["similarity"], r["separation"]): r["recall"]
            for r in recall
            if r["query"] == query and r["n"] == n
        }
        grid = np.array([[cells[(s, p)] for p in UHN_SEPARATIONS] for s in GRID_SIMILARITIES])
        title = f"digits, {query} query, N = {n}\nrecall fraction"
        _heatmap(ax, grid, title, "{:.2f}", 0, 1, power)
    cap = {
        r["family"]: r for r in rows if r["kind"] == "capacity" and r["family"].startswith("uhn:")
    }
    if cap:
        grid = np.array(
            [
                [math.log10(max(cap[f"uhn:{s}/{p}"]["n_max"], 1)) for p in UHN_SEPARATIONS]
                for s in GRID_SIMILARITIES
            ]
        )
        any_row = next(iter(cap.values()))
        _heatmap(
            axes[-1],
            grid,
            f"random ±1, d = {any_row['d']}, {any_row['query']}\nlog10 N_max",
            "{:.1f}",
            0,
            None,
            power,
        )
    fig.tight_layout()
    return fig


def _heatmap(
    ax: Any,
    grid: np.ndarray,
    title: str,
    fmt: str,
    vmin: float,
    vmax: float | None,
    power: int | None = None,
) -> None:
    """One similarity × separation heatmap; the power column names its degree ``power``."""
    image = ax.imshow(grid, cmap="viridis", vmin=vmin, vmax=vmax)
    labels = [f"power^{power}" if s == "power" and power else s for s in UHN_SEPARATIONS]
    ax.set_xticks(range(len(UHN_SEPARATIONS)), labels, rotation=30, ha="right")
    ax.set_yticks(range(len(GRID_SIMILARITIES)), GRID_SIMILARITIES)
    ax.set_title(title, fontsize=9)
    for i in range(grid.shape[0]):
        for j in range(grid.shape[1]):
            ax.text(
                j,
                i,
                fmt.format(grid[i, j]),
                ha="center",
                va="center",
                color="white" if grid[i, j] < (np.nanmax(grid) / 2) else "black",
                fontsize=8,
            )
    ax.figure.colorbar(image, ax=ax, fraction=0.046)


def digits_panel_figure(panel: dict[str, torch.Tensor]) -> Figure:
    """Stored digits, their corrupted queries, and the retrieval of several grid cells (one
    mosaic image: a row per key of ``panel``, a column per digit)."""
    labels = ["original:mask", "query:mask"] + [f"{c}:mask" for c in DIGITS_PANEL_CELLS]
    labels += ["original:noise", "query:noise"] + [f"{c}:noise" for c in DIGITS_PANEL_CELLS]
    labels = [k for k in labels if k in panel]
    cols = panel[labels[0]].shape[0]
    mosaic = np.full((9 * len(labels) + 1, 9 * cols + 1), np.nan)
    for i, key in enumerate(labels):
        images = panel[key].detach().cpu().numpy().reshape(-1, 8, 8)
        for j in range(cols):
            mosaic[1 + 9 * i : 9 + 9 * i, 1 + 9 * j : 9 + 9 * j] = images[j]
    fig, ax = new_figure(figsize=(0.9 * cols + 2.5, 0.9 * len(labels)))
    ax.imshow(np.clip(mosaic, 0, 1), cmap="gray_r", vmin=0, vmax=1, interpolation="nearest")
    ax.set_xticks([])
    ax.set_yticks([5 + 9 * i for i in range(len(labels))], labels, fontsize=7)
    ax.set_title("digits: stored, corrupted query, retrieval (similarity/separation:query)")
    fig.tight_layout()
    return fig


def _profile(config: CapacityConfig) -> str:
    return f"seed {config.seed}, {config.seeds} seeds, eps = {config.epsilon:g}"


def search_figures(rows: list[dict[str, Any]], config: CapacityConfig) -> list[FigureRecord]:
    """The capacity curves and, when measured, the energy family's (rows
    ``kind="capacity"``)."""
    profile = _profile(config)
    records = [
        FigureRecord(
            "capacity_vs_d",
            f"N_max(d) per memory family with theory curves ({profile}).",
            capacity_figure(rows),
        )
    ]
    if any(r.get("family", "").startswith("energy:") for r in rows):
        records.append(
            FigureRecord(
                "capacity_energy_family",
                f"Energy family E_F = -sum F(s_i) + xi^T xi / 2 with the whitened similarity "
                f"s = G^-1/2 K xi: N_max(d) per F, ±1 patterns, {config.energy_flips} flipped "
                f"bit(s), softmax beta = {config.energy_softmax_beta:g} sqrt N ({profile}).",
                energy_family_figure(rows),
            )
        )
    return records


def cost_figures(rows: list[dict[str, Any]], config: CapacityConfig) -> list[FigureRecord]:
    """The energy family's cost at ``N_max``, when measured (rows ``kind="energy_cost"``)."""
    if not any(r["kind"] == "energy_cost" for r in rows):
        return []
    return [
        FigureRecord(
            "capacity_energy_cost",
            f"Efficiency vs memory density of the energy family at N_max: time per "
            f"retrieval ({config.cost_queries} queries, best of {config.cost_repeats}) and "
            f"bytes of retrieval state per stored pattern ({_profile(config)}).",
            energy_cost_figure(rows),
        )
    ]


def digits_figures(
    rows: list[dict[str, Any]], panel: dict[str, torch.Tensor], config: CapacityConfig
) -> list[FigureRecord]:
    """The Universal Hopfield grid (rows ``kind="recall"`` and the grid's ``"capacity"``
    rows) and, when measured, the digits panel."""
    records = [
        FigureRecord(
            "capacity_uhn_grid",
            f"Universal Hopfield grid: similarity x separation ({_profile(config)}, beta = "
            f"{config.grid_beta:g}, power = {config.grid_power}).",
            grid_figure(rows),
        )
    ]
    if panel:
        records.append(
            FigureRecord(
                "capacity_digits_panel",
                f"Corrupted digit queries and their retrievals (N = {config.digits_n[0]}).",
                digits_panel_figure(panel),
            )
        )
    return records
