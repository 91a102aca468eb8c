"""Noise and the Bayes-optimal estimator: error against the number of context points.

Setting: ``x ~ N(0, I_d)``, ``w ~ N(0, τ² I)``, ``y = wᵀx + σε``. Errors are
``E[(ŷ_q − y_q)²] / d`` (Garg et al. 2022's normalisation: the zero predictor scores
``τ² + σ²/d``).

* Bayes-optimal: the posterior mean is ridge with ``λ = σ²/τ²`` (Akyürek et al. 2022); its
  error is ``(σ² + σ² E tr((XᵀX + λI)⁻¹)) / d`` (the posterior covariance traced against
  ``E x_q x_qᵀ = I``), computed here by Monte Carlo over ``X`` only (:func:`bayes_ridge_curve`).
* Minimum-norm least squares, closed form (:func:`min_norm_error`; Wishart means
  ``E (XXᵀ)⁻¹ = I_k/(d − k − 1)``, ``E (XᵀX)⁻¹ = I_d/(k − d − 1)``): for ``k ≤ d − 2``
  ``(τ²(d − k) + σ²(1 + k/(d − k − 1))) / d``; for ``k ≥ d + 2`` ``σ²(1 + d/(k − d − 1)) / d``;
  infinite in between (the interpolation peak). With ``σ = 0``: ``τ²(d − k)/d`` for ``k < d``
  (Garg et al. 2022) and 0 for ``k ≥ d``.
* Mixed noise (Vladymyrov et al. 2024): ``σ ~ U(0, σ_max)`` per task; the reference is ridge
  with each task's own ``λ = σ²/τ²`` (tuned to the noise level: Bayes-optimal given σ), and
  ridge with one ``λ`` tuned on the mixture.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch

from attnreg.core.whitening import ConditioningWarning, RankWarning
from attnreg.data.tasks import Tasks, TaskSampler, query_loss
from attnreg.estimators import OLS, Ridge
from attnreg.models import TrainableLSA
from attnreg.progress import Progress
from attnreg.studies.depth.config import DepthConfig
from attnreg.training import TrainConfig, generator, train

LAMBDA_GRID = tuple(10.0 ** (e / 4) for e in range(-16, 9))  # 1e-4 … 1e2: the mixture's λ


def min_norm_error(d: int, k: int, sigma: float, tau: float) -> float:
    """The closed-form error of min-norm least squares from ``k`` context points (module
    docstring); ``inf`` where it diverges (``d − 1 ≤ k ≤ d + 1`` with noise)."""
    if sigma == 0:
        return tau**2 * max(d - k, 0) / d
    if k <= d - 2:
        return (tau**2 * (d - k) + sigma**2 * (1 + k / (d - k - 1))) / d
    if k >= d + 2:
        return sigma**2 * (1 + d / (k - d - 1)) / d
    return math.inf


def bayes_ridge_curve(
    d: int, k: int, sigma: float, tau: float, draws: int, seed: int
) -> tuple[float, float]:
    """Monte-Carlo mean and standard error over ``draws`` designs ``X`` ``(k, d)`` of the
    Bayes-optimal error ``(σ² + σ² tr((XᵀX + λI)⁻¹)) / d``, ``λ = σ²/τ²`` (``σ > 0``)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(draws, k, d, generator=gen, dtype=torch.float64)
    lam = sigma**2 / tau**2
    inv = torch.linalg.inv(x.mT @ x + lam * torch.eye(d, dtype=torch.float64))
    vals = sigma**2 * (1 + torch.diagonal(inv, dim1=-2, dim2=-1).sum(-1)) / d
    return float(vals.mean()), float(vals.std() / math.sqrt(draws))


def task_errors(prediction: torch.Tensor, tasks: Tasks, d: int) -> tuple[float, float]:
    """Mean and standard error over tasks of ``‖ŷ_q − y_q‖² / d`` (one query per task)."""
    err = (prediction.to(torch.float64) - tasks.y_query).pow(2).flatten(1).sum(1) / d
    return float(err.mean()), float(err.std() / math.sqrt(len(err)))


def _quiet_predict(predictor: Any, tasks: Tasks) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RankWarning)
        warnings.simplefilter("ignore", ConditioningWarning)
        with torch.no_grad():
            return predictor.predict(tasks.x_ctx, tasks.y_ctx, tasks.x_query)


def mixed_tasks(
    sampler: TaskSampler, batch: int, gen: torch.Generator, sigma_max: float, dtype: torch.dtype
) -> tuple[Tasks, torch.Tensor]:
    """Noiseless tasks from ``sampler`` with per-task label noise ``σ_b ~ U(0, sigma_max)``
    added to context and query labels; returns the tasks and ``σ`` ``(B,)``."""
    t = sampler.sample(batch, gen, dtype)
    sig = torch.rand(batch, generator=gen, dtype=dtype) * sigma_max
    s = sig.reshape(-1, 1, 1)
    yc = t.y_ctx + s * torch.randn(t.y_ctx.shape, generator=gen, dtype=dtype)
    yq = t.y_query + s * torch.randn(t.y_query.shape, generator=gen, dtype=dtype)
    return Tasks(t.x_ctx, yc, t.x_query, yq, t.w), sig


