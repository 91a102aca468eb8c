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
from attnreg.studies.common import Section, StudyResult

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
    result = StudyResult("capacity", asdict(config), [])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RankWarning)
        warnings.simplefilter("ignore", ConditioningWarning)
        searches = search_section(config, tick)
        result.add(pinv_section(config, searches.rows, tick))
        result.add(searches)
        result.add(descent_section(config, searches.rows))
        result.add(digits_section(config, searches.rows, tick))
    return result


def pinv_section(config: CapacityConfig, searched: list[dict[str, Any]], tick: Tick) -> Section:
    """The pseudo-inverse memory exact exactly up to ``N = d`` (rows ``"pinv_check"``), beside
    its searched ``N_max`` (from ``searched``, the searches' rows)."""
    from attnreg.studies.capacity.summary import pinv_summary

    rows = pinv_check_rows(config, tick)
    return Section(rows, *pinv_summary(rows, searched))


def search_section(config: CapacityConfig, tick: Tick) -> Section:
    """Every family's ``N_max(d)``, the energy family's at both read-outs (rows
    ``"capacity"``; in ``config.workers`` processes, default one per torch thread): the
    summary, the softmax check, the capacity figures and the capacity claims."""
    from attnreg.studies.capacity.claims import search_claims
    from attnreg.studies.capacity.figures import search_figures
    from attnreg.studies.capacity.summary import search_summary

    rows: list[dict[str, Any]] = []
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
    summary, checks = search_summary(rows, config)
    return Section(rows, summary, checks, search_figures(rows, config), claims=search_claims(rows))


def descent_section(config: CapacityConfig, searched: list[dict[str, Any]]) -> Section:
    """The energy family's descent, the OLS-Transformer as one quadratic step and the cost at
    each family's ``N_max`` (from ``searched``, the searches' rows)."""
    from attnreg.studies.capacity.figures import cost_figures
    from attnreg.studies.capacity.summary import descent_summary

    with torch_threads(1):
        rows = energy_check_rows(config) + ols_energy_rows(config)
    rows += cost_rows(config, searched)
    summary, checks = descent_summary(rows, config)
    return Section(rows, summary, checks, cost_figures(rows, config))


def digits_section(config: CapacityConfig, searched: list[dict[str, Any]], tick: Tick) -> Section:
    """The Universal Hopfield grid on digits and random patterns, and the power separation's
    degrees (rows ``"recall"``, ``"power_degree"``; the grid figure also reads the grid's
    capacity rows from ``searched``), with Millidge et al.'s claims."""
    from attnreg.studies.capacity.claims import digits_claims
    from attnreg.studies.capacity.figures import digits_figures
    from attnreg.studies.capacity.summary import digits_summary

    rows, panel = digits_grid(config, tick)
    summary, checks = digits_summary(rows)
    figures = digits_figures(searched + rows, panel, config)
    return Section(rows, summary, checks, figures, claims=digits_claims(rows))


def json_rows(result: StudyResult) -> list[dict[str, Any]]:
    """The capacity rows with exactly the keys of ``JSON_KEYS`` (what ``--json`` prints)."""
    return [{k: r[k] for k in JSON_KEYS} for r in result.rows if r["kind"] == "capacity"]
