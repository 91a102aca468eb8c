"""Runs that stop cleanly and lose nothing: real processes, real signals, a real lock."""

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import psutil
import pytest
import yaml

from attnreg.runs.lifecycle import RunInterrupted, StopSignals
from attnreg.runs.store import ResultsStore

ATTNREG = [sys.executable, "-m", "attnreg.cli"]
# The target is a stop within 5 s. On a loaded 2-core machine a stop can take longer, so a test
# fails only if a process of the run is still alive this long after the stop, and names it.
STOP_DEADLINE = 30.0
# an icl cell that trains far longer than any test waits: it is always still running
ENDLESS_ICL = {
    "models": ["lsa-1"],
    "steps": 10**7,
    "eval_tasks": 200,
    "fit_tasks": 200,
    "batch": 64,
    "sweep_tasks": 40,
    "alignment_tasks": 40,
    "explain_tasks": 100,
    "eval_every": 10**6,
    "input_scales": [1.0],
    "teacher_scales": [1.0],
}


def _statuses(path):
    """{study or key: status} read straight from SQLite ({} while the store does not exist)."""
    if not path.exists():
        return {}
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as db:
            return dict(db.execute("SELECT key, study || ':' || status FROM cells").fetchall())
    except sqlite3.OperationalError:  # the table is not created yet
        return {}


def _running(proc):
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _wait_until(condition, timeout, what, proc=None):
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc is None or proc.poll() is None, f"exited ({proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _alive(session, recorded):
    """The processes of a run still alive (zombies count as ended): those recorded before the
    stop, and every process in the run's session (which also finds any started since)."""
    found = {p.pid: p for p in recorded if _running(p)}
    for proc in psutil.process_iter():
        try:
            in_session = os.getsid(proc.pid) == session
        except OSError:  # gone meanwhile
            continue
        if in_session and _running(proc):
            found[proc.pid] = proc
    return list(found.values())


def _describe(procs):
    named = []
    for proc in procs:
        try:
            named.append(f"pid {proc.pid} ({' '.join(proc.cmdline())[:160]})")
        except psutil.Error:
            named.append(f"pid {proc.pid}")
    return "; ".join(named)


def _wait_all_ended(session, recorded, since, what):
    """Poll until no process of the run started in ``session`` is alive; fail at
    ``STOP_DEADLINE`` naming the processes still alive."""
    while alive := _alive(session, recorded):
        waited = time.monotonic() - since
        if waited >= STOP_DEADLINE:
            pytest.fail(f"{waited:.1f} s after {what}, still alive: {_describe(alive)}")
        time.sleep(0.1)


