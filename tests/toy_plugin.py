"""A toy study for the tests of the study machinery (commands, sweeps, executors, the report):
seeded normal draws, written into a temporary package and registered through the registry's
entry point (``register`` in this process, ``ATTNREG_STUDIES`` for the processes a command, a
sweep or the report starts). Its cells cost nothing but ``pause`` seconds, so a test of the
machinery does not pay for a real study's numbers."""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from attnreg.studies import registry
from attnreg.studies.spec import StudySpec

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
    pause: float = 0.0

    def __post_init__(self) -> None:
        check_fields(self)
        check_seed("seed", self.seed)
        check_positive_int("n", self.n)
        check_positive("scale", self.scale)
        if not self.pause >= 0:
            raise ValueError(f"pause: must be >= 0 seconds, got {self.pause}")


def quick_config() -> ToyConfig:
    return ToyConfig()


def full_config() -> ToyConfig:
    return ToyConfig(n=8)
"""
TOY_RUN = """
import time

import numpy as np

from attnreg.studies.common import StudyResult
from attnreg.thresholds import check


def run(config, progress):
    with progress.stage("toy", total=1) as stage:
        time.sleep(config.pause)  # a cell that takes time, for the tests that stop a run midway
        draws = np.random.default_rng(config.seed).standard_normal(config.n) * config.scale
        stage.advance()
    rows = [{"i": i, "value": float(v), "seed": config.seed} for i, v in enumerate(draws)]
    summary = {"largest draw": f"{float(draws.max()):.6f}"}
    checks = [check("rows", len(rows), ">=", config.n)]
    return StudyResult("toy", {"n": config.n}, rows, summary=summary, checks=checks)
"""


def expected(seed: int, n: int, scale: float = 1.0) -> list[float]:
    """The toy cell's values, computed here with numpy."""
    return [float(v) for v in np.random.default_rng(seed).standard_normal(n) * scale]


def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[StudySpec]:
    """The toy package on ``sys.path`` (and ``PYTHONPATH``), registered here and, through
    ``ATTNREG_STUDIES``, in every process started from here; unregistered afterwards."""
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
