"""Results set aside in STORE.pending.jsonl: bad lines are set aside and reported, good ones
stored, nothing deleted before it is stored, orphaned claims recovered, no line stored twice."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from attnreg.runs import pending
from attnreg.runs.store import CellResult, ResultsStore

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _cell(seed, status="done", finished=12.5, value=1.0):
    return CellResult(
        "verify",
        {"ridge": 0.5, "seed": seed},
        seed,
        "0.1.0",
        status,
        10.0,
        finished,
        rows=[{"metric": "err", "value": value}],
        summary={"q": "a"},
        error=None if status == "done" else "boom",
    )


def _line(cell, **change):
    """The pending line of ``cell`` (a JSON list of the cells columns), with columns changed."""
    values = [
        cell.key,
        cell.study,
        json.dumps(cell.config, sort_keys=True),
        cell.seed,
        cell.version,
        cell.status,
        cell.started,
        cell.finished,
        cell.finished - cell.started,
        json.dumps(cell.rows),
        json.dumps(cell.summary),
        json.dumps(cell.figures),
        cell.error,
    ]
    names = ["key", "study", "config", "seed", "version", "status", "started", "finished"]
    names += ["seconds", "rows", "summary", "figures", "error"]
    for name, value in change.items():
        values[names.index(name)] = value
    return json.dumps(values).encode()


def _stored(path):
    """{key: (status, seed, rows, finished)} read with sqlite3 alone."""
    with sqlite3.connect(path) as db:
        found = db.execute("SELECT key, status, seed, rows, finished FROM cells").fetchall()
    return {key: (status, seed, json.loads(rows), fin) for key, status, seed, rows, fin in found}


def _expected(*cells):
    return {c.key: (c.status, c.seed, c.rows, c.finished) for c in cells}


def _leftovers(store):
    """Every file beside the store that belongs to the pending machinery."""
    return sorted(p.name for p in store.parent.iterdir() if ".pending" in p.name)


def _write(path, *lines):
    path.write_bytes(b"".join(line + b"\n" for line in lines))


BAD = {
    "invalid status": _line(_cell(7), status="bogus"),
    "not JSON (cut short by a kill)": _line(_cell(7))[:40],
    "not UTF-8": b"\xff\xfe garbage",
    "a JSON object, not the column list": json.dumps({"status": "done"}).encode(),
    "a column missing": json.dumps(json.loads(_line(_cell(7)))[:-1]).encode(),
    "seed is text": _line(_cell(7), seed="7"),
    "seed too large for SQLite": _line(_cell(7), seed=2**64),
    "started is not finite": _line(_cell(7)).replace(b", 10.0,", b", NaN,"),
    "rows is not JSON": _line(_cell(7), rows="[{"),
    "null study": _line(_cell(7), study=None),
    "key of another cell": _line(_cell(7), key=_cell(8).key),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_line_is_set_aside_and_reported_and_the_good_ones_stored(tmp_path, capsys, case):
    store = tmp_path / "r.db"
    ResultsStore(store).close()
    good = [_cell(0), _cell(1)]
    _write(pending.pending_path(store), _line(good[0]), BAD[case], _line(good[1]))
    with ResultsStore(store) as db:
        assert db.count() == 2
    assert _stored(store) == _expected(*good)
    rejected = pending.rejected_path(store)
    assert rejected.read_bytes() == BAD[case] + b"\n"  # byte for byte, to be mended by hand
    assert _leftovers(store) == [rejected.name]
    [warning] = capsys.readouterr().err.strip().splitlines()
    assert warning.startswith("warning: 1 line of ") and str(rejected) in warning
    assert str(pending.pending_path(store)) in warning and "line 2" in warning


def test_audit_case_bogus_status_first_then_a_valid_row(tmp_path, capsys):
    """The audit's report: the bogus line made the whole file fail and be deleted."""
    store = tmp_path / "r.db"
    bogus, valid = _line(_cell(0), status="bogus"), _line(_cell(1))
    _write(pending.pending_path(store), bogus, valid)
    with ResultsStore(store):
        pass
    assert _stored(store) == _expected(_cell(1))
    assert pending.rejected_path(store).read_bytes() == bogus + b"\n"
    assert "CHECK constraint failed" in capsys.readouterr().err


