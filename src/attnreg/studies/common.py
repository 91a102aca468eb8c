"""What every study returns, so the CLI, the sweeps and the report treat them alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnreg.output import rows_to_json, write_csv


@dataclass
class FigureRecord:
    """One saved figure: its PNG path (an SVG sits beside it) and a caption that names the
    config that re-creates it."""

    path: Path
    caption: str


@dataclass
class StudyResult:
    """A study's outcome: tidy rows (one per configuration × seed), figures, and a summary.

    ``summary`` maps a question or headline to its measured answer (a sentence with numbers);
    ``checks`` are pass/fail criteria ``{check, value, op, limit, passed}`` (a command exits
    with status 1 when one fails).
    """

    study: str
    config: dict[str, Any]
    rows: list[dict[str, Any]]
    figures: list[FigureRecord] = field(default_factory=list)
    summary: dict[str, str] = field(default_factory=dict)
    checks: list[dict[str, Any]] = field(default_factory=list)

    def write(self, out_dir: str | Path) -> Path:
        """Write ``rows.csv`` and ``rows.json`` into ``out_dir`` (figures are saved already)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_csv(self.rows, out / f"{self.study}_rows.csv")
        (out / f"{self.study}_rows.json").write_text(rows_to_json(self.rows))
        return out
