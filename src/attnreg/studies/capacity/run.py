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

import torch

from attnreg.core.threads import torch_threads
from attnreg.core.whitening import ConditioningWarning, RankWarning
from attnreg.progress import Progress
from attnreg.studies.capacity.config import CapacityConfig
from attnreg.studies.capacity.cost import cost_rows
from attnreg.studies.capacity.digits import digits_grid
from attnreg.studies.capacity.energy import energy_capacity_rows, energy_families
from attnreg.studies.capacity.energy_descent import energy_check_rows
from attnreg.studies.capacity.ols_energy import ols_energy_rows
from attnreg.studies.capacity.pinv import pinv_check_rows
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
        rows.extend(pinv_check_rows(config, tick))
        grid_rows, panel = digits_grid(config, tick)
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


def json_rows(result: StudyResult) -> list[dict[str, Any]]:
    """The capacity rows with exactly the keys of ``JSON_KEYS`` (what ``--json`` prints)."""
    return [{k: r[k] for k in JSON_KEYS} for r in result.rows if r["kind"] == "capacity"]
