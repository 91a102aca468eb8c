"""Sweeps: validation before anything runs, resume after SIGKILL, Dask, worker loss."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch
import yaml
from typer.testing import CliRunner

from attnreg.cli import app
from attnreg.runs.cells import CellSpec, execute_cell, make_cell
from attnreg.runs.executors import run_cells
from attnreg.runs.store import ResultsStore
from attnreg.runs.sweep import load_sweep, parse_sweep

runner = CliRunner()
UNAVAILABLE = "mps" if torch.cuda.is_available() else "cuda"  # a device this machine lacks
SWEEP = {
    "study": "verify",
    "base": {"dtypes": ["float32"]},
    "grid": {"ridge": [0.1, 0.2]},
    "seeds": [0, 1],
}


def _write(tmp_path, data, name="s.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def test_grid_times_seeds_cells():
    sweep = parse_sweep(SWEEP)
    assert len(sweep.cells) == 4
    assert len({c.key for c in sweep.cells}) == 4
    assert {c.config["ridge"] for c in sweep.cells} == {0.1, 0.2}
    assert all(c.config["dtypes"] == ["float32"] for c in sweep.cells)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"grdi": {}}, "unknown key 'grdi'"),
        ({"base": {"ridg": 1.0}}, "unknown key 'ridg'"),
        ({"grid": {"tol_scal": [1.0]}}, "unknown key 'tol_scal'"),
        ({"base": {"ridge": "big"}}, "'ridge'"),
        ({"study": "nope"}, "valid names are"),
        ({"seeds": []}, "seeds"),
        ({"seeds": [0, 2**63]}, "out of range"),
        ({"seeds": [-1]}, "out of range"),
        # values, not only keys and types: each cell's config is built before anything runs
        ({"base": {"dtypes": ["float16"]}}, "dtypes: unknown value 'float16'"),
        ({"grid": {"ridge": [0.1, -1.0]}}, "ridge: must be a finite number > 0, got -1.0"),
        ({"grid": {"ridge": [float("inf")]}}, "'ridge': must be a finite number, got inf"),
        ({"base": {"tolerance": {"float64": 1e-9}}}, "tolerance: no entry for dtype 'float32'"),
        ({"study": "icl", "base": {"device": UNAVAILABLE}, "grid": {}}, f"device: {UNAVAILABLE!r}"),
    ],
)
def test_bad_sweep_fails_before_running_anything(tmp_path, change, message):
    path = _write(tmp_path, {**SWEEP, **change})
    store = tmp_path / "r.db"
    result = runner.invoke(app, ["sweep", str(path), "--store", str(store), "--no-progress"])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and message in result.output, result.output
    assert "Traceback" not in result.output
    assert not store.exists()


def test_yaml_is_safe_loaded(tmp_path):
    path = tmp_path / "evil.yaml"
    path.write_text("study: !!python/object/apply:os.system ['echo hacked']\n")
    with pytest.raises(ValueError, match="invalid YAML"):
        load_sweep(path)


def test_binary_sweep_file_is_a_one_line_error_naming_it(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_bytes(b"study: verify\n\xff\xfe\x00binary")
    store = tmp_path / "r.db"
    result = runner.invoke(app, ["sweep", str(path), "--store", str(store), "--no-progress"])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1, result.output
    assert f"sweep file {str(path)!r}: not a UTF-8 text file (byte 14)" in result.output
    assert "Traceback" not in result.output
    assert not store.exists()


def test_same_cell_twice_gives_identical_metrics():
    cell = make_cell("verify", {"dtypes": ["float32"]}, seed=4)
    a, b = execute_cell(cell), execute_cell(cell)
    assert a.status == b.status == "done"
    assert a.rows == b.rows


def test_failing_cell_is_reported_not_raised():
    good = make_cell("verify", {"dtypes": ["float32"]}, seed=0)
    cell = CellSpec("verify", {**good.config, "dtypes": ["float16"]}, 0)  # not via make_cell
    result = execute_cell(cell)
    assert result.status == "failed" and "dtypes" in result.error


# the executor tests run the toy study (tests/toy_plugin.py): cells of a known duration
TOY = {"study": "toy", "base": {"pause": 0.5}, "grid": {"n": [2, 3]}, "seeds": [0, 1]}


def _stored(path):
    if not path.exists():
        return {}
    with ResultsStore(path) as store:
        return {c.key: c for c in store.cells()}


def test_sigkill_mid_sweep_then_resume(toy, tmp_path):
    data = {**TOY, "grid": {"n": [1, 2, 3, 4]}}
    path, store = _write(tmp_path, data), tmp_path / "r.db"
    cmd = [
        sys.executable,
        "-m",
        "attnreg.cli",
        "sweep",
        str(path),
        "--store",
        str(store),
        "--workers",
        "1",
        "--no-progress",
    ]
    proc = subprocess.Popen(
        cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.time() + 240
    while len(_stored(store)) < 2 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # the client and its worker die at once
    proc.wait()
    before = _stored(store)
    assert 2 <= len(before) < 8, "the kill must land mid-sweep"
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stderr
    after = _stored(store)
    assert len(after) == 8 and all(c.status == "done" for c in after.values())
    for key, cell in before.items():  # finished cells were not run again
        assert after[key].finished == cell.finished
    with ResultsStore(store) as db:
        assert db.count() == 8


def test_dask_local_cluster_matches_local_executor(toy, tmp_path):
    cells = parse_sweep(TOY).cells
    with ResultsStore(tmp_path / "local.db") as local:
        run_cells(cells, local, executor="local", workers=2, progress=False)
        expected = {c.key: c.rows for c in local.cells()}
    with ResultsStore(tmp_path / "dask.db") as dask_store:
        out = run_cells(cells, dask_store, executor="dask", workers=2, progress=False)
        got = {c.key: c.rows for c in dask_store.cells()}
    assert out.done == 4 and got == expected


def test_lost_dask_worker_still_completes_the_store(toy, tmp_path):
    from distributed import Client, LocalCluster

    data = {**TOY, "grid": {"n": [1, 2, 3, 4, 5]}}
    cells = parse_sweep(data).cells
    store_path = tmp_path / "r.db"
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        pids = list(client.run(os.getpid).values())
        errors = []

        def sweep():
            try:
                with ResultsStore(store_path) as store:
                    run_cells(
                        cells,
                        store,
                        executor="dask",
                        scheduler=cluster.scheduler_address,
                        progress=False,
                    )
            except Exception as exc:  # surfaced below
                errors.append(exc)

        worker = threading.Thread(target=sweep)
        worker.start()
        deadline = time.time() + 120
        while len(_stored(store_path)) < 1 and time.time() < deadline:
            time.sleep(0.1)
        os.kill(pids[0], signal.SIGKILL)  # a worker dies while cells are in flight
        worker.join(timeout=400)
        assert not errors
    stored = _stored(store_path)
    assert len(stored) == 10
    assert all(c.status == "done" for c in stored.values())
