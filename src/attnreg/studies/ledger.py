"""The claims ledger: each claim of a source that a study tests, in the source's words, the
number measured, and a verdict computed from that number.

A study (or one of its sections) returns :class:`Claim` objects in
:attr:`~attnreg.studies.common.StudyResult.claims`. A claim carries

* its :class:`Quote` — the source (:mod:`~attnreg.studies.sources`), the words **verbatim**
  with where they stand (section, theorem, figure, paragraph), or a paraphrase marked as one
  (shown without quotation marks);
* its **kind**: :data:`IDENTITY` (a proved equality), :data:`EMPIRICAL` (a result the source
  measured, in its setup), :data:`REMARK` (a hedged or qualitative aside) or :data:`OPEN` (a
  question the source asks);
* the measurement and its values per case, with standard errors where there are seeds;
* a :class:`~attnreg.thresholds.Threshold` that says where it comes from (the paper's own
  number, a null distribution measured in the same run, paired standard errors over seeds, an
  error bound);
* for a claim about trained models, a :class:`Regime`: the paper's setup and the run's, and
  whether the run met it.

The verdict is computed, never written:

* *open question* — the kind is :data:`OPEN`: the measurement and its answer, no verdict;
* *no verdict: reduced scale* — the claim has a regime that the run did not meet (in no case:
  a regime met in some cases only judges those, and names the others as below it);
* *not testable* — the claim names its reason, nothing was measured, or a remark has no
  reading as a number;
* *holds* — every case satisfies ``value op threshold``; *conditional* — every case does, under
  the claim's stated condition; *partial n of m* — some cases do; *does not hold* — none does.

:meth:`Claim.why` is the verdict's one-line reason (a contradiction said first), and
:meth:`Claim.row` the machine-readable row the report writes to ``ledger.json``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape
from typing import Any

from attnreg.studies.answers import format_against, summary_table
from attnreg.studies.sources import Source
from attnreg.studies.tex import plain
from attnreg.thresholds import Threshold

IDENTITY = "identity"
EMPIRICAL = "empirical"
REMARK = "remark"
OPEN = "open question"
KINDS = (IDENTITY, EMPIRICAL, REMARK, OPEN)

HOLDS = "holds"
CONDITIONAL = "conditional"
PARTIAL = "partial"
FAILS = "does not hold"
REDUCED = "no verdict: reduced scale"
OPEN_QUESTION = "open question"
UNTESTABLE = "not testable"
VERDICTS = (HOLDS, CONDITIONAL, PARTIAL, FAILS, REDUCED, OPEN_QUESTION, UNTESTABLE)
ICONS = {
    HOLDS: "✔",
    CONDITIONAL: "◐",
    PARTIAL: "◑",
    FAILS: "✘",
    REDUCED: "◷",
    OPEN_QUESTION: "?",
    UNTESTABLE: "–",
}
"""The icon shown beside each verdict (with its colour, on the report and the docs)."""

LEDGER_KEY = "claims of the sources"


@dataclass(frozen=True)
class Quote:
    """A source's words: ``text`` verbatim (``verbatim=True``, shown in quotation marks) or a
    paraphrase (``verbatim=False``, shown as one); ``where`` they stand in the source."""

    source: Source
    text: str
    where: str
    verbatim: bool = True

    def __post_init__(self) -> None:
        if not self.text.strip() or not self.where.strip():
            raise ValueError("quote: text and where must be non-empty")

    def shown(self) -> str:
        """The words as the ledger shows them: “…” when verbatim, else marked a paraphrase; a
        source's inline TeX in Unicode (:func:`~attnreg.studies.tex.plain`: the pages load no
        MathJax)."""
        return shown_quote(self.text, self.verbatim)


@dataclass(frozen=True)
class Regime:
    """The setup a trained-model claim is about (``paper``: model, depth, width, steps, data,
    metric) and the one the run met (``run``); ``met`` whether the run reaches the paper's
    (converged, at its depth, beating its weakest baseline), ``needed`` what scale would.
    ``unmet``: the claim's cases whose runs did not meet it although others did (a regime met
    cell by cell): they get no verdict, the others are judged."""

    paper: str
    run: str
    met: bool
    needed: str = ""
    unmet: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if (not self.met or self.unmet) and not self.needed.strip():
            raise ValueError("regime: a run below the paper's regime must say what is needed")


@dataclass(frozen=True)
class Claim:
    """One claim of a source, its measured values per case and the computed verdict.

    ``values`` maps a case (a data mode, a depth; ``""`` for a single number) to the measured
    number, ``errors`` the same cases to a standard error (shown as ±). ``answer``: an open
    question's measured answer (a sentence computed from the numbers). ``reading``: how a
    remark is read as the number (a remark without one gets no verdict). ``condition``: the
    condition under which a passing claim holds. ``untestable``: why it cannot be tested here.
    """

    quote: Quote
    kind: str
    measurement: str
    values: dict[str, float] = field(default_factory=dict)
    threshold: Threshold | None = None
    errors: dict[str, float] = field(default_factory=dict)
    regime: Regime | None = None
    answer: str = ""
    reading: str = ""
    condition: str = ""
    untestable: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind: unknown value {self.kind!r}; valid values are {KINDS}")
        if self.kind == OPEN:
            if self.threshold is not None:
                raise ValueError("an open question gets an answer, not a threshold")
            if not (self.answer or self.untestable):
                raise ValueError("an open question needs its measured answer")
        if self.kind == REMARK and self.threshold is not None and not self.reading:
            raise ValueError("a remark judged by a threshold must say how it reads as a number")
        if self.kind in (IDENTITY, EMPIRICAL) and self.threshold is None and not self.untestable:
            raise ValueError(f"a claim of kind {self.kind!r} needs a threshold")

    @property
    def source(self) -> Source:
        return self.quote.source

    def measured(self) -> dict[str, float]:
        return {c: v for c, v in self.values.items() if math.isfinite(v)}

    def unmet(self) -> list[str]:
        """The cases whose runs did not meet the claim's regime (no verdict on them)."""
        return [c for c in self.values if self.regime is not None and c in self.regime.unmet]

    def judged(self) -> list[str]:
        """The cases the verdict is computed from: every case but those below the regime."""
        return [c for c in self.values if c not in self.unmet()]

    def passing(self) -> list[str]:
        """The judged cases whose number satisfies the threshold."""
        if self.threshold is None:
            return []
        return [c for c in self.judged() if self.threshold.passes(self.values[c])]

    def verdict(self) -> str:
        """One of :data:`VERDICTS`, computed from the numbers."""
        if self.kind == OPEN:
            return UNTESTABLE if self.untestable else OPEN_QUESTION
        if self.untestable or not self.measured() or self.threshold is None:
            return UNTESTABLE
        if self.regime is not None and not (self.regime.met and self.judged()):
            return REDUCED
        good = len(self.passing())
        if good == len(self.judged()):
            return CONDITIONAL if self.condition else HOLDS
        return PARTIAL if good else FAILS

    def contradicted(self) -> bool:
        """Whether a fair measurement contradicts the claim in full or in part (*does not hold*
        or *partial*)."""
        return self.verdict() in (FAILS, PARTIAL)

    def verdict_text(self) -> str:
        """The verdict as shown: *partial* with its count ("partial 2 of 3")."""
        verdict = self.verdict()
        if verdict == PARTIAL:
            return f"{PARTIAL} {len(self.passing())} of {len(self.judged())}"
        return verdict

    def why(self) -> str:
        """The verdict's one-line reason; a contradiction is said first. It names cases and the
        threshold's origin, not the numbers (they have their own column)."""
        verdict = self.verdict()
        if verdict == OPEN_QUESTION:
            return self.answer
        if verdict == UNTESTABLE:
            if self.untestable:
                return f"Not testable here: {self.untestable}."
            if self.threshold is None and self.measured():
                return "Measured; the remark is not read as a number, so no verdict."
            return "Not testable here: nothing was measured."
        if verdict == REDUCED:
            assert self.regime is not None
            return (
                f"Measured at reduced scale ({self.regime.run}); the claim is about "
                f"{self.regime.paper}. Needs: {self.regime.needed}."
            )
        assert self.threshold is not None
        return self._judged_why(verdict, self.threshold.origin) + self._unmet_why()

    def _judged_why(self, verdict: str, origin: str) -> str:
        judged = self.judged()
        within = " in the paper's regime" if self.unmet() else ""
        if verdict == FAILS:
            none = f"none of the {len(judged)} cases{within}" if within else "no case"
            return f"Contradicted: {none} meets the threshold ({origin})."
        if verdict == PARTIAL:
            good = self.passing()
            bad = [c for c in judged if c not in good]
            return f"Contradicted on {', '.join(bad)}; holds on {', '.join(good)} ({origin})."
        cases = "" if judged == [""] else f"every case{within} ({len(judged)}) "
        head = f"{cases}meets the threshold ({origin})".strip()
        head = head[0].upper() + head[1:]
        if verdict == CONDITIONAL:
            return f"{head}, on condition: {self.condition}."
        return f"{head}."

    def _unmet_why(self) -> str:
        """`` No verdict on …: below the regime …`` for a regime met in some cases only."""
        unmet = self.unmet()
        if not unmet:
            return ""
        assert self.regime is not None
        return (
            f" No verdict on {'; '.join(unmet)}: their runs are below the paper's regime "
            f"(needs: {self.regime.needed})."
        )

    def number(self) -> str:
        """The measured numbers, with ± their standard errors, each shown with enough digits to
        differ from the threshold; a case below the claim's regime is marked as such."""
        limit = self.threshold.limit if self.threshold is not None else math.nan
        unmet = self.unmet()
        parts = []
        for case, v in self.values.items():
            text = format_against(v, limit) if math.isfinite(limit) else f"{v:.3g}"
            if case in self.errors and math.isfinite(self.errors[case]):
                text += f" ± {self.errors[case]:.2g}"
            if case in unmet:
                text += " (below the regime)"
            parts.append((f"{case}: " if case else "") + text)
        return "; ".join(parts)

    def threshold_text(self) -> str:
        return self.threshold.text() if self.threshold is not None else ""

    def row(self) -> dict[str, Any]:
        """The machine-readable row (``ledger.json``): source, quote, where, kind, regimes,
        measurement, values, threshold, its origin and the verdict."""
        t = self.threshold
        return {
            "source": self.source.cite(),
            "source_short": self.source.short(),
            "quote": self.quote.text,
            "verbatim": self.quote.verbatim,
            "where": self.quote.where,
            "kind": self.kind,
            "paper_regime": self.regime.paper if self.regime else None,
            "run_regime": self.regime.run if self.regime else None,
            "regime_met": self.regime.met if self.regime else None,
            "regime_unmet": self.unmet(),
            "measurement": self.measurement,
            "values": dict(self.values),
            "errors": dict(self.errors),
            "number": self.number(),
            "op": t.op if t else None,
            "threshold": t.limit if t else None,
            "threshold_text": self.threshold_text(),
            "threshold_origin": t.origin if t else None,
            "reading": self.reading or None,
            "verdict": self.verdict(),
            "verdict_text": self.verdict_text(),
            "icon": ICONS[self.verdict()],
            "why": self.why(),
        }


