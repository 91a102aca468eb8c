"""The results store: one SQLite row per run cell, written in one transaction.

A cell is one (study, config, seed, package version); its key is a SHA-256 of that tuple as
canonical JSON, so the same cell always lands on the same row (the record and its row:
:mod:`attnreg.runs.record`). The database runs in WAL mode;
each finished cell is one ``INSERT OR REPLACE`` inside one transaction, so a process killed
at any instant leaves either the whole row or none of it. Only the client process writes.

A store locked by another writer is waited for, with back-off, up to ``lock_timeout`` seconds
(each attempt is short, so a signal is handled at once). A result that still cannot be written
is not dropped: :meth:`ResultsStore.spill` appends it to ``STORE.pending.jsonl`` beside the
store, and the next :class:`ResultsStore` opened on that store adds it (claim, store, then
delete: see :mod:`attnreg.runs.pending`). A line there that is not a well-formed row, or that
the store's constraints refuse, is kept in ``STORE.pending.rejected.jsonl`` and reported. A
file that is not an SQLite database, or not a results store, is refused with
:class:`StoreError` naming its path.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from attnreg.runs import pending
from attnreg.runs.record import (
    ADD_PENDING,
    COLUMNS,
    INSERT,
    SCHEMA,
    CellResult,
    cell_key,
    cell_row,
    now,
    read_pending,
    to_result,
)

__all__ = ["CellResult", "ResultsStore", "StoreBusy", "StoreError", "cell_key", "now"]

LOCK_TIMEOUT = 600.0  # seconds a locked store is waited for before results are set aside
ATTEMPT_TIMEOUT = 0.2  # SQLite's own busy wait per attempt; the back-off happens in Python
MAX_BACKOFF = 1.0
HINT = "move it aside or use another results store"
# SQLite result codes meaning the file cannot serve as the store: PERM, READONLY, IOERR,
# CORRUPT, FULL, CANTOPEN, NOTADB
UNUSABLE = (3, 8, 10, 11, 13, 14, 26)
_RECOVERING = threading.Lock()  # one recovery at a time in this process (claims are per pid)


class StoreError(Exception):
    """The results store cannot be used; the message names its path."""


class StoreBusy(StoreError):
    """The store stayed locked by another writer for longer than the store's lock timeout."""