def test_several_bad_lines_are_counted_and_later_ones_appended(tmp_path, capsys):
    store = tmp_path / "r.db"
    ResultsStore(store).close()
    _write(pending.pending_path(store), BAD["not UTF-8"], _line(_cell(0)), BAD["invalid status"])
    ResultsStore(store).close()
    assert "warning: 2 lines of" in capsys.readouterr().err
    _write(pending.pending_path(store), BAD["seed is text"])
    ResultsStore(store).close()
    assert "warning: 1 line of" in capsys.readouterr().err
    rejected = pending.rejected_path(store).read_bytes().splitlines()
    assert rejected == [BAD["not UTF-8"], BAD["invalid status"], BAD["seed is text"]]
    assert _stored(store) == _expected(_cell(0))


def test_an_older_set_aside_result_never_replaces_a_newer_stored_one(tmp_path):
    store = tmp_path / "r.db"
    newer_done = _cell(0, "done", finished=20.0)
    with ResultsStore(store) as db:
        db.put(newer_done)
        db.put(_cell(1, "failed", finished=11.0))
    older_failed, newer_retry = _cell(0, "failed", finished=15.0), _cell(1, "done", finished=30.0)
    _write(pending.pending_path(store), _line(older_failed), _line(newer_retry), _line(newer_retry))
    ResultsStore(store).close()
    assert _stored(store) == _expected(newer_done, newer_retry)  # once each, newest kept


def test_store_still_locked_keeps_good_lines_pending_and_sets_bad_ones_aside(tmp_path):
    store = tmp_path / "r.db"
    good = [_line(_cell(0)), _line(_cell(1))]
    with ResultsStore(store, lock_timeout=0) as db:
        _write(pending.pending_path(store), good[0], BAD["not UTF-8"], good[1])
        locker = sqlite3.connect(store, isolation_level=None)
        locker.execute("BEGIN EXCLUSIVE")
        try:
            assert db.add_pending() == 2  # one try, then back in the queue
        finally:
            locker.execute("COMMIT")
            locker.close()
        assert pending.read_lines(pending.pending_path(store)) == good
        assert pending.read_lines(pending.rejected_path(store)) == [BAD["not UTF-8"]]
        assert _stored(store) == {}
        assert db.add_pending() == 0
    assert _stored(store) == _expected(_cell(0), _cell(1))
    assert _leftovers(store) == [pending.rejected_path(store).name]


def _dead_pid():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_orphaned_claim_of_a_dead_process_is_recovered_a_live_ones_is_left(tmp_path):
    store = tmp_path / "r.db"
    ResultsStore(store).close()
    name = pending.pending_path(store).name
    orphan = store.with_name(f"{name}.{_dead_pid()}")
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    live = store.with_name(f"{name}.{alive.pid}")  # a live process, maybe still recovering
    _write(orphan, _line(_cell(0)), BAD["invalid status"])
    _write(live, _line(_cell(1)))
    _write(pending.pending_path(store), _line(_cell(2)))
    try:
        ResultsStore(store).close()
    finally:
        alive.kill()
        alive.wait()
    assert _stored(store) == _expected(_cell(0), _cell(2))
    assert not orphan.exists() and live.read_bytes() == _line(_cell(1)) + b"\n"
    assert pending.read_lines(pending.rejected_path(store)) == [BAD["invalid status"]]


def _lines_on_disk(store):
    """The set-aside lines in every pending, claim and rejected file beside ``store``."""
    found = []
    for path in store.parent.iterdir():
        if ".pending" in path.name:
            found.extend(pending.read_lines(path))
    return found


def _crash_inside_the_transaction(monkeypatch):
    """After the claim, inside the transaction: rolled back, the claim file stays."""
    original = ResultsStore._transaction

    def crashing(self, body, give_up):
        def body_then_crash(db):
            body(db)
            raise RuntimeError("killed inside the transaction")

        return original(self, body_then_crash, give_up)

    monkeypatch.setattr(ResultsStore, "_transaction", crashing)


def _crash_in(owner, name):
    def patch(monkeypatch):
        def crash(*args, **kwargs):
            raise RuntimeError(f"killed in {name}")

        monkeypatch.setattr(owner, name, crash)

    return patch


CRASHES = {
    "inside the transaction": _crash_inside_the_transaction,
    "after the commit, before setting bad lines aside": _crash_in(ResultsStore, "_reject"),
    "before the claim file is deleted": _crash_in(Path, "unlink"),
}


