"""The one training loop of attnreg: Adam, clipping, seeds, early stop, plateaus.

Contract
--------
``train(model_or_params, loss_fn, config, eval_fn=None, progress=None) -> TrainResult``

* ``model_or_params``: an ``nn.Module`` or an iterable of tensors with ``requires_grad``. The
  loop never looks inside: any model, any parametrisation.
* ``loss_fn(step) -> Tensor``: the scalar training loss at optimiser step ``step`` (0-based).
  Draw a fresh batch of tasks inside it (online training, von Oswald et al. 2023), or return the
  full-batch loss on fixed data (the ``compare`` study). Use a ``torch.Generator`` seeded from
  ``config.seed`` (see :func:`generator`) for the data so that the run is reproducible.
* ``eval_fn() -> float``: an evaluation metric, lower is better (held-out loss, validation
  MSE). Called every ``config.eval_every`` steps and after the last step, under
  ``torch.no_grad()``. Early stopping (``patience``), ``stop_below`` and ``restore_best`` act on
  it; without ``eval_fn`` they act on the training loss.
* Optimiser: Adam(``lr``, ``betas``, ``weight_decay``); the global gradient norm is clipped to
  ``clip`` (``None``: no clipping). ``schedule="cosine"`` decays the rate from ``lr`` to
  ``lr_final × lr`` over ``steps`` (Loshchilov & Hutter 2017). ``torch.manual_seed(config.seed)``
  is set before the first step, so the same config + seed + data gives the same numbers.
* Early stop: after ``patience`` evaluations without an improvement of more than
  ``min_delta`` (relative), or as soon as the metric is ``<= stop_below``.
* Plateaus (:func:`find_plateaus`): a stretch of windows of ``plateau_window`` steps over which
  the mean training loss fell by less than ``plateau_rtol`` (relative) is a plateau if the loss
  later drops by ``plateau_drop`` (escaped), or if the run ends on it above
  ``(1 + plateau_rtol) × reference_loss`` (without a reference: near the initial loss). A run
  that ends on a plateau is ``stuck``; the loop warns (``PlateauWarning``): never silent.
* Checkpoints: :mod:`attnreg.checkpoints`.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from attnreg.checkpoints import save_checkpoint
from attnreg.core.validation import (
    check_choice,
    check_nonnegative,
    check_positive,
    check_positive_int,
)

SCHEDULES = ("constant", "cosine")


class PlateauWarning(UserWarning):
    """A training run ended on a loss plateau (see :class:`TrainResult.stuck`)."""


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


@dataclass
class Plateau:
    """Steps ``[start, end)`` over which the training loss stayed at about ``loss``."""

    start: int
    end: int
    loss: float
    escaped: bool = True

    def describe(self) -> str:
        return f"steps {self.start}-{self.end} at loss {self.loss:.4g}"


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

    @property
    def final_loss(self) -> float:
        return self.losses[-1] if self.losses else math.nan

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


class Adam:
    """Adam (Kingma & Ba 2015), the update of ``torch.optim.Adam`` (L2 ``weight_decay`` added to
    the gradient, bias-corrected moments, ``eps = 1e-8``) in a few tensor operations.

    Written out because ``torch.optim`` imports ``torch._dynamo`` on first use (seconds of
    start-up) and adds per-step dispatch that dominates the small steps of these models.
    """

    def __init__(
        self,
        params: list[torch.Tensor],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        weight_decay: float = 0.0,
        eps: float = 1e-8,
    ) -> None:
        self.params = params
        self.lr, self.betas, self.weight_decay, self.eps = lr, betas, weight_decay, eps
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]
        self.t = 0

    @torch.no_grad()
    def step(self, lr: float | None = None) -> None:
        """One update with learning rate ``lr`` (default: the constructor's)."""
        self.t += 1
        b1, b2 = self.betas
        step_size = (self.lr if lr is None else lr) / (1 - b1**self.t)
        root_correction = math.sqrt(1 - b2**self.t)
        for p, m, v in zip(self.params, self.m, self.v, strict=True):
            if p.grad is None:
                continue
            g = p.grad if self.weight_decay == 0 else p.grad + self.weight_decay * p
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            p.addcdiv_(m, (v.sqrt() / root_correction).add_(self.eps), value=-step_size)


@torch.no_grad()
def clip_grad_norm(params: list[torch.Tensor], max_norm: float) -> float:
    """Scale the gradients so that their global L2 norm is at most ``max_norm``; returns the
    norm before clipping (as ``torch.nn.utils.clip_grad_norm_``)."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    norm = float(torch.sqrt(sum((g.pow(2).sum() for g in grads), torch.zeros(()))))
    if norm > max_norm:
        for g in grads:
            g.mul_(max_norm / (norm + 1e-6))
    return norm


def generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A seeded ``torch.Generator`` (the data stream of a reproducible run)."""
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
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


def find_plateaus(
    losses: list[float],
    window: int,
    rtol: float,
    reference_loss: float | None = None,
    drop: float = 0.1,
) -> list[Plateau]:
    """Loss plateaus in a training curve.

    Split ``losses`` into windows of ``window`` steps; a *flat stretch* is a maximal run of
    consecutive windows whose mean loss fell by less than ``rtol`` (relative). It is reported as

    * an escaped plateau if the loss later falls at least ``drop`` (relative) below its level;
    * a stuck plateau if it lasts to the end of the run and its level is above
      ``(1 + rtol) × reference_loss`` (or, without a reference, within ``drop`` of the initial
      loss: nothing was learned).

    Other flat stretches (convergence, slow progress) are not plateaus.
    """
    n_windows = len(losses) // window
    if n_windows < 2:
        return []
    means = [sum(losses[i * window : (i + 1) * window]) / window for i in range(n_windows)]
    flat = [(means[i] - means[i + 1]) < rtol * abs(means[i]) for i in range(n_windows - 1)]
    plateaus: list[Plateau] = []
    i = 0
    while i < len(flat):
        if not flat[i]:
            i += 1
            continue
        j = i
        while j + 1 < len(flat) and flat[j + 1]:
            j += 1
        level = means[j + 1]
        later = min(means[j + 1 :])
        at_end = j + 1 == n_windows - 1
        if later <= (1 - drop) * level:
            plateaus.append(Plateau(i * window, (j + 2) * window, level, escaped=True))
        elif at_end:
            if reference_loss is not None:
                stuck = level > (1 + rtol) * reference_loss
            else:
                stuck = level >= (1 - drop) * losses[0]
            if stuck:
                plateaus.append(Plateau(i * window, (j + 2) * window, level, escaped=False))
        i = j + 1
    return plateaus


def train(
    model_or_params: nn.Module | Iterable[torch.Tensor],
    loss_fn: Callable[[int], torch.Tensor],
    config: TrainConfig | None = None,
    eval_fn: Callable[[], float] | None = None,
    progress: bool | None = None,
    description: str = "train",
) -> TrainResult:
    """Minimise ``loss_fn(step)`` over the parameters with Adam (Kingma & Ba 2015).

    ``θ ← Adam(θ, clip(∇_θ loss_fn(step)))`` for ``step = 0 .. steps−1``, with early stop on
    ``eval_fn`` (or the training loss) and plateau detection; see the module docstring for the
    full contract. ``progress`` shows a tqdm bar (default: only when stderr is a terminal).
    Returns a :class:`TrainResult`; with ``restore_best`` the parameters are reset to the best
    evaluation's values at the end.
    """
    cfg = config or TrainConfig()
    params = _parameters(model_or_params)
    torch.manual_seed(cfg.seed)
    opt = Adam(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    total = cfg.steps

    def rate(step: int) -> float:
        if cfg.schedule == "constant":
            return cfg.lr
        frac = min(step / total, 1.0)
        return cfg.lr * (cfg.lr_final + (1 - cfg.lr_final) * 0.5 * (1 + math.cos(math.pi * frac)))

    result = TrainResult(losses=[])
    best_state: list[torch.Tensor] | None = None
    since_best = 0
    wall0, cpu0 = time.perf_counter(), time.process_time()
    bar = None
    if progress is None:
        import sys

        progress = sys.stderr.isatty()
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=cfg.steps, desc=description, leave=False)

    def evaluate(step: int) -> bool:
        """Record an evaluation; True when training should stop."""
        nonlocal best_state, since_best
        if eval_fn is not None:
            with torch.no_grad():
                metric = float(eval_fn())
        else:
            tail = result.losses[-cfg.eval_every :]
            metric = sum(tail) / len(tail)
        result.evals.append((step, metric))
        if metric < result.best_metric * (1 - cfg.min_delta) or result.best_step < 0:
            result.best_metric, result.best_step = metric, step
            since_best = 0
            if cfg.restore_best:
                best_state = [p.detach().clone() for p in params]
        else:
            since_best += 1
        if cfg.stop_below is not None and metric <= cfg.stop_below:
            result.stopped = "stop_below"
            return True
        if cfg.patience is not None and since_best >= cfg.patience:
            result.stopped = "patience"
            return True
        return False

    for step in range(cfg.steps):
        for p in params:
            p.grad = None
        loss = loss_fn(step)
        value = float(loss.detach())
        if not math.isfinite(value):
            result.stopped = "non-finite"
            warnings.warn(
                f"{description}: training loss became {value} at step {step}; stopped",
                RuntimeWarning,
                stacklevel=2,
            )
            break
        loss.backward()
        if cfg.clip is not None:
            clip_grad_norm(params, cfg.clip)
        opt.step(rate(step))
        result.losses.append(value)
        if bar is not None:
            bar.update(1)
            if step % 50 == 0:
                bar.set_postfix(loss=f"{value:.4g}")
        done = step + 1
        if cfg.checkpoint_path and cfg.checkpoint_every and done % cfg.checkpoint_every == 0:
            save_checkpoint(
                cfg.checkpoint_path,
                {f"param{i}": p for i, p in enumerate(params)},
                {"step": done, "kind": "train-state"},
            )
        if done % cfg.eval_every == 0 and evaluate(done):
            break
    else:
        if not result.evals or result.evals[-1][0] != cfg.steps:
            evaluate(cfg.steps)
    if bar is not None:
        bar.close()
    if cfg.restore_best and best_state is not None:
        with torch.no_grad():
            for p, best in zip(params, best_state, strict=True):
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
    result.seconds = time.perf_counter() - wall0
    result.cpu_seconds = time.process_time() - cpu0
    return result
