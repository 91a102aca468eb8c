"""The one training loop of attnreg: torch.optim, clipping, seeds, early stop, plateaus,
resumable checkpoints.

Contract
--------
``train(model_or_params, loss_fn, config, eval_fn=None, progress=None, description="train",
optimizer=None, generators=(), resume=False) -> TrainResult``

* ``model_or_params``: an ``nn.Module`` or an iterable of tensors with ``requires_grad``. The
  loop never looks inside: any model, any parametrisation.
* ``loss_fn(step) -> Tensor``: the scalar training loss at optimiser step ``step`` (0-based).
  Draw a fresh batch of tasks inside it (online training, von Oswald et al. 2023), or return the
  full-batch loss on fixed data (the ``compare`` study). Draw the data from a
  ``torch.Generator`` seeded from ``config.seed`` (see :func:`generator`) and pass it in
  ``generators`` so that the run is reproducible and resumable.
* ``eval_fn() -> float``: an evaluation metric, lower is better (held-out loss, validation
  MSE). Called every ``config.eval_every`` steps and after the last step, under
  ``torch.no_grad()``. Early stopping (``patience``), ``stop_below`` and ``restore_best`` act on
  it; without ``eval_fn`` they act on the training loss.
* Optimiser: any ``torch.optim.Optimizer`` built over exactly the trainable parameters
  (``optimizer=``); by default ``torch.optim.Adam(lr, betas, weight_decay)`` from the config
  (the fused kernel when every parameter is a floating CPU/CUDA tensor: the same update as the
  other Adam implementations, the fastest on CPU). The global gradient norm is clipped to
  ``clip`` by ``torch.nn.utils.clip_grad_norm_`` (``None``: no clipping).
  ``schedule="cosine"`` multiplies each parameter group's rate by
  ``lr_final + (1 − lr_final)·(1 + cos(π·step/steps))/2`` (Loshchilov & Hutter 2017), a
  ``torch.optim.lr_scheduler.LambdaLR``. ``torch.manual_seed(config.seed)`` is set before the
  first step, so the same config + seed + data gives the same numbers.
* Early stop: after ``patience`` evaluations without an improvement of more than
  ``min_delta`` (relative), or as soon as the metric is ``<= stop_below``.
* Plateaus (:func:`attnreg.plateaus.find_plateaus`): a stretch of windows of
  ``plateau_window`` steps over which the mean training loss fell by less than
  ``plateau_rtol`` (relative) is a plateau if the loss later drops by ``plateau_drop``
  (escaped), or if the run ends on it above ``(1 + plateau_rtol) × reference_loss`` (without a
  reference: near the initial loss). A run that ends on a plateau is ``stuck``; the loop warns
  (:class:`attnreg.plateaus.PlateauWarning`): never silent.
* Checkpoints (``checkpoint_path``; the file: :func:`attnreg.checkpoints.save_train_state`):
  written every ``checkpoint_every`` steps (after that step's evaluation) and when the run
  ends. One holds the model (``state_dict()`` of a module, else ``param0``, ``param1``, …), the
  optimizer's and the scheduler's ``state_dict``, the step, the :class:`TrainResult` so far,
  the best parameters (``restore_best``), the global torch RNG state and the state of every
  generator in ``generators``. ``resume=True`` continues from the checkpoint if the file exists
  (from scratch otherwise): a killed run resumed this way ends with the same parameters, losses
  and evaluations as an uninterrupted one, provided ``loss_fn`` and ``eval_fn`` depend only on
  the step, the parameters, the torch RNG and ``generators`` (state they keep elsewhere, e.g. a
  list they append to, is not in the checkpoint).
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from attnreg.checkpoints import load_train_state, save_train_state
from attnreg.plateaus import PlateauWarning, find_plateaus
from attnreg.progress import Progress, Stage, terminal_progress
from attnreg.training_config import SCHEDULES, TrainConfig, TrainResult, generator
from attnreg.training_state import RunState, config_record, model_state, resumed, train_state

__all__ = ["SCHEDULES", "TrainConfig", "TrainResult", "default_optimizer", "generator", "train"]


def _parameters(model_or_params: nn.Module | Iterable[torch.Tensor]) -> list[torch.Tensor]:
    params = (
        list(model_or_params.parameters())
        if isinstance(model_or_params, nn.Module)
        else list(model_or_params)
    )
    params = [p for p in params if p.requires_grad]
    if not params:
        raise ValueError("model_or_params: no tensor with requires_grad=True to train")
    return params


def default_optimizer(params: list[torch.Tensor], config: TrainConfig) -> torch.optim.Adam:
    """``torch.optim.Adam(params, lr, betas, weight_decay)`` from ``config``: the optimiser of
    :func:`train` when none is given. Uses the fused kernel when every parameter is a floating
    CPU or CUDA tensor (the Adam update of the other implementations, up to rounding; the
    fastest per step on CPU), the default implementation otherwise."""
    fused = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
    return torch.optim.Adam(
        params,
        lr=config.lr,
        betas=(float(config.betas[0]), float(config.betas[1])),
        weight_decay=config.weight_decay,
        fused=True if fused else None,
    )


def _check_optimizer(optimizer: Any, params: list[torch.Tensor]) -> torch.optim.Optimizer:
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError(
            f"optimizer: expected a torch.optim.Optimizer, got {type(optimizer).__name__}"
        )
    mine = sorted(id(p) for group in optimizer.param_groups for p in group["params"])
    if mine != sorted(id(p) for p in params):
        raise ValueError(
            "optimizer: must be built over exactly the trainable parameters of "
            f"model_or_params ({len(params)} tensors; the optimizer holds {len(mine)}, or "
            "other tensors)"
        )
    return optimizer


def _cosine_factor(config: TrainConfig) -> Callable[[int], float]:
    """The factor of the cosine schedule at step ``step`` (1 at step 0, ``lr_final`` at the
    end): rate = base rate × factor, the formula of the loop before torch.optim."""

    def factor(step: int) -> float:
        frac = min(step / config.steps, 1.0)
        return config.lr_final + (1 - config.lr_final) * 0.5 * (1 + math.cos(math.pi * frac))

    return factor


def _loop(
    cfg: TrainConfig,
    params: list[torch.Tensor],
    loss_fn: Callable[[int], torch.Tensor],
    eval_fn: Callable[[], float] | None,
    opt: torch.optim.Optimizer,
    sched: torch.optim.lr_scheduler.LRScheduler | None,
    run: RunState,
    save: Callable[[], None],
    stage: Stage,
    description: str,
) -> None:
    """The optimisation steps from ``run.done`` to the end (or an early stop), with
    evaluations every ``cfg.eval_every`` steps and checkpoints every ``cfg.checkpoint_every``."""
    result = run.result

    def evaluate(step: int) -> bool:
        """Record an evaluation; True when training should stop."""
        if eval_fn is not None:
            with torch.no_grad():
                metric = float(eval_fn())
        else:
            tail = result.losses[-cfg.eval_every :]
            metric = sum(tail) / len(tail)
        result.evals.append((step, metric))
        if metric < result.best_metric * (1 - cfg.min_delta) or result.best_step < 0:
            result.best_metric, result.best_step = metric, step
            run.since_best = 0
            if cfg.restore_best:
                run.best_state = [p.detach().clone() for p in params]
        else:
            run.since_best += 1
        if cfg.stop_below is not None and metric <= cfg.stop_below:
            result.stopped = "stop_below"
            return True
        if cfg.patience is not None and run.since_best >= cfg.patience:
            result.stopped = "patience"
            return True
        return False

    if not run.finished:
        for step in range(run.done, cfg.steps):
            for p in params:
                p.grad = None
            loss = loss_fn(step)
            value = float(loss.detach())
            if not math.isfinite(value):
                result.stopped = "non-finite"
                warnings.warn(
                    f"{description}: training loss became {value} at step {step}; stopped",
                    RuntimeWarning,
                    stacklevel=3,
                )
                break
            loss.backward()
            if cfg.clip is not None:
                torch.nn.utils.clip_grad_norm_(params, cfg.clip)
            opt.step()
            if sched is not None:
                sched.step()
            result.losses.append(value)
            run.done = step + 1
            stage.advance(label=f"loss {value:.4g}")
            stop = run.done % cfg.eval_every == 0 and evaluate(run.done)
            if stop:
                break
            if cfg.checkpoint_every and run.done % cfg.checkpoint_every == 0:
                save()
        else:
            if not result.evals or result.evals[-1][0] != cfg.steps:
                evaluate(cfg.steps)
        run.finished = True
        save()


def train(
    model_or_params: nn.Module | Iterable[torch.Tensor],
    loss_fn: Callable[[int], torch.Tensor],
    config: TrainConfig | None = None,
    eval_fn: Callable[[], float] | None = None,
    progress: Progress | bool | None = None,
    description: str = "train",
    optimizer: torch.optim.Optimizer | None = None,
    generators: Sequence[torch.Generator] = (),
    resume: bool = False,
) -> TrainResult:
    """Minimise ``loss_fn(step)`` over the parameters with a ``torch.optim`` optimiser.

    ``θ ← opt(θ, clip(∇_θ loss_fn(step)))`` for ``step = 0 .. steps−1``, with early stop on
    ``eval_fn`` (or the training loss) and plateau detection; see the module docstring for the
    full contract.

    * ``optimizer``: a ``torch.optim.Optimizer`` built over exactly the trainable parameters of
      ``model_or_params`` (any other is a ``ValueError`` naming ``optimizer``); its own
      hyperparameters are used (``config.lr``, ``betas`` and ``weight_decay`` are then
      ignored; ``schedule`` and ``clip`` still apply). Default: :func:`default_optimizer`.
    * ``generators``: the ``torch.Generator`` objects ``loss_fn``/``eval_fn`` draw from; their
      states go into checkpoints and are restored on resume.
    * ``resume``: continue from ``config.checkpoint_path`` if that file exists (it must be a
      training checkpoint of a run with the same config, schedule, parameters and number of
      generators: ``ValueError`` naming ``checkpoint`` otherwise); start afresh if it does not.
      Without ``resume`` an existing checkpoint file is overwritten by the new run.
      The result's losses and evaluations then cover the whole run, and ``seconds`` adds the
      time spent before the interruption (up to the last checkpoint).
    * ``progress``: a :class:`~attnreg.progress.Progress` to open the stage ``description``
      on (one step per optimiser step, labelled with the loss), ``True`` for a bar of its own
      on a terminal, ``False`` for none (default: a bar when stderr is a terminal).

    Returns a :class:`TrainResult`; with ``restore_best`` the parameters are reset to the best
    evaluation's values at the end.
    """
    cfg = config or TrainConfig()
    params = _parameters(model_or_params)
    gens = list(generators)
    for i, gen in enumerate(gens):
        if not isinstance(gen, torch.Generator):
            raise ValueError(
                f"generators: item {i} is a {type(gen).__name__}, not a torch.Generator"
            )
    if resume and not cfg.checkpoint_path:
        raise ValueError("resume: needs config.checkpoint_path (the checkpoint to resume from)")
    torch.manual_seed(cfg.seed)
    opt = (
        default_optimizer(params, cfg) if optimizer is None else _check_optimizer(optimizer, params)
    )
    sched = (
        torch.optim.lr_scheduler.LambdaLR(opt, _cosine_factor(cfg))
        if cfg.schedule == "cosine"
        else None
    )
    run = RunState(result=TrainResult(losses=[]))
    path = cfg.checkpoint_path
    if resume and path and Path(path).is_file():
        state = model_state(model_or_params, params)
        run = resumed(load_train_state(path, state, config_record(cfg), opt, sched, gens))
    result = run.result
    seconds0, cpu_seconds0 = run.seconds, run.cpu_seconds  # spent before an interruption
    wall0, cpu0 = time.perf_counter(), time.process_time()

    def save() -> None:
        if path:
            run.seconds = seconds0 + time.perf_counter() - wall0
            run.cpu_seconds = cpu_seconds0 + time.process_time() - cpu0
            state = model_state(model_or_params, params)
            save_train_state(path, state, train_state(cfg, run), opt, sched, gens)

    with contextlib.ExitStack() as stack:
        if not isinstance(progress, Progress):
            progress = stack.enter_context(terminal_progress(progress is not False))
        stage = stack.enter_context(progress.stage(description, total=cfg.steps))
        stage.advance(run.done)
        _loop(cfg, params, loss_fn, eval_fn, opt, sched, run, save, stage, description)
    if cfg.restore_best and run.best_state is not None:
        with torch.no_grad():
            for p, best in zip(params, run.best_state, strict=True):
                p.copy_(best)
    result.plateaus = find_plateaus(
        result.losses, cfg.plateau_window, cfg.plateau_rtol, cfg.reference_loss, cfg.plateau_drop
    )
    result.stuck = any(not p.escaped for p in result.plateaus) and result.stopped != "stop_below"
    if result.stuck:
        warnings.warn(
            f"{description}: the run ended on a loss plateau ({result.plateaus[-1].describe()})",
            PlateauWarning,
            stacklevel=2,
        )
    result.seconds = seconds0 + time.perf_counter() - wall0
    result.cpu_seconds = cpu_seconds0 + time.process_time() - cpu0
    return result
