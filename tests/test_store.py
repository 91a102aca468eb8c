"""The SQLite results store: one row per cell, whole rows only, exports."""

import sqlite3

import pandas as pd
import pytest

from attnreg.runs.store import CellResult, ResultsStore, cell_key


def _cell(seed=0, status="done", value=1.5, config=None):
    return CellResult(
        "verify",
        config or {"ridge": 0.5, "seed": seed},
        seed,
        "0.1.0",
        status,
        10.0,
        12.5,
        rows=[{"metric": "err", "value": value}],
        summary={"q": "a"},
        error=None if status == "done" else "boom",
    )


def test_key_is_stable_and_sensitive_to_every_part():
    base = cell_key("verify", {"a": 1, "b": [1, 2]}, 0, "0.1.0")
    assert base == cell_key("verify", {"b": [1, 2], "a": 1}, 0, "0.1.0")  # key order irrelevant
    assert base != cell_key("verify", {"a": 2, "b": [1, 2]}, 0, "0.1.0")
    assert base != cell_key("verify", {"a": 1, "b": [1, 2]}, 1, "0.1.0")
    assert base != cell_key("verify", {"a": 1, "b": [1, 2]}, 0, "0.2.0")
    assert base != cell_key("icl", {"a": 1, "b": [1, 2]}, 0, "0.1.0")


def test_one_row_per_cell_and_replace(tmp_path):
    with ResultsStore(tmp_path / "r.db") as store:
        store.put(_cell(status="failed"))
        store.put(_cell(status="done", value=2.0))
        store.put(_cell(seed=1))
        assert store.count() == 2
        got = store.get(_cell().key)
        assert got is not None and got.status == "done" and got.rows[0]["value"] == 2.0
        assert store.status("missing") is None
    raw = sqlite3.connect(tmp_path / "r.db")
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert raw.execute("SELECT COUNT(DISTINCT key) FROM cells").fetchone()[0] == 2


def test_failed_write_leaves_no_row(tmp_path):
    with ResultsStore(tmp_path / "r.db") as store:
        bad = _cell()
        bad.rows = [{"x": object()}]  # not serialisable: the transaction must roll back
        with pytest.raises(TypeError):
            store.put(bad)
        assert store.count() == 0


def test_exports_csv_parquet_dataframe(tmp_path):
    with ResultsStore(tmp_path / "r.db") as store:
        store.put(_cell(seed=0, value=1.0))
        store.put(_cell(seed=1, value=3.0))
        store.put(_cell(seed=2, status="failed"))
        frame = store.to_dataframe()
        assert list(frame["value"]) == [1.0, 3.0]
        assert set(frame["config.ridge"]) == {0.5}
        csv_path, parquet_path = store.export(tmp_path / "out")
    assert pd.read_csv(csv_path)["value"].tolist() == [1.0, 3.0]
    assert pd.read_parquet(parquet_path)["cell_seed"].tolist() == [0, 1]
