"""The icl study's sweeps: loss against the number of context examples (Garg et al. 2022)
and out-of-distribution input / teacher scales (von Oswald et al. 2023)."""

from __future__ import annotations

from typing import Any

import torch

from attnreg.data.tasks import eval_loss
from attnreg.estimators import OLS, Ridge, ZeroPredictor
from attnreg.models import TokenModel
from attnreg.studies.icl.config import ICLConfig, ModelSpec
from attnreg.studies.icl.references import Reference
from attnreg.studies.icl.train import make_sampler, model_fn
from attnreg.training import generator


def _uniform_predictors(
    models: dict[str, TokenModel],
    specs: dict[str, ModelSpec],
    refs: dict[str, dict[str, Reference]],
    references: tuple[str, ...],
) -> dict[str, Any]:
    """The models trained on the uniform tasks, the named references fitted on them (those
    present) and OLS, by name."""
    predictors: dict[str, Any] = {
        name: model_fn(m) for name, m in models.items() if specs[name].tasks == "uniform"
    }
    for name in references:
        if name in refs["uniform"]:
            predictors[name] = refs["uniform"][name].predictor
    predictors["OLS"] = OLS()
    return predictors


def context_sweep(
    cfg: ICLConfig,
    models: dict[str, TokenModel],
    specs: dict[str, ModelSpec],
    refs: dict[str, dict[str, Reference]],
) -> list[dict[str, Any]]:
    if "uniform" not in refs:
        return []
    sampler = make_sampler(cfg, "uniform").shifted(n_ctx=2 * cfg.d, noise_std=cfg.sweep_noise)
    tasks = sampler.sample(cfg.sweep_tasks, generator(4 * 10**6 + cfg.seed), torch.float64)
    lam = max(cfg.sweep_noise**2, 1e-3)
    predictors = _uniform_predictors(models, specs, refs, ("GD", "GD x2", "GD++ x2", "GD++ x3"))
    predictors[f"ridge (λ = {lam:g})"] = Ridge(lam)
    predictors["zero"] = ZeroPredictor()
    rows = []
    for n in range(1, 2 * cfg.d + 1):
        sub = tasks.with_context(n)
        for name, pred in predictors.items():
            rows.append(
                {
                    "kind": "context_sweep",
                    "model": name,
                    "n_ctx": n,
                    "test_loss": eval_loss(pred, sub),
                    "noise_std": cfg.sweep_noise,
                }
            )
    return rows


def ood_sweep(
    cfg: ICLConfig,
    models: dict[str, TokenModel],
    specs: dict[str, ModelSpec],
    refs: dict[str, dict[str, Reference]],
) -> list[dict[str, Any]]:
    if "uniform" not in refs:
        return []
    base = make_sampler(cfg, "uniform")
    predictors = _uniform_predictors(models, specs, refs, ("GD", "GD++ x2"))
    rows = []
    for shift, scales in (("input_scale", cfg.input_scales), ("teacher_scale", cfg.teacher_scales)):
        for alpha in scales:
            sampler = base.shifted(**{shift: float(alpha)})
            tasks = sampler.sample(cfg.sweep_tasks, generator(5 * 10**6 + cfg.seed), torch.float64)
            for name, pred in predictors.items():
                rows.append(
                    {
                        "kind": "ood",
                        "shift": shift,
                        "alpha": float(alpha),
                        "model": name,
                        "test_loss": eval_loss(pred, tasks),
                    }
                )
    return rows