def _kill_group(proc):
    """Kill what is left of a run started in its own session (nothing, if the test passed)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _workers(parent):
    """The pool workers below ``parent`` (spawned: their command line runs spawn_main)."""
    return [p for p in parent.children(recursive=True) if "spawn_main" in " ".join(p.cmdline())]


def test_ctrl_c_during_report_stops_fast_keeps_finished_cells_and_no_child(toy, tmp_path):
    out = tmp_path / "page"
    overrides = tmp_path / "tiny.yaml"
    overrides.write_text(yaml.safe_dump({"icl": ENDLESS_ICL}))
    cmd = [
        *ATTNREG,
        "report",
        "--out",
        str(out),
        "--study",
        "toy",
        "--study",
        "icl",
        "--overrides",
        str(overrides),
        "--workers",
        "2",
        "--no-progress",
    ]
    log = tmp_path / "stderr.txt"
    with log.open("w") as stderr_file:  # a file, not a pipe: a full pipe could stall the run
        proc = subprocess.Popen(
            cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=stderr_file
        )
    try:
        parent = psutil.Process(proc.pid)
        # the toy cell (tests/toy_plugin.py) ends at once; icl is still training when it is stored
        done = lambda: "toy:done" in _statuses(out / "results.db").values()  # noqa: E731
        _wait_until(done, 240, "the toy cell", proc)
        family = [parent, *parent.children(recursive=True)]
        assert _workers(parent), "the icl cell must still be running in a worker"
        started = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the whole foreground process group
        # the client and every worker must end: the icl cell alone would train for hours
        _wait_all_ended(proc.pid, family, started, "SIGINT")
    finally:
        _kill_group(proc)
    stderr = log.read_text()
    assert proc.returncode == 128 + signal.SIGINT, stderr
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == (  # a study's warnings may come before it
        f"Stopped by SIGINT: 1 finished cell stored in {out / 'results.db'} by this run; "
        "run the same command again to continue."
    )
    assert sorted(_statuses(out / "results.db").values()) == ["toy:done"]


def test_sigkill_of_sweep_leaves_no_process_behind(toy, tmp_path):
    sweep = tmp_path / "many.yaml"
    cells = {"study": "toy", "base": {"pause": 1.0}, "seeds": list(range(40))}
    sweep.write_text(yaml.safe_dump(cells))
    store = tmp_path / "r.db"
    cmd = [*ATTNREG, "sweep", str(sweep), "--store", str(store), "--workers", "1"]
    proc = subprocess.Popen(
        [*cmd, "--no-progress"],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        parent = psutil.Process(proc.pid)
        _wait_until(lambda: len(_statuses(store)) >= 1, 240, "a first stored cell", proc)
        family = parent.children(recursive=True)
        assert _workers(parent) and len(_statuses(store)) < 40, "the kill must land mid-sweep"
        killed = time.monotonic()
        proc.kill()  # the client only: its worker and helpers must notice on their own
        proc.wait()
        _wait_all_ended(proc.pid, family, killed, "the client's SIGKILL")
    finally:
        _kill_group(proc)


LOCKER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.readline()
db.execute("COMMIT")
"""


def test_store_locked_by_another_writer_delays_the_sweep_but_loses_nothing(toy, tmp_path):
    store = tmp_path / "r.db"
    ResultsStore(store).close()
    sweep = tmp_path / "s.yaml"
    cells = {"study": "toy", "seeds": [0, 1]}
    sweep.write_text(yaml.safe_dump(cells))
    locker = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(store)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert locker.stdout.readline().strip() == "locked"
    cmd = [*ATTNREG, "sweep", str(sweep), "--store", str(store), "--workers", "1"]
    proc = subprocess.Popen(
        [*cmd, "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        # a finished cell is waiting for the lock: keep holding it across several retries
        notice = lambda: any("is locked" in line for line in lines)  # noqa: E731
        _wait_until(notice, 240, "the lock notice", proc)
        time.sleep(1.5)
        assert proc.poll() is None, "the sweep must wait, not crash"
        assert _statuses(store) == {}
    finally:
        locker.communicate("release\n", timeout=10)
    assert proc.wait(timeout=240) == 0, lines
    reader.join(timeout=10)
    assert "Traceback" not in "".join(lines)
    with ResultsStore(store) as db:
        assert db.count("done") == 2


def test_stop_signals_turn_sigint_and_sigterm_into_a_request():
    before = [signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)]
    with StopSignals() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        _wait_until(stop.requested, 5, "the SIGTERM handler")
        os.kill(os.getpid(), signal.SIGINT)  # an impatient repeat: still only the request
        time.sleep(0.1)
        assert stop.signum == signal.SIGTERM
    assert [signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)] == before
    with StopSignals(patience=0) as stop:
        os.kill(os.getpid(), signal.SIGINT)
        _wait_until(stop.requested, 5, "the SIGINT handler")
        time.sleep(0.01)
        with pytest.raises(RunInterrupted) as raised:
            os.kill(os.getpid(), signal.SIGINT)  # the stop takes too long: give up at once
            time.sleep(1)
    assert raised.value.exit_status == 130 and raised.value.name == "SIGINT"
