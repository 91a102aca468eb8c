"""The pseudo-inverse memory's exactness check: recall is exact for every ``N ≤ d`` stored
patterns and inexact beyond ``d`` (its capacity is ``d`` exactly)."""

from __future__ import annotations

from typing import Any

from attnreg.core.threads import torch_threads
from attnreg.studies.capacity import families as fam
from attnreg.studies.capacity.config import CapacityConfig
from attnreg.studies.capacity.sweeps import Tick


def pinv_check_rows(config: CapacityConfig, tick: Tick) -> list[dict[str, Any]]:
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
