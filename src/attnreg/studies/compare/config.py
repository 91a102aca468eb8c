"""The ``compare`` study's settings: the row keys, the cells the figures show, the config
dataclass and its quick and full profiles."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from attnreg.core.validation import check_choice, check_positive, check_positive_int
from attnreg.data.regression import DATA_MODES
from attnreg.models.regressors import QK_MODES, VARIANTS

ROW_KEYS = (
    "data",
    "variant",
    "whitening",
    "qk",
    "layernorm",
    "seed",
    "train_mse",
    "test_mse",
    "cos_to_ridge",
    "hat_distance",
    "wqwk_invcov_corr",
)
# The cells whose matrices the figures show: (variant, whitening, qk, layernorm).
FIGURE_CELLS = (
    ("regression", False, "separate", False),
    ("regression", True, "separate", False),
    ("softmax", False, "separate", False),
    ("whitened", False, "shared", False),
)


@dataclass
class CompareConfig:
    """Settings of the compare study (every field has a default; quick profile = defaults)."""

    data_modes: list[str] = field(default_factory=lambda: list(DATA_MODES))
    variants: list[str] = field(default_factory=lambda: list(VARIANTS))
    whitening: list[bool] = field(default_factory=lambda: [False, True])
    qk: list[str] = field(default_factory=lambda: list(QK_MODES))
    layernorm: list[bool] = field(default_factory=lambda: [False, True])
    seed: int = 0
    seeds: int = 1
    ridge: float = 1e-3
    n_train: int = 200
    n_test: int = 200
    d: int = 8
    condition: float = 100.0
    noise: float = 0.5
    steps: int = 600
    lr: float = 0.02
    eval_every: int = 10
    patience: int = 15
    validation_fraction: float = 0.2
    init_scale: float = 0.5
    device: str = "cpu"
    threads: int = 1
    probe_steps: int = 3000
    ols_transformer: bool = True
    ols_steps: int = 1000
    ols_lr: float = 0.01
    shift_magnitudes: list[float] = field(default_factory=lambda: [0.0, 0.5, 1.0, 2.0, 4.0])

    @property
    def seed_list(self) -> list[int]:
        """The seeds run: ``seed, seed + 1, …, seed + seeds − 1``."""
        return list(range(self.seed, self.seed + self.seeds))

    def __post_init__(self) -> None:
        for mode in self.data_modes:
            check_choice("data_modes", mode, DATA_MODES)
        for variant in self.variants:
            check_choice("variants", variant, VARIANTS)
        for qk in self.qk:
            check_choice("qk", qk, QK_MODES)
        for name in ("data_modes", "variants", "whitening", "qk", "layernorm"):
            if not getattr(self, name):
                raise ValueError(f"{name}: must list at least one value")
        check_positive_int("seeds", self.seeds)
        check_positive("ridge", self.ridge)
        check_positive_int("steps", self.steps)
        check_positive_int("ols_steps", self.ols_steps)
        check_positive_int("probe_steps", self.probe_steps)
        check_positive("lr", self.lr)
        check_positive("ols_lr", self.ols_lr)
        check_positive_int("threads", self.threads)
        try:
            torch.empty(0, device=self.device)
        except (RuntimeError, AssertionError) as exc:
            raise ValueError(f"device: {self.device!r} is not usable here ({exc})") from exc
        if not 0 < self.validation_fraction < 1:
            raise ValueError(
                f"validation_fraction: must be in (0, 1), got {self.validation_fraction}"
            )


def quick_config(seed: int = 0, device: str = "cpu") -> CompareConfig:
    """The ``--quick`` profile: one seed, N = 200, ≤ 600 Adam steps per cell, 1000 for the
    OLS-Transformer (a minute or two on 2 cores)."""
    return CompareConfig(seed=seed, device=device)


def full_config(seed: int = 0, device: str = "cpu") -> CompareConfig:
    """The ``--full`` profile: three seeds, N = 500, up to 3000 steps per cell."""
    return CompareConfig(
        seed=seed,
        seeds=3,
        n_train=500,
        n_test=500,
        steps=3000,
        patience=30,
        probe_steps=6000,
        ols_steps=5000,
        shift_magnitudes=[0.0, 0.25, 0.5, 1.0, 2.0, 3.0, 4.0],
        device=device,
    )
