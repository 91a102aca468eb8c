"""The energy family's cost at its capacity: time per retrieval and state bytes per stored
pattern at ``N_max`` (:mod:`~attnreg.studies.capacity.energy`)."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from typing import Any

import torch

from attnreg.core.threads import torch_threads
from attnreg.data.patterns import flip_bits, random_binary
from attnreg.studies.capacity import families as fam
from attnreg.studies.capacity.config import CapacityConfig
from attnreg.studies.capacity.energy import DTYPE, energy_families


def cost_rows(config: CapacityConfig, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Time per retrieval and state bytes per stored pattern at ``N_max`` for every energy
    family and ``d``, read out in pattern coordinates.

    The memory holds ``round(N_max)`` random ±1 patterns (seed ``config.seed``). A retrieval
    is one step plus the pattern read-out for a batch of ``cost_queries`` queries, on one
    thread; its time is the best of ``cost_repeats`` runs divided by the batch size. The
    state is what a retrieval reads (:meth:`~attnreg.memory.EnergyMemory.state_bytes`):
    ``K̃`` and ``K`` (``2 N d`` floats) for power and softmax. The quadratic energy's step and
    read-out form one linear map, ``S^{1/2} = K̃ᵀK`` (``d × d``), whatever ``N`` is; it is
    formed once at store time and applied as one matrix product. ``store_seconds`` covers the
    whitening, plus forming that map for the quadratic."""
    out = []
    by_key = {(r["family"], r["d"]): r for r in rows if r["kind"] == "capacity"}
    for family in energy_families(config):
        for d in family.dims:
            cap = by_key.get((f"energy:{family.key}@pattern", d))
            if cap is None or cap["n_max"] < 1:
                continue
            n = max(1, round(cap["n_max"]))
            gen = fam.cell_generator(config.seed, "energy-cost", d, n)
            k = random_binary(n, d, gen, DTYPE)
            q = flip_bits(k[torch.randint(0, n, (config.cost_queries,), generator=gen)], 1, gen)
            with torch_threads(1):
                t0 = time.perf_counter()
                mem = family.memory(n, config.energy_softmax_beta).store(k)
                if family.energy == "quadratic":
                    linear = mem.linear_map("pattern")
                    retrieve: Callable[[], Any] = functools.partial(torch.matmul, q, linear)
                else:
                    retrieve = functools.partial(mem.step, q, readout="pattern")
                retrieve()
                store = time.perf_counter() - t0
                best = math.inf
                for _ in range(config.cost_repeats):
                    t0 = time.perf_counter()
                    retrieve()
                    best = min(best, time.perf_counter() - t0)
            state = mem.state_bytes("pattern")
            out.append(
                {
                    "kind": "energy_cost",
                    "energy": family.key,
                    "model": f"energy({family.label})",
                    "d": d,
                    "n_max": cap["n_max"],
                    "n": n,
                    "seconds_per_retrieval": best / config.cost_queries,
                    "store_seconds": store,
                    "state_bytes": state,
                    "bytes_per_pattern": state / n,
                    "patterns_per_kib": n * 1024 / state,
                }
            )
    return out
