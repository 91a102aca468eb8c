"""The ``verify`` study's settings: the dtypes it certifies, the config dataclass, its
profiles (both the defaults: the certificate has one scale) and its validation."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from attnreg.core.validation import check_choice, check_positive

DTYPES = {"float64": torch.float64, "float32": torch.float32}


@dataclass
class VerifyConfig:
    """``attnreg verify`` settings: seed, dtypes, ridge λ and mesa λ, and the tolerances.

    A row passes when its relative error is at most ``tolerance[dtype] · tol_scale`` (times
    the design's condition number on the ill-conditioned shapes)."""

    seed: int = 0
    dtypes: list[str] = field(default_factory=lambda: ["float64", "float32"])
    ridge: float = 0.5
    mesa_lambda: float = 1.0
    tolerance: dict[str, float] = field(default_factory=lambda: {"float64": 1e-10, "float32": 1e-4})
    tol_scale: float = 1.0


def quick_config() -> VerifyConfig:
    """The quick profile: the defaults."""
    return VerifyConfig()


def full_config() -> VerifyConfig:
    """The full profile: the defaults too (the certificate is already complete)."""
    return VerifyConfig()


def check_config(cfg: VerifyConfig) -> None:
    """Reject invalid settings with a ``ValueError`` naming the field."""
    check_positive("tol_scale", cfg.tol_scale)
    for dtype in cfg.dtypes:
        check_choice("dtype", dtype, DTYPES)
        if dtype not in cfg.tolerance:
            raise ValueError(f"tolerance: no entry for dtype {dtype!r}")
    for dtype, tol in cfg.tolerance.items():
        check_positive(f"tolerance[{dtype!r}]", tol)


def config_dict(cfg: VerifyConfig) -> dict[str, Any]:
    """The config as a plain dict (for stored results and captions)."""
    return asdict(cfg)
