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
        depths = sorted({r["layers"] for r in trained})
        for i, depth in enumerate(depths):
            pts = [(r["layer"], r["loss"]) for r in trained if r["layers"] == depth]
            shade = 0.4 + 0.6 * (i + 1) / len(depths)  # deeper stacks darker, at most 1
            ax.plot(*zip(*pts, strict=True), "s:", color="k", ms=4, alpha=shade)
        ax.plot([], [], "s:", color="k", label="trained stacks (per layer)")
        ax.set_yscale("log")
        ax.set_xlabel("layer ℓ / iterate k")
        ax.set_title(f"κ = {kappa:g}, N = {n}", fontsize=9)
    axes[0][0].set_ylabel("0.5 × MSE (query)")
    axes[0][0].legend(fontsize=8)
    return fig


def noise_figure(
    curve: list[dict[str, Any]],
    mixed: list[dict[str, Any]],
    noiseless: list[dict[str, Any]] | None = None,
) -> Figure:
    """Left: error against context size with noise (measured markers, closed forms / Monte
    Carlo dashed), ``k = d`` dotted. Middle, on its own axis: the noiseless curves (the stack
    trained on noiseless tasks, min-norm least squares, averaging, ``τ²(d − k)/d``) — least
    squares is exactly 0 (rounding, ~1e-30) from ``k = d`` on, so the axis is clipped
    (:data:`NOISELESS_FLOOR`).
    Right: adjusted loss (− the oracle's) per σ bin of the deepest mixed-noise stack and the
    ridge baselines, at the first σ_max."""
    fig, (ax, cx, bx) = new_figure(1, 3, figsize=(15, 4), layout="tight")
    noisy = [r for r in curve if r["kind"] == "noise_curve"]
    labels = {
        "trained": "trained stack",
        "ols": "OLS / min-norm",
        "bayes_ridge": "Bayes ridge λ = σ²/τ²",
    }
    if not noisy:
        ax.set_axis_off()  # the "noise" part did not run
    else:
        for i, (name, label) in enumerate(labels.items()):
            pts = [(r["n_ctx"], r["error"]) for r in noisy if r["estimator"] == name]
            if pts:
                ax.plot(*zip(*pts, strict=True), "o-", color=f"C{i}", ms=4, label=label)
            if name == "ols":
                th = [(r["n_ctx"], r["theory"]) for r in noisy if r["estimator"] == name]
                th = [(k, v) for k, v in th if v != float("inf") and v > 0]
                if th:
                    ax.plot(*zip(*th, strict=True), "--", color=f"C{i}", lw=1)
        bayes = sorted({(r["n_ctx"], r["bayes_theory"]) for r in noisy})
        ax.plot(*zip(*bayes, strict=True), "k:", lw=1.2, label="Bayes error (Monte Carlo)")
        d, sigma = noisy[0]["d"], noisy[0]["sigma"]
        ax.axvline(d, color="grey", lw=0.8, ls=":")
        ax.set_yscale("log")
        ax.set_xlabel("context points k")
        ax.set_ylabel("E(ŷ − y)² / d")
        ax.set_title(f"d = {d}, σ = {sigma:g}; OLS peaks at k = d (dotted)", fontsize=9)
        ax.legend(fontsize=7)
    _noiseless_panel(cx, noiseless or [])
    _mixed_panel(bx, mixed)
    return fig


NOISELESS_FLOOR = 1e-4
"""The noiseless panel's range: from this fraction of the signal's scale (the largest
``τ²(d − k)/d`` or least-squares error) up to ten times the averaging estimator's largest
error; least squares' exact zeros from ``k = d`` on are drawn on the floor (▽), a trained
stack's heavy-tailed errors above the ceiling on the ceiling (△)."""


def _noiseless_panel(ax: Any, rows: list[dict[str, Any]]) -> None:
    if not rows:
        ax.set_axis_off()
        return
    scale = max(max(r["theory"], r["ols_error"]) for r in rows)
    floor = NOISELESS_FLOOR * scale
    ceiling = 10 * max(r["averaging_error"] for r in rows)
    for key, label, color in (
        ("error", f"trained {rows[0]['layers']}-layer stack", "C0"),
        ("ols_error", "min-norm least squares", "C1"),
        ("averaging_error", "averaging", "C4"),
    ):
        ks = [r["n_ctx"] for r in rows]
        vals = [min(max(r[key], floor), ceiling) for r in rows]
        ax.plot(ks, vals, "o-", color=color, ms=4, label=label)
        for bound, marker, out in ((floor, "v", -1), (ceiling, "^", 1)):
            off = [(k, bound) for k, r in zip(ks, rows, strict=True) if out * (r[key] - bound) > 0]
            if off:
                ax.plot(*zip(*off, strict=True), marker, color=color, ms=8)
    th = [(r["n_ctx"], r["theory"]) for r in rows if r["theory"] > 0]
    if th:
        ax.plot(*zip(*th, strict=True), "--", color="k", lw=1, label="τ²(d − k)/d")
    d = rows[0]["d"]
    ax.axvline(d, color="grey", lw=0.8, ls=":")
    ax.set_yscale("log")
    ax.set_ylim(floor / 2, ceiling * 2)
    ax.set_xlabel("context points k")
    ax.set_title(
        f"noiseless, d = {d} (▽ below {floor:.1g}: least squares is 0 for k ≥ d; △ clipped)",
        fontsize=9,
    )
    ax.legend(fontsize=7)


def _mixed_panel(ax: Any, mixed: list[dict[str, Any]]) -> None:
    cells = [r for r in mixed if r["kind"] == "mixed_noise"]
    if not cells:
        ax.set_axis_off()
        return
    smax = cells[0]["sigma_max"]
    deepest = max(r["layers"] for r in cells if r["sigma_max"] == smax)
    cells = [r for r in cells if r["sigma_max"] == smax and r["layers"] == deepest]
    bins = list(dict.fromkeys(r["bin"] for r in cells))
    names = [n for n in dict.fromkeys(r["estimator"] for r in cells) if n != "oracle"]
    width = 0.8 / len(names)
    for j, name in enumerate(names):
        vals = [
            next(r["adjusted"] for r in cells if r["bin"] == b and r["estimator"] == name)
            for b in bins
        ]
        ax.bar([i + j * width for i in range(len(bins))], vals, width, label=name)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(bins))], bins)
    ax.set_xlabel("σ bin (σ ~ U(0, σ_max) per task)")
    ax.set_ylabel("adjusted loss (− oracle's)")
    ax.set_title(
        f"mixed noise, σ_max = {smax:g}, {deepest} layers, N = {cells[0]['n_ctx']}", fontsize=9
    )
    ax.legend(fontsize=7)
