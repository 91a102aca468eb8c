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
    """``attnreg verify`` settings: seed, dtypes, ridge λ and mesa λ, and a tolerance scale."""

    seed: int = 0
    dtypes: list[str] = field(default_factory=lambda: ["float64", "float32"])
    ridge: float = 0.5
    mesa_lambda: float = 1.0
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


def config_dict(cfg: VerifyConfig) -> dict[str, Any]:
    """The config as a plain dict (for stored results and captions)."""
    return asdict(cfg)