@pytest.mark.parametrize("stage", CRASHES)
def test_a_crash_at_any_step_after_the_claim_loses_no_line(tmp_path, monkeypatch, stage):
    store = tmp_path / "r.db"
    ResultsStore(store).close()
    lines = [_line(_cell(0)), BAD["invalid status"], _line(_cell(1)), BAD["not UTF-8"]]
    _write(pending.pending_path(store), *lines)
    CRASHES[stage](monkeypatch)
    with pytest.raises(RuntimeError, match="killed"):
        ResultsStore(store)
    monkeypatch.undo()
    stored = set(_stored(store))
    on_disk = _lines_on_disk(store)
    claim = store.with_name(f"{pending.pending_path(store).name}.{os.getpid()}")
    assert claim.exists()  # claimed, and not deleted
    for line in lines:  # every line is in a file or, if good, in the store
        key = json.loads(line)[0] if line in (lines[0], lines[2]) else None
        assert line in on_disk or key in stored, line
    ResultsStore(store).close()  # the next opening finishes the job
    assert _stored(store) == _expected(_cell(0), _cell(1))
    assert set(pending.read_lines(pending.rejected_path(store))) == {lines[1], lines[3]}
    assert _leftovers(store) == [pending.rejected_path(store).name]


KILLED = """
import os, signal, sys
from attnreg.runs.store import ResultsStore
def die(self, rows):  # the claim is made: die before anything is stored
    os.kill(os.getpid(), signal.SIGKILL)
ResultsStore._add_rows = die
ResultsStore(sys.argv[1])
"""


def test_a_process_killed_after_its_claim_leaves_an_orphan_the_next_run_recovers(tmp_path):
    store = tmp_path / "r.db"
    ResultsStore(store).close()
    _write(pending.pending_path(store), _line(_cell(0)), _line(_cell(1)))
    env = {**os.environ, "PYTHONPATH": SRC}
    killed = subprocess.Popen([sys.executable, "-c", KILLED, str(store)], env=env)
    assert killed.wait(timeout=120) == -signal.SIGKILL
    orphan = store.with_name(f"{pending.pending_path(store).name}.{killed.pid}")
    assert _leftovers(store) == [orphan.name]
    with ResultsStore(store) as db:
        assert db.count() == 2
    assert _stored(store) == _expected(_cell(0), _cell(1))
    assert _leftovers(store) == []


RACER = """
import json, sys
from attnreg.runs.store import ResultsStore
original = ResultsStore._add_rows
def logged(self, rows):  # report every row this process stores
    print(json.dumps([row[0] for row in rows]), flush=True)
    return original(self, rows)
ResultsStore._add_rows = logged
print("ready", flush=True)
sys.stdin.readline()
ResultsStore(sys.argv[1], lock_timeout=60).close()
"""


def test_two_runs_starting_at_once_store_each_line_once(tmp_path):
    store = tmp_path / "r.db"
    ResultsStore(store).close()
    name = pending.pending_path(store).name
    cells = [_cell(seed) for seed in range(40)]
    files = [store.with_name(f"{name}.{_dead_pid()}") for _ in range(3)]
    files.append(pending.pending_path(store))
    for index, path in enumerate(files):
        _write(path, *(_line(c) for c in cells[index::4]))
    env = {**os.environ, "PYTHONPATH": SRC}
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(store)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for racer in racers:
        assert racer.stdout.readline().strip() == "ready"
    for racer in racers:  # both start recovering at the same instant
        racer.stdin.write("go\n")
        racer.stdin.flush()
    stored_by = []
    for racer in racers:
        out, _ = racer.communicate(timeout=120)
        assert racer.returncode == 0
        stored_by.append([key for line in out.splitlines() for key in json.loads(line)])
    everything = stored_by[0] + stored_by[1]
    assert sorted(everything) == sorted(c.key for c in cells)  # each line by one run, once
    assert _stored(store) == _expected(*cells)
    assert _leftovers(store) == []


def test_results_set_aside_while_a_recovery_runs_are_not_lost(tmp_path):
    store = tmp_path / "r.db"
    cells = [_cell(seed) for seed in range(300)]
    with ResultsStore(store) as db:
        spiller = threading.Thread(target=lambda: [db.spill(c) for c in cells])
        spiller.start()
        while spiller.is_alive():  # claim the file again and again while lines are appended
            db.add_pending()
        spiller.join()
        assert db.add_pending() == 0
    assert _stored(store) == _expected(*cells)
    assert _leftovers(store) == []
