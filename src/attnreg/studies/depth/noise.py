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
* Trained stacks: on noiseless tasks against min-norm least squares on the same tasks (Garg
  et al. 2022, :func:`noiseless_rows`); by depth and width against the Bayes ridge, with
  their prediction differences to ridge, OLS and one tuned GD step (Akyürek et al. 2023,
  :func:`curve_rows`). Comparisons are paired (:func:`paired`: the same tasks for both).
* Mixed noise (Vladymyrov et al. 2024): ``σ ~ U(0, σ_max)`` per task; the paper's ridge
  baselines ConstRR, AdaRR and TunedRR (:class:`RidgeBaselines`) and its adjusted loss, a
  predictor's loss minus the oracle's (ridge with each task's own ``λ = σ²/τ²``, the
  Bayes-optimal predictor given σ, which no learner beats in expectation).

Whether a trained run converged is measured on its loss (:func:`converged`).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import multiprocessing
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

import torch

from attnreg.core.whitening import ConditioningWarning, RankWarning
from attnreg.data.tasks import Tasks, TaskSampler, query_loss
from attnreg.estimators import GD, OLS, Ridge
from attnreg.models import TrainableLSA
from attnreg.progress import Progress
from attnreg.studies.depth.config import DepthConfig
from attnreg.studies.paired import in_standard_errors, paired_difference
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


def _safe_predict(model: Any, tasks: Tasks) -> torch.Tensor:
    """A trained stack's predictions, ``inf`` where they overflow (a deep linear-attention
    stack is cubic per layer in its tokens: a few heavy-tailed contexts can overflow float64);
    the overflow then shows as an infinite error, never a crash."""
    try:
        return _quiet_predict(model, tasks)
    except ValueError:
        with torch.no_grad():
            wide = copy.deepcopy(model).double()
            out = wide.forward_predict(
                *(t.to(torch.float64) for t in (tasks.x_ctx, tasks.y_ctx, tasks.x_query))
            )
        return torch.where(torch.isfinite(out), out, torch.full_like(out, math.inf))


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
    draw: Any,
    d: int,
    cfg: DepthConfig,
    seed: int,
    progress: Progress,
    name: str,
    layers: int,
    heads: int = 1,
    layernorm: bool | None = None,
) -> tuple[TrainableLSA, dict[str, Any]]:
    """A ``layers``-layer, ``heads``-head linear-attention stack trained ``cfg.noise_steps``
    Adam steps on the tasks ``draw(step)`` (a LayerNorm per layer if ``layernorm``, default
    ``cfg.noise_layernorm``); returns it and :func:`converged` of its losses."""
    norm = cfg.noise_layernorm if layernorm is None else layernorm
    model = TrainableLSA(d, 1, layers, heads, init_scale=cfg.init_scale, seed=seed, layernorm=norm)
    return _fit(model, model.forward_predict, draw, cfg.noise_steps, cfg.lr, seed, progress, name)


