"""Adding a study is one package plus one registry line: a toy study, defined here in a
temporary folder and registered through the registry's entry point (``register`` in this
process, ``ATTNREG_STUDIES`` for the processes a command, a sweep or the report starts), gets
its command with the common options, its sweep cells and its report section, with no other
edit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml
from toy_plugin import expected

from attnreg.report.build import build_report
from attnreg.runs.store import ResultsStore


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
    assert [r["value"] for r in rows] == expected(3, 5, 2.5)
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
        assert [r["value"] for r in cell.rows] == expected(cell.seed, cell.config["n"])


def test_the_toy_study_gets_a_report_section(toy, tmp_path):
    out = tmp_path / "page"
    page = build_report(out, studies=["toy"], seed=2, workers=1, progress=False)
    html = page.read_text()
    assert 'id="toy"' in html and "toy — seeded normal draws" in html
    assert "attnreg toy --quick --seed 2" in html
    assert f"{max(expected(2, 4)):.6f}" in html
    with ResultsStore(out / "results.db") as db:
        (cell,) = db.cells("toy")
    assert cell.status == "done", cell.error
    assert [r["value"] for r in cell.rows] == expected(2, 4)