def totals(rows: list[dict[str, Any]]) -> dict[str, int]:
    """How many rows have each verdict (every verdict listed, zeros included)."""
    return {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS}


def totals_text(rows: list[dict[str, Any]]) -> str:
    """The ledger's opening line: ``"31 claims: 12 holds · 3 conditional · …"``."""
    counts = ", ".join(f"{n} {v}" for v, n in totals(rows).items() if n)
    return f"{len(rows)} claims: {counts}." if rows else "No claims measured."


def ledger_table(claims: list[Claim], lead: str = "") -> dict[str, Any]:
    """The claims as a summary table (:func:`~attnreg.studies.answers.summary_table`), with the
    machine-readable rows under ``"claims"``."""
    rows = [c.row() for c in claims]
    table = summary_table(
        lead or totals_text(rows),
        ["source", "claim", "kind", "number", "threshold", "verdict"],
        [
            [
                r["source_short"],
                _words(r),
                r["kind"],
                r["number"],
                r["threshold_text"],
                f"{r['icon']} {r['verdict_text']}. {r['why']}",
            ]
            for r in rows
        ],
    )
    table["claims"] = rows
    return table


def shown_quote(text: str, verbatim: bool) -> str:
    """A quote as the ledger shows it: “…” when verbatim, else marked a paraphrase; the
    source's inline TeX in Unicode (:func:`~attnreg.studies.tex.plain`)."""
    return f"“{plain(text)}”" if verbatim else f"(paraphrase) {plain(text)}"


