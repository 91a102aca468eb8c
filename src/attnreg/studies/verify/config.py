"""The ``verify`` study's settings: the dtypes it certifies (and their unit roundoff, smallest
normal number and rounding), the config dataclass (which checks its values when built) and its
profiles (both the defaults: the certificate has one scale)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from attnreg.config import check_fields
from attnreg.core.validation import check_choice, check_positive, check_seed
from attnreg.studies.spec import comma_list

DTYPES = {"float64": torch.float64, "float32": torch.float32}


def unit_roundoff(dtype: str) -> float:
    """``u = eps/2`` of the dtype named ``dtype`` (float64: ``2⁻⁵³``, float32: ``2⁻²⁴``)."""
    return float(np.finfo(np.dtype(dtype)).eps) / 2


def smallest_normal(dtype: str) -> float:
    """The dtype's smallest normal number (float64: ``2⁻¹⁰²²``, float32: ``2⁻¹²⁶``)."""
    return float(np.finfo(np.dtype(dtype)).tiny)


def round_to(a: Any, dtype: str) -> np.ndarray:
    """``a`` rounded (to nearest) to the dtype named ``dtype``, returned as float64: every
    value a number of that dtype."""
    return np.asarray(a, dtype=np.dtype(dtype)).astype(np.float64)


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

    def __post_init__(self) -> None:
        """Refuse a bad value with a ``ValueError`` naming the key (and the value)."""
        check_fields(self)
        check_seed("seed", self.seed)
        check_positive("ridge", self.ridge)
        check_positive("mesa_lambda", self.mesa_lambda)
        check_positive("tol_scale", self.tol_scale)
        if not self.dtypes:
            raise ValueError("dtypes: must list at least one of float64, float32")
        for dtype in self.dtypes:
            check_choice("dtypes", dtype, DTYPES)
        for dtype, tol in self.tolerance.items():
            check_choice("tolerance", dtype, DTYPES)
            check_positive(f"tolerance[{dtype!r}]", tol)
        for dtype in self.dtypes:
            if dtype not in self.tolerance:
                raise ValueError(
                    f"tolerance: no entry for dtype {dtype!r} (got {self.tolerance!r})"
                )


def parse_dtypes(text: str) -> list[str]:
    """The ``--dtype`` option: ``both`` or a comma-separated list of dtype names."""
    return list(DTYPES) if text == "both" else comma_list(text)


def quick_config() -> VerifyConfig:
    """The quick profile: the defaults."""
    return VerifyConfig()


def full_config() -> VerifyConfig:
    """The full profile: the defaults too (the certificate is already complete)."""
    return VerifyConfig()
