"""A run cell's record: its stable key, the :class:`CellResult` a worker sends back, and its
row in the results store's ``cells`` table (:mod:`attnreg.runs.store`), including the lines of
the pending file that set-aside rows are written to and read back from."""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnreg.core.validation import check_seed
from attnreg.output import rows_to_json
from attnreg.runs import pending

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
COLUMNS = (
    "key",
    "study",
    "config",
    "seed",
    "version",
    "status",
    "started",
    "finished",
    "seconds",
    "rows",
    "summary",
    "figures",
    "error",
)
INSERT = f"INSERT OR REPLACE INTO cells VALUES ({','.join('?' * len(COLUMNS))})"
# a set-aside row replaces a stored one only if it did not finish earlier (storing it twice is
# harmless; a newer result is never overwritten by an older one)
ADD_PENDING = (
    f"INSERT INTO cells VALUES ({','.join('?' * len(COLUMNS))}) ON CONFLICT(key) DO UPDATE SET "
    + ", ".join(f"{name} = excluded.{name}" for name in COLUMNS[1:])
    + " WHERE excluded.finished >= cells.finished"
)
TEXT_COLUMNS = ("key", "study", "config", "version", "status", "rows", "summary", "figures")
JSON_COLUMNS = {"config": dict, "rows": list, "summary": dict, "figures": list}


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


def cell_row(result: CellResult) -> tuple[Any, ...]:
    """The cell as the values of one ``cells`` row (raises before any write if a value cannot
    be serialised)."""
    return (
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
    )


def read_pending(
    path: Path,
) -> tuple[list[tuple[str, bytes, tuple[Any, ...]]], list[tuple[bytes, str]]]:
    """The lines of a claimed pending file: ``("line N", line, row)`` of each well-formed one,
    and ``(line, "line N: reason")`` of each other."""
    good: list[tuple[str, bytes, tuple[Any, ...]]] = []
    bad: list[tuple[bytes, str]] = []
    for number, line in enumerate(pending.read_lines(path), 1):
        try:
            good.append((f"line {number}", line, pending_row(line)))
        except ValueError as exc:
            bad.append((line, f"line {number}: {exc}"))
    return good, bad


def pending_row(line: bytes) -> tuple[Any, ...]:
    """One set-aside line (a JSON list of the ``cells`` columns, as :meth:`ResultsStore.spill`
    writes it) as a row; ``ValueError`` saying what is wrong. The status is left to the
    table's own check."""
    try:
        values = json.loads(line.decode("utf-8"))
    except ValueError as exc:  # UnicodeDecodeError is one too
        raise ValueError(f"not a JSON line ({exc})") from exc
    if not isinstance(values, list) or len(values) != len(COLUMNS):
        raise ValueError(f"not a JSON list of the {len(COLUMNS)} columns {', '.join(COLUMNS)}")
    row = dict(zip(COLUMNS, values, strict=True))
    for name in TEXT_COLUMNS:
        if not isinstance(row[name], str):
            raise ValueError(f"{name}: expected text, got {type(row[name]).__name__}")
    check_seed("seed", row["seed"])
    for name in ("started", "finished", "seconds"):
        value = row[name]
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise ValueError(f"{name}: expected a finite number of seconds, got {value!r}")
    if row["error"] is not None and not isinstance(row["error"], str):
        raise ValueError(f"error: expected text or null, got {type(row['error']).__name__}")
    decoded = {}
    for name, kind in JSON_COLUMNS.items():
        try:
            decoded[name] = json.loads(row[name])
        except ValueError as exc:
            raise ValueError(f"{name}: not JSON ({exc})") from exc
        if not isinstance(decoded[name], kind):
            raise ValueError(f"{name}: expected a JSON {kind.__name__}")
    if not all(isinstance(item, dict) for item in decoded["rows"]):
        raise ValueError("rows: expected a JSON list of objects")
    if row["key"] != cell_key(row["study"], decoded["config"], row["seed"], row["version"]):
        raise ValueError("key: does not match the study, config, seed and version")
    return tuple(values)


def to_result(row: tuple[Any, ...]) -> CellResult:
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
