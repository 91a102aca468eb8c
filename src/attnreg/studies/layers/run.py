"""``layers`` — what each causal sequence layer learns in context.

Wang, Shi & Fox (2025), "Test-time regression": every causal sequence layer fits a regression
to the past pairs at every position. Here one layer of each type (:mod:`attnreg.sequence`) is
trained on in-context regression tasks (icl's, and a noisy, ill-conditioned variant) with the
causal token layout of :mod:`attnreg.studies.layers.model`, and read out at every position;
:func:`attnreg.explain` names the estimator each trained layer computes after the whole context
(fitted parameter, held-out R²), and the layer's loss at every context size is set beside that
estimator's (with the parameter fitted at the full context), the Bayes-optimal posterior mean
(ridge λ = σ², OLS without noise), GD with η line-searched per position and LMS at its best β
(:mod:`attnreg.studies.layers.curves`). The memory side (:mod:`attnreg.studies.layers.memory`):
recall of stored pairs against N/d for correlated keys — linear attention (dot-product memory)
against DeltaNet (one pass, and written until its residual is below ``memory_tol``) and Mesa
(pseudo-inverse memory): Tang's claim that regression memory holds exactly ``N_max = d``
pairs, and each trial's mean relative recall error paired across the memories.

Rows (``kind``): ``"layer"`` (one per task kind × trained layer: learned scalar, losses, best
family, its parameters and R², ``vs_target`` — :func:`vs_target`), ``"explain"`` (every
family's fit), ``"position"`` (loss at every context size, layers and references),
``"memory"`` (one per memory × ρ × N).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import asdict
from typing import Any

import numpy as np
import torch

from attnreg.core.threads import torch_threads
from attnreg.explaining import Explanation, FamilyFit, explain
from attnreg.progress import Progress
from attnreg.studies.common import Section, StudyResult
from attnreg.studies.layers.claims import memory_claims, trained_claims
from attnreg.studies.layers.config import LayersConfig, layer_choices
from attnreg.studies.layers.curves import (
    make_sampler,
    position_losses,
    prefix_predictions,
    reference_curves,
    sequence,
)
from attnreg.studies.layers.memory import capacity, memories, memory_rows
from attnreg.studies.layers.model import InContextLayer, as_predictor
from attnreg.studies.layers.summary import lead, memory_summary, trained_summary
from attnreg.studies.layers.train import train_layer
from attnreg.training import generator


def run(cfg: LayersConfig | None = None, progress: Progress | None = None) -> StudyResult:
    """Train every layer of ``cfg.layers`` on every task kind of ``cfg.tasks``, explain each,
    measure the loss at every context position and the memories' recall; return the rows,
    figures, summary, checks (thresholds ``cfg.max_mesa_error``, ``cfg.min_r2``) and claims
    ledger. Writes nothing; ``progress`` shows a stage per trained layer."""
    cfg = cfg or LayersConfig()
    with torch_threads(cfg.threads):
        return _run(cfg, progress or Progress.quiet())


def _position_rows(kind: str, model: str, role: str, losses: np.ndarray) -> list[dict[str, Any]]:
    return [
        {"kind": "position", "tasks": kind, "model": model, "role": role, "n": n + 1, "loss": v}
        for n, v in enumerate(losses.tolist())
    ]


def _params(params: dict[str, Any]) -> str:
    parts = [
        f"{k} = {v:.3g}" if isinstance(v, float) else f"{k} {len(v)}×{len(v[0])}"
        for k, v in params.items()
        if isinstance(v, float) or (isinstance(v, list) and v and isinstance(v[0], list))
    ]
    return ", ".join(parts) or "no parameter"


def _explain(model: InContextLayer, held: Any) -> Explanation:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return explain(as_predictor(model), held)


TIED = 1e-12
"""Relative squared error below which an estimator's predictions are the targets (float64
round-off)."""


def vs_target(model: InContextLayer, fit: FamilyFit | None, held: Any) -> float:
    """``MSE(layer, estimator) / MSE(layer, target)`` on the held-out half of ``held`` (the
    half :func:`~attnreg.explaining.explain` scores on): below 1 when the fitted estimator is
    closer to the layer's outputs than the targets are; NaN without a fitted predictor or when
    the estimator reproduces the targets (relative squared error ≤ :data:`TIED`, e.g. OLS on
    noiseless tasks), where the target is no null to tell it from."""
    if fit is None or fit.predictor is None:
        return math.nan
    half = held.x_ctx.shape[0] // 2
    xc, yc, xq = held.x_ctx[half:], held.y_ctx[half:], held.x_query[half:]
    with torch.no_grad():
        layer = as_predictor(model)(xc, yc, xq).to(torch.float64)
        est = torch.as_tensor(fit.predictor.predict(xc, yc, xq)).to(torch.float64)
    target = held.y_query[half:].to(torch.float64)
    if float((est - target).pow(2).mean()) <= TIED * float(target.pow(2).mean()):
        return math.nan  # the estimator is the target (noiseless OLS): no null to beat
    return float((layer - est).pow(2).mean() / (layer - target).pow(2).mean())


def _run(cfg: LayersConfig, progress: Progress) -> StudyResult:
    t_start, cpu_start = time.perf_counter(), time.process_time()
    result = StudyResult("layers", asdict(cfg), [], summary={"lead": ""})
    result.add(trained_section(cfg, progress))
    result.add(memory_section(cfg))
    layer_rows = [r for r in result.rows if r["kind"] == "layer"]
    named = sum(r["best_family"] is not None for r in layer_rows)
    result.summary["lead"] = lead(result.claims, named, len(layer_rows), cfg)
    result.summary["time"] = (
        f"{time.perf_counter() - t_start:.1f} s wall, {time.process_time() - cpu_start:.1f} s "
        f"CPU ({cfg.threads} thread(s))"
    )
    return result


def trained_section(cfg: LayersConfig, progress: Progress) -> Section:
    """Every layer of ``cfg.layers`` trained on every task kind of ``cfg.tasks``, explained and
    read out at every context position beside the references: rows ``"layer"``,
    ``"explain"`` and ``"position"``, the trained-layer table and checks, the positions figure,
    the ``layers_explained`` table and the claim on the trained layers."""
    from attnreg.studies.layers.figures import positions_figure  # matplotlib: only when run

    rows: list[dict[str, Any]] = []
    descriptions = layer_choices()
    for ti, kind in enumerate(cfg.tasks):
        sampler = make_sampler(cfg, kind)
        test = sequence(
            sampler.sample(cfg.eval_tasks, generator(10**6 + 10 * cfg.seed + ti), torch.float64)
        )
        fit = sequence(
            sampler.sample(cfg.fit_tasks, generator(2 * 10**6 + 10 * cfg.seed + ti), torch.float64)
        )
        held = sampler.sample(
            cfg.explain_tasks, generator(3 * 10**6 + 10 * cfg.seed + ti), torch.float64
        )
        refs = reference_curves(cfg, kind, fit, test)
        optimal_name = next(iter(refs))
        for name, (losses, _) in refs.items():
            rows += _position_rows(kind, name, "reference", losses)
        for li, layer in enumerate(cfg.layers):
            seed = cfg.seed * 1000 + 100 * ti + li
            model = InContextLayer(layer, cfg.d, cfg.init_noise, seed)
            res = train_layer(model, sampler, cfg, seed, progress, f"{kind} {layer}")
            with torch.no_grad():
                losses = position_losses(model.positions(*test), test[1])
            rows += _position_rows(kind, layer, "layer", losses)
            ex = _explain(model, held)
            rows += [{"kind": "explain", "tasks": kind, "layer": layer, **r} for r in ex.rows()]
            best = ex.fit(ex.best) if ex.best is not None else None
            top = best or max(
                (f for f in ex.fits if not math.isnan(f.r2)), key=lambda f: f.r2, default=None
            )
            if best is not None and best.predictor is not None:
                family_losses = position_losses(prefix_predictions(best.predictor, *test), test[1])
                rows += _position_rows(kind, f"{layer}: {best.family}", "family", family_losses)
            rows.append(
                {
                    "kind": "layer",
                    "tasks": kind,
                    "layer": layer,
                    "description": descriptions[layer],
                    "learned": model.scalar(),
                    "learned_momentum": model.momentum(),
                    "loss_last": float(losses[-1]),
                    "loss_mean": float(losses.mean()),
                    "optimal": optimal_name,
                    "optimal_loss_last": float(refs[optimal_name][0][-1]),
                    "best_family": ex.best,
                    "best_params": _params(best.params) if best else None,
                    "best_r2": best.r2 if best else max(f.r2 for f in ex.fits),
                    "vs_target": vs_target(model, top, held),
                    "steps_run": res.steps_run,
                    "train_seconds": res.seconds,
                    "train_cpu_seconds": res.cpu_seconds,
                    "seed": seed,
                }
            )
    layer_rows = [r for r in rows if r["kind"] == "layer"]
    summary, checks = trained_summary(cfg, layer_rows)
    return Section(
        rows,
        summary,
        checks,
        [positions_figure(cfg, rows)],
        {"layers_explained": _explained(layer_rows)},
        trained_claims(rows),
    )


def memory_section(cfg: LayersConfig) -> Section:
    """Recall of stored pairs against N/d for every memory (rows ``"memory"``): the memory
    table and Mesa's check, the memory figure, the ``layers_capacity`` table and the memory
    claims."""
    from attnreg.studies.layers.figures import memory_figure  # matplotlib: only when run

    rows = memory_rows(cfg)
    summary, checks = memory_summary(cfg, rows)
    return Section(
        rows,
        summary,
        checks,
        [memory_figure(cfg, rows)],
        {"layers_capacity": _capacities(cfg, rows)},
        memory_claims(rows, cfg),
    )


def _explained(layer_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What each trained layer computes, one row per trained layer."""
    return [
        {
            "tasks": r["tasks"],
            "layer": r["layer"],
            "family": r["best_family"],
            "params": r["best_params"],
            "r2": r["best_r2"],
            "learned": r["learned"],
            "loss_last": r["loss_last"],
            "optimal": r["optimal"],
            "optimal_loss_last": r["optimal_loss_last"],
        }
        for r in layer_rows
    ]


def _capacities(cfg: LayersConfig, mem: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each memory's capacity per key correlation, and its mean error at N = d."""
    return [
        {
            "memory": m,
            "rho": rho,
            "d": cfg.memory_d,
            "n_max": capacity(mem, m, rho, cfg.recall_eps),
            "mean_error_at_d": next(
                (
                    r["mean_error"]
                    for r in mem
                    if r["memory"] == m and r["rho"] == rho and r["n"] == cfg.memory_d
                ),
                None,
            ),
        }
        for m in memories(cfg)
        for rho in cfg.memory_rhos
    ]
