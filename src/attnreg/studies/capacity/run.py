"""``capacity`` — associative memory from linear to exponential capacity.

``N_max(d)`` is the largest ``N`` whose recall success rate is at least ``1 − ε``, found per
seed by doubling ``N = 1, 2, 4, …`` until the rate falls below ``1 − ε`` and then bisecting
between the last success and the first failure (to ``rtol`` relative precision; exactly for the
pseudo-inverse memory), and averaged over seeds. Every evaluation draws its patterns and
queries from a generator seeded by ``(seed, family, d, N)``, so the same config and seed give
the same numbers. Families and criteria: :mod:`attnreg.studies.capacity.families`. The
Universal Hopfield grid (Millidge et al. 2022) is measured on digits as the recall fraction at
fixed ``N`` and on random ±1 patterns as ``N_max``. The energy family
(:mod:`attnreg.studies.capacity.energy`) holds the whitened similarity fixed and varies only the
separation ``F`` (projection, ``|s|ⁿ/n``, softmax); it adds the energy-descent rows, the
OLS-Transformer-as-one-quadratic-step rows and the cost rows.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict
from typing import Any

import numpy as np
import torch

from attnreg.core.scores import UHN_SEPARATIONS
from attnreg.core.threads import torch_threads
from attnreg.core.whitening import ConditioningWarning, RankWarning
from attnreg.memory import GRID_SIMILARITIES
from attnreg.progress import Progress
from attnreg.studies.capacity import families as fam
from attnreg.studies.capacity.config import CapacityConfig
from attnreg.studies.capacity.energy import (
    cost_rows,
    energy_capacity_rows,
    energy_check_rows,
    energy_families,
    ols_energy_rows,
)
from attnreg.studies.capacity.sweeps import Tick, capacity_row, families, task_count
from attnreg.studies.common import StudyResult

JSON_KEYS = ("model", "patterns", "query", "d", "n_max", "n_max_theory", "epsilon", "seeds")


def run(config: CapacityConfig | None = None, progress: Progress | None = None) -> StudyResult:
    """Measure every family's ``N_max(d)`` (the energy family's at both read-outs), the energy
    descent, the OLS-Transformer as one quadratic step, the cost at ``N_max``, the
    pseudo-inverse exactness check and the digits grid; return the rows, figures, summary and
    checks (writes nothing). ``progress`` shows one
    stage with a step per finished search."""
    config = config or CapacityConfig()
    progress = progress or Progress.quiet()
    with progress.stage("capacity searches", total=task_count(config)) as stage:
        return _run(config, lambda label: stage.advance(label=label))


def _run(config: CapacityConfig, tick: Tick) -> StudyResult:
    rows: list[dict[str, Any]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RankWarning)
        warnings.simplefilter("ignore", ConditioningWarning)
        workers = config.workers or torch.get_num_threads()
        if workers > 1:
            from attnreg.studies.capacity.pool import capacity_rows

            rows.extend(capacity_rows(config, workers, tick))
        else:
            for family in families(config):
                for d in family.dims:
                    rows.append(capacity_row(config, family, d, tick))
            for energy in energy_families(config):
                for d in energy.dims:
                    rows.extend(energy_capacity_rows(config, energy, d, tick))
        with torch_threads(1):
            rows.extend(energy_check_rows(config))
            rows.extend(ols_energy_rows(config))
        rows.extend(cost_rows(config, rows))
        rows.extend(_pinv_check(config, tick))
        grid_rows, panel = _digits_grid(config, tick)
        rows.extend(grid_rows)
    from attnreg.studies.capacity.claims import capacity_claims
    from attnreg.studies.capacity.figures import make_figures
    from attnreg.studies.capacity.summary import capacity_checks, summarize

    figures = make_figures(rows, panel, config)
    summary = summarize(rows, config)
    result = StudyResult(
        "capacity", asdict(config), rows, figures, summary, capacity_checks(rows, config)
    )
    result.claims = capacity_claims(rows, config)
    return result


def _pinv_check(config: CapacityConfig, tick: Tick) -> list[dict[str, Any]]:
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
    config: CapacityConfig, tick: Tick
) -> tuple[list[dict[str, Any]], dict[str, torch.Tensor]]:
    """Recall fraction of every similarity × separation cell on digits, at each ``N``."""
    images = fam.load_digits_images(config.device)
    rows: list[dict[str, Any]] = []
    panel: dict[str, torch.Tensor] = {}
    with torch_threads(1):
        _digits_cells(config, images, rows, panel, tick)
        _power_degrees(config, images, rows, tick)
    return rows, panel


def _power_degrees(
    config: CapacityConfig, images: torch.Tensor, rows: list[dict[str, Any]], tick: Tick
) -> None:
    """Recall of the power separation at each degree of ``config.digits_power_degrees`` (N =
    the first ``digits_n``, both queries, every similarity; the grid's stored images and
    queries for seed ``config.seed``); NaN where the weights ``sⁿ`` leave the float range."""
    n = config.digits_n[0]
    for query in ("mask", "noise"):
        for sim in GRID_SIMILARITIES:
            for degree in config.digits_power_degrees:
                gen = fam.cell_generator(config.seed, f"digits:{query}", 64, n)
                stored = images[torch.randperm(images.shape[0], generator=gen)[:n]]
                try:
                    recall, _, _ = fam.digits_recall(
                        stored,
                        sim,
                        "power",
                        query,
                        beta=config.grid_beta,
                        power=degree,
                        sigma=config.digits_sigma,
                        tolerance=config.digits_tolerance,
                        gen=gen,
                    )
                except ValueError:  # the weights sᵈ leave the float range: not computable
                    recall = float("nan")
                rows.append(
                    {
                        "kind": "power_degree",
                        "model": f"uhn({sim},power)",
                        "similarity": sim,
                        "query": query,
                        "n": n,
                        "power": degree,
                        "recall": recall,
                        "seed": config.seed,
                    }
                )
                tick(f"digits {query} N={n} {sim}/power^{degree}")


def _digits_cells(
    config: CapacityConfig,
    images: torch.Tensor,
    rows: list[dict[str, Any]],
    panel: dict[str, torch.Tensor],
    tick: Tick,
) -> None:
    for n in config.digits_n:
        for query in ("mask", "noise"):
            for sim in GRID_SIMILARITIES:
                for sep in UHN_SEPARATIONS:
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
