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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from attnreg.checkpoints import TrainState, load_train_state, save_train_state
from attnreg.core.validation import (
    check_choice,
    check_nonnegative,
    check_positive,
    check_positive_int,
    check_seed,
)
from attnreg.plateaus import Plateau, PlateauWarning, find_plateaus
from attnreg.progress import Progress, Stage, terminal_progress

SCHEDULES = ("constant", "cosine")
# TrainConfig fields that do not change a run's numbers: a checkpoint resumes under other values
_RESUME_FREE = ("checkpoint_path", "checkpoint_every")


@dataclass
class TrainConfig:
    """Settings of :func:`train` (every field has a default; see the module docstring)."""

    steps: int = 1000
    lr: float = 1e-3
    schedule: str = "constant"
    lr_final: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.0
    clip: float | None = 1.0
    seed: int = 0
    eval_every: int = 100
    patience: int | None = None
    min_delta: float = 0.0
    stop_below: float | None = None
    restore_best: bool = False
    plateau_window: int = 200
    plateau_rtol: float = 0.01
    plateau_drop: float = 0.1
    reference_loss: float | None = None
    checkpoint_path: str | None = None
    checkpoint_every: int | None = None

    def __post_init__(self) -> None:
        check_positive_int("steps", self.steps)
        check_seed("seed", self.seed)
        check_positive("lr", self.lr)
        check_choice("schedule", self.schedule, SCHEDULES)
        check_positive("lr_final", self.lr_final)
        check_nonnegative("weight_decay", self.weight_decay)
        if self.clip is not None:
            check_positive("clip", self.clip)
        check_positive_int("eval_every", self.eval_every)
        if self.patience is not None:
            check_positive_int("patience", self.patience)
        check_nonnegative("min_delta", self.min_delta)
        check_positive_int("plateau_window", self.plateau_window)
        check_nonnegative("plateau_rtol", self.plateau_rtol)
        check_nonnegative("plateau_drop", self.plateau_drop)
        if self.checkpoint_every is not None:
            check_positive_int("checkpoint_every", self.checkpoint_every)
            if not self.checkpoint_path:
                raise ValueError("checkpoint_every: set checkpoint_path too (where to write)")
        if len(tuple(self.betas)) != 2:
            raise ValueError(f"betas: expected two coefficients, got {self.betas!r}")


@dataclass
class TrainResult:
    """What a run did: per-step training losses, evaluations, plateaus and why it stopped."""

    losses: list[float]
    evals: list[tuple[int, float]] = field(default_factory=list)
    best_step: int = -1
    best_metric: float = math.inf
    stopped: str = "steps"  # "steps" | "patience" | "stop_below" | "non-finite"
    plateaus: list[Plateau] = field(default_factory=list)
    stuck: bool = False
    seconds: float = 0.0
    cpu_seconds: float = 0.0

    @property
    def steps_run(self) -> int:
        return len(self.losses)

    def plateau_summary(self) -> str | None:
        """``None`` if no plateau was seen, else a sentence (stuck or escaped)."""
        if not self.plateaus:
            return None
        text = "; ".join(p.describe() for p in self.plateaus)
        return f"stuck on a plateau ({text})" if self.stuck else f"escaped plateau ({text})"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["steps_run"] = self.steps_run
        return out


def generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A seeded ``torch.Generator`` (the data stream of a reproducible run)."""
    gen = torch.Generator(device=device)
    gen.manual_seed(check_seed("seed", seed))
    return gen


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


def _config_record(config: TrainConfig) -> dict[str, Any]:
    """The JSON-like config fields that fix a run's numbers (compared on resume)."""
    out = asdict(config)
    out["betas"] = [float(b) for b in config.betas]
    for key in _RESUME_FREE:
        out.pop(key)
    return out


@dataclass
class _Progress:
    """The mutable state of a run besides parameters, optimiser and RNGs."""

    result: TrainResult
    done: int = 0
    since_best: int = 0
    finished: bool = False
    best_state: list[torch.Tensor] | None = None
    seconds: float = 0.0
    cpu_seconds: float = 0.0


def _model_state(
    model_or_params: nn.Module | Iterable[torch.Tensor], params: list[torch.Tensor]
) -> dict[str, torch.Tensor]:
    if isinstance(model_or_params, nn.Module):
        return dict(model_or_params.state_dict())
    return {f"param{i}": p for i, p in enumerate(params)}


def _train_state(config: TrainConfig, run: _Progress) -> TrainState:
    """``run`` as the :class:`~attnreg.checkpoints.TrainState` a checkpoint holds."""
    res = run.result
    progress = {
        "losses": list(res.losses),
        "evals": [[s, m] for s, m in res.evals],
        "best_step": res.best_step,
        "best_metric": res.best_metric,
        "stopped": res.stopped,
        "since_best": run.since_best,
        "seconds": run.seconds,
        "cpu_seconds": run.cpu_seconds,
    }
    return TrainState(run.done, run.finished, _config_record(config), progress, run.best_state)


def _resumed(state: TrainState) -> _Progress:
    """The run state a checkpoint's :class:`~attnreg.checkpoints.TrainState` describes."""
    saved = state.progress
    result = TrainResult(
        losses=[float(v) for v in saved["losses"]],
        evals=[(int(s), float(m)) for s, m in saved["evals"]],
        best_step=int(saved["best_step"]),
        best_metric=float(saved["best_metric"]),
        stopped=str(saved["stopped"]),
    )
    return _Progress(
        result=result,
        done=state.step,
        since_best=int(saved["since_best"]),
        finished=state.finished,
        best_state=state.best_state,
        seconds=float(saved["seconds"]),
        cpu_seconds=float(saved["cpu_seconds"]),
    )


def _loop(
    cfg: TrainConfig,
    params: list[torch.Tensor],
    loss_fn: Callable[[int], torch.Tensor],
    eval_fn: Callable[[], float] | None,
    opt: torch.optim.Optimizer,
    sched: torch.optim.lr_scheduler.LRScheduler | None,
    run: _Progress,
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
    run = _Progress(result=TrainResult(losses=[]))
    path = cfg.checkpoint_path
    if resume and path and Path(path).is_file():
        state = _model_state(model_or_params, params)
        run = _resumed(load_train_state(path, state, _config_record(cfg), opt, sched, gens))
    result = run.result
    seconds0, cpu_seconds0 = run.seconds, run.cpu_seconds  # spent before an interruption
    wall0, cpu0 = time.perf_counter(), time.process_time()

    def save() -> None:
        if path:
            run.seconds = seconds0 + time.perf_counter() - wall0
            run.cpu_seconds = cpu_seconds0 + time.process_time() - cpu0
            state = _model_state(model_or_params, params)
            save_train_state(path, state, _train_state(cfg, run), opt, sched, gens)

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
