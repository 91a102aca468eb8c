"""The same config and seed give identical stored metrics through the study command line, a
sweep and the report (one study, verify: seconds)."""

from __future__ import annotations

import json

import pandas as pd
from typer.testing import CliRunner

from attnreg.cli import app
from attnreg.report.build import build_report
from attnreg.runs.store import ResultsStore
from attnreg.studies.verify.sequence_rows import LAYER_OF_ROW

KEY = ["construction", "shape", "dtype"]
METRICS = ["max_abs_err", "rel_err", "tol", "passed"]


def _frame(rows):
    return pd.DataFrame(rows)[KEY + METRICS].sort_values(KEY).reset_index(drop=True)


def test_cli_sweep_and_report_store_identical_metrics(tmp_path):
    runner = CliRunner()
    cli = runner.invoke(
        app,
        ["verify", "--json", "--seed", "3", "--dtype", "float64", "--out", str(tmp_path / "cli")],
    )
    assert cli.exit_code == 0, cli.output
    from_cli = _frame(json.loads(cli.stdout))

    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text("study: verify\nbase: {dtypes: [float64]}\nseeds: [3]\n")
    store = tmp_path / "sweep.db"
    swept = runner.invoke(app, ["sweep", str(sweep_file), "--store", str(store), "--no-progress"])
    assert swept.exit_code == 0, swept.output
    from_sweep = _frame(ResultsStore(store).to_dataframe("verify"))

    report_dir = tmp_path / "report"
    build_report(
        report_dir,
        studies=["verify"],
        seed=3,
        progress=False,
        overrides={"verify": {"dtypes": ["float64"]}},
    )
    from_report = _frame(ResultsStore(report_dir / "results.db").to_dataframe("verify"))

    # (14 constructions + one row per sequence-layer configuration + 5 stacks × 4 depths)
    # × 11 shapes, float64
    assert len(from_cli) == (14 + len(LAYER_OF_ROW) + 5 * 4) * 11
    pd.testing.assert_frame_equal(from_cli, from_sweep, check_exact=True)
    pd.testing.assert_frame_equal(from_cli, from_report, check_exact=True)
