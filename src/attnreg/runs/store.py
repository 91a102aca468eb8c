"""The results store: one SQLite row per run cell, written in one transaction.

A cell is one (study, config, seed, package version); its key is a SHA-256 of that tuple as
canonical JSON, so the same cell always lands on the same row. The database runs in WAL mode;
each finished cell is one ``INSERT OR REPLACE`` inside one transaction, so a process killed
at any instant leaves either the whole row or none of it. Only the client process writes.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnreg.output import rows_to_json

SCHEMA = """
CREATE TABLE IF NOT EXISTS cells (
    key TEXT PRIMARY KEY,
    study TEXT NOT NULL,
    config TEXT NOT NULL,
    seed INTEGER NOT NULL,
    version TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('done', 'failed')),
    started REAL NOT NULL,
    finished REAL NOT NULL,
    seconds REAL NOT NULL,
    rows TEXT NOT NULL,
    summary TEXT NOT NULL,
    figures TEXT NOT NULL,
    error TEXT
)
"""


def cell_key(study: str, config: dict[str, Any], seed: int, version: str) -> str:
    """Stable hash of a cell: ``sha256(json({study, config, seed, version}, sort_keys))``."""
    blob = json.dumps(
        {"study": study, "config": config, "seed": seed, "version": version},
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass
class CellResult:
    """What a worker sends back for one cell (the store adds nothing but the key)."""

    study: str
    config: dict[str, Any]
    seed: int
    version: str
    status: str
    started: float
    finished: float
    rows: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, str] = field(default_factory=dict)
    figures: list[dict[str, str]] = field(default_factory=list)
    error: str | None = None

    @property
    def key(self) -> str:
        """The cell's stable key."""
        return cell_key(self.study, self.config, self.seed, self.version)


class ResultsStore:
    """SQLite results store (WAL). Use as a context manager or call :meth:`close`."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(SCHEMA)

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection."""
        self._db.close()

    def put(self, result: CellResult) -> None:
        """Write one finished cell in one transaction (replacing a failed attempt)."""
        with self._transaction():
            self._db.execute(
                "INSERT OR REPLACE INTO cells VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    result.key,
                    result.study,
                    json.dumps(result.config, sort_keys=True, default=str),
                    result.seed,
                    result.version,
                    result.status,
                    result.started,
                    result.finished,
                    result.finished - result.started,
                    rows_to_json(result.rows),
                    json.dumps(result.summary),
                    json.dumps(result.figures),
                    result.error,
                ),
            )

    def _transaction(self) -> Any:
        db = self._db

        class _Tx:
            def __enter__(self) -> None:
                db.execute("BEGIN IMMEDIATE")

            def __exit__(self, exc_type: object, *rest: object) -> None:
                db.execute("ROLLBACK" if exc_type else "COMMIT")

        return _Tx()

    def status(self, key: str) -> str | None:
        """``"done"``, ``"failed"`` or ``None`` (never run) for a cell key."""
        row = self._db.execute("SELECT status FROM cells WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def get(self, key: str) -> CellResult | None:
        """The stored cell, or ``None``."""
        row = self._db.execute(
            "SELECT study, config, seed, version, status, started, finished, rows, summary, "
            "figures, error FROM cells WHERE key = ?",
            (key,),
        ).fetchone()
        return None if row is None else _to_result(row)

    def cells(self, study: str | None = None) -> Iterator[CellResult]:
        """Every stored cell (optionally of one study), oldest first."""
        query = (
            "SELECT study, config, seed, version, status, started, finished, rows, summary, "
            "figures, error FROM cells"
        )
        args: tuple[Any, ...] = ()
        if study is not None:
            query += " WHERE study = ?"
            args = (study,)
        for row in self._db.execute(query + " ORDER BY finished", args).fetchall():
            yield _to_result(row)

    def count(self, status: str | None = None) -> int:
        """Number of stored cells (optionally with a given status)."""
        if status is None:
            return int(self._db.execute("SELECT COUNT(*) FROM cells").fetchone()[0])
        sql = "SELECT COUNT(*) FROM cells WHERE status = ?"
        return int(self._db.execute(sql, (status,)).fetchone()[0])

    def to_dataframe(self, study: str | None = None) -> Any:
        """Tidy rows of every done cell as a pandas DataFrame, with ``study``, ``cell``,
        ``seed`` and the config's keys (prefixed ``config.``) as extra columns."""
        import pandas as pd

        records: list[dict[str, Any]] = []
        for cell in self.cells(study):
            if cell.status != "done":
                continue
            extra = {"study": cell.study, "cell": cell.key[:12], "cell_seed": cell.seed}
            extra.update({f"config.{k}": _scalar(v) for k, v in cell.config.items()})
            records.extend({**extra, **row} for row in cell.rows)
        return pd.DataFrame.from_records(records)

    def export(self, out_dir: str | Path, study: str | None = None) -> list[Path]:
        """Write ``results.csv`` and ``results.parquet`` (pyarrow) of :meth:`to_dataframe`."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        frame = self.to_dataframe(study)
        for column in frame.columns:
            if frame[column].dtype == object:
                frame[column] = frame[column].map(lambda v: v if v is None else str(v))
        frame.to_csv(out / "results.csv", index=False)
        frame.to_parquet(out / "results.parquet", index=False)
        return [out / "results.csv", out / "results.parquet"]


def _scalar(value: Any) -> Any:
    return value if isinstance(value, int | float | str | bool) or value is None else str(value)


def _to_result(row: tuple[Any, ...]) -> CellResult:
    return CellResult(
        study=row[0],
        config=json.loads(row[1]),
        seed=int(row[2]),
        version=row[3],
        status=row[4],
        started=float(row[5]),
        finished=float(row[6]),
        rows=json.loads(row[7]),
        summary=json.loads(row[8]),
        figures=json.loads(row[9]),
        error=row[10],
    )


def now() -> float:
    """Wall-clock seconds (for ``started`` / ``finished``)."""
    return time.time()
