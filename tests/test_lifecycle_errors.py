"""User errors of ``sweep`` and ``report``: one line naming the culprit, exit status 2, no
traceback, and nothing run or written before the check."""

import socket
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from attnreg.cli import app

runner = CliRunner()
SWEEP = {"study": "verify", "base": {"dtypes": ["float32"]}, "seeds": [0]}


def _sweep_file(tmp_path, data=None):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data or SWEEP))
    return path


def _closed_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens there once the socket is closed


def _unwritable(tmp_path):
    """A folder this user cannot write into (root writes anywhere but in sysfs)."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        (folder / "probe").touch()
    except OSError:
        return folder
    return Path("/sys")


def _fails(args, *culprits):
    started = time.monotonic()
    result = runner.invoke(app, args)
    elapsed = time.monotonic() - started
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for culprit in culprits:
        assert str(culprit) in lines[0]
    return elapsed


@pytest.mark.parametrize("workers", ["-2", "0"])
def test_sweep_workers_must_be_positive(tmp_path, workers):
    store = tmp_path / "r.db"
    path = _sweep_file(tmp_path)
    _fails(["sweep", str(path), "--store", str(store), "--workers", workers], "--workers", workers)
    assert not store.exists()


def test_report_workers_must_be_positive(tmp_path):
    _fails(["report", "--out", str(tmp_path / "page"), "--workers", "-2"], "--workers", "-2")
    assert not (tmp_path / "page").exists()


def test_sweep_seed_too_large_for_the_store_is_refused_before_running(tmp_path):
    path = _sweep_file(tmp_path, {**SWEEP, "seeds": [0, 2**64]})
    store = tmp_path / "r.db"
    _fails(["sweep", str(path), "--store", str(store)], "seeds", str(2**64), "2**63 - 1")
    assert not store.exists()


def test_report_seed_out_of_range_is_refused(tmp_path):
    _fails(["report", "--out", str(tmp_path / "p"), "--seed", str(2**63)], "--seed", str(2**63))
    _fails(["report", "--out", str(tmp_path / "p"), "--seed", "-1"], "--seed", "-1")
    assert not (tmp_path / "p").exists()


def test_corrupt_store_is_refused_with_its_path_and_a_hint(tmp_path):
    store = tmp_path / "r.db"
    store.write_bytes(b"this is not an SQLite database" * 100)
    path = _sweep_file(tmp_path)
    _fails(["sweep", str(path), "--store", str(store)], store, "not a database", "move it aside")
    args = ["report", "--out", str(tmp_path / "p"), "--store", str(store), "--study", "verify"]
    _fails(args, store, "move it aside")
    assert store.read_bytes().startswith(b"this is not")  # left as it was


def test_store_that_is_a_folder_is_refused(tmp_path):
    _fails(["sweep", str(_sweep_file(tmp_path)), "--store", str(tmp_path)], tmp_path, "folder")


def test_report_out_must_be_a_writable_folder(tmp_path):
    a_file = tmp_path / "page.html"
    a_file.write_text("not a folder")
    _fails(["report", "--out", str(a_file)], "--out", a_file, "is a file")
    unwritable = _unwritable(tmp_path)
    _fails(["report", "--out", str(unwritable)], "--out", unwritable, "not a writable folder")
    _fails(["report", "--out", str(unwritable / "page")], "--out", "not a writable folder")


def test_unreachable_scheduler_fails_fast_before_anything_runs(tmp_path):
    store = tmp_path / "r.db"
    address = f"tcp://127.0.0.1:{_closed_port()}"
    args = ["sweep", str(_sweep_file(tmp_path)), "--store", str(store), "--executor", "dask"]
    elapsed = _fails([*args, "--scheduler", address], "--scheduler", address, "not reachable")
    assert elapsed < 5
    assert not store.exists()


def test_scheduler_port_that_never_answers_times_out_quickly(tmp_path):
    with socket.socket() as silent:  # accepts connections (the kernel does) but says nothing
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        address = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
        args = ["sweep", str(_sweep_file(tmp_path)), "--executor", "dask", "--scheduler", address]
        elapsed = _fails(args, "--scheduler", address, "no Dask scheduler answered")
    assert elapsed < 10


def test_scheduler_without_dask_executor_is_refused(tmp_path):
    args = ["sweep", str(_sweep_file(tmp_path)), "--scheduler", "tcp://127.0.0.1:8786"]
    _fails(args, "--scheduler", "--executor dask")


def test_unreadable_sweep_file_names_it(tmp_path):
    _fails(["sweep", str(tmp_path / "missing.yaml")], "missing.yaml", "no such file")
