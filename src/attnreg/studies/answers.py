"""A study's summary answers and how they print: a question or headline → a short sentence or a
table (:func:`summary_table`), shown as markdown, plain text or its prose paragraphs, and a
measured value printed against its limit (:func:`format_against`). A leaf module: the ledger,
the studies and the report read it."""

from __future__ import annotations

import math
from typing import Any

Summary = dict[str, Any]
"""A study's summary: a question or headline → a short sentence (``str``) or a table
(:func:`summary_table`)."""


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
