"""The SQLite results store: one row per cell, whole rows only, exports, a lock held by
another writer, corrupt files."""

import sqlite3
import subprocess
import sys
import threading
import time

import pandas as pd
import pytest
from cells import cell

from attnreg.runs.store import ResultsStore, StoreBusy, StoreError, cell_key


def test_key_is_stable_and_sensitive_to_every_part():
    base = cell_key("verify", {"a": 1, "b": [1, 2]}, 0, "0.1.0")
    assert base == cell_key("verify", {"b": [1, 2], "a": 1}, 0, "0.1.0")  # key order irrelevant
    assert base != cell_key("verify", {"a": 2, "b": [1, 2]}, 0, "0.1.0")
    assert base != cell_key("verify", {"a": 1, "b": [1, 2]}, 1, "0.1.0")
    assert base != cell_key("verify", {"a": 1, "b": [1, 2]}, 0, "0.2.0")
    assert base != cell_key("icl", {"a": 1, "b": [1, 2]}, 0, "0.1.0")


def test_one_row_per_cell_and_replace(tmp_path):
    with ResultsStore(tmp_path / "r.db") as store:
        store.put(cell(status="failed"))
        store.put(cell(status="done", value=2.0))
        store.put(cell(seed=1))
        assert store.count() == 2
        got = store.get(cell().key)
        assert got is not None and got.status == "done" and got.rows[0]["value"] == 2.0
        assert store.status("missing") is None
    raw = sqlite3.connect(tmp_path / "r.db")
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert raw.execute("SELECT COUNT(DISTINCT key) FROM cells").fetchone()[0] == 2


def test_failed_write_leaves_no_row(tmp_path):
    with ResultsStore(tmp_path / "r.db") as store:
        bad = cell()
        bad.rows = [{"x": object()}]  # not serialisable: the transaction must roll back
        with pytest.raises(TypeError):
            store.put(bad)
        assert store.count() == 0


def test_exports_csv_parquet_dataframe(tmp_path):
    with ResultsStore(tmp_path / "r.db") as store:
        store.put(cell(seed=0, value=1.0))
        store.put(cell(seed=1, value=3.0))
        store.put(cell(seed=2, status="failed"))
        frame = store.to_dataframe()
        assert list(frame["value"]) == [1.0, 3.0]
        assert set(frame["config.ridge"]) == {0.5}
        csv_path, parquet_path = store.export(tmp_path / "out")
    assert pd.read_csv(csv_path)["value"].tolist() == [1.0, 3.0]
    assert pd.read_parquet(parquet_path)["cell_seed"].tolist() == [0, 1]


LOCKER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.readline()
db.execute("COMMIT")
"""


@pytest.fixture
def locked_store(tmp_path):
    """A store whose write lock another process holds until ``release()``."""
    path = tmp_path / "r.db"
    ResultsStore(path).close()
    locker = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert locker.stdout.readline().strip() == "locked"

    def release():
        if locker.poll() is None:
            locker.communicate("go\n", timeout=10)

    yield path, release
    release()


def test_locked_store_is_waited_for_then_written(locked_store):
    path, release = locked_store
    timer = threading.Timer(1.0, release)
    timer.start()
    started = time.monotonic()
    with ResultsStore(path, lock_timeout=30) as store:
        store.put(cell())  # waits for the other writer, well past SQLite's own short wait
        assert time.monotonic() - started >= 1.0
        assert store.count() == 1
    timer.join()


def test_store_locked_too_long_sets_results_aside_and_adds_them_later(locked_store):
    path, release = locked_store
    with ResultsStore(path, lock_timeout=0.5) as store:
        started = time.monotonic()
        with pytest.raises(StoreBusy, match=str(path)):
            store.put(cell(seed=1))
        assert 0.5 <= time.monotonic() - started < 5
        pending = store.spill(cell(seed=1))
        assert store.count() == 0 and pending.exists()
        with pytest.raises(StoreBusy):  # a stop request ends the wait at once
            store.put(cell(seed=2), give_up=lambda: True)
    release()
    with ResultsStore(path) as store:  # the next opening adds what was set aside
        assert store.count() == 1
        assert store.get(cell(seed=1).key).rows == cell(seed=1).rows
    assert not pending.exists()


def test_corrupt_or_foreign_store_is_refused_with_its_path(tmp_path):
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"not a database at all" * 200)
    with pytest.raises(StoreError, match=f"{corrupt}.*not a database.*move it aside"):
        ResultsStore(corrupt)
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE cells (id INTEGER, name TEXT)")
    with pytest.raises(StoreError, match=f"{foreign}.*not an attnreg results table"):
        ResultsStore(foreign)
    with pytest.raises(StoreError, match="is a folder"):
        ResultsStore(tmp_path)
