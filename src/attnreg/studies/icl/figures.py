"""Figures of the ``icl`` study (matplotlib figures, written by the caller as PNG + SVG)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from attnreg.estimators import optimal_preconditioner
from attnreg.models import TrainableLSA, gd_products
from attnreg.output import new_figure
from attnreg.studies.common import FigureRecord
from attnreg.studies.icl.config import MODEL_SPECS, ICLConfig
from attnreg.studies.icl.train import make_sampler


def _smooth(values: list[float], width: int) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if width <= 1 or len(arr) < width:
        return arr
    kernel = np.ones(width) / width
    return np.convolve(arr, kernel, mode="valid")


def _caption(cfg: ICLConfig) -> str:
    return f"(attnreg icl, seed {cfg.seed}, steps {cfg.steps}/{cfg.deep_steps})"


def trained_figures(
    cfg: ICLConfig,
    models: dict[str, Any],
    results: dict[str, Any],
    histories: dict[str, list[dict[str, float]]],
    refs: dict[str, dict[str, Any]],
) -> list[FigureRecord]:
    """The trained models: training curves, alignment curves, weight heatmaps."""
    figs: list[FigureRecord] = []
    caption_cfg = _caption(cfg)

    # 1. training loss with reference lines
    n = len(results)
    if n:
        fig, axes = new_figure(1, n, figsize=(4 * n, 3.4), squeeze=False)
        for ax, (name, res) in zip(axes[0], results.items(), strict=True):
            spec = MODEL_SPECS[name]
            width = max(1, len(res.losses) // 100)
            curve = _smooth(res.losses, width)
            ax.plot(np.arange(len(curve)) + width, curve, label="train loss", lw=1)
            names = dict.fromkeys(["GD", spec.reference, "OLS"])
            for ref_name, style in zip(names, ("--", ":", "-."), strict=False):
                ref = refs[spec.tasks].get(ref_name)
                if ref is None:
                    continue
                if ref.loss < 1e-6 * float(np.min(curve)):  # e.g. OLS, exact when N ≥ d
                    ax.plot([], [], ls=style, color="C3", label=f"{ref_name} {ref.loss:.1e}")
                    continue
                ax.axhline(
                    ref.loss,
                    ls=style,
                    color="k" if ref_name == "GD" else "C3",
                    lw=1,
                    label=f"{ref_name} {ref.loss:.4f}",
                )
            ax.set_yscale("log")
            ax.set_title(name, fontsize=9)
            ax.set_xlabel("step")
            ax.legend(fontsize=7)
        axes[0][0].set_ylabel("0.5 × MSE (query)")
        fig.tight_layout()
        figs.append(
            FigureRecord(
                name="icl_training",
                figure=fig,
                caption=f"Training loss with reference lines {caption_cfg}",
            )
        )

    # 2. alignment over training
    if any(histories.values()):
        fig, axes = new_figure(1, 2, figsize=(9, 3.4))
        for name, hist in histories.items():
            if not hist:
                continue
            steps = [h["step"] for h in hist]
            axes[0].plot(steps, [h["cos_sensitivity"] for h in hist], label=name)
            axes[1].plot(steps, [h["model_diff"] for h in hist], label=name)
        axes[0].set_ylabel("sensitivity cosine vs reference")
        axes[1].set_ylabel("‖∂ŷ/∂x_q − ∂ŷ_ref/∂x_q‖")
        axes[1].set_yscale("log")
        for ax in axes:
            ax.set_xlabel("step")
            ax.legend(fontsize=7)
        fig.tight_layout()
        figs.append(
            FigureRecord(
                name="icl_alignment",
                figure=fig,
                caption=f"Alignment with each model's reference during training {caption_cfg}",
            )
        )

    # 3. learned vs constructed weights
    panels = []
    lsa1 = models.get("lsa-1")
    if isinstance(lsa1, TrainableLSA) and "GD" in refs.get("uniform", {}):
        kq, pv = lsa1.normalised_products()
        kq_gd, pv_gd = gd_products(lsa1.d, lsa1.dy, refs["uniform"]["GD"].eta)
        panels += [
            ("lsa-1 KQ (normalised)", kq[0]),
            ("GD construction KQ", kq_gd),
            ("lsa-1 PV (normalised)", pv[0]),
            ("GD construction PV", pv_gd),
        ]
    gauss = models.get("lsa-1-gaussian")
    if isinstance(gauss, TrainableLSA) and "gaussian" in refs:
        effective = gauss.step_matrix()  # the Γ the layer applies (η = 1)
        gamma = optimal_preconditioner(make_sampler(cfg, "gaussian").input_covariance, cfg.n_ctx)
        panels += [
            ("lsa-1-gaussian learned Γ", effective),
            ("optimal Γ* (Ahn et al.)", gamma),
        ]
    if panels:
        cols = 2
        rows_n = (len(panels) + 1) // cols
        fig, axes = new_figure(rows_n, cols, figsize=(7, 3.2 * rows_n), squeeze=False)
        for ax, (title, mat) in zip(axes.flat, panels, strict=False):
            m = torch.as_tensor(mat).to(torch.float64).numpy()
            lim = float(np.abs(m).max()) or 1.0
            im = ax.imshow(m, cmap="RdBu_r", vmin=-lim, vmax=lim)
            ax.set_title(title, fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
            fig.colorbar(im, ax=ax, fraction=0.046)
        for ax in list(axes.flat)[len(panels) :]:
            ax.axis("off")
        fig.tight_layout()
        figs.append(
            FigureRecord(
                name="icl_weights",
                figure=fig,
                caption=f"Learned (scale-normalised) vs constructed weights {caption_cfg}",
            )
        )
    return figs


def sweep_figures(cfg: ICLConfig, rows: list[dict[str, Any]]) -> list[FigureRecord]:
    """The sweeps (rows ``kind="context_sweep"`` and ``"ood"``): loss against the number of
    context examples, out-of-distribution curves."""
    figs: list[FigureRecord] = []
    caption_cfg = _caption(cfg)

    # 1. loss against the number of context examples
    sweep = [r for r in rows if r.get("kind") == "context_sweep"]
    if sweep:
        fig, ax = new_figure(figsize=(6, 4))
        for name in dict.fromkeys(r["model"] for r in sweep):
            pts = [(r["n_ctx"], r["test_loss"]) for r in sweep if r["model"] == name]
            xs, ys = zip(*pts, strict=True)
            ax.plot(xs, ys, marker="o", ms=3, label=name)
        ax.axvline(cfg.d, color="grey", lw=0.8, ls=":")
        ax.set_yscale("log")
        ax.set_xlabel("number of context examples N")
        ax.set_ylabel("0.5 × MSE (query)")
        ax.set_title(f"noise σ = {cfg.sweep_noise:g}, d = {cfg.d}", fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        figs.append(
            FigureRecord(
                name="icl_context_sweep",
                figure=fig,
                caption=(
                    f"Loss against the number of context examples (models "
                    f"trained at N = {cfg.n_ctx}) {caption_cfg}"
                ),
            )
        )

    # 2. out-of-distribution
    ood = [r for r in rows if r.get("kind") == "ood"]
    if ood:
        fig, axes = new_figure(1, 2, figsize=(9, 3.4))
        for ax, shift in zip(axes, ("input_scale", "teacher_scale"), strict=True):
            sub = [r for r in ood if r["shift"] == shift]
            for name in dict.fromkeys(r["model"] for r in sub):
                pts = [(r["alpha"], r["test_loss"]) for r in sub if r["model"] == name]
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, ys, marker="o", ms=3, label=name)
            ax.set_xlabel(f"{shift.replace('_', ' ')} α")
            ax.set_yscale("symlog", linthresh=1e-3)
            ax.legend(fontsize=7)
        axes[0].set_ylabel("0.5 × MSE (query)")
        fig.tight_layout()
        figs.append(
            FigureRecord(
                name="icl_ood",
                figure=fig,
                caption=f"Out-of-distribution loss (inputs / teacher scaled by α) {caption_cfg}",
            )
        )
    return figs
