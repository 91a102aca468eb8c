"""What every study returns, so the CLI, the sweeps and the report treat them alike.

A study's runner computes and returns a :class:`StudyResult`; it writes nothing. The caller
writes the result where it wants it (:meth:`StudyResult.write`), or keeps only its rows (a
sweep cell) and its figures as PNG bytes (:meth:`FigureRecord.png`).
"""

from __future__ import annotations

import io
import json
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnreg.output import rows_to_json, save_figure, write_csv

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from attnreg.models import TokenModel

Summary = dict[str, Any]
"""A study's summary: a question or headline → a short sentence (``str``) or a table
(:func:`summary_table`)."""


@dataclass
class FigureRecord:
    """One figure: its file stem ``name``, a caption that names the config that re-creates it,
    the matplotlib figure until it is written, then the PNG's ``path`` (an SVG sits beside it).
    """

    name: str
    caption: str
    figure: Figure | None = None
    path: Path | None = None

    def png(self) -> bytes:
        """The figure as PNG bytes (150 dpi), from memory or from its written file."""
        if self.figure is not None:
            buffer = io.BytesIO()
            self.figure.savefig(buffer, format="png", dpi=150, bbox_inches="tight")
            return buffer.getvalue()
        if self.path is None:
            raise ValueError(f"figure {self.name!r}: neither in memory nor written")
        return self.path.read_bytes()

    def close(self) -> None:
        """Drop the matplotlib figure (a plain ``Figure``, not tracked by pyplot: freed once
        unreferenced; a written figure is dropped already)."""
        self.figure = None

    def write(self, out_dir: Path) -> Path:
        """Save as ``out_dir/name.png`` and ``.svg``, drop the matplotlib figure, keep the path
        (a figure written before is copied from its files)."""
        out = Path(out_dir)
        if self.figure is not None:
            self.path = save_figure(self.figure, out, self.name)[0]
            self.figure = None
        elif self.path is None:
            raise ValueError(f"figure {self.name!r}: neither in memory nor written")
        elif self.path.parent.resolve() != out.resolve():
            out.mkdir(parents=True, exist_ok=True)
            for suffix in (".png", ".svg"):
                shutil.copyfile(self.path.with_suffix(suffix), out / f"{self.name}{suffix}")
            self.path = out / f"{self.name}.png"
        return self.path


@dataclass
class StudyResult:
    """A study's outcome: tidy rows (one per configuration × seed), figures, a summary, checks.

    ``summary`` maps a question or headline to its measured answer: a short sentence, or a
    lead sentence with a small table (:func:`summary_table`); ``claims`` are the claims of the
    sources the study tests, each with its number and computed verdict
    (:class:`~attnreg.studies.ledger.Claim`); ``checks`` are pass/fail criteria
    ``{check, value, op, limit, passed}`` whose limits are config fields (a command exits with
    status 1 when one fails); ``tables`` are further tidy tables by file stem; ``models`` are
    trained models to save as checkpoints, by name, with their metadata.
    """

    study: str
    config: dict[str, Any]
    rows: list[dict[str, Any]]
    figures: list[FigureRecord] = field(default_factory=list)
    summary: Summary = field(default_factory=dict)
    checks: list[dict[str, Any]] = field(default_factory=list)
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    claims: list[Any] = field(default_factory=list)  # ledger.Claim (ledger imports this)
    models: dict[str, tuple[TokenModel, dict[str, Any]]] = field(default_factory=dict)

    def add(self, section: Section) -> None:
        """Merge a section's rows, summary, checks, claims, figures and tables into this
        result."""
        self.rows += section.rows
        self.summary |= section.summary
        self.checks += section.checks
        self.claims += section.claims
        self.figures += section.figures
        self.tables |= section.tables

    def write(self, out_dir: str | Path) -> Path:
        """Write everything into ``out_dir``: ``<study>_rows.csv/.json``, each table as
        ``<name>.csv``, ``<study>_summary.json`` (summary with its tables, checks and the claims
        ledger), the figures as PNG + SVG
        and the models as ``checkpoints/<name>.pt``."""
        from attnreg.models import save_model

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_csv(self.rows, out / f"{self.study}_rows.csv")
        (out / f"{self.study}_rows.json").write_text(rows_to_json(self.rows))
        for name, table in self.tables.items():
            write_csv(table, out / f"{name}.csv")
        summary = {
            "summary": self.summary,
            "checks": self.checks,
            "claims": [c.row() for c in self.claims],
        }
        (out / f"{self.study}_summary.json").write_text(json.dumps(summary, indent=2))
        for figure in self.figures:
            figure.write(out)
        for name, (model, meta) in self.models.items():
            save_model(out / "checkpoints" / f"{name}.pt", model, meta)
        return out


