"""Figures: made without pyplot (importing attnreg never changes matplotlib's backend, so a
notebook keeps showing its figures), written headless, and with readable axes."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from attnreg.studies.capacity.config import CapacityConfig
from attnreg.studies.capacity.figures import capacity_figure, energy_family_figure
from attnreg.studies.common import FigureRecord

SRC = Path(__file__).resolve().parent.parent / "src"

IMPORT_ALL = """
import importlib, pkgutil, sys
import matplotlib
import attnreg
for info in pkgutil.walk_packages(attnreg.__path__, "attnreg."):
    if info.name.endswith("__main__"):
        continue
    importlib.import_module(info.name)
from attnreg.output import new_figure
fig, ax = new_figure(figsize=(2, 2))
ax.plot([0, 1], [0, 1])
print(matplotlib.get_backend(), "matplotlib.pyplot" in sys.modules)
"""


def test_importing_every_module_keeps_the_backend_and_leaves_pyplot_alone():
    """A process that chose a backend (here ``svg``; a notebook's is the inline one) still has
    it after importing every attnreg module and making a figure, and pyplot was never
    imported (figures are plain ``Figure`` objects)."""
    env = {**os.environ, "MPLBACKEND": "svg", "PYTHONPATH": str(SRC)}
    out = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["svg", "False"]


def test_a_figure_is_written_as_png_and_svg_without_a_display(tmp_path):
    from attnreg.output import new_figure

    fig, axes = new_figure(1, 2, figsize=(4, 2), layout="constrained")
    axes[0].plot([1, 2, 3])
    record = FigureRecord("f", "caption", fig)
    png = record.png()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    path = record.write(tmp_path)
    assert path == tmp_path / "f.png" and path.read_bytes()[:8] == png[:8]
    assert (tmp_path / "f.svg").read_text().lstrip().startswith("<?xml")
    assert record.figure is None and record.png() == path.read_bytes()


def _capacity_rows() -> list[dict]:
    """Capacity rows at the quick profile's d values (made-up N_max: only the axes matter)."""
    c = CapacityConfig()
    rows: list[dict] = []

    def add(family: str, ds: list[int], n_max, eps: float = 0.01) -> None:
        for d in ds:
            n = float(n_max(d))
            rows.append(
                {
                    "kind": "capacity",
                    "family": family,
                    "d": d,
                    "n_max": n,
                    "n_max_std": 0.1 * n,
                    "n_max_theory": n,
                    "epsilon": eps,
                }
            )

    add("pinv", c.pinv_d, lambda d: d)
    for eps in c.hebbian_epsilons:
        add(f"hebbian@{eps:g}", c.hebbian_d, lambda d: 0.14 * d, eps)
    for power in (2, 3, 4):
        add(f"dam{power}", getattr(c, f"dam{power}_d"), lambda d, p=power: d ** (p - 1) / 10)
    add("softmax", c.softmax_d, lambda d: 2 ** (d / 2))
    add("softmax_sphere", c.sphere_d, lambda d: 2 ** (d / 2))
    for key, ds in (
        ("quadratic", c.energy_quadratic_d),
        ("power3", c.energy_power3_d),
        ("power4", c.energy_power4_d),
        ("softmax", c.energy_softmax_d),
    ):
        for where in ("pattern", "state"):
            add(f"energy:{key}@{where}", ds, lambda d: d * d)
    return rows


@pytest.mark.parametrize("make", [capacity_figure, energy_family_figure])
def test_capacity_tick_labels_do_not_overlap(make):
    """Drawn, no two tick labels of an axis overlap (the dense-memory panel spans 16 … 1024:
    base-10 minor labels 2×10¹, 3×10¹, … ran into each other)."""
    fig = make(_capacity_rows())
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    for ax in fig.axes:
        box = ax.get_window_extent(renderer)
        for axis in ("x", "y"):
            get = ax.get_xticklabels if axis == "x" else ax.get_yticklabels
            labels = get() + get(minor=True)
            shown = [
                t.get_window_extent(renderer) for t in labels if t.get_visible() and t.get_text()
            ]
            if axis == "x":
                shown = [b for b in shown if box.x0 - 1 <= (b.x0 + b.x1) / 2 <= box.x1 + 1]
            else:
                shown = [b for b in shown if box.y0 - 1 <= (b.y0 + b.y1) / 2 <= box.y1 + 1]
            assert shown, (ax.get_title(), axis)
            for a, b in itertools.combinations(shown, 2):
                assert not a.overlaps(b), (ax.get_title(), axis, a, b)
