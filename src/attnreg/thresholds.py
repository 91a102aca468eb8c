"""One threshold for the whole package: :class:`Threshold`, ``value op limit`` with ``op``
``"<="`` or ``">="`` and the limit's origin, where a missing (``None``) or non-finite value
fails (:func:`passes`).

A study's checks are :meth:`Threshold.check` rows (:func:`check`: the limit a config field),
the ledger's claims each hold a :class:`Threshold` (:class:`attnreg.studies.ledger.Claim`), and
the benchmark targets (:class:`attnreg.bench.limits.Limit`) judge through :func:`passes`. A
leaf module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

SYMBOLS = {"<=": "≤", ">=": "≥"}
"""The two operators and how the pages write them."""


def check_op(op: str) -> str:
    """``op`` if it is ``"<="`` or ``">="``, else a ``ValueError`` naming it."""
    if op not in SYMBOLS:
        raise ValueError(f"op: unknown value {op!r}; valid values are '<=', '>='")
    return op


def passes(value: float | None, op: str, limit: float) -> bool:
    """Whether ``value op limit``; ``None``, NaN and ±inf never pass."""
    check_op(op)
    if value is None or not math.isfinite(value):
        return False
    return value <= limit if op == "<=" else value >= limit


@dataclass(frozen=True)
class Threshold:
    """``value op limit`` passes (``op`` ``"<="`` or ``">="``); ``origin`` says where ``limit``
    comes from."""

    op: str
    limit: float
    origin: str

    def __post_init__(self) -> None:
        check_op(self.op)
        if not self.origin.strip():
            raise ValueError("threshold: origin must say where the limit comes from")

    def passes(self, value: float | None) -> bool:
        return passes(value, self.op, self.limit)

    def text(self) -> str:
        return f"{SYMBOLS[self.op]} {self.limit:g}"

    def check(self, name: str, value: float | None) -> dict[str, Any]:
        """The pass/fail row ``{check, value, op, limit, passed}`` of ``value`` (named
        ``name``), as a study's checks store it."""
        return {
            "check": name,
            "value": None if value is None else float(value),
            "op": self.op,
            "limit": float(self.limit),
            "passed": self.passes(value),
        }


CONFIG_ORIGIN = "a field of the study's config"
"""Where a study check's limit comes from."""


def check(name: str, value: float | None, op: str, limit: float) -> dict[str, Any]:
    """A study's pass/fail criterion (the limit a config field): :meth:`Threshold.check`."""
    return Threshold(op, limit, CONFIG_ORIGIN).check(name, value)
