"""The study protocol: a runner computes and writes nothing; ``StudySpec.run`` writes the result
(rows, tables, summary with checks, figures) where it is told; progress nests stages."""

from __future__ import annotations

import json
import os

from attnreg.progress import Progress
from attnreg.studies.registry import get_study
from attnreg.studies.verify import VerifyConfig
from attnreg.studies.verify.run import run


def test_the_runner_writes_nothing_and_the_spec_writes_everything(tmp_path, monkeypatch):
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    events = []
    result = run(VerifyConfig(dtypes=["float32"]), Progress(events.append))
    assert os.listdir(work) == []  # nothing written by the runner
    assert [f.path for f in result.figures] == [None]
    # the stage opened, advanced once per dtype, and closed, in that order
    assert [(e[0], e[1]) for e in events] == [
        ("start", ("verify",)),
        ("advance", ("verify",)),
        ("end", ("verify",)),
    ]
    out = tmp_path / "out"
    written = get_study("verify").run(VerifyConfig(dtypes=["float32"]), out)
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(
        [
            "verify_rows.csv",
            "verify_rows.json",
            "verify_summary.json",
            "verify_certificate.png",
            "verify_certificate.svg",
        ]
    )
    summary = json.loads((out / "verify_summary.json").read_text())
    assert summary["checks"] == written.checks
    assert summary["checks"][0]["limit"] == len(written.rows)  # every row within tolerance
    assert json.loads((out / "verify_rows.json").read_text()) == json.loads(
        json.dumps(written.rows)
    )


def test_nested_stages_carry_their_path_and_a_quiet_progress_emits_nothing():
    events = []
    progress = Progress(events.append, interval=0.0)
    with progress.stage("study", total=2) as outer:
        with outer.progress.stage("train", total=3) as inner:
            for _ in range(3):
                inner.advance(label="loss 1")
        outer.advance()
    paths = {e[1] for e in events}
    assert paths == {("study",), ("study", "train")}
    inner_advances = [e[2] for e in events if e[0] == "advance" and e[1] == ("study", "train")]
    assert inner_advances == [1, 2, 3]
    quiet = Progress.quiet()
    with quiet.stage("x", total=1) as stage:
        stage.advance()
    assert not quiet.enabled


def test_a_worker_sends_the_cell_stages_to_its_queue_and_the_display_nests_them():
    import multiprocessing

    from rich.progress import Progress as RichProgress

    from attnreg.progress import Display
    from attnreg.runs.cells import execute_cell, make_cell, send_progress_to

    queue = multiprocessing.get_context("spawn").Queue()
    cell = make_cell("verify", {"dtypes": ["float32"]}, seed=1)
    send_progress_to(queue)
    try:
        result = execute_cell(cell)
    finally:
        send_progress_to(None)
    assert result.status == "done", result.error
    events = []
    while len(events) < 5:
        events.append(queue.get(timeout=10))
    root = f"verify [{cell.key[:6]}]"
    assert [(e[0], e[1]) for e in events] == [
        ("start", (root,)),
        ("start", (root, "verify")),
        ("advance", (root, "verify")),
        ("end", (root, "verify")),
        ("end", (root,)),
    ]
    bar = RichProgress(disable=True)
    display = Display(bar)
    shown = []
    for event in events:
        display(event)
        shown.append(sorted(display.tasks))
    assert shown[1] == [(root,), (root, "verify")]  # the stage nests under its cell
    assert shown[-1] == [(root,)]  # a finished nested stage is gone, the cell's row stays
    assert [t.description for t in bar.tasks] == [root.replace("[", "\\[")]  # rich markup
    sweep = Display(RichProgress(disable=True), keep_finished=False)
    for event in events:
        sweep(event)
    assert sweep.tasks == {}  # in a sweep the bar counts finished cells: no row stays


def test_a_cell_stores_the_checks_with_their_thresholds_beside_the_summary():
    from attnreg.runs.cells import execute_cell, make_cell

    cell = make_cell("verify", {"dtypes": ["float32"]}, seed=0)
    result = execute_cell(cell)
    line = result.summary["check: float32 rows within their tolerance"]
    rows = len(result.rows)
    assert line == f"pass: {rows} >= {rows}"


def test_a_result_written_twice_lands_whole_in_both_folders(tmp_path):
    result = run(VerifyConfig(dtypes=["float32"]))
    result.write(tmp_path / "a")
    result.write(tmp_path / "b")
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "b").iterdir())
    png = "verify_certificate.png"
    assert (tmp_path / "a" / png).read_bytes() == (tmp_path / "b" / png).read_bytes()
    assert result.figures[0].path == tmp_path / "b" / png
