"""The capacity curves computed in worker processes, one ``(family, d)`` cell per task (the
energy family's cells give two rows, one per read-out).

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
from attnreg.studies.capacity.energy import energy_capacity_rows, energy_families
from attnreg.studies.capacity.sweeps import Tick, capacity_row, families

Job = tuple[str, int, int]


def _cell(config: dict[str, Any], kind: str, index: int, d: int) -> list[dict[str, Any]]:
    """Worker: the capacity rows of family ``index`` (``kind`` ``"family"`` or ``"energy"``) at
    dimension ``d``."""
    cfg = CapacityConfig(**config)
    with warnings.catch_warnings(), torch_threads(1):
        warnings.simplefilter("ignore", RankWarning)
        warnings.simplefilter("ignore", ConditioningWarning)
        if kind == "energy":
            return energy_capacity_rows(cfg, energy_families(cfg)[index], d, lambda label: None)
        return [capacity_row(cfg, families(cfg)[index], d, lambda label: None)]


def capacity_rows(config: CapacityConfig, workers: int, tick: Tick) -> list[dict[str, Any]]:
    """Every family's rows at every ``d`` (the energy family after the others), in the serial
    order, computed by ``workers`` spawned processes (the largest cells first, so that no
    process is left with a long tail)."""
    jobs: list[Job] = [("family", i, d) for i, f in enumerate(families(config)) for d in f.dims]
    jobs += [("energy", i, d) for i, f in enumerate(energy_families(config)) for d in f.dims]
    order = sorted(jobs, key=lambda job: -job[2])
    rows: dict[Job, list[dict[str, Any]]] = {}
    context = multiprocessing.get_context("spawn")
    plain = asdict(config)
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = {pool.submit(_cell, plain, *job): job for job in order}
        for future in as_completed(futures):
            job = futures[future]
            rows[job] = future.result()
            tick(f"{rows[job][0]['family']} d={job[2]} ({config.seeds} seeds)")
    return [row for job in jobs for row in rows[job]]
