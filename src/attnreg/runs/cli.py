"""``attnreg sweep``: run a grid of cells into the results store."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console

from attnreg.runs.executors import EXECUTORS, check_scheduler, run_cells
from attnreg.runs.lifecycle import RunInterrupted
from attnreg.runs.paths import folder_problem
from attnreg.runs.store import ResultsStore, StoreError
from attnreg.runs.sweep import load_sweep

USAGE_ERROR = 2


def fail(message: str) -> NoReturn:
    """A user error: one line on stderr, exit status 2."""
    typer.echo(f"Error: {' '.join(message.split())}", err=True)
    raise typer.Exit(code=USAGE_ERROR)


def check_workers_option(workers: int | None, executor: str = "local") -> None:
    """``--workers`` must be at least 1 when given, and on the local executor at most the cores
    this process may use (:func:`attnreg.runs.executors.check_workers`)."""
    from attnreg.runs.executors import check_workers

    try:
        check_workers(workers, executor)
    except ValueError as exc:
        fail(f"--{exc}")


def interrupted(exc: RunInterrupted, store: Path) -> NoReturn:
    """A run stopped by a signal: say what was kept, exit with 128 + the signal number."""
    cells = "1 finished cell" if exc.stored == 1 else f"{exc.stored} finished cells"
    typer.echo(
        f"Stopped by {exc.name}: {cells} stored in {store} by this run; "
        "run the same command again to continue.",
        err=True,
    )
    raise typer.Exit(code=exc.exit_status)


def sweep_command(
    sweep_file: Path = typer.Argument(..., help="YAML sweep file: study, base, grid, seeds."),
    store: Path = typer.Option(Path("attnreg-results.db"), help="SQLite results store."),
    executor: str = typer.Option(
        "local", help="local (a process pool over this machine's cores) or dask."
    ),
    scheduler: str = typer.Option(
        None,
        help="Address of an existing Dask scheduler (tcp://host:8786), with --executor dask; "
        "without it, --executor dask starts a LocalCluster.",
    ),
    workers: int = typer.Option(None, help="Worker processes (default: one per core)."),
    retry_failed: bool = typer.Option(False, help="Run again the cells stored as failed."),
    export: Path = typer.Option(None, help="Also write results.csv and results.parquet here."),
    progress: bool = typer.Option(True, help="Show the progress bar."),
    lock_timeout: float = typer.Option(
        600.0,
        help="Seconds to wait for a store locked by another writer; results that still "
        "cannot be written are kept in STORE.pending.jsonl and added on the next run.",
    ),
) -> None:
    """Run every cell of a sweep; finished cells already in the store are skipped, so a killed
    sweep continues where it stopped. Only this process writes the store. Ctrl-C (SIGINT) or
    SIGTERM stops it within seconds, keeping every finished cell."""
    if executor not in EXECUTORS:
        fail(f"--executor: unknown executor {executor!r}; valid: local, dask")
    if scheduler and executor != "dask":
        fail(f"--scheduler {scheduler} needs --executor dask")
    check_workers_option(workers, executor)
    if not lock_timeout >= 0:
        fail(f"--lock-timeout must be >= 0 seconds, got {lock_timeout}")
    if export is not None and (problem := folder_problem(export)):
        fail(f"--export {export} {problem}")
    try:
        sweep = load_sweep(sweep_file)
    except OSError as exc:
        fail(f"sweep file {sweep_file}: {exc.strerror or exc}")
    except ValueError as exc:
        fail(str(exc))
    if scheduler:
        try:
            check_scheduler(scheduler)
        except ValueError as exc:
            fail(f"--scheduler: {exc}")
    console = Console(stderr=True)
    try:
        with ResultsStore(store, lock_timeout=lock_timeout) as db:
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
            if outcome.set_aside:
                console.print(
                    f"{outcome.set_aside} finished cells could not be written (the store "
                    f"stayed locked): kept in {outcome.pending}, added on the next run."
                )
            if export:
                db.export(export, sweep.study)
    except (StoreError, ValueError) as exc:  # the store, or the scheduler refused us
        fail(str(exc))
    except RunInterrupted as exc:
        interrupted(exc, store)
    if outcome.failed:
        raise typer.Exit(code=1)
