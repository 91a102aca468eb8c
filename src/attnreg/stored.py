"""A study's result read through one results store, so that the pages of a documentation build
(the claims ledger and the tutorials) run each study's profile once between them.

:func:`study_cell` returns the stored cell of a study's profile (:class:`~attnreg.runs.store.
CellResult`: rows, summary, figures as PNG, the ledger rows); a cell not yet stored is run in
this process and stored first. :func:`run_missing` runs several missing cells in parallel
worker processes. The store is the file named by the environment variable
:data:`ENVIRONMENT` — the docs build sets it to a fresh temporary folder for each build
(``docs/assets/results_store.py``), so no page ever reads a stale number — else a store in a
temporary folder of this process. A cell's key is its study, full config, seed and the
package version (:func:`~attnreg.runs.cells.make_cell`), as everywhere else.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from attnreg.runs.cells import CellSpec, execute_cell, make_cell
from attnreg.runs.store import CellResult, ResultsStore
from attnreg.studies.ledger import LEDGER_KEY

__all__ = ["ENVIRONMENT", "claim_rows", "run_missing", "store_path", "study_cell"]

ENVIRONMENT = "ATTNREG_RESULTS_STORE"
_PRIVATE: list[Path] = []  # this process's store when the environment names none


def store_path() -> Path:
    """The results store the pages share: ``$ATTNREG_RESULTS_STORE``, else one in a temporary
    folder made for this process (removed when it exits, never used by another process)."""
    given = os.environ.get(ENVIRONMENT, "").strip()
    if given:
        return Path(given)
    if not _PRIVATE:
        folder = tempfile.mkdtemp(prefix="attnreg-results-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        _PRIVATE.append(Path(folder) / "results.db")
    return _PRIVATE[0]


def _cell(study: str, profile: str, seed: int) -> CellSpec:
    return make_cell(study, {}, seed, profile)


def run_missing(studies: list[str], profile: str = "quick", seed: int = 0) -> list[str]:
    """Run the cells of ``studies`` not yet in the store, in parallel worker processes (one per
    core, at most one per cell), and store them; returns the studies that were run. A failed
    cell is a ``RuntimeError`` with its traceback."""
    from attnreg.runs.executors import run_cells

    cells = [_cell(name, profile, seed) for name in studies]
    with ResultsStore(store_path()) as store:
        todo = [c for c in cells if store.status(c.key) != "done"]
        if todo:
            run_cells(todo, store, figures=True, progress=False, retry_failed=True)
        _raise_failed(store, todo)
    return [c.study for c in todo]


def study_cell(study: str, profile: str = "quick", seed: int = 0) -> CellResult:
    """The stored cell of ``study``'s ``profile`` at ``seed``: read from the store, or run here
    (figures kept as PNG) and stored first. A failed run is a ``RuntimeError`` with its
    traceback."""
    cell = _cell(study, profile, seed)
    with ResultsStore(store_path()) as store:
        if store.status(cell.key) != "done":
            store.put(execute_cell(cell, figures=True))
        _raise_failed(store, [cell])
        stored = store.get(cell.key)
    assert stored is not None
    return stored


def _raise_failed(store: ResultsStore, cells: list[CellSpec]) -> None:
    for cell in cells:
        stored = store.get(cell.key)
        if stored is None or stored.status != "done":
            error = stored.error if stored is not None else "not stored"
            raise RuntimeError(f"study {cell.study} ({cell.key[:12]}) failed:\n{error}")


def claim_rows(cell: CellResult) -> list[dict[str, Any]]:
    """The ledger rows (:meth:`~attnreg.studies.ledger.Claim.row`) of a stored cell, with the
    study's committed full-scale verdicts read in (:func:`attnreg.studies.published.merge`);
    none when its study tests no claim."""
    from attnreg.studies.published import merge

    table = cell.summary.get(LEDGER_KEY)
    return merge(list(table.get("claims", [])) if isinstance(table, dict) else [], cell.study)
