"""What every study returns, so the CLI, the sweeps and the report treat them alike.

A study's runner computes and returns a :class:`StudyResult`; it writes nothing. The caller
writes the result where it wants it (:meth:`StudyResult.write`), or keeps only its rows (a
sweep cell) and its figures as PNG bytes (:meth:`FigureRecord.png`).
"""

from __future__ import annotations

import io
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnreg.output import rows_to_json, save_figure, write_csv
from attnreg.studies.answers import Summary
from attnreg.studies.ledger import Claim

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from attnreg.models import TokenModel


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
    lead sentence with a small table (:func:`~attnreg.studies.answers.summary_table`);
    ``claims`` are the claims of the sources the study tests, each with its number and
    computed verdict (:class:`~attnreg.studies.ledger.Claim`); ``checks`` are pass/fail criteria
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
    claims: list[Claim] = field(default_factory=list)
    models: dict[str, tuple[TokenModel, dict[str, Any]]] = field(default_factory=dict)

    def add(self, section: Section) -> None:
        """Merge a section's rows, summary, checks, claims, figures, tables and models into
        this result."""
        self.rows += section.rows
        self.summary |= section.summary
        self.checks += section.checks
        self.claims += section.claims
        self.figures += section.figures
        self.tables |= section.tables
        self.models |= section.models

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
    summary answers, checks, claims, figures, tables and trained models, merged into the
    study's result by :meth:`StudyResult.add`."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    summary: Summary = field(default_factory=dict)
    checks: list[dict[str, Any]] = field(default_factory=list)
    figures: list[FigureRecord] = field(default_factory=list)
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    claims: list[Claim] = field(default_factory=list)
    models: dict[str, tuple[TokenModel, dict[str, Any]]] = field(default_factory=dict)
