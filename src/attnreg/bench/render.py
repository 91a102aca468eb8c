"""The benchmark tables, rendered from one ``attnreg bench --json`` result file.

The docs page (``docs/benchmarks.md``, through a build hook) and ``benchmarks/README.md``
(between :data:`BEGIN` and :data:`END`) show the committed result file
``benchmarks/results.json`` through :func:`render`, never numbers typed by hand. After a new
run::

    attnreg bench --json > benchmarks/results.json
    python -m attnreg.bench.render            # rewrites the block in benchmarks/README.md
    python -m attnreg.bench.render --check    # exit status 1 if the block is out of date

The file is one JSON object: ``run`` (date in UTC, machine, threads, matmul rate, torch version,
the targets run, seconds; an optional ``note``) and ``targets`` (the rows of ``attnreg bench``:
``id, workload, value, unit, target, passed, reference, details``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from attnreg.bench import TARGETS
from attnreg.output import rows_to_json

BEGIN = (
    "<!-- bench-results:begin — generated from benchmarks/results.json by "
    "`python -m attnreg.bench.render`; do not edit by hand -->"
)
END = "<!-- bench-results:end -->"
ROW_KEYS = ("id", "workload", "value", "unit", "target", "passed", "reference", "details")
_SYMBOLS = {"<=": "≤", ">=": "≥"}


def bench_json(run: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> str:
    """The result file's text: ``{"run": run, "targets": rows}`` (NaN/Inf in a row's
    top-level values become null, numpy/torch scalars become numbers)."""
    return json.dumps({"run": dict(run), "targets": json.loads(rows_to_json(rows))}, indent=2)


def load(path: str | Path) -> dict[str, Any]:
    """Read a result file; a ``ValueError`` naming ``path`` if it is not one."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"path: cannot read a bench result from {path}: {exc}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("run"), dict):
        raise ValueError(f"path: {path} has no 'run' object (write it with attnreg bench --json)")
    targets = doc.get("targets")
    if not isinstance(targets, list) or not targets:
        raise ValueError(f"path: {path} has no 'targets' list")
    for row in targets:
        if not isinstance(row, dict) or set(row) != set(ROW_KEYS):
            raise ValueError(f"path: {path}: a target row must have exactly the keys {ROW_KEYS}")
    return doc


