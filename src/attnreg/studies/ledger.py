"""The claims ledger: each claim of a source that a study tests, its measured number and a
verdict computed from that number against a stated threshold.

A study (or one of its sections) returns :class:`Claim` objects in
:attr:`~attnreg.studies.common.StudyResult.claims`; nothing here is written by hand but the
source's words, the measurement's name and the threshold. The verdict is

* *holds* — every measured case satisfies ``value op threshold``;
* *holds with a condition* — every case does and the claim carries a ``condition`` (e.g.
  "within its condition-scaled tolerance"), or only some cases do (the condition is then
  "only on" those cases, computed);
* *does not hold* — no case does;
* *not testable, because …* — the claim names its reason, or no case was measured.

Its :meth:`Claim.finding` sentence states the verdict first, a contradiction in so many words.
The sources: Tan & Zhao 2026 (arXiv 2604.13656, OLS as a one-layer transformer); Goulet
Coulombe 2025 (arXiv 2504.09663 and the "Everything is matter" blog, OLS as attention);
von Oswald et al. 2023 (arXiv 2212.07677, and "Uncovering mesa-optimization algorithms in
transformers", arXiv 2309.05858); Tang (regression as memory, correlation and ``√d_k``);
Ramsauer et al. 2021 and Krotov & Hopfield 2016 for capacity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from attnreg.studies.common import format_against, summary_table

HOLDS = "holds"
CONDITIONAL = "holds with a condition"
FAILS = "does not hold"
UNTESTABLE = "not testable"
VERDICTS = (HOLDS, CONDITIONAL, FAILS, UNTESTABLE)
LEDGER_KEY = "claims of the sources"
COLUMNS = ["source", "the source's words", "measurement", "number", "threshold", "verdict"]


def _passes(value: float, op: str, threshold: float) -> bool:
    return value <= threshold if op == "<=" else value >= threshold


@dataclass(frozen=True)
class Claim:
    """One claim of a source, tested by a measured number per case.

    ``values`` maps a case (a data mode, a dtype; ``""`` for a single number) to the measured
    number; the claim holds in a case when ``value op threshold`` (``op`` ``"<="`` or ``">="``).
    ``condition``: the condition under which a passing claim holds (empty: none).
    ``untestable``: why it cannot be tested (the verdict is then *not testable*).
    """

    source: str
    words: str
    measurement: str
    op: str
    threshold: float
    values: dict[str, float] = field(default_factory=dict)
    condition: str = ""
    untestable: str = ""

    def __post_init__(self) -> None:
        if self.op not in ("<=", ">="):
            raise ValueError(f"op: unknown value {self.op!r}; valid values are '<=', '>='")

    def passing(self) -> list[str]:
        """The cases whose number satisfies the threshold."""
        return [
            case
            for case, v in self.values.items()
            if math.isfinite(v) and _passes(v, self.op, self.threshold)
        ]

    def measured(self) -> dict[str, float]:
        return {c: v for c, v in self.values.items() if math.isfinite(v)}

    def verdict(self) -> str:
        """One of :data:`VERDICTS`, computed from the numbers."""
        if self.untestable or not self.measured():
            return UNTESTABLE
        good = self.passing()
        if len(good) == len(self.values):
            return CONDITIONAL if self.condition else HOLDS
        return CONDITIONAL if good else FAILS

    def contradicted(self) -> bool:
        """Whether a measured case fails its threshold: the verdict is *does not hold*, or
        *holds with a condition* on only some cases (the finding then opens with "The
        measurement contradicts the source")."""
        return self.verdict() in (FAILS, CONDITIONAL) and len(self.passing()) < len(self.values)

    def verdict_text(self) -> str:
        """The verdict with its condition or reason."""
        verdict = self.verdict()
        if verdict == UNTESTABLE:
            return f"{UNTESTABLE}, because {self.untestable or 'nothing was measured'}"
        if verdict == CONDITIONAL:
            good = self.passing()
            if len(good) < len(self.values):
                return f"{CONDITIONAL}: only on {', '.join(good)}"
            return f"{CONDITIONAL}: {self.condition}"
        return verdict

    def number(self) -> str:
        """The measured numbers, each shown with enough digits to differ from the threshold."""
        return "; ".join(
            (f"{case} " if case else "") + format_against(v, self.threshold)
            for case, v in self.values.items()
        )

    def threshold_text(self) -> str:
        return f"{'≤' if self.op == '<=' else '≥'} {self.threshold:g}"

    def finding(self) -> str:
        """The row's first sentence: the verdict, a contradiction stated as one."""
        verdict = self.verdict()
        if verdict == UNTESTABLE:
            return f"Not testable here, because {self.untestable or 'nothing was measured'}."
        head = {
            HOLDS: "The measurement agrees with the source",
            FAILS: "The measurement contradicts the source",
            CONDITIONAL: "The measurement agrees with the source under a condition",
        }[verdict]
        if verdict == CONDITIONAL and self.contradicted():
            head = "The measurement contradicts the source in part"
        return f"{head}: {self.measurement} is {self.number()} (threshold {self.threshold_text()})."

    def row(self) -> dict[str, Any]:
        """The ledger row (machine-readable: the numbers, the threshold and the verdict)."""
        return {
            "source": self.source,
            "words": self.words,
            "measurement": self.measurement,
            "values": dict(self.values),
            "op": self.op,
            "threshold": self.threshold,
            "verdict": self.verdict(),
            "verdict_text": self.verdict_text(),
            "finding": self.finding(),
        }


def ledger_rows(claims: list[Claim]) -> list[list[str]]:
    """The table rows of :data:`COLUMNS`, the finding first in the verdict column."""
    return [
        [
            c.source,
            c.words,
            c.measurement,
            c.number(),
            c.threshold_text(),
            f"{c.verdict_text()}. {c.finding()}",
        ]
        for c in claims
    ]


def ledger_table(claims: list[Claim], lead: str = "") -> dict[str, Any]:
    """The claims as a summary table (:func:`~attnreg.studies.common.summary_table`), with the
    machine-readable rows under ``"claims"``."""
    table = summary_table(
        lead or f"{len(claims)} claims tested; verdicts computed from the numbers.",
        COLUMNS,
        ledger_rows(claims),
    )
    table["claims"] = [c.row() for c in claims]
    return table


def markdown(rows: list[dict[str, Any]], study: bool = False) -> str:
    """Ledger rows (:meth:`Claim.row`, with ``"study"`` when ``study``) as a markdown table."""

    def esc(text: Any) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    head = (["study"] if study else []) + ["source", "claim", "verdict"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = ([r.get("study", "")] if study else []) + [
            r["source"],
            f"“{r['words']}”",
            f"**{r['verdict_text']}.** {r['finding']}",
        ]
        lines.append("| " + " | ".join(esc(c) for c in cells) + " |")
    return "\n".join(lines)


def admonition(claims: list[Claim], title: str) -> str:
    """The claims as an HTML admonition box (Material for MkDocs' ``admonition`` classes) with
    one row per claim: the source's words, the number and the verdict with its finding. A
    tutorial shows it with ``IPython.display.HTML``."""
    from html import escape

    rows = "".join(
        f"<tr><td>{escape(c.source)}</td><td>“{escape(c.words)}”</td>"
        f"<td>{escape(c.number())} ({escape(c.threshold_text())})</td>"
        f"<td><strong>{escape(c.verdict_text())}.</strong> {escape(c.finding())}</td></tr>"
        for c in claims
    )
    return (
        f'<div class="admonition note"><p class="admonition-title">{escape(title)}</p>'
        "<table><thead><tr><th>source</th><th>claim</th><th>number</th><th>verdict</th></tr>"
        f"</thead><tbody>{rows}</tbody></table></div>"
    )
