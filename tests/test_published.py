"""Committed full-scale verdicts: a quick run never overrides them, and shows its own number
beside them; a full-scale claim the quick run did not measure still appears."""

from __future__ import annotations

import json

from attnreg.studies.ledger import EMPIRICAL, Claim, Quote, Regime, admonition
from attnreg.studies.published import load, merge, publish
from attnreg.studies.sources import FU, VLADYMYROV
from attnreg.thresholds import Threshold

PAPER = "the paper's setup"


def _claim(source, value: float, met: bool) -> Claim:
    run = "12 layers, converged" if met else "4 layers, 500 steps"
    return Claim(
        Quote(source, f"{source.authors}'s words", "Section 4", verbatim=False),
        EMPIRICAL,
        "a slope",
        {"": value},
        Threshold(">=", 1.0, "a stated origin"),
        regime=Regime(PAPER, run, met, "" if met else "12 layers"),
    )


def test_a_full_scale_verdict_is_read_in_and_the_quick_number_kept_beside_it(tmp_path):
    full = [_claim(FU, 2.0, True).row(), _claim(VLADYMYROV, 0.5, True).row()]
    summary = tmp_path / "depth_summary.json"
    summary.write_text(json.dumps({"claims": full}))
    path = publish([summary], "depth", "attnreg depth --full --seed 0", [0, 1, 2], tmp_path)
    record = load("depth", tmp_path)
    assert path.name == "depth.json" and record is not None and record["seeds"] == [0, 1, 2]

    quick = [_claim(FU, 0.2, False).row()]
    merged = merge(quick, "depth", tmp_path)
    assert [r["verdict"] for r in merged] == ["holds", "does not hold"]  # Fu, then Vladymyrov
    fu = merged[0]
    assert fu["this_run"]["verdict"] == "no verdict: reduced scale"
    assert fu["this_run"]["number"] == "0.2" and "full scale (" in fu["why"]
    assert "committed as depth.json" in fu["why"]  # the reason stays short: no command
    assert "0.2" in fu["why"] and "seeds 0, 1, 2" in fu["published"]
    assert "attnreg depth --full --seed 0" in fu["published"]  # the command is in the row
    assert "full scale (" in merged[1]["why"]  # measured only at full scale


def test_without_a_record_the_rows_are_unchanged(tmp_path):
    quick = [_claim(FU, 0.2, False).row()]
    assert merge(quick, "depth", tmp_path) == quick
    assert merge(quick, "no-such-study") == quick
    assert "reduced scale" in admonition(quick, "box", study="no-such-study")