def _number(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    return f"{value:.3g}"


def _duration(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"


def _cell(text: str) -> str:
    """Markdown table cell text: ``|`` escaped, no line breaks."""
    return " ".join(text.split()).replace("|", "\\|")


def _checks(details: Mapping[str, Any]) -> str:
    parts = [
        f"{c['check']} {_number(c['value'])} {_SYMBOLS.get(c['op'], c['op'])} "
        f"{_number(c['limit'])}{'' if c['passed'] else ' (FAILED)'}"
        for c in details.get("checks", [])
    ]
    if "error" in details:
        parts.append(f"error: {details['error']}")
    return "; ".join(parts)


def _times(details: Mapping[str, Any]) -> str:
    seconds = details.get("seconds")
    if isinstance(seconds, Mapping):
        return ", ".join(
            f"{name} {_duration(value)}"
            for name, value in seconds.items()
            if isinstance(value, int | float)
        )
    runs = details.get("runs")
    if isinstance(runs, list):
        return ", ".join(
            f"seed {r['seed']} {_duration(r['measured_wall_seconds'])}"
            for r in runs
            if isinstance(r, Mapping) and "seed" in r and "measured_wall_seconds" in r
        )
    return ""


def _header(run: Mapping[str, Any], targets: Sequence[Mapping[str, Any]]) -> str:
    box = run.get("machine") or {}
    date = str(run.get("date", "unknown date"))[:16].replace("T", " ")  # to the minute
    cores = f"{box.get('usable_cores', '?')} of {box.get('logical_cores', '?')} cores"
    gib = box.get("memory_gib")
    memory = f", {gib:g} GiB" if isinstance(gib, int | float) else ""
    options = f"--repeat {run.get('repeat', '?')}"
    if run.get("smoke"):
        options += " --smoke"
    only = run.get("only")
    if only and list(only) != list(TARGETS):
        options += f" --only {','.join(only)}"
    seconds = round(float(run.get("seconds") or 0.0))
    passed = sum(bool(t["passed"]) for t in targets)
    lines = [
        f"**Run of {date} UTC** — {box.get('cpu', 'unknown CPU')} ({cores}{memory}), torch "
        f"{run.get('torch', '?')}, {run.get('threads', '?')} threads; `attnreg bench --json "
        f"{options}`, {seconds // 60} min {seconds % 60} s in all. Float32 "
        f"matmul rate measured first: {_number(run.get('matmul_gflops'))} GFLOP/s. "
        f"{passed} of {len(targets)} targets passed.",
    ]
    if run.get("note"):
        lines += ["", f"> **Note.** {_cell(str(run['note']))}"]
    return "\n".join(lines)


def render(doc: Mapping[str, Any]) -> str:
    """The Markdown block for a result file: a line on the run (date, machine, options,
    matmul rate, how many targets passed) and one table row per target (headline value,
    target, pass, each sub-check as ``value op limit``, the measured times); then the timing of
    every registered sequence layer, where the run has it."""
    targets = doc["targets"]
    rows = [
        _header(doc["run"], targets),
        "",
        "| id | value | target | passed | checks | times |",
        "|---|---|---|---|---|---|",
    ]
    for t in targets:
        value = "n/a" if t["value"] is None else f"{_number(t['value'])} {t['unit']}"
        cells = (
            t["id"],
            value,
            t["target"],
            "yes" if t["passed"] else "**NO**",
            _checks(t["details"]),
            _times(t["details"]) or "—",
        )
        rows.append("| " + " | ".join(_cell(str(c)) for c in cells) + " |")
    return "\n".join(rows + _registered(targets)) + "\n"


def _registered(targets: Sequence[Mapping[str, Any]]) -> list[str]:
    """A table of every registered sequence layer's timing (a target's
    ``details["registered"]``, :mod:`attnreg.bench.registered`), or nothing."""
    for t in targets:
        timed = t["details"].get("registered")
        if not timed:
            continue
        shape = next(iter(timed.values()))["shape"]
        lines = [
            "",
            f"Every registered sequence layer, default form, on its example inputs ({t['id']}, "
            f"reported, not judged; {shape}):",
            "",
            "| layer | seconds | tokens / s | fla's reference | × fla |",
            "|---|---|---|---|---|",
        ]
        for name, row in timed.items():
            fla = row.get("fla_seconds")
            theirs = "—" if fla is None else _duration(fla)
            ratio = "—" if fla is None else f"{fla / row['seconds']:,.1f} ×"
            lines.append(
                f"| `{name}` | {_duration(row['seconds'])} | {row['tokens_per_second']:,.0f} "
                f"| {theirs} | {ratio} |"
            )
        return lines
    return []


def block(doc: Mapping[str, Any]) -> str:
    """:func:`render` between the :data:`BEGIN` and :data:`END` markers."""
    return f"{BEGIN}\n\n{render(doc)}\n{END}"


def splice(text: str, doc: Mapping[str, Any]) -> str:
    """``text`` with its one marked block replaced by :func:`block` of ``doc``; a
    ``ValueError`` if the markers are missing, repeated or out of order."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start or text.count(BEGIN) != 1 or text.count(END) != 1:
        raise ValueError(f"text: needs exactly one {BEGIN!r} … {END!r} block")
    return text[:start] + block(doc) + text[end + len(END) :]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m attnreg.bench.render [--results FILE] [--readme FILE] [--check]``."""
    parser = argparse.ArgumentParser(
        prog="python -m attnreg.bench.render",
        description="Rewrite the generated benchmark table of a README from a result file.",
    )
    parser.add_argument("--results", default="benchmarks/results.json", help="the result file")
    parser.add_argument("--readme", default="benchmarks/README.md", help="the file to update")
    parser.add_argument("--check", action="store_true", help="exit 1 if out of date; no write")
    args = parser.parse_args(argv)
    try:
        doc = load(args.results)
        readme = Path(args.readme)
        old = readme.read_text(encoding="utf-8")
        new = splice(old, doc)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        if new != old:
            print(f"{readme} is out of date with {args.results}", file=sys.stderr)
            return 1
        return 0
    readme.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
