"""``capacity`` — associative memory from linear to exponential capacity.

``N_max(d)`` is the largest ``N`` whose recall success rate is at least ``1 − ε``, found per
seed by doubling ``N = 1, 2, 4, …`` until the rate falls below ``1 − ε`` and then bisecting
between the last success and the first failure (to ``rtol`` relative precision; exactly for the
pseudo-inverse memory), and averaged over seeds. Every evaluation draws its patterns and
queries from a generator seeded by ``(seed, family, d, N)``, so the same config and seed give
the same numbers. Families and criteria: :mod:`attnreg.studies.capacity_families`. The
Universal Hopfield grid (Millidge et al. 2022) is measured on digits as the recall fraction at
fixed ``N`` and on random ±1 patterns as ``N_max``.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from attnreg.core.attention import SEPARATIONS
from attnreg.core.threads import torch_threads
from attnreg.core.validation import check_choice, check_positive, check_positive_int
from attnreg.core.whitening import ConditioningWarning, RankWarning
from attnreg.memory import GRID_SIMILARITIES
from attnreg.studies import capacity_families as fam
from attnreg.studies.common import StudyResult

SMALL_WORK = 2e8  # queries × memories × d below which one thread is faster than several

JSON_KEYS = ("model", "patterns", "query", "d", "n_max", "n_max_theory", "epsilon", "seeds")
Progress = Callable[[str], None]


@dataclass
class CapacityConfig:
    """Settings of ``attnreg capacity`` (defaults: the quick profile). ``workers``: processes
    for the ``N_max(d)`` curves (0: one per torch intra-op thread, so a report cell given one
    thread stays in its process); the numbers do not depend on it."""

    seed: int = 0
    seeds: int = 3
    epsilon: float = 0.01
    queries: int = 500
    device: str = "cpu"
    pinv_d: list[int] = field(default_factory=lambda: [8, 16, 32, 64, 128])
    hebbian_d: list[int] = field(default_factory=lambda: [100, 200, 400])
    hebbian_flip_fraction: float = 0.1
    hebbian_bit_tolerance: float = 0.05
    hebbian_epsilons: list[float] = field(default_factory=lambda: [0.01, 0.1, 0.5])
    hebbian_dynamics: str = "synchronous"
    dam2_d: list[int] = field(default_factory=lambda: [32, 64, 128, 256, 512])
    dam3_d: list[int] = field(default_factory=lambda: [16, 32, 48, 64, 96])
    dam4_d: list[int] = field(default_factory=lambda: [16, 24, 32, 48, 64])
    softmax_d: list[int] = field(default_factory=lambda: [8, 10, 12, 14, 16, 18, 20, 22, 24])
    softmax_beta: float = 1.0
    softmax_flips: int = 1
    sphere_d: list[int] = field(default_factory=lambda: [8, 12, 16, 20])
    sphere_sigma: float = 0.1
    sphere_tolerance: float = 0.01
    grid_beta: float = 100.0
    grid_power: int = 3
    grid_random_d: int = 24
    grid_random_flip_fraction: float = 0.1
    digits_n: list[int] = field(default_factory=lambda: [100, 1000])
    digits_sigma: float = 0.3
    digits_tolerance: float = 0.02
    n_limit: int = 2**22
    workers: int = 0


def quick_config() -> CapacityConfig:
    """The ``--quick`` profile (the defaults): P5 of ``quality.md``, ≤ 120 s on 2 cores."""
    return CapacityConfig()


def full_config() -> CapacityConfig:
    """The ``--full`` profile: more seeds and queries, larger d for every family."""
    return CapacityConfig(
        seeds=5,
        queries=1000,
        pinv_d=[8, 16, 32, 64, 128, 256],
        hebbian_d=[100, 200, 400, 800],
        dam2_d=[32, 64, 128, 256, 512, 1024],
        dam3_d=[16, 32, 48, 64, 96, 128],
        dam4_d=[16, 24, 32, 48, 64, 96],
        softmax_d=[8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32],
        sphere_d=[8, 12, 16, 20, 24],
        grid_random_d=32,
        digits_n=[100, 300, 1000, 1797],
    )


def check_config(config: CapacityConfig) -> None:
    """Reject invalid settings with a ``ValueError`` naming the field."""
    check_positive_int("seeds", config.seeds)
    check_positive_int("queries", config.queries)
    check_positive_int("n_limit", config.n_limit)
    workers = config.workers
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise ValueError(f"workers: must be an integer >= 0 (0: automatic), got {workers!r}")
    check_positive_int("grid_power", config.grid_power)
    check_positive_int("softmax_flips", config.softmax_flips)
    check_positive_int("grid_random_d", config.grid_random_d)
    for name in ("softmax_beta", "grid_beta", "sphere_tolerance", "digits_tolerance"):
        check_positive(name, getattr(config, name))
    for eps in [config.epsilon, *config.hebbian_epsilons]:
        if not 0 < eps < 1:
            raise ValueError(f"epsilon: must lie in (0, 1), got {eps}")
    check_choice("hebbian_dynamics", config.hebbian_dynamics, ("synchronous", "asynchronous"))
    for name in ("pinv_d", "hebbian_d", "dam2_d", "dam3_d", "dam4_d", "softmax_d", "sphere_d"):
        for d in getattr(config, name):
            check_positive_int(name, d)
    for n in config.digits_n:
        if not 1 <= n <= 1797:
            raise ValueError(f"digits_n: every N must lie in 1..1797, got {n}")


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
        for sep in SEPARATIONS:
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
    """Number of progress ticks of :func:`run` (one per family × d × seed, per digits cell)."""
    curves = sum(len(f.dims) for f in families(config)) * config.seeds
    grid = len(GRID_SIMILARITIES) * len(SEPARATIONS) * 2 * len(config.digits_n) * config.seeds
    return curves + grid + len(config.pinv_d)


def run(
    config: CapacityConfig | None = None,
    out_dir: str | None = None,
    progress: Progress | None = None,
) -> StudyResult:
    """Measure every family's ``N_max(d)``, the pseudo-inverse exactness check and the digits
    grid; write the figures into ``out_dir`` (if given); return the rows and the summary."""
    config = config or CapacityConfig()
    check_config(config)
    tick = progress or (lambda label: None)
    rows: list[dict[str, Any]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RankWarning)
        warnings.simplefilter("ignore", ConditioningWarning)
        workers = config.workers or torch.get_num_threads()
        if workers > 1:
            from attnreg.studies.capacity_pool import capacity_rows

            rows.extend(capacity_rows(config, workers, tick))
        else:
            for family in families(config):
                for d in family.dims:
                    rows.append(capacity_row(config, family, d, tick))
        rows.extend(_pinv_check(config, tick))
        grid_rows, panel = _digits_grid(config, tick)
        rows.extend(grid_rows)
    from attnreg.studies.capacity_figures import make_figures
    from attnreg.studies.capacity_summary import summarize

    figures = make_figures(rows, panel, config, out_dir) if out_dir is not None else []
    return StudyResult("capacity", asdict(config), rows, figures, summarize(rows, config))


def capacity_row(
    config: CapacityConfig, family: fam.Family, d: int, tick: Progress
) -> dict[str, Any]:
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


def _pinv_check(config: CapacityConfig, tick: Progress) -> list[dict[str, Any]]:
    """For each ``d``: is recall exact for every ``N ≤ d`` and inexact for every ``d < N ≤ 2d``
    (every stored key queried; seed ``config.seed``)?"""
    success = fam.pinv_success(config.device)
    rows = []
    for d in config.pinv_d:
        with torch_threads(1):
            rates = {
                n: success(d, n, fam.cell_generator(config.seed, "pinv-check", d, n))
                for n in range(1, 2 * d + 1)
            }
        rows.append(
            {
                "kind": "pinv_check",
                "model": "pseudo-inverse",
                "d": d,
                "exact_all_n_le_d": all(rates[n] == 1.0 for n in range(1, d + 1)),
                "worst_rate_n_le_d": min(rates[n] for n in range(1, d + 1)),
                "inexact_all_n_gt_d": all(
                    rates[n] < 1.0 - config.epsilon for n in range(d + 1, 2 * d + 1)
                ),
                "best_rate_n_gt_d": max(rates[n] for n in range(d + 1, 2 * d + 1)),
            }
        )
        tick(f"pinv check d={d}")
    return rows


def _digits_grid(
    config: CapacityConfig, tick: Progress
) -> tuple[list[dict[str, Any]], dict[str, torch.Tensor]]:
    """Recall fraction of every similarity × separation cell on digits, at each ``N``."""
    images = fam.load_digits_images(config.device)
    rows: list[dict[str, Any]] = []
    panel: dict[str, torch.Tensor] = {}
    with torch_threads(1):
        _digits_cells(config, images, rows, panel, tick)
    return rows, panel


def _digits_cells(
    config: CapacityConfig,
    images: torch.Tensor,
    rows: list[dict[str, Any]],
    panel: dict[str, torch.Tensor],
    tick: Progress,
) -> None:
    for n in config.digits_n:
        for query in ("mask", "noise"):
            for sim in GRID_SIMILARITIES:
                for sep in SEPARATIONS:
                    recalls = []
                    for i in range(config.seeds):
                        gen = fam.cell_generator(config.seed + i, f"digits:{query}", 64, n)
                        stored = images[torch.randperm(images.shape[0], generator=gen)[:n]]
                        recall, q, out = fam.digits_recall(
                            stored,
                            sim,
                            sep,
                            query,
                            beta=config.grid_beta,
                            power=config.grid_power,
                            sigma=config.digits_sigma,
                            tolerance=config.digits_tolerance,
                            gen=gen,
                        )
                        recalls.append(recall)
                        if i == 0 and n == config.digits_n[0]:
                            panel.setdefault(f"original:{query}", stored[:8])
                            panel.setdefault(f"query:{query}", q[:8])
                            if f"{sim}/{sep}" in fam.DIGITS_PANEL_CELLS:
                                panel[f"{sim}/{sep}:{query}"] = out[:8]
                        tick(f"digits {query} N={n} {sim}/{sep}")
                    rows.append(
                        {
                            "kind": "recall",
                            "model": f"uhn({sim},{sep})",
                            "similarity": sim,
                            "separation": sep,
                            "patterns": "digits",
                            "query": query,
                            "d": 64,
                            "n": n,
                            "recall": float(np.mean(recalls)),
                            "seeds": config.seeds,
                            "beta": config.grid_beta,
                            "power": config.grid_power,
                            "tolerance": config.digits_tolerance,
                        }
                    )


def json_rows(result: StudyResult) -> list[dict[str, Any]]:
    """The capacity rows with exactly the keys of ``JSON_KEYS`` (what ``--json`` prints)."""
    return [{k: r[k] for k in JSON_KEYS} for r in result.rows if r["kind"] == "capacity"]
