"""The report page: one self-contained HTML file (figures embedded, no network needed).

Rendered with Jinja2 and autoescaping on, so every label, config value and error message is
HTML-escaped; figures are PNGs embedded as ``data:`` URIs.
"""

from __future__ import annotations

import json
import math
import platform
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from attnreg import __version__
from attnreg.output import strict_json
from attnreg.runs.record import CellResult
from attnreg.studies.answers import cell_text, format_against, is_table
from attnreg.studies.ledger import (
    ICONS,
    LEDGER_KEY,
    VERDICT_CSS,
    totals,
    totals_text,
    verdict_class,
)
from attnreg.studies.published import merge
from attnreg.studies.registry import STUDIES

MAX_TABLE_ROWS = 200


@dataclass
class StudySection:
    """What the template needs of one study."""

    name: str
    title: str
    command: str
    config_json: str
    status: str
    seconds: float
    summary: dict[str, Any] = field(default_factory=dict)
    claims: list[dict[str, Any]] = field(default_factory=list)
    figures: list[dict[str, str]] = field(default_factory=list)
    table: dict[str, Any] | None = None
    error: str | None = None


def _cell(value: Any, column: str) -> dict[str, Any]:
    if column in ("passed",) and isinstance(value, bool):
        return {"kind": "pass", "value": value}
    if isinstance(value, float):
        text = (
            ""
            if not math.isfinite(value)
            else (f"{value:.3g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.2e}")
        )
        return {"kind": "num", "text": text}
    return {"kind": "text", "text": "" if value is None else str(value)}


def certificate_table(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The rows of a study as a table (at most ``MAX_TABLE_ROWS`` rows)."""
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    shown = rows[:MAX_TABLE_ROWS]
    return {
        "columns": columns,
        "rows": [[_cell(row.get(c), c) for c in columns] for row in shown],
        "truncated": max(0, len(rows) - len(shown)),
    }


def _answer(answer: Any) -> dict[str, Any]:
    """A summary answer for the template: a sentence, or a table with its cells as text."""
    if is_table(answer):
        return {
            "lead": answer["lead"],
            "columns": answer["columns"],
            "rows": [[cell_text(c) for c in row] for row in answer["rows"]],
            "note": answer.get("note", ""),
        }
    return {"lead": str(answer)}


def section(cell: CellResult, command: str, table: bool) -> StudySection:
    """A study section from its stored cell, under the title of the study's spec; its claims
    (the summary entry :data:`~attnreg.studies.ledger.LEDGER_KEY`) go to the page's ledger."""
    spec = STUDIES.get(cell.study)
    ledger = cell.summary.get(LEDGER_KEY)
    claims: list[dict[str, Any]] = merge(
        list(ledger.get("claims", [])) if isinstance(ledger, dict) else [], cell.study
    )
    return StudySection(
        name=cell.study,
        title=spec.title if spec is not None else cell.study,
        command=command,
        config_json=json.dumps(cell.config, sort_keys=True),
        status=cell.status,
        seconds=cell.finished - cell.started,
        summary={q: _answer(a) for q, a in cell.summary.items() if q != LEDGER_KEY},
        claims=claims,
        figures=cell.figures,
        table=certificate_table(cell.rows) if table and cell.status == "done" else None,
        error=cell.error,
    )


def ledger_rows(sections: list[StudySection]) -> list[dict[str, Any]]:
    """Every study's ledger rows, each tagged with its study."""
    return [{"study": s.name} | c for s in sections for c in s.claims]


def write_ledger(sections: list[StudySection], path: Path) -> Path:
    """``ledger.json``: one object per claim (source, quote, where, kind, paper_regime,
    run_regime, measurement, values, threshold, threshold_origin, verdict, …) with the totals;
    strict JSON (a value that is not a finite number, e.g. a case whose run overflowed, is
    ``null``)."""
    rows = ledger_rows(sections)
    ledger = strict_json({"totals": totals(rows), "claims": rows})
    path.write_text(
        json.dumps(ledger, indent=2, ensure_ascii=False, allow_nan=False), encoding="utf-8"
    )
    return path


def render(sections: list[StudySection], store_name: str, n_cells: int) -> str:
    """The whole page as a string."""
    env = Environment(
        loader=PackageLoader("attnreg.report", "templates"),
        autoescape=select_autoescape(["html", "j2"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["fmtnum"] = format_against
    env.filters["verdict_class"] = verdict_class  # before the template is compiled
    template = env.get_template("index.html.j2")
    ledger = ledger_rows(sections)
    return template.render(
        ledger=ledger,
        ledger_totals=totals_text(ledger),
        verdict_counts=[(v, n, ICONS[v], VERDICT_CSS[v]) for v, n in totals(ledger).items() if n],
        verdict_css=VERDICT_CSS,
        version=__version__,
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        machine=f"{platform.machine()} · Python {platform.python_version()}",
        studies=sections,
        n_failed=sum(s.status != "done" for s in sections),
        total_seconds=sum(s.seconds for s in sections),
        store_name=store_name,
        n_cells=n_cells,
    )
