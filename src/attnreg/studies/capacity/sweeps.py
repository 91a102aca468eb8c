"""The capacity curves: ``N_max(d)`` of every family, searched per seed by doubling then
bisection (one row per family × ``d``, averaged over the seeds)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from attnreg.core.scores import UHN_SEPARATIONS
from attnreg.core.threads import torch_threads
from attnreg.memory import GRID_SIMILARITIES
from attnreg.studies.capacity import families as fam
from attnreg.studies.capacity.config import CapacityConfig

SMALL_WORK = 2e8  # queries × memories × d below which one thread is faster than several

Tick = Callable[[str], None]


def search_capacity(
    success: Callable[[int], float], epsilon: float, rtol: float = 0.0, n_limit: int = 2**22
) -> tuple[int, int]:
    """Largest ``N ≤ n_limit`` with ``success(N) ≥ 1 − ε``: doubling from 1, then bisection
    until ``bad − good ≤ max(1, rtol·good)``. Returns ``(N_max, evaluations)``; ``N_max = 0``
    if even one pattern fails."""
    threshold = 1.0 - epsilon
    good, n, evaluations = 0, 1, 0
    bad: int | None = None
    while n <= n_limit:
        evaluations += 1
        if success(n) >= threshold:
            good, n = n, 2 * n
        else:
            bad = n
            break
    if bad is None:
        if good == n_limit:
            return good, evaluations
        bad = n_limit + 1
    while bad - good > max(1, math.floor(rtol * good)):
        mid = (good + bad) // 2
        evaluations += 1
        if success(mid) >= threshold:
            good = mid
        else:
            bad = mid
    return good, evaluations


def families(config: CapacityConfig) -> list[fam.Family]:
    """The capacity families measured by ``config``."""
    c, dev, m = config, config.device, config.queries
    out = [
        fam.Family(
            "pinv",
            "pseudo-inverse",
            "sphere->binary",
            "clean",
            tuple(c.pinv_d),
            c.epsilon,
            fam.pinv_success(dev),
            float,
            rtol=0.0,
        ),
    ]
    flips = f"flips:{c.hebbian_flip_fraction:g}d"
    for eps in c.hebbian_epsilons:
        out.append(
            fam.Family(
                f"hebbian@{eps:g}",
                "hebbian",
                "binary",
                flips,
                tuple(c.hebbian_d),
                eps,
                fam.hebbian_success(
                    m, c.hebbian_flip_fraction, c.hebbian_bit_tolerance, c.hebbian_dynamics, dev
                ),
                fam.hebbian_theory,
                rtol=0.0,
            )
        )
    for power, dims in ((2, c.dam2_d), (3, c.dam3_d), (4, c.dam4_d)):
        out.append(
            fam.Family(
                f"dam{power}",
                f"dam(n={power})",
                "binary",
                "clean",
                tuple(dims),
                c.epsilon,
                fam.dam_success(power, m, dev),
                fam.dam_theory(power),
            )
        )
    k, beta = c.softmax_flips, c.softmax_beta
    out.append(
        fam.Family(
            "softmax",
            f"softmax(beta={beta:g})",
            "binary",
            f"flips:{k}",
            tuple(c.softmax_d),
            c.epsilon,
            fam.softmax_binary_success(beta, k, m, dev),
            lambda d: fam.nearest_pattern_bound(d, k, c.epsilon),
            n_limit=c.n_limit,
        )
    )
    out.append(
        fam.Family(
            "softmax_sphere",
            f"softmax(beta={beta:g})",
            "sphere",
            f"noise:{c.sphere_sigma:g}",
            tuple(c.sphere_d),
            c.epsilon,
            fam.softmax_sphere_success(beta, c.sphere_sigma, c.sphere_tolerance, m, dev),
            fam.no_theory,
            n_limit=c.n_limit,
        )
    )
    k_grid = max(1, round(c.grid_random_flip_fraction * c.grid_random_d))
    for sim in GRID_SIMILARITIES:
        for sep in UHN_SEPARATIONS:
            theory = (
                (lambda d: fam.nearest_pattern_bound(d, k_grid, c.epsilon))
                if sep == "max"
                else fam.no_theory
            )
            out.append(
                fam.Family(
                    f"uhn:{sim}/{sep}",
                    f"uhn({sim},{sep})",
                    "binary",
                    f"flips:{k_grid}",
                    (c.grid_random_d,),
                    c.epsilon,
                    fam.uhn_binary_success(sim, sep, c.grid_beta, c.grid_power, k_grid, m, dev),
                    theory,
                    n_limit=min(c.n_limit, 2**16),
                )
            )
    return out


def task_count(config: CapacityConfig) -> int:
    """Number of progress ticks of :func:`run` (one per family × d × seed, per energy family ×
    d × seed, per digits cell and per power degree × query × similarity)."""
    energy_dims = (
        config.energy_quadratic_d,
        config.energy_power3_d,
        config.energy_power4_d,
        config.energy_softmax_d,
    )
    curves = sum(len(f.dims) for f in families(config)) * config.seeds
    curves += sum(len(dims) for dims in energy_dims) * config.seeds
    grid = len(GRID_SIMILARITIES) * len(UHN_SEPARATIONS) * 2 * len(config.digits_n) * config.seeds
    degrees = len(GRID_SIMILARITIES) * 2 * len(config.digits_power_degrees)
    return curves + grid + degrees + len(config.pinv_d)


def capacity_row(config: CapacityConfig, family: fam.Family, d: int, tick: Tick) -> dict[str, Any]:
    start = time.perf_counter()
    per_seed, evaluations = [], 0
    for i in range(config.seeds):
        seed = config.seed + i

        def success(n: int, seed: int = seed) -> float:
            work = config.queries * d * max(n, d)
            with torch_threads(1 if work < SMALL_WORK else None):
                return family.success(d, n, fam.cell_generator(seed, family.key, d, n))

        n_max, evals = search_capacity(success, family.epsilon, family.rtol, family.n_limit)
        per_seed.append(n_max)
        evaluations += evals
        tick(f"{family.key} d={d} seed={seed}")
    return {
        "kind": "capacity",
        "family": family.key,
        "model": family.model,
        "patterns": family.patterns,
        "query": family.query,
        "d": d,
        "n_max": float(np.mean(per_seed)),
        "n_max_theory": float(family.theory(d)),
        "epsilon": family.epsilon,
        "seeds": config.seeds,
        "n_max_std": float(np.std(per_seed)),
        "n_max_per_seed": ";".join(str(v) for v in per_seed),
        "evaluations": evaluations,
        "seconds": time.perf_counter() - start,
    }
