"""Figures of the ``depth`` study (matplotlib; written by the caller as PNG + SVG). Each is
one column or at least 1000 px wide at 150 dpi."""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure

from attnreg.output import new_figure

COLORS = {"gd": "C0", "gd++": "C1", "preconditioned": "C2", "newton": "C3"}


def atlas_figure(rows: list[dict[str, Any]], eps: float) -> Figure:
    """Layers needed to reach ``eps`` against the population κ, one panel per context size,
    one line per method (measured solid, theory dashed; the cap dotted)."""
    sizes = sorted({r["n_ctx"] for r in rows})
    fig, axes = new_figure(
        1, len(sizes), figsize=(4.4 * len(sizes), 3.8), layout="tight", squeeze=False
    )
    for ax, n in zip(axes[0], sizes, strict=True):
        cell = [r for r in rows if r["n_ctx"] == n and r["eps"] == eps]
        for method in dict.fromkeys(r["method"] for r in cell):
            mine = sorted((r for r in cell if r["method"] == method), key=lambda r: r["kappa"])
            got = [(r["kappa"], r["layers_needed"]) for r in mine if r["layers_needed"]]
            theory = [(r["kappa"], r["theory_layers"]) for r in mine if r["theory_layers"]]
            color = COLORS.get(method, "k")
            if got:
                ax.plot(*zip(*got, strict=True), "o-", color=color, ms=4, label=method)
            if theory:
                ax.plot(*zip(*theory, strict=True), "--", color=color, lw=1)
        if cell:
            cap = max(r["cap"] for r in cell)
            ax.axhline(cap, color="grey", ls=":", lw=1)
            ax.set_ylim(top=5 * cap)  # theory far beyond the cap is cut off
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("condition number κ of Σ")
        ax.set_title(f"N = {n}, ε = {eps:g} (dashed: theory, dotted: cap)", fontsize=9)
    axes[0][0].set_ylabel("layers to reach ε of OLS")
    axes[0][0].legend(fontsize=8)
    return fig


def trained_figure(rows: list[dict[str, Any]]) -> Figure:
    """Loss against depth of every trained stack (markers, one line per stack) beside each
    method's loss against its iterations (lines), one panel per (κ, N)."""
    cells = list(dict.fromkeys((r["kappa"], r["n_ctx"]) for r in rows if r["kind"] == "iterate"))
    fig, axes = new_figure(
        1, len(cells), figsize=(4.4 * len(cells), 3.8), layout="tight", squeeze=False
    )
    for ax, (kappa, n) in zip(axes[0], cells, strict=True):
        its = [r for r in rows if r["kind"] == "iterate" and (r["kappa"], r["n_ctx"]) == (kappa, n)]
        for method in dict.fromkeys(r["method"] for r in its):
            pts = [(r["iterate"], r["loss"]) for r in its if r["method"] == method]
            ax.plot(*zip(*pts, strict=True), "-", color=COLORS[method], lw=1.2, label=method)
        trained = [
            r
            for r in rows
            if r["kind"] == "trained"
            and (r["kappa"], r["n_ctx"]) == (kappa, n)
            and r["method"] == "gd"
        ]
        for depth in sorted({r["layers"] for r in trained}):
            pts = [(r["layer"], r["loss"]) for r in trained if r["layers"] == depth]
            ax.plot(*zip(*pts, strict=True), "s:", color="k", ms=4, alpha=0.4 + 0.6 * depth / 6)
        ax.plot([], [], "s:", color="k", label="trained stacks (per layer)")
        ax.set_yscale("log")
        ax.set_xlabel("layer ℓ / iterate k")
        ax.set_title(f"κ = {kappa:g}, N = {n}", fontsize=9)
    axes[0][0].set_ylabel("0.5 × MSE (query)")
    axes[0][0].legend(fontsize=8)
    return fig


def noise_figure(curve: list[dict[str, Any]], mixed: list[dict[str, Any]]) -> Figure:
    """Left: error against context size (measured markers, closed forms / Monte Carlo
    dashed). Right: the mixed-noise stack against ridge per σ bin."""
    fig, (ax, bx) = new_figure(1, 2, figsize=(11, 4), layout="tight")
    labels = {
        "trained": "trained stack",
        "ols": "OLS / min-norm",
        "bayes_ridge": "Bayes ridge λ = σ²/τ²",
        "ols_noiseless": "min-norm, σ = 0",
    }
    for i, (name, label) in enumerate(labels.items()):
        pts = [(r["n_ctx"], r["error"]) for r in curve if r["estimator"] == name]
        pts = [(k, v) for k, v in pts if v > 1e-20]  # σ = 0, k ≥ d: rounding, not an error
        if pts:
            ax.plot(*zip(*pts, strict=True), "o-", color=f"C{i}", ms=4, label=label)
        if name in ("ols", "ols_noiseless"):
            th = [(r["n_ctx"], r["theory"]) for r in curve if r["estimator"] == name]
            th = [(k, v) for k, v in th if v != float("inf") and v > 0]
            if th:
                ax.plot(*zip(*th, strict=True), "--", color=f"C{i}", lw=1)
    bayes = sorted({(r["n_ctx"], r["bayes_theory"]) for r in curve})
    ax.plot(*zip(*bayes, strict=True), "k:", lw=1.2, label="Bayes error (Monte Carlo)")
    d, sigma = curve[0]["d"], curve[0]["sigma"]
    ax.axvline(d, color="grey", lw=0.8, ls=":")
    ax.set_yscale("log")
    ax.set_xlabel("context points k")
    ax.set_ylabel("E(ŷ − y)² / d")
    ax.set_title(f"d = {d}, σ = {sigma:g} (dashed: closed forms)", fontsize=9)
    ax.legend(fontsize=7)
    bins = list(dict.fromkeys(r["bin"] for r in mixed))
    names = list(dict.fromkeys(r["estimator"] for r in mixed))
    width = 0.8 / len(names)
    for j, name in enumerate(names):
        vals = [
            next(r["error"] for r in mixed if r["bin"] == b and r["estimator"] == name)
            for b in bins
        ]
        bx.bar([i + j * width for i in range(len(bins))], vals, width, label=name)
    bx.set_xticks([i + 0.4 - width / 2 for i in range(len(bins))], bins)
    bx.set_xlabel("σ bin (σ ~ U(0, σ_max) per task)")
    bx.set_ylabel("E(ŷ − y)² / d")
    bx.set_title(f"mixed noise, N = {mixed[0]['n_ctx']}", fontsize=9)
    bx.legend(fontsize=7)
    return fig
