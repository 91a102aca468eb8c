"""Full-scale results of the claims that need a paper's regime, committed with the package.

A trained-model claim gets a verdict only from a run in its paper's regime (depth, width,
steps, seeds), which the quick profile does not reach. Such runs (``attnreg STUDY --full``) are
made once, on a stated machine, and their ledger rows are committed as
``attnreg/studies/full_scale/STUDY.json``::

    {"study", "command", "date", "machine", "seeds", "claims": [Claim.row(), …]}

written by :func:`publish` from the run's ``STUDY_summary.json`` files (one per seed). The
ledger (:func:`merge`, used by the report and the docs) shows, for each claim the full run
measured, the full run's verdict, number and regime, and keeps this run's own number beside it
(``this_run``): a quick run never overrides a full-scale verdict, and says so.
"""

from __future__ import annotations

import json
import os
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PUBLISHED = Path(__file__).with_name("full_scale")


def key(row: dict[str, Any]) -> tuple[str, str]:
    """A claim's identity across profiles: its quote and its kind (the measurement's wording
    may name the profile's sizes)."""
    return (str(row["quote"]), str(row["kind"]))


def load(study: str, folder: Path = PUBLISHED) -> dict[str, Any] | None:
    """The committed full-scale record of ``study``, or ``None``."""
    path = folder / f"{study}.json"
    if not path.is_file():
        return None
    record: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return record


def provenance(record: dict[str, Any], command: bool = True) -> str:
    """``"full scale: COMMAND (DATE, MACHINE, seeds …)"``; without ``command``, ``"full scale
    (DATE, MACHINE, seeds …; committed as STUDY.json)"`` (the verdict's one-line reason keeps
    it short: the command stands in the record and in ``published``)."""
    seeds = ", ".join(str(s) for s in record["seeds"])
    when = f"{record['date']}, {record['machine']}, seeds {seeds}"
    if not command:
        return f"full scale ({when}; committed as {record['study']}.json)"
    return f"full scale: {record['command']} ({when})"


def merge(rows: list[dict[str, Any]], study: str, folder: Path = PUBLISHED) -> list[dict[str, Any]]:
    """The ledger rows of this run with the committed full-scale rows of ``study`` read in:
    a claim the full run measured shows the full run's verdict and number, with this run's
    number, verdict and regime under ``this_run`` and both in ``why``; a full-scale claim this
    run did not measure is added as its own row. Without a record, ``rows`` unchanged."""
    record = load(study, folder)
    if record is None:
        return rows
    full = {key(r): r for r in record["claims"]}
    out = []
    for row in rows:
        published = full.pop(key(row), None)
        if published is None:
            out.append(row)
            continue
        merged = dict(published)
        merged["this_run"] = {
            k: row.get(k) for k in ("number", "verdict", "verdict_text", "run_regime")
        }
        merged["published"] = provenance(record)
        this = row.get("run_regime") or "this run"
        merged["why"] = (
            f"{published['why']} ({provenance(record, command=False)}; this run, {this}: "
            f"{row['number']}, {row['verdict_text']})"
        )
        out.append(merged)
    for published in full.values():
        note = {"published": provenance(record)}
        short = provenance(record, command=False)
        out.append(dict(published) | note | {"why": f"{published['why']} ({short})"})
    return out


def publish(
    summaries: list[Path],
    study: str,
    command: str,
    seeds: list[int],
    folder: Path = PUBLISHED,
    machine: str | None = None,
) -> Path:
    """Write ``folder/STUDY.json`` from the ``claims`` of a full run's summary file(s)
    (``STUDY_summary.json``; a study that pools its seeds writes one; a study whose claims
    come from several runs, one part each, gives each run's file). ``machine`` describes the
    machine that ran them (default: its architecture and core count). Returns the path."""
    claims: list[dict[str, Any]] = []
    for path in summaries:
        claims += json.loads(Path(path).read_text(encoding="utf-8"))["claims"]
    record = {
        "study": study,
        "command": command,
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": machine or f"{platform.machine()}, {os.cpu_count()} cores",
        "seeds": seeds,
        "claims": claims,
    }
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{study}.json"
    out.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return out
