"""Run cells on a local process pool or a Dask distributed cluster; only the client writes.

Both executors skip cells already done in the store (and failed ones unless
``retry_failed``), hand each cell to a worker, and write every result the moment it comes
back, in one transaction. A worker process that dies takes no result with it: the local pool
is rebuilt and its unfinished cells resubmitted; Dask's scheduler reschedules the lost
worker's tasks on the others (``distributed.scheduler.allowed-failures``), and a cell whose
retries run out is stored as failed, with the reason.

SIGINT or SIGTERM stops a run within seconds: every cell that has finished is stored, the
workers (and any process they started) are ended, and :class:`RunInterrupted` is raised. Pool
workers also exit by themselves when the client dies, even by SIGKILL
(:mod:`attnreg.runs.lifecycle`). A result the store cannot take because another writer holds
its lock too long is set aside beside the store, never dropped (:mod:`attnreg.runs.store`).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from attnreg.core.threads import check_count
from attnreg.core.validation import check_choice
from attnreg.progress import Display
from attnreg.runs.cells import CellSpec, execute_cell, send_progress_to
from attnreg.runs.lifecycle import (
    RunInterrupted,
    StopSignals,
    sigint_blocked,
    terminate_trees,
    worker_init,
)
from attnreg.runs.store import CellResult, ResultsStore, StoreBusy

EXECUTORS = ("local", "dask")
POLL = 0.2  # seconds between checks for a stop request while waiting for results
SCHEDULER_TIMEOUT = 3.0  # seconds to reach a Dask scheduler before giving up
DEFAULT_SCHEDULER_PORT = 8786


@dataclass
class SweepOutcome:
    """Counts after a sweep: cells done now, failed now, skipped (already stored), and how
    many finished cells are set aside in ``pending`` because the store stayed locked."""

    done: int = 0
    failed: int = 0
    skipped: int = 0
    set_aside: int = 0
    pending: str = ""


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


def check_workers(workers: int | None, executor: str = "local") -> None:
    """``workers`` must be ``None`` (automatic) or an integer >= 1; on the local executor at
    most the cores this process may use (:func:`attnreg.core.threads.check_count`): each
    worker is a process running a study."""
    if workers is not None and (
        isinstance(workers, bool) or not isinstance(workers, int) or workers < 1
    ):
        raise ValueError(f"workers: must be an integer >= 1, got {workers!r}")
    if workers is not None and executor == "local":
        check_count("workers", workers, "worker processes")


def check_scheduler(address: str, timeout: float = SCHEDULER_TIMEOUT) -> None:
    """``ValueError`` naming ``address`` unless a Dask scheduler answers there within about
    ``timeout`` seconds (``[scheme://]host[:port]``, port 8786 by default): a TCP connection
    first, then Dask's handshake."""
    rest = address.split("://", 1)[1] if "://" in address else address
    rest = rest.split("/", 1)[0]
    host, sep, port_text = rest.rpartition(":")
    if not sep or "]" in port_text:  # no port (an IPv6 address alone ends in "]")
        host, port_text = rest, str(DEFAULT_SCHEDULER_PORT)
    host = host.strip("[]")
    if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"Dask scheduler {address!r}: expected tcp://host:port")
    try:
        socket.create_connection((host, int(port_text)), timeout=timeout).close()
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise ValueError(
            f"Dask scheduler {address}: not reachable within {timeout:g} s ({reason})"
        ) from exc
    try:
        asyncio.run(asyncio.wait_for(_handshake(address, timeout), timeout + 1))
    except Exception as exc:  # timed out, refused or garbled: no scheduler there
        reason = (
            (str(exc) or "timed out").splitlines()[0][:200]
            if isinstance(exc, OSError | TimeoutError)
            else "something answers there, but not Dask's handshake"
        )
        raise ValueError(
            f"Dask scheduler {address}: no Dask scheduler answered within {timeout:g} s ({reason})"
        ) from exc


async def _handshake(address: str, timeout: float) -> None:
    """Open a Dask comm to ``address`` (the handshake included) and close it again."""
    from distributed.comm import connect

    comm = await connect(address if "://" in address else f"tcp://{address}", timeout=timeout)
    await comm.close()


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
    (``rerun`` runs every cell again, replacing what is stored).

    In the main thread, SIGINT and SIGTERM stop the run: finished cells are stored, workers
    ended, and :class:`~attnreg.runs.lifecycle.RunInterrupted` raised."""
    check_choice("executor", executor, EXECUTORS)
    check_workers(workers, executor)
    todo, skipped = pending_cells(cells, store, retry_failed, rerun)
    outcome = SweepOutcome(skipped=skipped)
    workers = workers or max(1, min(os.cpu_count() or 1, len(todo) or 1))
    threads = max(1, (os.cpu_count() or 1) // workers)
    with StopSignals() as stop, _Bar(len(todo), progress) as bar:
        waiting: list[bool] = []

        def give_up() -> bool:  # called while the store is locked by another writer
            if not waiting:
                waiting.append(True)
                print(
                    f"results store {store.path} is locked by another writer; finished cells "
                    f"wait for it (up to {store.lock_timeout:g} s)",
                    file=sys.stderr,
                    flush=True,
                )
            # after one result was set aside, later ones do not wait for the lock again
            return stop.requested() or outcome.set_aside > 0

        def record(result: CellResult) -> None:
            try:
                store.put(result, give_up=give_up)
            except StoreBusy:
                outcome.pending = str(store.spill(result))
                outcome.set_aside += 1
            if result.status == "done":
                outcome.done += 1
            else:
                outcome.failed += 1
            bar.advance(outcome)

        if todo:
            if executor == "local":
                _run_local(todo, workers, threads, figures, record, stop, bar.events)
            else:
                _run_dask(todo, workers, scheduler, threads, figures, record, stop)
        if outcome.set_aside:
            outcome.set_aside = store.add_pending()
        if stop.signum is not None:
            raise RunInterrupted(stop.signum, outcome.done + outcome.failed)
    return outcome


def _run_local(
    todo: list[CellSpec],
    workers: int,
    threads: int,
    figures: bool,
    record: Callable[[CellResult], None],
    stop: StopSignals,
    events: Any = None,
    attempts: int = 3,
) -> None:
    remaining = {cell.key: cell for cell in todo}
    context = multiprocessing.get_context("spawn")
    for _ in range(attempts):
        if not remaining or stop.requested():
            return
        pool = ProcessPoolExecutor(
            max_workers=workers,
            mp_context=context,
            initializer=_init_worker,
            initargs=(os.getpid(), events),
        )
        futures: dict[Future[CellResult], str] = {}
        try:
            with sigint_blocked():  # the workers start here: see lifecycle.sigint_blocked
                for key, cell in remaining.items():
                    futures[pool.submit(execute_cell, cell, figures, threads)] = key
            broken = False
            while futures and not broken and not stop.requested():
                finished, _ = wait(futures, timeout=POLL, return_when=FIRST_COMPLETED)
                for future in finished:
                    broken |= _collect(future, futures, remaining, record)
            # a stop or a broken pool: keep whatever has finished meanwhile
            for future in [f for f in futures if f.done()]:
                _collect(future, futures, remaining, record)
        finally:
            if futures:
                _end_pool(pool)
            else:
                pool.shutdown(wait=True)
    for cell in remaining.values():
        if not stop.requested():
            record(cell.failed(f"worker process died {attempts} times on this cell"))


def _collect(
    future: Future[CellResult],
    futures: dict[Future[CellResult], str],
    remaining: dict[str, CellSpec],
    record: Callable[[CellResult], None],
) -> bool:
    """Record a finished future's result; ``True`` if its worker died (pool broken)."""
    key = futures.pop(future)
    if future.cancelled():
        return False
    error = future.exception()
    if isinstance(error, BrokenProcessPool):
        return True  # resubmitted on a new pool
    cell = remaining.pop(key)
    record(cell.failed(f"{type(error).__name__}: {error}") if error else future.result())
    return False


def _end_pool(pool: ProcessPoolExecutor) -> None:
    """Stop a pool now: cancel what has not started, end every worker and its children."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    terminate_trees(p.pid for p in processes if p.pid is not None)
    manager = getattr(pool, "_executor_manager_thread", None)
    if manager is not None:
        manager.join(timeout=5)
    for process in processes:
        process.join(timeout=1)


def _run_dask(
    todo: list[CellSpec],
    workers: int,
    scheduler: str | None,
    threads: int,
    figures: bool,
    record: Callable[[CellResult], None],
    stop: StopSignals,
) -> None:
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError as exc:  # pragma: no cover - depends on the extra being installed
        raise RuntimeError(
            "executor 'dask' needs the optional extra: pip install 'attnreg[dask]'"
        ) from exc
    cluster: Any = None
    if scheduler:
        check_scheduler(scheduler)
        client = Client(scheduler, timeout=10)
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
        arrived = as_completed(list(futures))
        while not arrived.is_empty():
            if not arrived.has_ready():
                if stop.requested():
                    break
                time.sleep(POLL / 2)
                continue
            for future in arrived.next_batch(block=False):
                cell = futures.pop(future)
                try:
                    result = future.result()
                except Exception as exc:  # KilledWorker after every retry: store as failed
                    result = cell.failed(f"{type(exc).__name__}: {exc}")
                record(result)
        if futures:
            client.cancel(list(futures))
    finally:
        if cluster is not None and stop.requested():
            _end_local_workers(cluster)
        client.close(timeout=5)
        if cluster is not None:
            cluster.close(timeout=10)


def _end_local_workers(cluster: Any) -> None:
    """A stop: end our LocalCluster's worker processes now instead of waiting for the cells
    they compute (their nannies are told not to restart them)."""
    nannies = list(getattr(cluster, "workers", {}).values())
    for nanny in nannies:
        with contextlib.suppress(Exception):
            nanny.close_gracefully()
    terminate_trees([pid for n in nannies if (pid := getattr(n, "pid", None))], grace=0.5)


def _init_worker(parent_pid: int, events: Any) -> None:
    """A pool worker: the lifecycle of :func:`worker_init`, progress events to ``events``."""
    worker_init(parent_pid)
    send_progress_to(events)


class _Bar:
    """The sweep's progress on a terminal: a bar with cells done / failed / remaining and an
    ETA, and under it the stages of the cells running in local worker processes (their events
    arrive on :attr:`events`, a queue read by a thread; Dask workers show none)."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total = total
        self.enabled = enabled and total > 0 and sys.stderr.isatty()
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[counts]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            disable=not self.enabled,
        )
        self.task = self.progress.add_task("sweep", total=total, counts=self._counts(0, 0))
        self.display = Display(self.progress, keep_finished=False, counts="")
        self.events: Any = None
        self._reader: threading.Thread | None = None
        self._stop = threading.Event()

    def _counts(self, done: int, failed: int) -> str:
        return f"{done} done · {failed} failed · {self.total - done - failed} remaining"

    def advance(self, outcome: SweepOutcome) -> None:
        self.progress.update(
            self.task, advance=1, counts=self._counts(outcome.done, outcome.failed)
        )

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                event = self.events.get(timeout=0.2)
            except Exception:  # empty, or a message cut by a worker that was ended
                continue
            self.display(event)

    def __enter__(self) -> _Bar:
        self.progress.start()
        if self.enabled:
            self.events = multiprocessing.get_context("spawn").Queue()
            self._reader = threading.Thread(target=self._read, name="attnreg-progress", daemon=True)
            self._reader.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._reader is not None:
            self._reader.join(timeout=1)
        if self.events is not None:
            self.events.close()
            self.events.cancel_join_thread()
        self.progress.stop()