class ResultsStore:
    """SQLite results store (WAL). Use as a context manager or call :meth:`close`.

    ``lock_timeout``: seconds to wait, with back-off, while another writer holds the lock."""

    def __init__(self, path: str | Path, lock_timeout: float = LOCK_TIMEOUT) -> None:
        self.path = Path(path)
        self.lock_timeout = lock_timeout
        if self.path.is_dir():
            raise StoreError(f"results store {self.path} is a folder, not a file")
        self.pending_path = pending.pending_path(self.path)
        self.rejected_path = pending.rejected_path(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=ATTEMPT_TIMEOUT, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"results store {self.path}: cannot open it ({exc})") from exc
        try:
            self._retry(self._setup)
            self.add_pending()
        except BaseException:
            self._db.close()
            raise

    def _setup(self) -> None:
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(SCHEMA)
        found = tuple(row[1] for row in self._db.execute("PRAGMA table_info(cells)"))
        if found != COLUMNS:
            raise StoreError(
                f"results store {self.path}: its 'cells' table is not an attnreg results "
                f"table (columns {', '.join(found)}); {HINT}"
            )

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection."""
        self._db.close()

    def put(self, result: CellResult, give_up: Callable[[], bool] | None = None) -> None:
        """Write one finished cell in one transaction (replacing a failed attempt), waiting for
        a lock held by another writer; :class:`StoreBusy` after ``lock_timeout`` seconds, or
        as soon as ``give_up()`` is true while waiting."""
        row = cell_row(result)
        self._transaction(lambda db: db.execute(INSERT, row), give_up)

    def spill(self, result: CellResult) -> Path:
        """Set ``result`` aside in ``STORE.pending.jsonl`` (for a store that stays locked); the
        next store opened on this path adds it. Returns that file."""
        pending.append(self.pending_path, [json.dumps(list(cell_row(result))).encode()])
        return self.pending_path

    def add_pending(self) -> int:
        """Add the results set aside by :meth:`spill`, and those of a recovery killed midway;
        returns how many still wait (one try: while the store is locked they stay set aside).

        Good lines are stored in one transaction before their file is deleted; bad ones (not
        JSON, not a well-formed row, or refused by the store's constraints) are appended to
        ``STORE.pending.rejected.jsonl`` and reported on stderr with their count."""
        with _RECOVERING:
            for claim in pending.claims(self.pending_path):
                good, bad = read_pending(claim)
                try:
                    refused = self._add_rows([row for _, _, row in good])
                except StoreBusy:  # back in the queue: the next run adds them
                    pending.append(self.pending_path, [line for _, line, _ in good])
                    self._reject(bad)
                    claim.unlink()
                    break
                self._reject(bad + [(good[i][1], f"{good[i][0]}: {why}") for i, why in refused])
                claim.unlink()
        return pending.waiting(self.pending_path)

    def _add_rows(self, rows: list[tuple[Any, ...]]) -> list[tuple[int, str]]:
        """Add set-aside rows in one transaction (no wait for a lock); the index and reason of
        each row the store's constraints refuse."""
        refused: list[tuple[int, str]] = []

        def add(db: sqlite3.Connection) -> None:
            refused.clear()
            for index, row in enumerate(rows):
                try:
                    db.execute(ADD_PENDING, row)
                except sqlite3.IntegrityError as exc:  # only this statement is undone
                    refused.append((index, f"the store refuses it ({exc})"))

        if rows:
            self._transaction(add, give_up=lambda: True)
        return refused

    def _reject(self, bad: list[tuple[bytes, str]]) -> None:
        """Keep ``bad`` lines in the rejected file and say so, with the first line's reason."""
        if not bad:
            return
        pending.append(self.rejected_path, [line for line, _ in bad])
        lines = "1 line" if len(bad) == 1 else f"{len(bad)} lines"
        print(
            f"warning: {lines} of {self.pending_path} could not be added to the results store "
            f"and {'was' if len(bad) == 1 else 'were'} kept in {self.rejected_path} "
            f"(first: {bad[0][1]})",
            file=sys.stderr,
            flush=True,
        )

    def _transaction(
        self, body: Callable[[sqlite3.Connection], Any], give_up: Callable[[], bool] | None
    ) -> None:
        """Run ``body`` in one write transaction, retried while another writer holds the lock."""
        db = self._db

        def transaction() -> None:
            db.execute("BEGIN IMMEDIATE")
            try:
                body(db)
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise

        self._retry(transaction, give_up)

    def _retry(self, op: Callable[[], Any], give_up: Callable[[], bool] | None = None) -> Any:
        """Run ``op``; while the database is locked, try again with back-off until
        ``lock_timeout`` (or ``give_up()``); a file that cannot be a store → StoreError."""
        started = time.monotonic()
        delay = 0.02
        while True:
            try:
                return op()
            except sqlite3.Error as exc:
                code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
                busy = code in (5, 6) or "locked" in str(exc) or "busy" in str(exc)
                if not busy:
                    if code in UNUSABLE:
                        raise StoreError(
                            f"results store {self.path} is not usable ({exc}); {HINT}"
                        ) from exc
                    raise
                waited = time.monotonic() - started
                if waited >= self.lock_timeout or (give_up is not None and give_up()):
                    raise StoreBusy(
                        f"results store {self.path} is locked by another writer "
                        f"(waited {waited:.0f} s)"
                    ) from exc
                time.sleep(min(delay, max(0.0, self.lock_timeout - waited)))
                delay = min(2 * delay, MAX_BACKOFF)

    def status(self, key: str) -> str | None:
        """``"done"``, ``"failed"`` or ``None`` (never run) for a cell key."""
        row = self._fetch("SELECT status FROM cells WHERE key = ?", (key,))
        return None if not row else str(row[0][0])

    def get(self, key: str) -> CellResult | None:
        """The stored cell, or ``None``."""
        rows = self._fetch(
            "SELECT study, config, seed, version, status, started, finished, rows, summary, "
            "figures, error FROM cells WHERE key = ?",
            (key,),
        )
        return None if not rows else to_result(rows[0])

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
        for row in self._fetch(query + " ORDER BY finished", args):
            yield to_result(row)

    def count(self, status: str | None = None) -> int:
        """Number of stored cells (optionally with a given status)."""
        if status is None:
            return int(self._fetch("SELECT COUNT(*) FROM cells")[0][0])
        return int(self._fetch("SELECT COUNT(*) FROM cells WHERE status = ?", (status,))[0][0])

    def _fetch(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        return list(self._retry(lambda: self._db.execute(sql, args).fetchall()))

    def to_dataframe(self, study: str | None = None) -> Any:
        """Tidy rows of every done cell as a pandas DataFrame, with ``study``, ``cell``,
        ``cell_seed`` and the config's keys (prefixed ``config.``) as extra columns."""
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
