"""Stopping runs cleanly: signals in the client, parent-death watch in the workers.

* The client turns SIGINT and SIGTERM into a *stop request* (:class:`StopSignals`): the
  executors stop waiting, store every cell that has finished, end their workers and raise
  :class:`RunInterrupted`.
* A worker ignores SIGINT (a Ctrl-C in the terminal reaches the whole process group; the
  client decides) and, on SIGTERM, ends its own child processes, then exits. The client starts
  its workers with SIGINT blocked (:func:`sigint_blocked`; a child keeps the signal mask), so a
  Ctrl-C that comes while a worker is still importing waits until it ignores SIGINT instead of
  printing that worker's ``KeyboardInterrupt`` traceback.
* A worker whose parent is gone, even killed with SIGKILL, exits too: on Linux the kernel sends
  it SIGTERM (``prctl(PR_SET_PDEATHSIG)``), and everywhere a watchdog thread polls the parent's
  pid. With every worker gone, multiprocessing's resource tracker reads end-of-file and exits.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from types import FrameType
from typing import Any

import psutil

PR_SET_PDEATHSIG = 1
WATCH_INTERVAL = 0.5
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by a signal; every cell finished before it is in the store."""

    def __init__(self, signum: int, stored: int = 0) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.stored = stored

    @property
    def name(self) -> str:
        """The signal's name (``SIGINT``, ``SIGTERM``)."""
        return signal.Signals(self.signum).name

    @property
    def exit_status(self) -> int:
        """The shell's convention for a process ended by this signal: 128 + its number."""
        return 128 + self.signum


class StopSignals:
    """While active (main thread only), SIGINT and SIGTERM set :attr:`signum` instead of
    raising. A repeated signal changes nothing while the stop is under way (an impatient
    second Ctrl-C must not throw away a result being stored); only once the stop has taken
    more than ``patience`` seconds does one raise :class:`RunInterrupted` at once. Outside the
    main thread it installs nothing and :attr:`signum` stays ``None``."""

    def __init__(self, patience: float = 10.0) -> None:
        self.signum: int | None = None
        self.patience = patience
        self._since = 0.0
        self._previous: dict[int, Any] = {}

    def requested(self) -> bool:
        """Whether a stop was asked for."""
        return self.signum is not None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum, self._since = signum, time.monotonic()
        elif time.monotonic() - self._since > self.patience:
            raise RunInterrupted(signum)

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()


def terminate_trees(pids: Iterable[int], grace: float = 1.5) -> None:
    """End each process of ``pids`` and all its descendants: SIGTERM, then SIGKILL after
    ``grace`` seconds for any still alive. Reaps nothing: a zombie counts as ended, and the
    parent's own bookkeeping (``multiprocessing``) still sees its children exit."""
    procs: dict[int, psutil.Process] = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(pid)
            for proc in [root, *root.children(recursive=True)]:
                procs[proc.pid] = proc
    _signal_all(procs.values(), signal.SIGTERM)
    alive = _wait_ended(list(procs.values()), grace)
    _signal_all(alive, signal.SIGKILL)
    _wait_ended(alive, 2.0)


def _wait_ended(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait up to ``timeout`` s for ``procs`` to end (exited or zombie); the ones still alive."""
    deadline = time.monotonic() + timeout
    while True:
        procs = [p for p in procs if _running(p)]
        if not procs or time.monotonic() >= deadline:
            return procs
        time.sleep(0.02)


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _signal_all(procs: Iterable[psutil.Process], signum: int) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signum)


def _exit_with_children(status: int) -> None:
    """End this process's descendants (a study may run its own pool), then exit now."""
    with contextlib.suppress(Exception):
        children = psutil.Process().children(recursive=True)
        _signal_all(children, signal.SIGTERM)
        _, alive = psutil.wait_procs(children, timeout=1)
        _signal_all(alive, signal.SIGKILL)
    os._exit(status)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    _exit_with_children(128 + signum)


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(WATCH_INTERVAL)
        if os.getppid() != parent_pid:  # re-parented: the parent died
            _exit_with_children(1)


def _die_with_parent(signum: int) -> None:
    """Linux: ask the kernel to send ``signum`` when the parent (thread) ends."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0)


@contextlib.contextmanager
def sigint_blocked() -> Iterator[None]:
    """SIGINT held pending in this thread while the block runs (where the platform has signal
    masks): a worker process started here inherits the mask, and :func:`worker_init` unblocks
    it once SIGINT is ignored. A Ctrl-C meanwhile reaches this process when the block ends."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def worker_init(parent_pid: int) -> None:
    """Initializer of every pool worker: SIGINT ignored (and unblocked: see
    :func:`sigint_blocked`), SIGTERM ends the worker and its children, and the worker exits as
    soon as its parent ``parent_pid`` is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGTERM, _on_sigterm)
    _die_with_parent(signal.SIGTERM)
    if os.getppid() != parent_pid:  # the parent died before the line above
        _exit_with_children(1)
    threading.Thread(
        target=_watch_parent, args=(parent_pid,), name="attnreg-parent-watch", daemon=True
    ).start()
