"""The thresholds of the performance targets, as data.

Each target lists its :class:`Limit` objects once; the row's ``target`` text
(:func:`target_text`) and its sub-checks (:func:`judge`, recorded in ``details["checks"]`` and
deciding ``passed``) are both derived from that list, so the printed target and the check
cannot disagree.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_SYMBOLS = {"<=": "≤", ">=": "≥"}


def check(name: str, value: float | None, op: str, limit: float) -> dict[str, Any]:
    """A sub-check ``value op limit`` (``op`` is ``"<="`` or ``">="``); ``None`` or a non-finite
    value fails. Returns ``{check, value, op, limit, passed}``."""
    if op not in _SYMBOLS:
        raise ValueError(f"op: unknown value {op!r}; valid names are <=, >=")
    ok = value is not None and math.isfinite(value)
    if ok and value is not None:
        ok = value <= limit if op == "<=" else value >= limit
    return {"check": name, "value": value, "op": op, "limit": limit, "passed": bool(ok)}


@dataclass(frozen=True)
class Limit:
    """One threshold of a target: the sub-check ``name`` passes when ``value op bound`` (the
    bound times a ``scale`` given at judging time, where it is relative). ``text`` is how the
    target states it: a format string whose ``{op}`` becomes ≤ or ≥ and ``{bound}`` the bound
    (``"{op} {bound:g}× Cholesky normal equations"``); ``""`` leaves it out of the text."""

    name: str
    op: str
    bound: float
    text: str

    def __post_init__(self) -> None:
        if self.op not in _SYMBOLS:
            raise ValueError(f"op: unknown value {self.op!r}; valid names are <=, >=")

    def describe(self) -> str:
        """The threshold in words, e.g. ``"≤ 3× Cholesky normal equations"``."""
        return self.text.format(op=_SYMBOLS[self.op], bound=self.bound)


def target_text(limits: Sequence[Limit]) -> str:
    """A target's ``target`` text: its limits in words, joined by ``"; "``."""
    return "; ".join(limit.describe() for limit in limits if limit.text)


def judge(
    limits: Sequence[Limit],
    values: Mapping[str, float | None],
    scales: Mapping[str, float] | None = None,
) -> list[dict[str, Any]]:
    """The sub-checks of a target, in the order of ``limits``: ``values[name] op bound ×
    scales.get(name, 1)``. ``values`` must hold exactly one value per limit (a ``ValueError``
    naming the missing or unknown checks otherwise)."""
    names = [limit.name for limit in limits]
    if set(values) != set(names):
        missing, unknown = set(names) - set(values), set(values) - set(names)
        raise ValueError(
            f"values: missing {sorted(missing)}, unknown {sorted(unknown)} (limits: {names})"
        )
    scales = scales or {}
    return [
        check(limit.name, values[limit.name], limit.op, limit.bound * scales.get(limit.name, 1.0))
        for limit in limits
    ]
