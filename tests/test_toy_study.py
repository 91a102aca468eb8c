"""Adding a study is one package plus one registry line: a toy study, defined here in a
temporary folder and registered through the registry's entry point (``register`` in this
process, ``ATTNREG_STUDIES`` for the processes a command, a sweep or the report starts), gets
its command with the common options, its sweep cells and its report section, with no other
edit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml

from attnreg.report.build import build_report
from attnreg.runs.store import ResultsStore
from attnreg.studies import registry

TOY_INIT = '''
"""A toy study: seeded normal draws."""
from attnreg.studies.spec import Extra, StudySpec
from toy_study.config import ToyConfig, full_config, quick_config

SPEC = StudySpec(
    name="toy",
    config_class=ToyConfig,
    quick=quick_config,
    full=full_config,
    runner="toy_study.run:run",
    help="A toy study: n seeded normal draws times scale.",
    title="toy — seeded normal draws",
    extras=(Extra("--n", "n", "How many draws.", int),),
)
'''
TOY_CONFIG = """
from dataclasses import dataclass

from attnreg.config import check_fields
from attnreg.core.validation import check_positive, check_positive_int, check_seed


@dataclass
class ToyConfig:
    seed: int = 0
    n: int = 4
    scale: float = 1.0

    def __post_init__(self) -> None:
        check_fields(self)
        check_seed("seed", self.seed)
        check_positive_int("n", self.n)
        check_positive("scale", self.scale)


def quick_config() -> ToyConfig:
    return ToyConfig()


def full_config() -> ToyConfig:
    return ToyConfig(n=8)
"""
TOY_RUN = """
import numpy as np

from attnreg.studies.common import StudyResult
from attnreg.thresholds import check


def run(config, progress):
    with progress.stage("toy", total=1) as stage:
        draws = np.random.default_rng(config.seed).standard_normal(config.n) * config.scale
        stage.advance()
    rows = [{"i": i, "value": float(v), "seed": config.seed} for i, v in enumerate(draws)]
    summary = {"largest draw": f"{float(draws.max()):.6f}"}
    checks = [check("rows", len(rows), ">=", config.n)]
    return StudyResult("toy", {"n": config.n}, rows, summary=summary, checks=checks)
"""


def _expected(seed: int, n: int, scale: float = 1.0) -> list[float]:
    return [float(v) for v in np.random.default_rng(seed).standard_normal(n) * scale]


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The toy package on ``sys.path`` (and ``PYTHONPATH``), registered here and, through
    ``ATTNREG_STUDIES``, in every process started from here."""
    package = tmp_path / "plugins" / "toy_study"
    package.mkdir(parents=True)
    for name, text in (("__init__", TOY_INIT), ("config", TOY_CONFIG), ("run", TOY_RUN)):
        (package / f"{name}.py").write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(package.parent))
    paths = [str(package.parent), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    monkeypatch.setenv(registry.ENVIRONMENT, "toy_study")
    spec = registry.register("toy_study")
    yield spec
    registry.STUDIES.pop("toy", None)
    for name in [m for m in sys.modules if m == "toy_study" or m.startswith("toy_study.")]:
        del sys.modules[name]


def _attnreg(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "attnreg", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
    )


def test_the_toy_study_gets_a_command_with_the_common_options(toy, tmp_path):
    text = _attnreg("toy", "--help", cwd=tmp_path).stdout
    for option in (
        "--quick",
        "--full",
        "--config",
        "--set",
        "--seed",
        "--out",
        "--json",
        "--device",
        "--progress",
        "--no-progress",
        "--n",
    ):
        assert option in text, option
    assert "A toy study" in text
    out = tmp_path / "out"
    args = ["toy", "--json", "--seed", "3", "--set", "scale=2.5", "--n", "5", "--out", str(out)]
    proc = _attnreg(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [r["value"] for r in rows] == _expected(3, 5, 2.5)
    assert json.loads((out / "toy_rows.json").read_text()) == rows
    bad = _attnreg("toy", "--set", "scale=-1", "--out", str(tmp_path / "bad"), cwd=tmp_path)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines() == [
        "Error: scale: must be a finite number > 0, got -1.0"
    ]


def test_the_toy_study_runs_as_sweep_cells(toy, tmp_path):
    sweep = tmp_path / "toy.yaml"
    sweep.write_text(yaml.safe_dump({"study": "toy", "grid": {"n": [2, 3]}, "seeds": [0, 1]}))
    store = tmp_path / "toy.db"
    proc = _attnreg("sweep", str(sweep), "--store", str(store), "--workers", "1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    with ResultsStore(store) as db:
        cells = list(db.cells("toy"))
    assert len(cells) == 4 and all(c.status == "done" for c in cells), [c.error for c in cells]
    for cell in cells:
        assert [r["value"] for r in cell.rows] == _expected(cell.seed, cell.config["n"])


def test_the_toy_study_gets_a_report_section(toy, tmp_path):
    out = tmp_path / "page"
    page = build_report(out, studies=["toy"], seed=2, workers=1, progress=False)
    html = page.read_text()
    assert 'id="toy"' in html and "toy — seeded normal draws" in html
    assert "attnreg toy --quick --seed 2" in html
    assert f"{max(_expected(2, 4)):.6f}" in html
    with ResultsStore(out / "results.db") as db:
        (cell,) = db.cells("toy")
    assert cell.status == "done", cell.error
    assert [r["value"] for r in cell.rows] == _expected(2, 4)
