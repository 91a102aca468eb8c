"""The capacity curves computed in worker processes, one ``(family, d)`` cell per task.

Every evaluation of the search draws its patterns from a generator seeded by
``(seed, family, d, N)`` (:mod:`attnreg.studies.capacity.families`), so a cell's ``N_max`` does
not depend on which process computes it or in which order: the rows equal the serial ones.
Workers rebuild the families from the config (their success functions are closures, which do
not pickle) and run single-threaded, so ``workers`` processes use ``workers`` cores.
"""

from __future__ import annotations

import multiprocessing
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict
from typing import Any

from attnreg.core.threads import torch_threads
from attnreg.core.whitening import ConditioningWarning, RankWarning
from attnreg.studies.capacity.config import CapacityConfig
from attnreg.studies.capacity.sweeps import Progress, capacity_row, families


def _cell(config: dict[str, Any], index: int, d: int) -> dict[str, Any]:
    """Worker: the capacity row of family ``index`` at dimension ``d``."""
    cfg = CapacityConfig(**config)
    with warnings.catch_warnings(), torch_threads(1):
        warnings.simplefilter("ignore", RankWarning)
        warnings.simplefilter("ignore", ConditioningWarning)
        return capacity_row(cfg, families(cfg)[index], d, lambda label: None)


def capacity_rows(config: CapacityConfig, workers: int, tick: Progress) -> list[dict[str, Any]]:
    """Every family's row at every ``d``, in the serial order, computed by ``workers`` spawned
    processes (the largest cells first, so that no process is left with a long tail)."""
    jobs = [(i, d) for i, family in enumerate(families(config)) for d in family.dims]
    order = sorted(jobs, key=lambda job: -job[1])
    rows: dict[tuple[int, int], dict[str, Any]] = {}
    context = multiprocessing.get_context("spawn")
    plain = asdict(config)
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = {pool.submit(_cell, plain, i, d): (i, d) for i, d in order}
        for future in as_completed(futures):
            i, d = futures[future]
            rows[(i, d)] = future.result()
            tick(f"{rows[(i, d)]['family']} d={d} ({config.seeds} seeds)")
    return [rows[job] for job in jobs]
