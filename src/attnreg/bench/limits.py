"""The thresholds of the performance targets, as data.

Each target lists its :class:`Limit` objects once; the row's ``target`` text
(:func:`target_text`) and its sub-checks (:func:`judge`, recorded in ``details["checks"]`` and
deciding ``passed``) are both derived from that list (:func:`judged` builds the row from it), so
the printed target and the check cannot disagree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from attnreg.bench.common import BenchResult
from attnreg.thresholds import SYMBOLS, check, check_op


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
        check_op(self.op)

    def describe(self) -> str:
        """The threshold in words, e.g. ``"≤ 3× Cholesky normal equations"``."""
        return self.text.format(op=SYMBOLS[self.op], bound=self.bound)


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


def judged(
    limits: Sequence[Limit],
    values: Mapping[str, float | None],
    *,
    row_id: str,
    workload: str,
    value: float | None,
    unit: str,
    reference: str,
    details: Mapping[str, Any],
    scales: Mapping[str, float] | None = None,
) -> BenchResult:
    """A target's row judged against its ``limits``: ``target`` is :func:`target_text`, the
    sub-checks :func:`judge` of ``values`` (and ``scales``) come first in ``details`` as
    ``"checks"``, and ``passed`` is whether every one of them passed."""
    checks = judge(limits, values, scales)
    return BenchResult(
        id=row_id,
        workload=workload,
        value=value,
        unit=unit,
        target=target_text(limits),
        passed=all(c["passed"] for c in checks),
        reference=reference,
        details={"checks": checks, **details},
    )