@dataclass
class Section:
    """One part of a study computed on its own (e.g. one question of a source): its tidy rows,
    summary answers, checks, claims, figures and tables, merged into the study's result by
    :meth:`StudyResult.add`."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    summary: Summary = field(default_factory=dict)
    checks: list[dict[str, Any]] = field(default_factory=list)
    figures: list[FigureRecord] = field(default_factory=list)
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    claims: list[Any] = field(default_factory=list)  # ledger.Claim (ledger imports this)


def format_against(value: float, limit: float, digits: int = 3) -> str:
    """``value`` shown with two significant digits more than ``limit`` needs (at least
    ``digits``), and more if that still prints it equal to ``limit``: against ``1.02`` (three
    digits) ``1.0002`` shows as ``"1.0002"``, not ``"1"``; against ``1e-12``, ``2.17e-15``."""
    value, limit = float(value), float(limit)
    if not (math.isfinite(value) and math.isfinite(limit)):
        return f"{value:.{digits}g}"
    mantissa = f"{abs(limit):.12e}".split("e")[0].replace(".", "").rstrip("0")
    n = max(digits, len(mantissa) + 2)
    while n < 15 and value != limit and float(f"{value:.{n}g}") == limit:
        n += 1
    return f"{value:.{n}g}"


def summary_table(
    lead: str, columns: list[str], rows: list[list[Any]], note: str = ""
) -> dict[str, Any]:
    """A summary answer as a table: a short ``lead`` sentence, ``columns`` and ``rows`` (cells
    are strings or numbers; floats are shown with 3 significant digits), and an optional closing
    ``note``. Kept machine-readable in ``<study>_summary.json``; the report renders it as an HTML
    table, the docs as markdown (:func:`table_markdown`)."""
    if any(len(r) != len(columns) for r in rows):
        raise ValueError("rows: every row needs one cell per column")
    return {"lead": lead, "columns": list(columns), "rows": [list(r) for r in rows], "note": note}


def is_table(answer: Any) -> bool:
    """Whether a summary answer is a :func:`summary_table` (else a sentence)."""
    return isinstance(answer, dict) and "columns" in answer and "rows" in answer


def cell_text(value: Any) -> str:
    """A table cell as text: floats with 3 significant digits, others by ``str``."""
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.3g}"
    return str(value)


def table_markdown(answer: dict[str, Any]) -> str:
    """A :func:`summary_table` as markdown: the lead, the table, the note."""

    def row(cells: list[Any]) -> str:
        return "| " + " | ".join(cell_text(c).replace("|", "\\|") for c in cells) + " |"

    lines = [answer["lead"], "", row(answer["columns"]), "|" + "---|" * len(answer["columns"])]
    lines += [row(r) for r in answer["rows"]]
    if answer.get("note"):
        lines += ["", answer["note"]]
    return "\n".join(lines)


def summary_markdown(summary: Summary) -> str:
    """A whole summary as markdown: each question in bold, then its sentence or table."""
    parts = []
    for question, answer in summary.items():
        body = table_markdown(answer) if is_table(answer) else str(answer)
        parts.append(f"**{question}**\n\n{body}")
    return "\n\n".join(parts)


def answer_text(answer: Any) -> str:
    """A summary answer as plain text: a sentence as is; a table as its lead, its columns and
    cells (``" · "``-separated, floats as :func:`cell_text` shows them) and its note."""
    if not is_table(answer):
        return str(answer)
    cells = [" · ".join(cell_text(c) for c in row) for row in [answer["columns"], *answer["rows"]]]
    return " ".join([answer["lead"], *cells, answer.get("note", "")]).strip()


def paragraphs(summary: Summary) -> list[str]:
    """Every prose paragraph of a summary: its sentences, and each table's lead and note
    (table cells are not prose)."""
    out: list[str] = []
    for answer in summary.values():
        if is_table(answer):
            out += [answer["lead"]] + ([answer["note"]] if answer.get("note") else [])
        elif isinstance(answer, str):
            out.append(answer)
    return out
