"""``attnreg report``: run (or read) every study's quick profile and write the page.

Each study's quick profile is one cell of the results store (default ``OUT/results.db``):
a cell already done there is read, not re-run, so an interrupted report resumes, and a store
filled by ``attnreg sweep`` can be reported on with ``--store``. A failing study is stored as
failed and shown with its error; the other studies still appear.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnreg.core.validation import check_seed
from attnreg.report.page import render, section, write_ledger
from attnreg.runs.cells import CellSpec, make_cell
from attnreg.runs.executors import check_workers, run_cells
from attnreg.runs.paths import folder_problem
from attnreg.runs.store import CellResult, ResultsStore, now
from attnreg.studies.registry import STUDIES, get_study


def report_cells(
    studies: list[str],
    seed: int,
    profile: str,
    overrides: dict[str, dict[str, Any]] | None = None,
) -> list[CellSpec]:
    """One cell per study: its ``profile`` config with ``seed`` and the study's ``overrides``
    (keys of its config; an unknown key is an error naming it)."""
    extra = overrides or {}
    return [make_cell(name, extra.get(name, {}), seed, profile) for name in studies]


def check_overrides(overrides: dict[str, dict[str, Any]], seed: int, profile: str) -> None:
    """Build each overridden study's config (its ``profile`` with the overrides and ``seed``):
    an unknown study, an unknown key, a wrong type or a bad value is a ``ValueError`` naming
    the study and the key."""
    for name, changes in overrides.items():
        get_study(name)
        try:
            make_cell(name, changes, seed, profile)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"overrides of {name}: {exc}") from exc


def build_report(
    out_dir: str | Path,
    *,
    store_path: str | Path | None = None,
    studies: list[str] | None = None,
    seed: int = 0,
    profile: str = "quick",
    workers: int | None = None,
    rerun: bool = False,
    progress: bool = True,
    overrides: dict[str, dict[str, Any]] | None = None,
) -> Path:
    """Run what is missing, then write ``out_dir/index.html`` and the tidy results beside it.

    ``overrides`` maps a study name to config keys replacing its profile's values (e.g. a
    smaller grid); the page's re-create command then lists them. Arguments are checked before
    anything runs, each study's config built with its overrides (``ValueError`` naming the
    culprit: nothing runs, nothing is written); SIGINT or SIGTERM stops the studies
    with every finished one stored (:class:`~attnreg.runs.lifecycle.RunInterrupted`)."""
    out = Path(out_dir)
    check_seed("seed", seed)
    check_workers(workers)
    names = list(studies or STUDIES)
    for name in names:
        get_study(name)
    check_overrides(overrides or {}, seed, profile)
    problem = folder_problem(out)
    if problem:
        raise ValueError(f"output folder {out} {problem}")
    cells: list[CellSpec] = []
    failed_setup: list[CellResult] = []
    for name in names:
        try:
            cells.extend(report_cells([name], seed, profile, overrides))
        except Exception as exc:  # a study whose config cannot even be built: show it failed
            stamp = now()
            failed_setup.append(
                CellResult(
                    name, {}, seed, "", "failed", stamp, stamp, error=f"{type(exc).__name__}: {exc}"
                )
            )
    store_file = Path(store_path) if store_path else out / "results.db"
    with ResultsStore(store_file) as store:
        run_cells(
            cells,
            store,
            workers=workers,
            retry_failed=True,
            figures=True,
            progress=progress,
            rerun=rerun,
        )
        results = {c.study: store.get(c.key) for c in cells}
        results.update({c.study: c for c in failed_setup})
        sections = []
        for name in names:
            cell = results.get(name)
            if cell is None:
                continue
            spec = get_study(name)
            command = spec.command(profile, seed)
            changed = (overrides or {}).get(name)
            if changed:
                command += " with " + ", ".join(f"{k} = {v!r}" for k, v in changed.items())
            sections.append(section(cell, command, table=spec.report_table))
        store.export(out)
        html = render(sections, store_file.name, store.count())
        write_ledger(sections, out / "ledger.json")
    page = out / "index.html"
    page.write_text(html, encoding="utf-8")
    return page
