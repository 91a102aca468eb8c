"""The seed is the run's (``--seed``, a sweep's ``seeds``): given as a config key in the report's
``--overrides`` or a sweep's ``base``/``grid`` it is refused, never ignored (the page's
re-create line said "attnreg verify --seed 0 with seed = 4" for a run made with seed 0)."""

from __future__ import annotations

import pytest
from cli_checks import one_line_error
from typer.testing import CliRunner

from attnreg.cli import app
from attnreg.runs.cells import make_cell

runner = CliRunner()


def test_a_seed_in_the_overrides_is_refused_not_ignored():
    with pytest.raises(ValueError, match="seed: set by the run"):
        make_cell("verify", {"seed": 4}, 0)
    assert make_cell("verify", {}, 4).seed == 4  # the run's seed is the way


def test_the_report_refuses_a_seed_in_its_overrides(tmp_path):
    overrides = tmp_path / "o.yaml"
    overrides.write_text("verify: {seed: 4}\n")
    result = runner.invoke(
        app, ["report", "--out", str(tmp_path / "page"), "--overrides", str(overrides)]
    )
    one_line_error(result, "seed", "--seed")
    assert not (tmp_path / "page").exists()


@pytest.mark.parametrize("part", ["base: {seed: 4}", "grid: {seed: [1, 2]}"])
def test_a_sweep_refuses_a_seed_in_base_or_grid(part, tmp_path):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(f"study: verify\n{part}\nseeds: [0]\n")
    one_line_error(
        runner.invoke(app, ["sweep", str(sweep), "--store", str(tmp_path / "r.db")]), "seeds"
    )
