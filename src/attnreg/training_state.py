"""The state of a training run besides parameters, optimiser and generators, and its form in a
checkpoint (:class:`attnreg.checkpoints.TrainState`): what :func:`attnreg.training.train` saves
and resumes from."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from attnreg.checkpoints import TrainState
from attnreg.training_config import RESUME_FREE, TrainConfig, TrainResult


def config_record(config: TrainConfig) -> dict[str, Any]:
    """The JSON-like config fields that fix a run's numbers (compared on resume)."""
    out = asdict(config)
    out["betas"] = [float(b) for b in config.betas]
    for key in RESUME_FREE:
        out.pop(key)
    return out


@dataclass
class RunState:
    """The mutable state of a run besides parameters, optimiser and RNGs."""

    result: TrainResult
    done: int = 0
    since_best: int = 0
    finished: bool = False
    best_state: list[torch.Tensor] | None = None
    seconds: float = 0.0
    cpu_seconds: float = 0.0


def model_state(
    model_or_params: nn.Module | Iterable[torch.Tensor], params: list[torch.Tensor]
) -> dict[str, torch.Tensor]:
    if isinstance(model_or_params, nn.Module):
        return dict(model_or_params.state_dict())
    return {f"param{i}": p for i, p in enumerate(params)}


def train_state(config: TrainConfig, run: RunState) -> TrainState:
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
    return TrainState(run.done, run.finished, config_record(config), progress, run.best_state)


def resumed(state: TrainState) -> RunState:
    """The run state a checkpoint's :class:`~attnreg.checkpoints.TrainState` describes."""
    saved = state.progress
    result = TrainResult(
        losses=[float(v) for v in saved["losses"]],
        evals=[(int(s), float(m)) for s, m in saved["evals"]],
        best_step=int(saved["best_step"]),
        best_metric=float(saved["best_metric"]),
        stopped=str(saved["stopped"]),
    )
    return RunState(
        result=result,
        done=state.step,
        since_best=int(saved["since_best"]),
        finished=state.finished,
        best_state=state.best_state,
        seconds=float(saved["seconds"]),
        cpu_seconds=float(saved["cpu_seconds"]),
    )
