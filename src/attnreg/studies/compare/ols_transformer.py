"""The OLS-Transformer trained rather than constructed (Tan & Zhao, arXiv 2604.13656).

The architecture of :class:`attnreg.constructions.OLSTransformer` with free weights
(:class:`attnreg.models.regressors.TrainableOLSTransformer`), ``out = (XW_Q)(XW_K)ᵀ(XW_V)W_P/N``,
starts from a random initialisation and is trained by full-batch Adam
(:func:`attnreg.training.train`) to predict the training targets from the training rows
(self-attention), on Tan & Zhao's toy ``y = 2x + ε`` and on the compare study's synthetic
linear mode. Measured, against the constructed layer (``covariance="mean"``: ``W_Q W_Kᵀ =
(XᵀX/N)⁻¹``, ``W_V W_P = β̂``):

* functional convergence — ``mean((out − Hy)²) / mean((Hy)²)`` on the training rows (``Hy`` the
  OLS fit) and the same on test queries against ``X* β̂``, against the training step;
* structural convergence — ``‖s A − A_c‖_F / ‖A_c‖_F`` for ``A = W_Q W_Kᵀ`` and
  ``‖B/s − B_c‖_F / ‖B_c‖_F`` for ``B = W_V W_P`` after the best scale ``s`` (the one symmetry
  of the layer; on one fixed data set only the product ``A (XᵀX/N) B`` is identifiable);
* shift sensitivity — the inference context and queries are drawn from a shifted input
  distribution (same true weights), the weights stay those trained (slow memory fixed) while
  the context in the scores changes (fast memory). ``mean``: ``x + m·σ`` (``σ`` the feature
  standard deviations); ``scale``: ``(1 + m)·x``; ``covariance``: ``Σ' = (1−t)Σ + t (trΣ/d) I``
  with ``t = m/(1+m)`` (same total variance, condition number → 1; ``d > 1`` only). Error is
  the MSE to the noise-free truth ``X* w``, for the trained weights, the constructed weights
  frozen at the training context, and the construction refitted on the new context (OLS).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from attnreg.constructions import OLSTransformer
from attnreg.core.threads import torch_threads
from attnreg.data.regression import RegressionData, simple_linear
from attnreg.models.regressors import TrainableOLSTransformer
from attnreg.plateaus import PlateauWarning
from attnreg.studies.common import FigureRecord
from attnreg.studies.compare.config import CompareConfig
from attnreg.studies.compare.metrics import best_scale_distance, mse
from attnreg.studies.compare.train import load_mode
from attnreg.studies.paired import paired_z
from attnreg.training import TrainConfig, train

SHIFTS = ("mean", "scale", "covariance")


@dataclass
class OLSTransformerResult:
    """Curves (one row per data set × evaluation step), shift rows, and final numbers."""

    curves: list[dict[str, Any]] = field(default_factory=list)
    shifts: list[dict[str, Any]] = field(default_factory=list)
    final: dict[str, dict[str, float]] = field(default_factory=dict)
    frozen_vs_refit: dict[str, float] = field(default_factory=dict)
    """Per ``"<data> <shift> m=<largest m>"``: the paired z over the test queries of the squared
    error to ``X* w`` of the frozen constructed weights minus the refitted (OLS) ones."""


def constructed(x: torch.Tensor, y: torch.Tensor) -> TrainableOLSTransformer:
    """The constructed OLS-Transformer's weights (``covariance="mean"``) in a trainable module."""
    layer = OLSTransformer(covariance="mean").fit(x[None], y[None])
    module = TrainableOLSTransformer(x.shape[1], y.shape[1], dtype=x.dtype).to(x.device)
    with torch.no_grad():
        for name in ("w_q", "w_k", "w_v", "w_p"):
            getattr(module, name).copy_(getattr(layer, name)[0])
    return module


