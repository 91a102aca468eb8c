"""One threshold test for the whole package: ``value op limit`` with ``op`` ``"<="`` or
``">="``, where a missing (``None``) or non-finite value fails.

The studies' checks (:func:`check`), the ledger's claims
(:class:`attnreg.studies.ledger.Threshold`) and the benchmark targets
(:class:`attnreg.bench.limits.Limit`) all judge through :func:`passes`. A leaf module.
"""

from __future__ import annotations

import math
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


def check(name: str, value: float | None, op: str, limit: float) -> dict[str, Any]:
    """One pass/fail criterion ``{check, value, op, limit, passed}`` (:func:`passes`)."""
    return {
        "check": name,
        "value": None if value is None else float(value),
        "op": check_op(op),
        "limit": float(limit),
        "passed": passes(value, op, limit),
    }
