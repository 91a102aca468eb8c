"""The one study command line: the same options on every study, and user errors as one line."""

from __future__ import annotations

import json

import pytest
import torch
from cli_checks import one_line_error
from typer.testing import CliRunner

from attnreg.cli import app
from attnreg.studies.registry import STUDIES

runner = CliRunner()
COMMON = ("--quick", "--full", "--config", "--set", "--seed", "--out", "--json", "--device")


def test_the_registry_holds_the_five_studies():
    assert list(STUDIES) == ["verify", "compare", "icl", "capacity", "depth", "layers"]


@pytest.mark.parametrize("study", list(STUDIES))
def test_every_study_lists_the_common_options_its_own_and_its_help(study):
    text = runner.invoke(app, [study, "--help"], terminal_width=200).output
    spec = STUDIES[study]
    for option in (*COMMON, "--progress", "--no-progress", *(e.flag for e in spec.extras)):
        assert option in text, (study, option)
    assert " ".join(spec.help.split()[:6]) in " ".join(text.split())


@pytest.mark.parametrize("study", list(STUDIES))
def test_bad_config_files_are_one_line_errors(study, tmp_path):
    out = ["--out", str(tmp_path / "out")]
    missing = tmp_path / "missing.yaml"
    one_line_error(runner.invoke(app, [study, "--config", str(missing), *out]), "no such file")
    syntax = tmp_path / "syntax.yaml"
    syntax.write_text("seed: [1, 2\nsteps: 3\n")
    one_line_error(
        runner.invoke(app, [study, "--config", str(syntax), *out]), "invalid YAML", "line"
    )
    tagged = tmp_path / "tagged.yaml"
    tagged.write_text("seed: !!python/object/apply:os.system ['echo pwned']\n")
    one_line_error(runner.invoke(app, [study, "--config", str(tagged), *out]), "invalid YAML")
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"no_such_key": 1}))
    one_line_error(runner.invoke(app, [study, "--config", str(unknown), *out]), "no_such_key")
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("seed: three\n")
    one_line_error(runner.invoke(app, [study, "--config", str(wrong), *out]), "seed")
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"seed: 1\n\xff\xfe\x00\x9c")
    one_line_error(
        runner.invoke(app, [study, "--config", str(binary), *out]),
        "--config",
        str(binary),
        "not a UTF-8 text file",
    )


@pytest.mark.parametrize("study", list(STUDIES))
def test_bad_options_are_one_line_errors(study, tmp_path):
    out = ["--out", str(tmp_path / "out")]
    one_line_error(runner.invoke(app, [study, "--set", "seed", *out]), "--set", "KEY=VALUE")
    one_line_error(runner.invoke(app, [study, "--set", "nope=1", *out]), "nope")
    one_line_error(runner.invoke(app, [study, "--quick", "--full", *out]), "--quick", "--full")
    one_line_error(runner.invoke(app, [study, "--seed", "-1", *out]), "seed")
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    one_line_error(runner.invoke(app, [study, "--out", str(a_file / "x")]), "--out")
    if not torch.cuda.is_available():
        one_line_error(runner.invoke(app, [study, "--device", "cuda", *out]), "--device")
    one_line_error(runner.invoke(app, [study, "--device", "tpu9", *out]), "--device")