def _words(row: dict[str, Any]) -> str:
    return f"{shown_quote(row['quote'], row['verbatim'])} ({row['where']})"


def markdown(rows: list[dict[str, Any]], study: bool = False) -> str:
    """Ledger rows (:meth:`Claim.row`, with ``"study"`` when ``study``) as a markdown table."""

    def esc(text: Any) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    head = (["study"] if study else []) + ["source", "claim", "verdict"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = ([r.get("study", "")] if study else []) + [
            r["source_short"],
            _words(r),
            f"{r['icon']} **{r['verdict_text']}.** {r['why']}",
        ]
        lines.append("| " + " | ".join(esc(c) for c in cells) + " |")
    return "\n".join(lines)


VERDICT_CSS = {
    HOLDS: "#1a7f37",
    CONDITIONAL: "#0a7a8a",
    PARTIAL: "#b26a00",
    FAILS: "#c62828",
    REDUCED: "#6b7280",
    OPEN_QUESTION: "#3558c9",
    UNTESTABLE: "#6b7280",
}
"""The colour of each verdict (text and left border), on the report page and the docs."""


def verdict_class(verdict: str) -> str:
    """The CSS class of a verdict (``verdict-does-not-hold``)."""
    return "verdict-" + "".join(ch if ch.isalnum() else "-" for ch in verdict)


def admonition(
    claims: list[Claim] | list[dict[str, Any]], title: str, study: str | None = None
) -> str:
    """Claims (or their rows) as an HTML box (Material for MkDocs' ``admonition`` classes):
    the totals, then one row per claim — source, words with where they stand, kind, number
    (against the threshold), and the coloured verdict with its reason. With ``study``, the
    committed full-scale verdicts of that study are read in
    (:func:`attnreg.studies.published.merge`). A tutorial shows it with
    ``IPython.display.HTML``."""
    from attnreg.studies.published import merge

    rows = [c.row() if isinstance(c, Claim) else c for c in claims]
    if study is not None:
        rows = merge(rows, study)
    body = "".join(
        f'<tr class="{verdict_class(r["verdict"])}">'
        f"<td>{escape(r['source_short'])}</td><td>{escape(_words(r))}</td>"
        f"<td>{escape(r['kind'])}</td>"
        f'<td><span class="ledger-muted">{escape(r["measurement"])}:</span> {escape(r["number"])}'
        + (f" ({escape(r['threshold_text'])})" if r["threshold_text"] else "")
        + "</td>"
        f'<td><strong style="color:{VERDICT_CSS[r["verdict"]]}">{escape(r["icon"])} '
        f"{escape(r['verdict_text'])}.</strong> {escape(r['why'])}</td></tr>"
        for r in rows
    )
    return (
        f'<div class="admonition note"><p class="admonition-title">{escape(title)}</p>'
        f"<p>{escape(totals_text(rows))}</p>"
        "<table><thead><tr><th>source</th><th>claim (where)</th><th>kind</th><th>number</th>"
        f"<th>verdict</th></tr></thead><tbody>{body}</tbody></table></div>"
    )