def _fit(
    model: TrainableLSA,
    forward: Any,
    draw: Any,
    steps: int,
    lr: float,
    seed: int,
    progress: Progress,
    name: str,
) -> tuple[TrainableLSA, dict[str, Any]]:
    """``model`` trained ``steps`` Adam steps at rate ``lr`` (cosine schedule, gradients clipped
    at norm 10) on the query loss of ``forward`` over the tasks ``draw(step)``; returns it and
    :func:`converged` of its losses."""

    def loss_fn(step: int) -> torch.Tensor:
        t = draw(step)
        return query_loss(forward(t.x_ctx, t.y_ctx, t.x_query), t.y_query)

    config = TrainConfig(
        steps=steps, lr=lr, schedule="cosine", clip=10.0, seed=seed, eval_every=steps
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = train(model, loss_fn, config, progress=progress, description=name)
    return model, converged(result.losses)


def converged(losses: list[float], fraction: float = 0.2) -> dict[str, Any]:
    """Whether a run's training loss has reached a plateau: the median loss over its last
    ``fraction`` of steps against the median over the ``fraction`` before, the drop within two
    standard errors of the difference, and below the median over its first ``fraction`` (a run
    that did not learn, or blew up, has not converged). Medians and the median absolute
    deviation (``1.4826 · MAD / √w`` per window, the normal-consistent scale) keep a few
    exploding batches — a deep linear-attention stack's loss can spike to 1e28 — from passing
    for a plateau by inflating the scatter. Returns ``{"converged", "loss_drop",
    "loss_drop_se", "final_loss"}``."""
    w = max(int(len(losses) * fraction), 2)
    if len(losses) < 2 * w:
        return {"converged": False, "loss_drop": math.nan, "loss_drop_se": math.nan}
    first = torch.tensor(losses[:w], dtype=torch.float64)
    prev = torch.tensor(losses[-2 * w : -w], dtype=torch.float64)
    last = torch.tensor(losses[-w:], dtype=torch.float64)

    def scale(x: torch.Tensor) -> float:
        return 1.4826 * float((x - x.median()).abs().median()) / math.sqrt(w)

    drop = float(prev.median() - last.median())
    se = math.hypot(scale(prev), scale(last))
    learned = bool(torch.isfinite(last).all()) and float(last.median()) < float(first.median())
    return {
        "converged": learned and drop <= 2 * se,
        "loss_drop": drop,
        "loss_drop_se": se,
        "final_loss": float(last.median()),
    }


def paired(a: torch.Tensor, b: torch.Tensor) -> dict[str, float]:
    """Per-task errors ``a`` and ``b`` of two predictors on the same tasks: the mean difference
    ``a − b`` and its standard error, the ratio ``mean a / mean b`` and its standard error
    (delta method on the paired means), and ``z = difference / standard error``."""
    n = len(a)
    diff, se = paired_difference(a, b)
    ma, mb = float(a.mean()), float(b.mean())
    ratio = ma / mb
    lin = (a - ratio * b) / mb  # the ratio's influence function
    return {
        "diff": diff,
        "diff_se": se,
        "ratio": ratio,
        "ratio_se": float(lin.std() / math.sqrt(n)),
        "z": in_standard_errors(diff, se),
    }


def per_task(prediction: torch.Tensor, tasks: Tasks, d: int) -> torch.Tensor:
    """``‖ŷ_q − y_q‖² / d`` per task (``(B,)``, float64)."""
    return (prediction.to(torch.float64) - tasks.y_query).pow(2).flatten(1).sum(1) / d


def ridge_batch(tasks: Tasks, lam: torch.Tensor) -> torch.Tensor:
    """Ridge ``x_qᵀ (XᵀX + λ_b I)⁻¹ Xᵀy`` with one ``λ_b`` per task (``lam`` ``(B,)``, ``> 0``),
    solved in a batch (``N ≥ d`` or not: the ``d × d`` system is regular for ``λ > 0``)."""
    x, y = tasks.x_ctx.to(torch.float64), tasks.y_ctx.to(torch.float64)
    d = x.shape[-1]
    eye = torch.eye(d, dtype=torch.float64)
    coef = torch.linalg.solve(x.mT @ x + lam.to(torch.float64).reshape(-1, 1, 1) * eye, x.mT @ y)
    return tasks.x_query.to(torch.float64) @ coef


def noise_estimate(tasks: Tasks) -> torch.Tensor:
    """σ̂² per task from its context alone: the least-squares residual ``‖y − Xŵ‖² / (N − d)``
    (unbiased for Gaussian noise; needs ``N > d``)."""
    x, y = tasks.x_ctx.to(torch.float64), tasks.y_ctx.to(torch.float64)
    n, d = x.shape[-2], x.shape[-1]
    if n <= d:
        raise ValueError(f"noise_estimate: needs more context points than features, {n} <= {d}")
    w = torch.linalg.lstsq(x, y).solution
    return (y - x @ w).pow(2).flatten(1).sum(1) / (n - d)


def _grid_errors(tasks: Tasks, d: int) -> torch.Tensor:
    """Per-task errors of ridge at every λ of :data:`LAMBDA_GRID` (``(G, B)``)."""
    ones = torch.ones(len(tasks), dtype=torch.float64)
    return torch.stack([per_task(ridge_batch(tasks, lam * ones), tasks, d) for lam in LAMBDA_GRID])


class RidgeBaselines:
    """Vladymyrov et al. (2024)'s ridge baselines for noise levels that vary per task, fitted on
    ``fit`` tasks drawn like the test tasks (``tau``: the teachers' scale, ``bins``: σ̂² bins):

    * **ConstRR** — ridge with one λ for every task, the λ of :data:`LAMBDA_GRID` with the
      lowest error over all the fit tasks (tuned on the whole noise distribution);
    * **AdaRR** — ridge with ``λ = σ̂²/τ²`` per task, ``σ̂²`` the noise variance estimated from
      the task's own context (:func:`noise_estimate`): the Bayes λ with σ² replaced by σ̂²;
    * **TunedRR** — AdaRR with λ tuned per σ̂² bin: the fit tasks split into ``bins`` equal-count
      bins of ``σ̂²``, in each the λ of :data:`LAMBDA_GRID` with the lowest error; a test task
      takes its σ̂² bin's λ.

    The oracle (:meth:`oracle`) is ridge with each task's true ``λ = σ²/τ²``, the Bayes-optimal
    predictor given σ; the paper's adjusted loss is a predictor's loss minus the oracle's.
    """

    def __init__(self, fit: Tasks, d: int, tau: float, bins: int = 10) -> None:
        self.d, self.tau = d, tau
        errors = _grid_errors(fit, d)
        self.const_lam = LAMBDA_GRID[int(errors.mean(1).argmin())]
        est = noise_estimate(fit)
        q = torch.linspace(0, 1, bins + 1, dtype=torch.float64)[1:-1]
        self.edges = torch.quantile(est, q)
        which = torch.bucketize(est, self.edges)
        self.bin_lams = torch.tensor(
            [
                LAMBDA_GRID[int(errors[:, which == j].mean(1).argmin())]
                if bool((which == j).any())
                else self.const_lam
                for j in range(bins)
            ],
            dtype=torch.float64,
        )

    def const(self, tasks: Tasks) -> torch.Tensor:
        return ridge_batch(tasks, torch.full((len(tasks),), self.const_lam, dtype=torch.float64))

    def ada(self, tasks: Tasks) -> torch.Tensor:
        return ridge_batch(tasks, (noise_estimate(tasks) / self.tau**2).clamp_min(1e-12))

    def tuned(self, tasks: Tasks) -> torch.Tensor:
        return ridge_batch(tasks, self.bin_lams[torch.bucketize(noise_estimate(tasks), self.edges)])

    def oracle(self, tasks: Tasks, sigma: torch.Tensor) -> torch.Tensor:
        lam = (sigma.to(torch.float64) ** 2 / self.tau**2).clamp_min(1e-12)
        return ridge_batch(tasks, lam)


GD_ETAS = tuple(0.1 * i for i in range(1, 21))
"""The step sizes one GD step is tuned over (per context size, on separate tasks)."""


def _tuned_gd(tasks: Tasks, d: int) -> GD:
    """One GD step from 0 with the step size of :data:`GD_ETAS` that has the lowest error on
    ``tasks`` (Akyürek et al.'s GD reference, tuned like their ridge)."""
    errs = [float(per_task(_quiet_predict(GD(eta, 1), tasks), tasks, d).mean()) for eta in GD_ETAS]
    return GD(GD_ETAS[errs.index(min(errs))], 1)


def curve_rows(cfg: DepthConfig, progress: Progress) -> list[dict[str, Any]]:
    """Rows ``kind="noise_curve"``: per context size ``k`` and estimator (the trained
    ``noise_layers``-layer stack, ``ols`` min-norm, ``bayes_ridge``) the measured error and its
    standard error, beside ``bayes_theory`` (Monte Carlo over X) and ``ols_theory`` (closed
    form); the noiseless min-norm curve (``estimator="ols_noiseless"``) against its closed
    form. Rows ``kind="bayes"`` (Akyürek et al.): per stack of ``bayes_layers`` layers and
    ``bayes_heads`` heads, its error over every ``k`` against the Bayes ridge's on the same
    tasks (:func:`paired`: ratio, difference, standard errors), and the mean squared
    prediction difference to ridge, OLS and one tuned GD step. Every stack is trained over all
    the context sizes (one size per step, in turn)."""
    d, sig, tau = cfg.noise_d, cfg.sigma, cfg.tau
    base = TaskSampler(d=d, inputs="gaussian", noise_std=sig, teacher_scale=tau)
    sizes = cfg.noise_n_ctx
    # the curve's stack first: it keeps the seeds it had before the depth × width grid
    grid = sorted({(n, h) for n in cfg.bayes_layers for h in cfg.bayes_heads})
    shapes = [(cfg.noise_layers, 1)] + [s for s in grid if s != (cfg.noise_layers, 1)]
    models: dict[tuple[int, int], tuple[TrainableLSA, dict[str, Any]]] = {}
    for i, (layers, heads) in enumerate(shapes):
        gen = generator(cfg.seed + 7 + 100 * i)

        def draw(step: int, gen: torch.Generator = gen) -> Tasks:
            return base.shifted(n_ctx=sizes[step % len(sizes)]).sample(cfg.batch, gen)

        seed = cfg.seed * 1000 + 900 + 10 * i
        name = f"noisy stack, {layers} layers × {heads} heads"
        models[(layers, heads)] = _train(draw, d, cfg, seed, progress, name, layers, heads)
    rows: list[dict[str, Any]] = []
    lam = sig**2 / tau**2
    pooled: dict[str, list[torch.Tensor]] = {}
    for i, k in enumerate(sizes):
        g = generator(2 * 10**6 + cfg.seed * 100 + i)
        tasks = base.shifted(n_ctx=k).sample(cfg.curve_tasks, g, torch.float64)
        clean = base.shifted(n_ctx=k, noise_std=0.0).sample(cfg.curve_tasks, g, torch.float64)
        fit = base.shifted(n_ctx=k).sample(cfg.curve_tasks, g, torch.float64)
        bayes, bayes_se = bayes_ridge_curve(d, k, sig, tau, cfg.curve_tasks, cfg.seed + i)
        preds = {shape: _safe_predict(m, tasks) for shape, (m, _) in models.items()}
        refs = {
            "ols": _quiet_predict(OLS(), tasks),
            "gd": _quiet_predict(_tuned_gd(fit, d), tasks),
        }
        if lam > 0:
            refs["bayes_ridge"] = _quiet_predict(Ridge(lam), tasks)
        measured = {
            "trained": task_errors(preds[(cfg.noise_layers, 1)], tasks, d),
            "ols": task_errors(refs["ols"], tasks, d),
            "ols_noiseless": task_errors(_quiet_predict(OLS(), clean), clean, d),
        }
        if lam > 0:
            measured["bayes_ridge"] = task_errors(refs["bayes_ridge"], tasks, d)
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
        for name, p in refs.items():
            pooled.setdefault(name, []).append(per_task(p, tasks, d))
        for (layers, heads), p in preds.items():
            key = f"{layers}x{heads}"
            pooled.setdefault(key, []).append(per_task(p, tasks, d))
            for name, ref in refs.items():
                spd = (p.to(torch.float64) - ref.to(torch.float64)).pow(2).flatten(1).sum(1) / d
                pooled.setdefault(f"{key}-{name}", []).append(spd)
    if lam > 0:
        bayes_err = torch.cat(pooled["bayes_ridge"])
        for (layers, heads), (_, conv) in models.items():
            key = f"{layers}x{heads}"
            rows.append(
                {"kind": "bayes", "layers": layers, "heads": heads, "d": d, "sigma": sig}
                | {"steps": cfg.noise_steps, "tasks": len(bayes_err), "n_ctx": list(sizes)}
                | {"error": float(torch.cat(pooled[key]).mean())}
                | {"bayes_error": float(bayes_err.mean())}
                | {"ols_error": float(torch.cat(pooled["ols"]).mean())}
                | paired(torch.cat(pooled[key]), bayes_err)
                | {
                    f"spd_{name}": float(torch.cat(pooled[f"{key}-{name}"]).mean())
                    for name in ("bayes_ridge", "ols", "gd")
                }
                | conv
            )
    return rows


def noiseless_rows(cfg: DepthConfig, progress: Progress) -> list[dict[str, Any]]:
    """Rows ``kind="noiseless_curve"`` (Garg et al. 2022): a ``noiseless_layers``-layer stack
    trained on noiseless tasks in ``noiseless_d`` dimensions over the context sizes
    ``noiseless_n_ctx``; per size ``k`` its error and min-norm least squares' on the same
    tasks (:func:`paired`: difference and its standard error), the averaging estimator's
    (``ŷ = x_qᵀ Σ y_i x_i / k``, Garg et al.'s weakest baseline) and the closed form
    ``τ²(d − k)/d`` (0 for ``k ≥ d``); every row carries the run's :func:`converged`."""
    d, tau, sizes = cfg.noiseless_d, cfg.tau, cfg.noiseless_n_ctx
    base = TaskSampler(d=d, inputs="gaussian", noise_std=0.0, teacher_scale=tau)
    gen = generator(cfg.seed + 13)

    def draw(step: int) -> Tasks:
        return base.shifted(n_ctx=sizes[step % len(sizes)]).sample(cfg.batch, gen)

    model, conv = _train(
        draw, d, cfg, cfg.seed * 1000 + 970, progress, "noiseless stack", cfg.noiseless_layers
    )
    rows = []
    for i, k in enumerate(sizes):
        g = generator(5 * 10**6 + cfg.seed * 100 + i)
        tasks = base.shifted(n_ctx=k).sample(cfg.curve_tasks, g, torch.float64)
        trained = per_task(_safe_predict(model, tasks), tasks, d)
        ols = per_task(_quiet_predict(OLS(), tasks), tasks, d)
        avg = per_task(_quiet_predict(GD(1.0, 1), tasks), tasks, d)
        diff = trained - ols
        se = paired_difference(trained, ols)[1]
        rows.append(
            {"kind": "noiseless_curve", "n_ctx": k, "d": d, "layers": cfg.noiseless_layers}
            | {"steps": cfg.noise_steps, "theory": min_norm_error(d, k, 0.0, tau)}
            | {"error": float(trained.mean()), "stderr": float(trained.std() / len(diff) ** 0.5)}
            | {"ols_error": float(ols.mean()), "ols_stderr": float(ols.std() / len(diff) ** 0.5)}
            | {"averaging_error": float(avg.mean())}
            | {"diff": float(diff.mean()), "diff_se": se}
            | {"z": in_standard_errors(float(diff.mean()), se)}
            | conv
        )
    return rows


def mixed_rows(cfg: DepthConfig, progress: Progress, bins: int = 4) -> list[dict[str, Any]]:
    """Vladymyrov et al. (2024)'s mixed noise: ``σ ~ U(0, σ_max)`` per task, ``N = mixed_n_ctx``,
    for each ``σ_max`` of ``sigma_maxes``, stacks of every depth in ``mixed_layers`` trained
    with ``mixed_seeds`` seeds, against :class:`RidgeBaselines` (ConstRR, AdaRR, TunedRR) and
    the oracle (ridge given each task's σ) on the same test tasks.

    Rows ``kind="mixed_noise"``: per (σ_max, depth, σ bin — ``bins`` equal bins of
    ``[0, σ_max]`` and ``"all"``, estimator) the error (the trained stack's averaged over
    seeds), its standard error over tasks and the adjusted loss (error − the oracle's). Rows
    ``kind="mixed_match"``: per (σ_max, depth) the adjusted losses of the stack and of each
    baseline, the stack's minus TunedRR's (``diff``) with its paired standard error
    (``diff_se``: over tasks, plus the spread over seeds when there are 3 or more) and
    ``z = diff / diff_se``, whether every seed's run converged and whether the stack beats
    ConstRR (the weakest ridge baseline)."""
    d, tau, n = cfg.noise_d, cfg.tau, cfg.mixed_n_ctx
    base = TaskSampler(d=d, n_ctx=n, inputs="gaussian", teacher_scale=tau)
    stacks = mixed_stacks(cfg, progress)
    rows: list[dict[str, Any]] = []
    for a, smax in enumerate(cfg.sigma_maxes):
        fit, _ = mixed_tasks(
            base, cfg.curve_tasks, generator(3 * 10**6 + cfg.seed + 10 * a), smax, torch.float64
        )
        ridge = RidgeBaselines(fit, d, tau)
        tasks, sig = mixed_tasks(
            base, cfg.curve_tasks, generator(4 * 10**6 + cfg.seed + 10 * a), smax, torch.float64
        )
        oracle = per_task(ridge.oracle(tasks, sig), tasks, d)
        refs = {
            "const_rr": per_task(ridge.const(tasks), tasks, d),
            "ada_rr": per_task(ridge.ada(tasks), tasks, d),
            "tuned_rr": per_task(ridge.tuned(tasks), tasks, d),
            "oracle": oracle,
        }
        for b, layers in enumerate(cfg.mixed_layers):
            runs, convs = [], []
            for s in range(cfg.mixed_seeds):
                model, conv = stacks[(a, b, s)]
                runs.append(per_task(_safe_predict(model, tasks), tasks, d))
                convs.append(conv)
            trained = torch.stack(runs).mean(0)
            errs = {"trained": trained} | refs
            edges = [smax * j / bins for j in range(bins + 1)]
            for j in range(bins + 1):
                if j == bins:
                    mask = torch.ones_like(sig, dtype=torch.bool)
                else:
                    mask = (sig >= edges[j]) & (sig < edges[j + 1])
                for name, e in errs.items():
                    m = e[mask]
                    rows.append(
                        {"kind": "mixed_noise", "estimator": name, "n_ctx": n, "d": d}
                        | {"sigma_max": smax, "layers": layers, "seeds": cfg.mixed_seeds}
                        | {"sigma_low": 0.0 if j == bins else edges[j]}
                        | {"sigma_high": smax if j == bins else edges[j + 1]}
                        | {"bin": "all" if j == bins else f"{edges[j]:.2f}-{edges[j + 1]:.2f}"}
                        | {"error": float(m.mean()), "stderr": float(m.std() / len(m) ** 0.5)}
                        | {"adjusted": float((m - oracle[mask]).mean()), "tasks": int(mask.sum())}
                        | {"const_lambda": ridge.const_lam}
                    )
            diff = trained - refs["tuned_rr"]
            se2 = float(diff.var() / len(diff))
            if cfg.mixed_seeds >= 3:
                per_seed = torch.stack([(r - refs["tuned_rr"]).mean() for r in runs])
                se2 += float(per_seed.var() / cfg.mixed_seeds)
            se = math.sqrt(se2)
            rows.append(
                {"kind": "mixed_match", "sigma_max": smax, "layers": layers, "d": d, "n_ctx": n}
                | {"seeds": cfg.mixed_seeds, "steps": cfg.mixed_steps}
                | {"variant": cfg.mixed_variant, "dtype": cfg.mixed_dtype}
                | {"grown": cfg.mixed_grow}
                | {f"adjusted_{k}": float((e - oracle).mean()) for k, e in errs.items()}
                | {"diff": float(diff.mean()), "diff_se": se}
                | {"z": in_standard_errors(float(diff.mean()), se)}
                | {"converged": all(c["converged"] for c in convs)}
                | {"beats_const": float(trained.mean()) < float(refs["const_rr"].mean())}
            )
    return rows


Stack = tuple[TrainableLSA, dict[str, Any]]
"""A trained stack and :func:`converged` of its losses."""


def mixed_stacks(cfg: DepthConfig, progress: Progress) -> dict[tuple[int, int, int], Stack]:
    """Every mixed-noise stack, by (σ_max index, depth index, seed index): trained in this
    process, or with ``cfg.mixed_workers > 1`` in that many spawned processes (each stack's
    data and initialisation are seeded by its indices alone, so the numbers are the same). A
    job is one stack, or with ``cfg.mixed_grow`` one (σ_max, seed)'s stacks of every depth in
    turn (:func:`mixed_chain`)."""
    depths = list(range(len(cfg.mixed_layers)))
    chains = [[b] for b in depths] if not cfg.mixed_grow else [depths]
    jobs = [
        (a, chain, s)
        for a in range(len(cfg.sigma_maxes))
        for chain in chains
        for s in range(cfg.mixed_seeds)
    ]
    out: dict[tuple[int, int, int], Stack] = {}
    if cfg.mixed_workers == 1:
        for a, chain, s in jobs:
            for b, stack in zip(chain, mixed_chain(cfg, a, chain, s, progress), strict=True):
                out[a, b, s] = stack
        return out
    fields = dataclasses.asdict(cfg)
    context = multiprocessing.get_context("spawn")
    with (
        ProcessPoolExecutor(cfg.mixed_workers, mp_context=context) as pool,
        progress.stage("mixed-noise stacks", total=len(jobs)) as stage,
    ):
        futures = {pool.submit(_chain_in_worker, fields, *job): job for job in jobs}
        for future in as_completed(futures):
            a, chain, s = futures[future]
            for b, (state, conv) in zip(chain, future.result(), strict=True):
                model = _mixed_model(cfg, a, b, s)
                model.load_state_dict(state)
                out[a, b, s] = (model, conv)
            stage.advance()
    return out


def mixed_chain(
    cfg: DepthConfig, a: int, chain: list[int], s: int, progress: Progress
) -> list[Stack]:
    """The stacks of depth indices ``chain`` for σ_max index ``a`` and seed ``s``, trained in
    turn by :func:`mixed_stack`; with ``cfg.mixed_grow`` each after the first starts from the
    one before (:meth:`TrainableLSA.grow_from`)."""
    stacks: list[Stack] = []
    for b in chain:
        start = stacks[-1][0] if cfg.mixed_grow and stacks else None
        stacks.append(mixed_stack(cfg, a, b, s, progress, start))
    return stacks


def _mixed_model(cfg: DepthConfig, a: int, b: int, s: int) -> TrainableLSA:
    """The untrained stack of job ``(a, b, s)`` (its architecture and seeded initialisation)."""
    variant = cfg.mixed_variant
    return TrainableLSA(
        cfg.noise_d,
        1,
        cfg.mixed_layers[b],
        2 if variant == "diag" else 1,
        variant=variant,
        init_scale=cfg.mixed_init_scale,
        seed=_mixed_seed(cfg, a, b, s),
        dtype=getattr(torch, cfg.mixed_dtype),
    )


def _mixed_seed(cfg: DepthConfig, a: int, b: int, s: int) -> int:
    return cfg.seed * 1000 + 950 + 7 * s + 3 * b + 31 * a


def mixed_stack(
    cfg: DepthConfig,
    a: int,
    b: int,
    s: int,
    progress: Progress,
    start: TrainableLSA | None = None,
) -> Stack:
    """Stack ``(a, b, s)``: ``mixed_layers[b]`` layers trained on mixed noise up to
    ``sigma_maxes[a]`` (Vladymyrov et al.'s linear transformers have no LayerNorm), seed ``s``:
    from its seeded initialisation at ``cfg.mixed_lr``, or grown from the shallower stack
    ``start`` (:meth:`TrainableLSA.grow_from`) at ``cfg.mixed_grow_lr``."""
    smax, layers = cfg.sigma_maxes[a], cfg.mixed_layers[b]
    base = TaskSampler(
        d=cfg.noise_d, n_ctx=cfg.mixed_n_ctx, inputs="gaussian", teacher_scale=cfg.tau
    )
    gen = generator(cfg.seed + 11 + 1000 * s + 100 * b + 10 * a)
    dtype = getattr(torch, cfg.mixed_dtype)

    def draw(step: int) -> Tasks:
        return mixed_tasks(base, cfg.mixed_batch, gen, smax, dtype)[0]

    name = f"mixed-noise stack, σ_max = {smax:g}, {layers} layers, seed {s}"
    model = _mixed_model(cfg, a, b, s)
    lr = cfg.mixed_lr
    if start is not None:
        model.grow_from(start)
        lr = cfg.mixed_grow_lr
    # the diag stacks train through their moments (the same numbers, no score matrices)
    forward = model.moments_predict if cfg.mixed_variant == "diag" else model.forward_predict
    seed = _mixed_seed(cfg, a, b, s)
    return _fit(model, forward, draw, cfg.mixed_steps, lr, seed, progress, name)


def _chain_in_worker(
    fields: dict[str, Any], a: int, chain: list[int], s: int
) -> list[tuple[dict[str, torch.Tensor], dict[str, Any]]]:
    """:func:`mixed_chain` in a worker process: each stack's weights and convergence."""
    cfg = DepthConfig(**fields)
    torch.set_num_threads(cfg.threads)
    stacks = mixed_chain(cfg, a, chain, s, Progress.quiet())
    return [(model.state_dict(), conv) for model, conv in stacks]
