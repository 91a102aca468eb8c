"""Worker and thread counts are bounded by the cores this process may use: from the command
line, a config file, a sweep file or the report's overrides alike, a count above the limit is
one line naming the option and the limit, exit status 2, before anything runs (100,000 torch
threads was a segmentation fault)."""

from __future__ import annotations

import os

import pytest
from cli_checks import one_line_error
from typer.testing import CliRunner

from attnreg.cli import app
from attnreg.core.threads import check_count, torch_threads, usable_cores

runner = CliRunner()
CORES = len(os.sched_getaffinity(0))  # what the limit must be, read here independently
TOO_MANY = str(CORES + 1)


def test_the_limit_is_the_cores_this_process_may_use():
    assert usable_cores() == CORES
    assert check_count("threads", CORES) == CORES
    assert check_count("threads", 1.0) == 1
    for bad in (CORES + 1, 100000, 0, -1, 1.5, True, "2", None):
        with pytest.raises(ValueError, match="threads"):
            check_count("threads", bad)


def test_torch_threads_refuses_a_count_above_the_limit():
    with pytest.raises(ValueError, match=f"the {CORES} cores"), torch_threads(CORES + 1):
        pass


@pytest.mark.parametrize("study", ["icl", "depth", "layers", "compare"])
def test_a_study_refuses_too_many_threads_from_the_command_line_and_a_config(study, tmp_path):
    one_line_error(runner.invoke(app, [study, "--set", f"threads={TOO_MANY}"]), "threads")
    config = tmp_path / "c.yaml"
    config.write_text("threads: 100000\n")
    one_line_error(runner.invoke(app, [study, "--config", str(config)]), "threads", "limit")


@pytest.mark.parametrize("study", ["icl", "depth", "layers"])
def test_the_threads_shorthand_is_refused_the_same_way(study):
    one_line_error(runner.invoke(app, [study, "--threads", "100000"]), "threads", "limit")


def test_a_sweep_file_with_too_many_threads_is_refused_before_any_cell_runs(tmp_path):
    sweep = tmp_path / "s.yaml"
    sweep.write_text("study: layers\ngrid: {threads: [100000]}\nseeds: [0]\n")
    store = tmp_path / "r.db"
    result = runner.invoke(app, ["sweep", str(sweep), "--store", str(store)])
    one_line_error(result, "threads")
    assert not store.exists()


def test_the_report_refuses_too_many_threads_in_its_overrides(tmp_path):
    overrides = tmp_path / "o.yaml"
    overrides.write_text("icl: {threads: 100000}\n")
    result = runner.invoke(
        app, ["report", "--out", str(tmp_path / "page"), "--overrides", str(overrides)]
    )
    one_line_error(result, "threads")


@pytest.mark.parametrize("command", [["sweep", "SWEEP"], ["report", "--out", "OUT"]])
def test_local_workers_are_bounded_too(command, tmp_path):
    sweep = tmp_path / "s.yaml"
    sweep.write_text("study: verify\nseeds: [0]\n")
    args = [
        str(sweep) if a == "SWEEP" else str(tmp_path / "o") if a == "OUT" else a for a in command
    ]
    one_line_error(runner.invoke(app, [*args, "--workers", TOO_MANY]), "--workers", "limit")


def test_explain_and_bench_refuse_too_many_threads():
    result = runner.invoke(app, ["bench", "--threads", "100000", "--smoke", "--only", "P1"])
    assert result.exit_code == 2 and "the limit" in result.output
    from attnreg.explain_cli import ExplainConfig

    with pytest.raises(ValueError, match="threads: 100000 threads"):
        ExplainConfig(threads=100000)


def test_the_capacity_study_bounds_its_worker_processes():
    from attnreg.studies.capacity.config import CapacityConfig

    assert CapacityConfig(workers=0).workers == 0  # automatic
    assert CapacityConfig(workers=CORES).workers == CORES
    with pytest.raises(ValueError, match="workers: 100000 worker processes"):
        CapacityConfig(workers=100000)
