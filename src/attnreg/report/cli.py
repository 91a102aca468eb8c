"""``attnreg report``: the main job."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from attnreg.report.build import build_report
from attnreg.studies.registry import STUDIES


def report_command(
    out: Path = typer.Option(
        Path("attnreg-report"),
        help="Folder for index.html, results.csv, "
        "results.parquet and (by default) the results store.",
    ),
    store: Path = typer.Option(
        None,
        help="Results store to read finished cells from and add "
        "new ones to (default: OUT/results.db).",
    ),
    study: list[str] = typer.Option(
        None, help="Only these studies (repeatable); default all: " + ", ".join(STUDIES) + "."
    ),
    seed: int = typer.Option(0, help="Seed of every study (same seed, same numbers)."),
    full: bool = typer.Option(
        False, "--full", help="Use the full (published-scale) profiles instead of the quick ones."
    ),
    workers: int = typer.Option(None, help="Studies run in parallel processes (default: cores)."),
    rerun: bool = typer.Option(False, help="Run every study again even if its cell is stored."),
    progress: bool = typer.Option(True, help="Show the progress bar over the studies."),
) -> None:
    """Run every study's quick profile (or read it from the store) and write one self-contained
    page, OUT/index.html, with the verify certificate, each study's figures and answers, and the
    tidy results as CSV/Parquet beside it. A failing study is shown as failed; the rest appear."""
    for name in study or []:
        if name not in STUDIES:
            raise typer.BadParameter(
                f"unknown study {name!r}; valid: {', '.join(STUDIES)}", param_hint="--study"
            )
    page = build_report(
        out,
        store_path=store,
        studies=list(study) if study else None,
        seed=seed,
        profile="full" if full else "quick",
        workers=workers,
        rerun=rerun,
        progress=progress,
    )
    Console(stderr=True).print(f"report written: {page}")
