"""Settings and result of the training loop (:func:`attnreg.training.train`, whose module
docstring states the whole contract), and the seeded generator of its data stream."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from attnreg.core.validation import (
    check_choice,
    check_nonnegative,
    check_positive,
    check_positive_int,
    check_seed,
)
from attnreg.plateaus import Plateau

SCHEDULES = ("constant", "cosine")
RESUME_FREE = ("checkpoint_path", "checkpoint_every")
"""The :class:`TrainConfig` fields that do not change a run's numbers: a checkpoint resumes
under other values of them."""


@dataclass
class TrainConfig:
    """Settings of :func:`attnreg.training.train` (every field has a default; the contract:
    :mod:`attnreg.training`)."""

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
