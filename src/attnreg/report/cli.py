"""``attnreg report``: the main job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from attnreg.config import read_config_file
from attnreg.core.validation import check_seed
from attnreg.report.build import build_report, check_overrides
from attnreg.runs.cli import check_workers_option, fail, interrupted
from attnreg.runs.lifecycle import RunInterrupted
from attnreg.runs.paths import folder_problem
from attnreg.runs.store import StoreError
from attnreg.studies.registry import STUDIES


def load_overrides(path: Path) -> dict[str, dict[str, Any]]:
    """A YAML (or ``.json``) mapping of study name to config keys, read by
    :func:`~attnreg.config.read_config_file` (safe YAML); a one-line ``ValueError`` that starts
    with ``--overrides`` and the path otherwise (an empty file: no overrides)."""
    data = read_config_file(path, name="--overrides")
    where = f"--overrides {str(path)!r}"
    if not all(isinstance(v, dict) for v in data.values()):
        raise ValueError(f"{where}: expected a mapping of study name to config keys")
    for name in data:
        if name not in STUDIES:
            raise ValueError(f"{where}: unknown study {name!r}; valid: {', '.join(STUDIES)}")
    return data


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
    overrides: Path = typer.Option(
        None,
        help="YAML file mapping a study to config keys replacing its profile's values "
        "(e.g. smaller grids: 'icl: {steps: 30}'); the page lists them.",
    ),
) -> None:
    """Run every study's quick profile (or read it from the store) and write one self-contained
    page, OUT/index.html, with the verify certificate, each study's figures and answers, and the
    tidy results as CSV/Parquet beside it. A failing study is shown as failed; the rest appear.
    Ctrl-C (SIGINT) or SIGTERM stops it within seconds, keeping every finished study."""
    for name in study or []:
        if name not in STUDIES:
            fail(f"--study: unknown study {name!r}; valid: {', '.join(STUDIES)}")
    check_workers_option(workers)
    try:
        check_seed("--seed", seed)
    except ValueError as exc:
        fail(str(exc))
    changed = None
    if overrides is not None:
        try:
            changed = load_overrides(overrides)
        except ValueError as exc:
            fail(str(exc))
        try:  # every overridden config is built now: a bad value stops before anything runs
            check_overrides(changed, seed, "full" if full else "quick")
        except ValueError as exc:
            fail(str(exc))
    problem = folder_problem(out)
    if problem:
        fail(f"--out {out} {problem}")
    try:
        page = build_report(
            out,
            store_path=store,
            studies=list(study) if study else None,
            seed=seed,
            profile="full" if full else "quick",
            workers=workers,
            rerun=rerun,
            progress=progress,
            overrides=changed,
        )
    except (StoreError, ValueError) as exc:
        fail(str(exc))
    except RunInterrupted as exc:
        interrupted(exc, store or out / "results.db")
    Console(stderr=True).print(f"report written: {page}")
