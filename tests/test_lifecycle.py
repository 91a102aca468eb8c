"""Runs that stop cleanly and lose nothing: real processes, real signals, a real lock."""

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


def _workers(parent):
    """The pool workers below ``parent`` (spawned: their command line runs spawn_main)."""
    return [p for p in parent.children(recursive=True) if "spawn_main" in " ".join(p.cmdline())]


def test_ctrl_c_during_report_stops_fast_keeps_finished_cells_and_no_child(tmp_path):
    out = tmp_path / "page"
    overrides = tmp_path / "tiny.yaml"
    overrides.write_text(yaml.safe_dump({"verify": {"dtypes": ["float32"]}, "icl": ENDLESS_ICL}))
    cmd = [
        *ATTNREG,
        "report",
        "--out",
        str(out),
        "--study",
        "verify",
        "--study",
        "icl",
        "--overrides",
        str(overrides),
        "--workers",
        "2",
        "--no-progress",
    ]
    proc = subprocess.Popen(
        cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        parent = psutil.Process(proc.pid)
        # verify finishes in about a second; icl is still training when it is stored
        done = lambda: "verify:done" in _statuses(out / "results.db").values()  # noqa: E731
        _wait_until(done, 240, "the verify cell", proc)
        family = parent.children(recursive=True)
        assert _workers(parent), "the icl cell must still be running in a worker"
        started = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the whole foreground process group
        _, stderr = proc.communicate(timeout=30)
        elapsed = time.monotonic() - started
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert elapsed < 5, f"took {elapsed:.1f} s to stop"
    assert proc.returncode == 128 + signal.SIGINT
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == (  # a study's warnings may come before it
        f"Stopped by SIGINT: 1 finished cell stored in {out / 'results.db'} by this run; "
        "run the same command again to continue."
    )
    assert sorted(_statuses(out / "results.db").values()) == ["verify:done"]
    _wait_until(lambda: not any(_running(p) for p in family), 5, "the children to exit")


def test_sigkill_of_sweep_leaves_no_process_behind(tmp_path):
    sweep = tmp_path / "many.yaml"
    cells = {"study": "verify", "base": {"dtypes": ["float32"]}, "seeds": list(range(40))}
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
        proc.kill()  # the client only: its worker and helpers must notice on their own
        proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def leftovers():
        found = [p for p in family if _running(p)]
        for p in psutil.process_iter(["cmdline"]):
            if str(sweep) in " ".join(p.info["cmdline"] or []) and _running(p):
                found.append(p)
        return found

    _wait_until(lambda: not leftovers(), 10, "every process of the sweep to exit")
    assert not leftovers()


LOCKER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.readline()
db.execute("COMMIT")
"""


def test_store_locked_by_another_writer_delays_the_sweep_but_loses_nothing(tmp_path):
    store = tmp_path / "r.db"
    ResultsStore(store).close()
    sweep = tmp_path / "s.yaml"
    cells = {"study": "verify", "base": {"dtypes": ["float32"]}, "seeds": [0, 1]}
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
