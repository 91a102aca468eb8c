"""The benchmark tables are generated from the committed result file, never typed by hand.

``benchmarks/README.md`` must hold exactly the rendering of ``benchmarks/results.json`` between
its markers (so a hand edit of the table, or a new result file without re-rendering, fails);
the renderer itself is checked against a table written out in this file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnreg.bench.render import BEGIN, END, bench_json, block, load, main, render, splice

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results.json"
README = ROOT / "benchmarks" / "README.md"

RUN = {
    "date": "2026-01-02T03:04:05Z",
    "machine": {"cpu": "Test CPU", "logical_cores": 4, "usable_cores": 2, "memory_gib": 8.0},
    "threads": 2,
    "matmul_gflops": 123.456,
    "repeat": 3,
    "smoke": False,
    "torch": "9.9.9",
    "only": ["P1", "P7"],
    "seconds": 125.4,
}
ROWS = [
    {
        "id": "P1",
        "workload": "w1",
        "value": 0.8712,
        "unit": "× lstsq time",
        "target": "≤ 1.0× lstsq",
        "passed": True,
        "reference": "r1",
        "details": {
            "checks": [
                {"check": "time / lstsq", "value": 0.8712, "op": "<=", "limit": 1.0, "passed": True}
            ],
            "seconds": {"construction": 0.0055, "lstsq": 1.5},
        },
    },
    {
        "id": "P7",
        "workload": "w7",
        "value": None,
        "unit": "× SDPA time",
        "target": "within max|y|",
        "passed": False,
        "reference": "r7",
        "details": {
            "checks": [{"check": "c", "value": None, "op": ">=", "limit": 2.0, "passed": False}],
            "error": "boom",
        },
    },
]
EXPECTED = """\
**Run of 2026-01-02 03:04 UTC** — Test CPU (2 of 4 cores, 8 GiB), torch 9.9.9, 2 threads; \
`attnreg bench --json --repeat 3 --only P1,P7`, 2 min 5 s in all. Float32 matmul rate measured \
first: 123 GFLOP/s. 1 of 2 targets passed.

| id | value | target | passed | checks | times |
|---|---|---|---|---|---|
| P1 | 0.871 × lstsq time | ≤ 1.0× lstsq | yes | time / lstsq 0.871 ≤ 1 | construction 5.5 ms, \
lstsq 1.5 s |
| P7 | n/a | within max\\|y\\| | **NO** | c n/a ≥ 2 (FAILED); error: boom | — |
"""


def _doc() -> dict:
    return json.loads(bench_json(RUN, ROWS))


def test_render_matches_a_table_written_out():
    assert render(_doc()) == EXPECTED


def test_a_note_in_the_run_is_shown():
    doc = _doc()
    doc["run"]["note"] = "reconstructed | by hand"
    assert "\n\n> **Note.** reconstructed \\| by hand\n\n| id |" in render(doc)


def test_the_registered_layers_table_follows_the_targets():
    doc = _doc()
    doc["targets"][1]["details"]["registered"] = {
        "delta_rule": {
            "seconds": 0.0021,
            "tokens_per_second": 1950476.2,
            "fla_seconds": 0.0525,
            "shape": "B=1, T=8",
        },
        "titans": {"seconds": 0.25, "tokens_per_second": 16384.0, "shape": "B=1, T=8"},
    }
    assert render(doc) == EXPECTED + (
        "\nEvery registered sequence layer, default form, on its example inputs (P7, reported, "
        "not judged; B=1, T=8):\n\n| layer | seconds | tokens / s | fla's reference | × fla |\n"
        "|---|---|---|---|---|\n"
        "| `delta_rule` | 2.1 ms | 1,950,476 | 52.5 ms | 25.0 × |\n"
        "| `titans` | 250 ms | 16,384 | — | — |\n"
    )


def test_readme_table_is_the_rendering_of_the_committed_results():
    doc = load(RESULTS)
    text = README.read_text(encoding="utf-8")
    assert splice(text, doc) == text, (
        "benchmarks/README.md differs from benchmarks/results.json: run "
        "`python -m attnreg.bench.render` (never edit the generated table by hand)"
    )
    assert block(doc) in text


def test_committed_results_are_consistent():
    """Each row's pass is the conjunction of its checks, and each check is its value against
    its limit (the comparison redone here)."""
    doc = load(RESULTS)
    assert doc["run"]["date"] and doc["run"]["machine"]["cpu"]
    for row in doc["targets"]:
        checks = row["details"]["checks"]
        for c in checks:
            ok = c["value"] is not None and (
                c["value"] <= c["limit"] if c["op"] == "<=" else c["value"] >= c["limit"]
            )
            assert c["passed"] == ok, (row["id"], c)
        assert row["passed"] == all(c["passed"] for c in checks), row["id"]


def test_a_hand_edit_of_the_table_is_caught(tmp_path):
    results = tmp_path / "results.json"
    results.write_text(bench_json(RUN, ROWS))
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{BEGIN}\n{END}\n\nafter\n")
    args = ["--results", str(results), "--readme", str(readme)]
    assert main([*args, "--check"]) == 1
    assert main(args) == 0
    assert readme.read_text() == f"# x\n\n{BEGIN}\n\n{EXPECTED}\n{END}\n\nafter\n"
    assert main([*args, "--check"]) == 0
    readme.write_text(readme.read_text().replace("0.871", "0.85"))
    assert main([*args, "--check"]) == 1


def test_bad_files_and_markers_are_refused(tmp_path, capsys):
    missing = tmp_path / "none.json"
    with pytest.raises(ValueError, match="path"):
        load(missing)
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(ValueError, match="'run'"):
        load(tmp_path / "list.json")
    with pytest.raises(ValueError, match="text"):
        splice("no markers here", _doc())
    with pytest.raises(ValueError, match="text"):
        splice(f"{BEGIN}\n{END}\n{BEGIN}\n{END}", _doc())
    readme = tmp_path / "README.md"
    readme.write_text(f"{BEGIN}\n{END}\n")
    assert main(["--results", str(missing), "--readme", str(readme)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: path:") and err.count("\n") == 1