def test_set_and_config_replace_the_profile_fields(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("dtypes: [float32]\nridge: 0.25\n")
    args = ["verify", "--json", "--config", str(config), "--set", "tol_scale=2.0"]
    result = runner.invoke(app, [*args, "--seed", "4", "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert {r["dtype"] for r in rows} == {"float32"}
    stored = json.loads((tmp_path / "o" / "verify_rows.json").read_text())
    assert stored == rows


@pytest.mark.parametrize(
    "args, needle",
    [
        (["sweep", "--workers", "abc", "x.yaml"], "--workers"),
        (["report", "--seed", "1.5"], "--seed"),
        (["verify", "--no-such-option"], "--no-such-option"),
        (["no-such-command"], "no-such-command"),
    ],
)
def test_usage_errors_of_the_real_entry_point_are_one_line(args, needle):
    """Through the installed entry point (``python -m attnreg``), not typer's test runner:
    typer's own usage errors are one line naming the culprit, exit status 2."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "attnreg", *args], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], proc.stderr


def test_report_overrides_with_an_unknown_key_is_aone_line_error(tmp_path):
    overrides = tmp_path / "overrides.yaml"
    overrides.write_text("icl: {no_such_key: 3}\n")
    result = runner.invoke(
        app, ["report", "--overrides", str(overrides), "--out", str(tmp_path / "r")]
    )
    one_line_error(result, "overrides of icl", "no_such_key")
    assert not (tmp_path / "r" / "results.db").exists()  # nothing ran


@pytest.mark.parametrize(
    "text, needles",
    [
        (None, ("--overrides", "no such file")),
        ("icl: [1, 2\n", ("--overrides", "invalid YAML at line")),
        ("- icl\n- verify\n", ("--overrides", "must hold a mapping")),
        ("icl: 3\n", ("--overrides", "expected a mapping of study name to config keys")),
        ("no_such_study: {}\n", ("--overrides", "unknown study 'no_such_study'", "verify")),
    ],
)
def test_bad_overrides_files_are_one_line_errors_naming_the_option(text, needles, tmp_path):
    overrides = tmp_path / "overrides.yaml"
    if text is not None:
        overrides.write_text(text)
    out = tmp_path / "r"
    result = runner.invoke(app, ["report", "--overrides", str(overrides), "--out", str(out)])
    one_line_error(result, *needles, str(overrides))
    assert not out.exists()  # nothing ran, nothing written


@pytest.mark.parametrize(
    "value, needles",
    [
        # the audit: a nested mapping (YAML reads 1e-9 as a number; float32 has no entry)
        ("tolerance={float64: 1e-9}", ("tolerance", "float32")),
        ("tolerance={float64: 1.0e-9, float32: tiny}", ("tolerance", "float32", "tiny")),
        ("tolerance={float64: 1e-9, float32: 1e-4, float16: 1e-2}", ("tolerance", "float16")),
        ("tolerance={float64: -1e-9, float32: 1e-4}", ("tolerance", "float64", "-1e-09")),
        ("ridge=.inf", ("ridge", "inf")),  # was: a run failing row by row, exit status 1
        ("ridge=.nan", ("ridge", "nan")),
        ("ridge=-1", ("ridge", "-1")),  # was: scikit-learn's message about Ridge's 'alpha'
        ("dtypes=[float16]", ("dtypes", "float16")),
        ("dtypes=[]", ("dtypes",)),
        ("tol_scale=0", ("tol_scale", "0")),
    ],
)
def test_bad_set_values_are_refused_before_anything_runs(value, needles, tmp_path):
    out = tmp_path / "out"
    one_line_error(runner.invoke(app, ["verify", "--set", value, "--out", str(out)]), *needles)
    assert not out.exists()  # nothing ran, nothing written


def test_set_reads_exponent_floats_as_numbers():
    from attnreg.studies.command import parse_set

    values = parse_set(["ridge=1e-1", "tol_scale=2E3", "dtypes=[float64]", "name=1e-3x"])
    assert values == {"ridge": 0.1, "tol_scale": 2000.0, "dtypes": ["float64"], "name": "1e-3x"}


def test_report_overrides_with_a_bad_value_is_aone_line_error(tmp_path):
    """The audit: these overrides used to write the page with verify failed, exit status 0."""
    overrides = tmp_path / "overrides.yaml"
    overrides.write_text('verify: {dtypes: ["float16"]}\n')
    out = tmp_path / "r"
    result = runner.invoke(app, ["report", "--overrides", str(overrides), "--out", str(out)])
    one_line_error(result, "overrides of verify", "dtypes", "float16")
    assert not out.exists()  # nothing ran, nothing written


def test_a_bad_value_of_a_study_option_names_the_option(tmp_path):
    out = ["--out", str(tmp_path / "out")]
    one_line_error(runner.invoke(app, ["verify", "--tol-scale", "abc", *out]), "--tol-scale")
    one_line_error(runner.invoke(app, ["verify", "--dtype", "float16", *out]), "dtypes")
    one_line_error(runner.invoke(app, ["icl", "--threads", "x", *out]), "--threads")
    one_line_error(runner.invoke(app, ["icl", "--models", "lsa-9", *out]), "models", "lsa-9")