def shifted_sample(
    data: RegressionData, kind: str, magnitude: float, n: int, noise: float, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` rows ``(x, y = xᵀw + noise·ε)`` from the shifted input distribution (docstring)."""
    assert data.covariance is not None and data.true_weights is not None
    sigma = data.covariance.copy()
    d = sigma.shape[0]
    rng = np.random.default_rng(seed)
    if kind == "covariance":
        t = magnitude / (1 + magnitude)
        sigma = (1 - t) * sigma + t * np.trace(sigma) / d * np.eye(d)
    x = rng.standard_normal((n, d)) @ np.linalg.cholesky(sigma).T
    if kind == "mean":
        x = x + magnitude * np.sqrt(np.diag(data.covariance))
    elif kind == "scale":
        x = (1 + magnitude) * x
    y = x @ data.true_weights + noise * rng.standard_normal(n)
    return torch.from_numpy(x), torch.from_numpy(y[:, None])


def train_one(
    data: RegressionData,
    steps: int,
    lr: float,
    seed: int,
    eval_every: int,
    threads: int | None = 1,
    device: str = "cpu",
) -> tuple[TrainableOLSTransformer, list[dict[str, Any]], TrainableOLSTransformer]:
    """Train the free OLS-Transformer on ``data`` (with ``threads`` torch threads, on
    ``device``); returns (model, curve rows every ``eval_every`` steps, the constructed layer)."""
    x, y = torch.from_numpy(data.x_train).to(device), torch.from_numpy(data.y_train).to(device)
    xt = torch.from_numpy(data.x_test).to(device)
    ref = constructed(x, y)
    with torch.no_grad():
        fit_train, fit_test = ref(x, x), ref(xt, x)
    a_c, b_c = ref.qk_product, ref.vp_product
    model = TrainableOLSTransformer(x.shape[1], y.shape[1], seed=seed).to(device)
    curve: list[dict[str, Any]] = []
    done = [0]  # optimiser steps taken so far

    def loss_fn(step: int) -> torch.Tensor:
        done[0] = step + 1
        return ((model(x, x) - y) ** 2).mean()

    def eval_fn() -> float:
        step = done[0]
        d_a, s = best_scale_distance(model.qk_product, a_c)
        d_b = float((model.vp_product / s - b_c).norm() / b_c.norm())
        rel = mse(model(x, x), fit_train) / float((fit_train**2).mean())
        curve.append(
            {
                "data": data.name,
                "step": step,
                "loss": mse(model(x, x), y),
                "rel_mse_to_ols_train": rel,
                "rel_mse_to_ols_test": mse(model(xt, x), fit_test) / float((fit_test**2).mean()),
                "qk_distance": d_a,
                "vp_distance": d_b,
            }
        )
        return rel

    with torch.no_grad():
        eval_fn()
    cfg = TrainConfig(steps=steps, lr=lr, clip=1.0, seed=seed, eval_every=eval_every)
    with warnings.catch_warnings(), torch_threads(threads):
        warnings.simplefilter("ignore", PlateauWarning)
        train(model, loss_fn, cfg, eval_fn=eval_fn, progress=False)
    return model, curve, ref


def run(config: CompareConfig) -> OLSTransformerResult:
    """Train on ``y = 2x + ε`` and on the synthetic mode, then measure the shift sensitivity.

    ``config``: the compare study's settings (``ols_steps``, ``ols_lr``, ``shift_magnitudes``,
    the synthetic sizes, and the first seed are used).
    """

    seed = config.seed
    result = OLSTransformerResult()
    sets = [
        (simple_linear(n_train=config.n_train, n_test=config.n_test, seed=seed), 0.1),
        (load_mode(config, "synthetic", seed), config.noise),
    ]
    for data, noise in sets:
        model, curve, ref = train_one(
            data, config.ols_steps, config.ols_lr, seed, 10, config.threads, config.device
        )
        result.curves.extend(curve)
        threshold = next((c["step"] for c in curve if c["rel_mse_to_ols_train"] < 1e-3), -1)
        last = curve[-1]
        result.final[data.name] = {
            "steps": float(config.ols_steps),
            "rel_mse_to_ols_train": last["rel_mse_to_ols_train"],
            "rel_mse_to_ols_test": last["rel_mse_to_ols_test"],
            "qk_distance": last["qk_distance"],
            "vp_distance": last["vp_distance"],
            "first_step_below_1e-3": float(threshold),
            "d": float(data.d),
        }
        for kind in SHIFTS:
            if kind == "covariance" and data.d == 1:
                continue
            for i, m in enumerate(config.shift_magnitudes):
                xc, yc = shifted_sample(data, kind, m, config.n_train, noise, seed + 100 + i)
                xq, _ = shifted_sample(data, kind, m, config.n_test, noise, seed + 200 + i)
                xc, yc, xq = xc.to(config.device), yc.to(config.device), xq.to(config.device)
                assert data.true_weights is not None
                truth = xq @ torch.from_numpy(data.true_weights).to(config.device)[:, None]
                with torch.no_grad():
                    preds = {
                        "trained (weights frozen)": model(xq, xc),
                        "constructed (weights frozen)": ref(xq, xc),
                        "constructed (refitted = OLS)": constructed(xc, yc)(xq, xc),
                    }
                if m == max(config.shift_magnitudes):
                    sq = {k: ((p - truth) ** 2).sum(-1).cpu().numpy() for k, p in preds.items()}
                    result.frozen_vs_refit[f"{data.name} {kind} m={m:g}"] = paired_z(
                        sq["constructed (weights frozen)"], sq["constructed (refitted = OLS)"]
                    )
                for name, pred in preds.items():
                    result.shifts.append(
                        {
                            "data": data.name,
                            "shift": kind,
                            "magnitude": float(m),
                            "model": name,
                            "mse_to_truth": mse(pred, truth),
                        }
                    )
    return result


def tables(result: OLSTransformerResult) -> dict[str, list[dict[str, Any]]]:
    """The training curves and the shift rows, as ``ols_transformer_curves`` and
    ``ols_transformer_shift``."""
    return {"ols_transformer_curves": result.curves, "ols_transformer_shift": result.shifts}


def make_figures(result: OLSTransformerResult) -> list[FigureRecord]:
    """Functional convergence, structural convergence and shift sensitivity (one figure each)."""
    from attnreg.output import new_figure

    names = list(dict.fromkeys(c["data"] for c in result.curves))
    records = []
    fig, axes = new_figure(1, 2, figsize=(10, 3.8), squeeze=False, layout="constrained")
    for ax, key, title in zip(
        axes[0],
        ("rel_mse_to_ols_train", "rel_mse_to_ols_test"),
        ("training rows vs OLS fit Hy", "test queries vs X*β̂"),
        strict=True,
    ):
        for name in names:
            c = [r for r in result.curves if r["data"] == name]
            ax.loglog([max(r["step"], 1) for r in c], [r[key] for r in c], label=name)
        ax.set(xlabel="Adam step", ylabel="relative MSE to OLS", title=title)
        ax.legend(fontsize=9)
    records.append(
        FigureRecord(
            name="ols_transformer_functional",
            figure=fig,
            caption=(
                "Trained OLS-Transformer, MSE to the OLS fit against the training step "
                "(compare config: ols_steps, ols_lr, first seed)."
            ),
        )
    )
    colours = dict(zip(names, ("tab:blue", "tab:red", "tab:green", "tab:purple"), strict=False))
    fig, ax = new_figure(figsize=(6, 3.6))
    # d = 1 (the y = 2x toy): the best scale is the only freedom, so the distance is 0 at every
    # step and the curve shows nothing
    for name in [n for n in names if result.final.get(n, {}).get("d", 2.0) > 1]:
        c = [r for r in result.curves if r["data"] == name]
        steps = [max(r["step"], 1) for r in c]
        for key, style, label in (
            ("qk_distance", "-", "W_Q W_Kᵀ"),
            ("vp_distance", "--", "W_V W_P"),
        ):
            ax.loglog(
                steps,
                [max(r[key], 1e-16) for r in c],
                style,
                color=colours.get(name, "grey"),
                label=f"{name}: {label}",
            )
    ax.set(xlabel="Adam step", ylabel="rel. distance to constructed (best scale, ≥ 1e-16)")
    ax.set_title("Structural convergence to the construction")
    ax.legend(fontsize=9)
    records.append(
        FigureRecord(
            name="ols_transformer_structural",
            figure=fig,
            caption=(
                "Distance of the learned W_Q W_Kᵀ and W_V W_P to the constructed ones after the "
                "identifiable scale, against the training step (compare config). Data sets with "
                "d = 1 (the y = 2x toy) are left out: one scale is their only freedom, so the "
                "distance is 0 from the first step and shows nothing."
            ),
        )
    )
    kinds = [k for k in SHIFTS if any(r["shift"] == k for r in result.shifts)]
    fig, axes = new_figure(
        1, len(kinds), figsize=(4 * len(kinds), 3.8), squeeze=False, layout="constrained"
    )
    styles = {"trained": "-", "constructed (weights": "--", "constructed (refit": ":"}
    for ax, kind in zip(axes[0], kinds, strict=True):
        for name in names:
            rows = [r for r in result.shifts if r["shift"] == kind and r["data"] == name]
            for model in dict.fromkeys(r["model"] for r in rows):
                sel = [r for r in rows if r["model"] == model]
                style = next(v for k, v in styles.items() if model.startswith(k))
                ax.semilogy(
                    [r["magnitude"] for r in sel],
                    [max(r["mse_to_truth"], 1e-16) for r in sel],
                    style,
                    marker="o",
                    color=colours.get(name, "grey"),
                    label=f"{name}: {model}",
                )
        ax.set(xlabel=f"{kind} shift magnitude m", ylabel="MSE to X* w", title=f"{kind} shift")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=2, fontsize=9)
    records.append(
        FigureRecord(
            name="ols_transformer_shift",
            figure=fig,
            caption=(
                "Error under a shifted inference context with the trained weights held fixed "
                "(compare config: shift_magnitudes, first seed)."
            ),
        )
    )
    return records
