"""``attnreg sweep``: run a grid of cells into the results store."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from attnreg.runs.executors import EXECUTORS, run_cells
from attnreg.runs.store import ResultsStore
from attnreg.runs.sweep import load_sweep


def sweep_command(
    sweep_file: Path = typer.Argument(..., help="YAML sweep file: study, base, grid, seeds."),
    store: Path = typer.Option(Path("attnreg-results.db"), help="SQLite results store."),
    executor: str = typer.Option(
        "local", help="local (a process pool over this machine's cores) or dask."
    ),
    scheduler: str = typer.Option(
        None,
        help="Address of an existing Dask scheduler (tcp://host:8786); without it, "
        "--executor dask starts a LocalCluster.",
    ),
    workers: int = typer.Option(None, help="Worker processes (default: one per core)."),
    retry_failed: bool = typer.Option(False, help="Run again the cells stored as failed."),
    export: Path = typer.Option(None, help="Also write results.csv and results.parquet here."),
    progress: bool = typer.Option(True, help="Show the progress bar."),
) -> None:
    """Run every cell of a sweep; finished cells already in the store are skipped, so a killed
    sweep continues where it stopped. Only this process writes the store."""
    if executor not in EXECUTORS:
        raise typer.BadParameter(
            f"unknown executor {executor!r}; valid: local, dask", param_hint="--executor"
        )
    try:
        sweep = load_sweep(sweep_file)
    except (ValueError, OSError) as exc:
        raise typer.BadParameter(str(exc), param_hint="SWEEP_FILE") from exc
    console = Console(stderr=True)
    with ResultsStore(store) as db:
        outcome = run_cells(
            sweep.cells,
            db,
            executor=executor,
            workers=workers,
            scheduler=scheduler,
            retry_failed=retry_failed,
            figures=sweep.figures,
            progress=progress,
        )
        console.print(
            f"{sweep.name}: {len(sweep.cells)} cells — {outcome.done} run now, "
            f"{outcome.failed} failed, {outcome.skipped} already stored → {store}"
        )
        if export:
            db.export(export, sweep.study)
    if outcome.failed:
        raise typer.Exit(code=1)
