"""The ``icl`` study's settings: the models it can train (:data:`MODEL_SPECS`), the config
dataclass (which checks its values when built) and its quick and full profiles (von Oswald et
al. 2023; Ahn et al. 2023)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from attnreg.config import check_device, check_fields
from attnreg.core.validation import (
    check_choice,
    check_nonnegative,
    check_positive,
    check_positive_int,
    check_seed,
)

# The training loop's schedules (``attnreg.training_config.SCHEDULES``; this module stays light).
SCHEDULES = ("constant", "cosine")


@dataclass(frozen=True)
class ModelSpec:
    """A trained model of the study: architecture, task distribution and its reference."""

    kind: str  # "lsa" | "softmax"
    layers: int = 1
    heads: int = 1
    recurrent: bool = False
    variant: str = "full"
    tasks: str = "uniform"  # "uniform" (von Oswald) | "gaussian" (Ahn et al.)
    reference: str = "GD"
    long: bool = False  # trained for ``deep_steps``


MODEL_SPECS: dict[str, ModelSpec] = {
    "lsa-1": ModelSpec("lsa"),
    "lsa-1-2heads": ModelSpec("lsa", heads=2),
    "lsa-1-factored": ModelSpec("lsa", variant="factored"),
    "lsa-2-recurrent-gdpp": ModelSpec(
        "lsa", layers=2, recurrent=True, variant="gdpp", reference="GD++ x2", long=True
    ),
    "lsa-2-deep": ModelSpec("lsa", layers=2, reference="GD++ x2", long=True),
    "lsa-2-deep-gdpp": ModelSpec("lsa", layers=2, variant="gdpp", reference="GD++ x2", long=True),
    "lsa-3-recurrent-gdpp": ModelSpec(
        "lsa", layers=3, recurrent=True, variant="gdpp", reference="GD++ x3", long=True
    ),
    "lsa-1-gaussian": ModelSpec("lsa", tasks="gaussian", reference="preconditioned GD (optimal)"),
    "softmax-2heads": ModelSpec("softmax", heads=2),
}


@dataclass
class ICLConfig:
    """``attnreg icl`` settings (every field has a default: the quick profile).

    The checks' thresholds: a trained one-layer LSA's test loss at most ``max_loss_ratio`` ×
    line-searched GD's (and the Gaussian-input model's at most that × the optimal
    preconditioned GD's), its sensitivity cosine with GD at least ``min_sensitivity_cosine``
    and its learned η within ``max_eta_error`` (relative) of the line-searched η; the recurrent
    GD++ models' loss at most ``max_loss_ratio_gdpp`` × fitted GD++'s (von Oswald et al.
    2023)."""

    seed: int = 0
    d: int = 10
    n_ctx: int = 10
    eval_tasks: int = 10000
    fit_tasks: int = 10000
    batch: int = 1024  # the full profile: 2048, as von Oswald et al.'s code
    lr: float = 1e-2
    schedule: str = "cosine"
    clip: float = 10.0
    init_scale: float = 0.05
    steps: int = 1500
    deep_steps: int = 3000
    eval_every: int = 100
    models: list[str] = field(
        default_factory=lambda: [
            "lsa-1",
            "lsa-1-2heads",
            "lsa-2-recurrent-gdpp",
            "lsa-1-gaussian",
            "softmax-2heads",
        ]
    )
    gaussian_condition: float = 10.0
    sweep_noise: float = 0.25
    sweep_tasks: int = 2000
    input_scales: list[float] = field(default_factory=lambda: [0.5, 1.0, 1.5, 2.0])
    teacher_scales: list[float] = field(default_factory=lambda: [0.5, 1.0, 2.0, 5.0])
    alignment_tasks: int = 1000
    explain_tasks: int = 2000
    threads: int = 1
    device: str = "cpu"
    max_loss_ratio: float = 1.02
    max_loss_ratio_gdpp: float = 1.05
    min_sensitivity_cosine: float = 0.99
    max_eta_error: float = 0.05

    def __post_init__(self) -> None:
        """Refuse a bad value with a ``ValueError`` naming the key (and the value)."""
        check_fields(self)
        check_seed("seed", self.seed)
        check_device("device", self.device)
        for name in (
            "d",
            "n_ctx",
            "eval_tasks",
            "fit_tasks",
            "batch",
            "steps",
            "deep_steps",
            "eval_every",
            "threads",
            "sweep_tasks",
            "alignment_tasks",
            "explain_tasks",
        ):
            check_positive_int(name, getattr(self, name))
        if not self.models:
            raise ValueError("models: must list at least one model")
        for name in self.models:
            check_choice("models", name, MODEL_SPECS)
        check_choice("schedule", self.schedule, SCHEDULES)
        for name in (
            "lr",
            "clip",
            "init_scale",
            "max_loss_ratio",
            "max_loss_ratio_gdpp",
            "min_sensitivity_cosine",
            "max_eta_error",
        ):
            check_positive(name, getattr(self, name))
        if self.min_sensitivity_cosine > 1:
            raise ValueError(
                f"min_sensitivity_cosine: a cosine is at most 1, got {self.min_sensitivity_cosine}"
            )
        if not self.gaussian_condition >= 1:
            raise ValueError(
                f"gaussian_condition: must be a finite number >= 1, got {self.gaussian_condition}"
            )
        check_nonnegative("sweep_noise", self.sweep_noise)
        for name in ("input_scales", "teacher_scales"):
            for scale in getattr(self, name):
                check_positive(name, scale)


def quick_config(**changes: Any) -> ICLConfig:
    """The quick profile (a minute and a half on one core): batches of 1024 tasks per step,
    half von Oswald et al.'s 2048 (every check and claim the same as with 2048 on seed 0, the
    step a third cheaper)."""
    return ICLConfig(**changes)


def full_config(**changes: Any) -> ICLConfig:
    """The full profile: every model, longer training, more evaluation tasks for the sweeps."""
    base: dict[str, Any] = {
        "batch": 2048,
        "steps": 5000,
        "deep_steps": 10000,
        "lr": 3e-3,
        "models": list(MODEL_SPECS),
        "sweep_tasks": 10000,
        "input_scales": [0.5, 0.75, 1.0, 1.25, 1.5, 2.0],
        "teacher_scales": [0.5, 1.0, 2.0, 3.0, 5.0],
    }
    base.update(changes)
    return ICLConfig(**base)
