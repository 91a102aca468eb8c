"""`attnreg verify`: the certificate's rows, its JSON, its exit status."""

import json

import numpy as np
from typer.testing import CliRunner

from attnreg.cli import app
from attnreg.studies import verify_references as ref
from attnreg.studies.verify import CASES, VerifyConfig, run

runner = CliRunner()
KEYS = {"construction", "reference", "dtype", "shape", "max_abs_err", "rel_err", "tol", "passed"}
CONSTRUCTIONS = {
    "OLS-Transformer",
    "OLS-attention",
    "mesa layer",
    "LSA, 1 GD step",
    "LSA stack, 3 layers",
    "GD++",
    "preconditioned GD",
}


def test_every_construction_passes_on_every_case_and_dtype():
    rows = run(VerifyConfig(seed=3))
    assert len({r["shape"] for r in rows}) == len(CASES)
    assert {r["dtype"] for r in rows} == {"float64", "float32"}
    for word in CONSTRUCTIONS:
        assert any(word in r["construction"] for r in rows), word
    failed = [r for r in rows if not r["passed"]]
    assert not failed, failed
    for r in rows:
        base = 1e-10 if r["dtype"] == "float64" else 1e-4
        assert r["tol"] >= base
        if "ill" not in r["shape"] and "N<d" not in r["shape"]:
            assert r["tol"] <= 1e3 * base  # the condition-scaled tolerance is for ill cases


def test_references_are_themselves_right():
    """The numpy references of verify against closed forms written here."""
    rng = np.random.default_rng(0)
    x, y, q = rng.normal(size=(12, 3)), rng.normal(size=(12, 1)), rng.normal(size=(2, 3))
    beta = np.linalg.inv(x.T @ x) @ x.T @ y
    np.testing.assert_allclose(ref.lstsq(x, y, q), q @ beta, atol=1e-12)
    w1 = 0.3 * (y.T @ x) / 12  # one GD step from 0
    np.testing.assert_allclose(ref.gd_loop(x, y, q, [0.3], np.zeros((1, 3))), q @ w1.T, atol=1e-14)


def test_json_has_the_documented_keys_and_exit_zero():
    result = runner.invoke(app, ["verify", "--json", "--dtype", "float64", "--seed", "1"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert rows and all(set(r) == KEYS for r in rows)
    assert all(r["passed"] for r in rows)


def test_tightened_tolerance_exits_one():
    result = runner.invoke(app, ["verify", "--json", "--dtype", "float64", "--tol-scale", "1e-9"])
    assert result.exit_code == 1
    rows = json.loads(result.stdout)
    assert any(not r["passed"] for r in rows)


def test_same_seed_same_numbers():
    a = run(VerifyConfig(seed=5, dtypes=["float32"]))
    b = run(VerifyConfig(seed=5, dtypes=["float32"]))
    assert [r["max_abs_err"] for r in a] == [r["max_abs_err"] for r in b]


def test_table_output_and_bad_dtype():
    result = runner.invoke(app, ["verify", "--dtype", "float32"])
    assert result.exit_code == 0
    assert "passed, 0 failed" in result.stdout
    bad = runner.invoke(app, ["verify", "--dtype", "float16"])
    assert bad.exit_code != 0
    assert "dtype" in bad.output


def test_help_explains_options():
    result = runner.invoke(app, ["verify", "--help"])
    assert result.exit_code == 0
    for option in ("--seed", "--dtype", "--json", "--tol-scale", "--ridge"):
        assert option in result.stdout