def _train(
    draw: Any, d: int, cfg: DepthConfig, seed: int, progress: Progress, name: str
) -> TrainableLSA:
    model = TrainableLSA(d, 1, cfg.noise_layers, init_scale=cfg.init_scale, seed=seed)

    def loss_fn(step: int) -> torch.Tensor:
        t = draw(step)
        return query_loss(model.forward_predict(t.x_ctx, t.y_ctx, t.x_query), t.y_query)

    config = TrainConfig(
        steps=cfg.noise_steps,
        lr=cfg.lr,
        schedule="cosine",
        clip=10.0,
        seed=seed,
        eval_every=cfg.noise_steps,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        train(model, loss_fn, config, progress=progress, description=name)
    return model


def curve_rows(cfg: DepthConfig, progress: Progress) -> list[dict[str, Any]]:
    """Rows ``kind="noise_curve"``: per context size ``k`` and estimator (the trained stack,
    ``ols`` min-norm, ``bayes_ridge``) the measured error and its standard error, beside
    ``bayes_theory`` (Monte Carlo over X) and ``ols_theory`` (closed form); and the noiseless
    min-norm curve (``estimator="ols_noiseless"``) against ``(d − k)/d``. The stack is
    trained over all the context sizes (one size per step, in turn)."""
    d, sig, tau = cfg.noise_d, cfg.sigma, cfg.tau
    base = TaskSampler(d=d, inputs="gaussian", noise_std=sig, teacher_scale=tau)
    gen = generator(cfg.seed + 7)
    sizes = cfg.noise_n_ctx

    def draw(step: int) -> Tasks:
        return base.shifted(n_ctx=sizes[step % len(sizes)]).sample(cfg.batch, gen)

    model = _train(draw, d, cfg, cfg.seed * 1000 + 900, progress, "noisy stack")
    rows: list[dict[str, Any]] = []
    lam = sig**2 / tau**2
    for i, k in enumerate(sizes):
        g = generator(2 * 10**6 + cfg.seed * 100 + i)
        tasks = base.shifted(n_ctx=k).sample(cfg.curve_tasks, g, torch.float64)
        clean = base.shifted(n_ctx=k, noise_std=0.0).sample(cfg.curve_tasks, g, torch.float64)
        bayes, bayes_se = bayes_ridge_curve(d, k, sig, tau, cfg.curve_tasks, cfg.seed + i)
        measured = {
            "trained": task_errors(_quiet_predict(model, tasks), tasks, d),
            "ols": task_errors(_quiet_predict(OLS(), tasks), tasks, d),
            "ols_noiseless": task_errors(_quiet_predict(OLS(), clean), clean, d),
        }
        if lam > 0:
            measured["bayes_ridge"] = task_errors(_quiet_predict(Ridge(lam), tasks), tasks, d)
        theory = {
            "trained": bayes,
            "ols": min_norm_error(d, k, sig, tau),
            "ols_noiseless": min_norm_error(d, k, 0.0, tau),
            "bayes_ridge": bayes,
        }
        for name, (err, se) in measured.items():
            rows.append(
                {"kind": "noise_curve", "n_ctx": k, "d": d, "sigma": sig, "estimator": name}
                | {"error": err, "stderr": se, "theory": theory[name]}
                | {"bayes_theory": bayes, "bayes_theory_stderr": bayes_se}
            )
    return rows


def mixed_rows(cfg: DepthConfig, progress: Progress, bins: int = 4) -> list[dict[str, Any]]:
    """Rows ``kind="mixed_noise"``: per σ bin (``bins`` equal bins of ``[0, σ_max]``) and
    overall, the errors of the stack trained with ``σ ~ U(0, σ_max)`` per task, of ridge with
    each task's own ``λ = σ²/τ²`` (``tuned_ridge``) and of ridge with one ``λ`` tuned on the
    mixture (``const_ridge``, from :data:`LAMBDA_GRID` on separate tasks)."""
    d, tau, n = cfg.noise_d, cfg.tau, cfg.mixed_n_ctx
    base = TaskSampler(d=d, n_ctx=n, inputs="gaussian", teacher_scale=tau)
    gen = generator(cfg.seed + 11)

    def draw(step: int) -> Tasks:
        return mixed_tasks(base, cfg.batch, gen, cfg.sigma_max, torch.float32)[0]

    model = _train(draw, d, cfg, cfg.seed * 1000 + 950, progress, "mixed-noise stack")
    fit, _ = mixed_tasks(
        base, cfg.curve_tasks, generator(3 * 10**6 + cfg.seed), cfg.sigma_max, torch.float64
    )
    const_lam = min(
        LAMBDA_GRID, key=lambda lam: float(query_loss(_quiet_predict(Ridge(lam), fit), fit.y_query))
    )
    tasks, sig = mixed_tasks(
        base, cfg.curve_tasks, generator(4 * 10**6 + cfg.seed), cfg.sigma_max, torch.float64
    )
    preds = {
        "trained": _quiet_predict(model, tasks),
        "const_ridge": _quiet_predict(Ridge(const_lam), tasks),
        "tuned_ridge": torch.cat(
            [
                _quiet_predict(
                    Ridge(max(float(s) ** 2 / tau**2, 1e-12)), tasks.subset(slice(i, i + 1))
                )
                for i, s in enumerate(sig)
            ]
        ),
    }
    edges = [cfg.sigma_max * j / bins for j in range(bins + 1)]
    rows: list[dict[str, Any]] = []
    for j in range(bins + 1):
        mask = (
            torch.ones_like(sig, dtype=torch.bool)
            if j == bins
            else (sig >= edges[j]) & (sig < edges[j + 1])
        )
        sub = tasks.subset(mask)
        for name, p in preds.items():
            err, se = task_errors(p[mask], sub, d)
            rows.append(
                {"kind": "mixed_noise", "estimator": name, "n_ctx": n, "d": d}
                | {"sigma_low": 0.0 if j == bins else edges[j]}
                | {"sigma_high": cfg.sigma_max if j == bins else edges[j + 1]}
                | {"bin": "all" if j == bins else f"{edges[j]:.2f}-{edges[j + 1]:.2f}"}
                | {"error": err, "stderr": se, "tasks": int(mask.sum()), "const_lambda": const_lam}
            )
    return rows
