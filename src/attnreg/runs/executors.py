"""Run cells on a local process pool or a Dask distributed cluster; only the client writes.

Both executors skip cells already done in the store (and failed ones unless
``retry_failed``), hand each cell to a worker, and write every result the moment it comes
back, in one transaction. A worker process that dies takes no result with it: the local pool
is rebuilt and its unfinished cells resubmitted; Dask's scheduler reschedules the lost
worker's tasks on the others (``distributed.scheduler.allowed-failures``), and a cell whose
retries run out is stored as failed, with the reason.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from attnreg.core.validation import check_choice
from attnreg.runs.cells import CellSpec, execute_cell
from attnreg.runs.store import CellResult, ResultsStore

EXECUTORS = ("local", "dask")


@dataclass
class SweepOutcome:
    """Counts after a sweep: cells done now, failed now, skipped (already stored)."""

    done: int = 0
    failed: int = 0
    skipped: int = 0


def pending_cells(
    cells: Iterable[CellSpec], store: ResultsStore, retry_failed: bool = False, rerun: bool = False
) -> tuple[list[CellSpec], int]:
    """The cells still to run (deduplicated by key) and how many were skipped."""
    todo: dict[str, CellSpec] = {}
    skipped = 0
    for cell in cells:
        status = None if rerun else store.status(cell.key)
        if status == "done" or (status == "failed" and not retry_failed) or cell.key in todo:
            skipped += 1
            continue
        todo[cell.key] = cell
    return list(todo.values()), skipped


def run_cells(
    cells: Iterable[CellSpec],
    store: ResultsStore,
    *,
    executor: str = "local",
    workers: int | None = None,
    scheduler: str | None = None,
    retry_failed: bool = False,
    figures: bool = False,
    progress: bool = True,
    rerun: bool = False,
) -> SweepOutcome:
    """Run every pending cell with ``executor`` and store each result as it arrives
    (``rerun`` runs every cell again, replacing what is stored)."""
    check_choice("executor", executor, EXECUTORS)
    todo, skipped = pending_cells(cells, store, retry_failed, rerun)
    outcome = SweepOutcome(skipped=skipped)
    workers = workers or max(1, min(os.cpu_count() or 1, len(todo) or 1))
    threads = max(1, (os.cpu_count() or 1) // workers)
    with _Bar(len(todo), progress) as bar:

        def record(result: CellResult) -> None:
            store.put(result)
            if result.status == "done":
                outcome.done += 1
            else:
                outcome.failed += 1
            bar.advance(outcome)

        if not todo:
            return outcome
        if executor == "local":
            _run_local(todo, workers, threads, figures, record)
        else:
            _run_dask(todo, workers, scheduler, threads, figures, record)
    return outcome


def _run_local(
    todo: list[CellSpec],
    workers: int,
    threads: int,
    figures: bool,
    record: Callable[[CellResult], None],
    attempts: int = 3,
) -> None:
    remaining = {cell.key: cell for cell in todo}
    context = multiprocessing.get_context("spawn")
    for _ in range(attempts):
        if not remaining:
            return
        try:
            with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
                futures: dict[Future[CellResult], str] = {
                    pool.submit(execute_cell, cell, figures, threads): key
                    for key, cell in remaining.items()
                }
                while futures:
                    finished, _ = wait(futures, return_when=FIRST_COMPLETED)
                    for future in finished:
                        key = futures.pop(future)
                        record(future.result())
                        remaining.pop(key, None)
        except BrokenProcessPool:
            continue  # a worker died: rebuild the pool, resubmit what did not come back
    for cell in remaining.values():
        record(cell.failed(f"worker process died {attempts} times on this cell"))


def _run_dask(
    todo: list[CellSpec],
    workers: int,
    scheduler: str | None,
    threads: int,
    figures: bool,
    record: Callable[[CellResult], None],
) -> None:
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError as exc:  # pragma: no cover - depends on the extra being installed
        raise RuntimeError(
            "executor 'dask' needs the optional extra: pip install 'attnreg[dask]'"
        ) from exc
    cluster: Any = None
    if scheduler:
        client = Client(scheduler)
    else:
        cluster = LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        )
        client = Client(cluster)
    try:
        futures = {
            client.submit(
                execute_cell, cell, figures, threads, key=f"cell-{cell.key}", pure=False, retries=2
            ): cell
            for cell in todo
        }
        for future in as_completed(list(futures)):
            cell = futures[future]
            try:
                result = future.result()
            except Exception as exc:  # KilledWorker after every retry: store as failed
                result = cell.failed(f"{type(exc).__name__}: {exc}")
            record(result)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


class _Bar:
    """A rich progress bar with cells done / failed / remaining and an ETA."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total = total
        self.progress = Progress(
            TextColumn("[bold]sweep"),
            BarColumn(),
            TextColumn("{task.fields[counts]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            disable=not enabled or total == 0,
        )
        self.task = self.progress.add_task("cells", total=total, counts=self._counts(0, 0))

    def _counts(self, done: int, failed: int) -> str:
        return f"{done} done · {failed} failed · {self.total - done - failed} remaining"

    def advance(self, outcome: SweepOutcome) -> None:
        self.progress.update(
            self.task, advance=1, counts=self._counts(outcome.done, outcome.failed)
        )

    def __enter__(self) -> _Bar:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()
