"""The claims ledger: verdicts computed from the numbers, summaries as short prose and tables,
and conclusions that change when the measured number does."""

from __future__ import annotations

import math

import pytest

from attnreg.studies.common import (
    answer_text,
    format_against,
    paragraphs,
    summary_markdown,
    summary_table,
)
from attnreg.studies.ledger import CONDITIONAL, FAILS, HOLDS, UNTESTABLE, Claim, ledger_table
from attnreg.studies.verify import sign
from attnreg.studies.verify.config import VerifyConfig
from attnreg.studies.verify.run import run as run_verify

MAX_WORDS = 60


def _claim(values: dict[str, float], op: str = "<=", condition: str = "") -> Claim:
    return Claim("a source", "its words", "a measured ratio", op, 1.0, values, condition)


@pytest.mark.parametrize(
    ("values", "op", "condition", "verdict"),
    [
        ({"": 0.5}, "<=", "", HOLDS),
        ({"": 1.0}, "<=", "", HOLDS),  # the threshold itself passes, as in a check
        ({"": 1.5}, "<=", "", FAILS),
        ({"": 1.5}, ">=", "", HOLDS),
        ({"": 0.5}, "<=", "within its tolerance", CONDITIONAL),
        ({"a": 0.5, "b": 2.0}, "<=", "", CONDITIONAL),
        ({"a": math.nan}, "<=", "", UNTESTABLE),
        ({}, "<=", "", UNTESTABLE),
    ],
)
def test_the_verdict_is_computed_from_the_numbers(values, op, condition, verdict):
    claim = _claim(values, op, condition)
    assert claim.verdict() == verdict
    row = claim.row()
    assert row["verdict"] == verdict and row["values"] == values
    first = claim.finding().split(":")[0]
    if verdict == FAILS:
        assert first == "The measurement contradicts the source"
    if verdict == CONDITIONAL and len(values) == 2:
        assert first == "The measurement contradicts the source in part"
        assert claim.verdict_text() == f"{CONDITIONAL}: only on a"


def test_a_claim_refuses_an_unknown_operator():
    with pytest.raises(ValueError, match="op"):
        _claim({"": 1.0}, op="<")


def test_numbers_are_shown_with_the_digits_that_separate_them_from_the_threshold():
    assert format_against(1.0002, 1.02) == "1.0002"
    assert format_against(1.00002, 1.0, digits=4) == "1.00002"  # more digits until it differs
    assert format_against(0.5, 1.0) == "0.5"
    assert format_against(0.99999, 1.0) == "0.99999"
    assert format_against(1.0, 1.0) == "1"


def test_check_lines_show_the_difference_from_the_limit():
    from attnreg.runs.cells import check_lines
    from attnreg.studies.common import check

    lines = check_lines([check("ratio", 1.0002, "<=", 1.02)])
    assert lines == {"check: ratio": "pass: 1.0002 <= 1.02"}


def test_a_summary_table_and_its_text():
    table = summary_table("Lead.", ["a", "b"], [["x", 0.123456], ["y", 2]], note="Note.")
    assert answer_text(table) == "Lead. a · b x · 0.123 y · 2 Note."
    assert paragraphs({"q": table, "r": "a sentence"}) == ["Lead.", "Note.", "a sentence"]
    assert "| x | 0.123 |" in summary_markdown({"q": table})
    with pytest.raises(ValueError, match="rows"):
        summary_table("Lead.", ["a", "b"], [["x"]])


def test_the_ledger_table_keeps_the_machine_readable_rows():
    claims = [_claim({"": 0.5}), _claim({"": 3.0})]
    table = ledger_table(claims)
    assert [r["verdict"] for r in table["claims"]] == [HOLDS, FAILS]
    assert table["rows"][1][-1].startswith(f"{FAILS}. The measurement contradicts the source")


def test_the_sign_conclusion_follows_the_measured_distances(monkeypatch):
    """verify's sentence and claims are built from the two distances: patch the measurement and
    the verdict and the sentence change with it."""
    cfg = VerifyConfig(dtypes=["float64"])
    measured = run_verify(cfg)
    text = measured.summary["von Oswald summary, as written"]
    assert "y-entry is −(W0 + ΔW0) x_q" in text and "off by 2.00" in text
    verdicts = {c.words: c.verdict() for c in measured.claims}
    assert verdicts["the layer's output is (W0 − ΔW0) x"] == FAILS

    import attnreg.studies.verify.run as verify_run

    monkeypatch.setattr(verify_run, "literal_sign_distances", lambda seed: (0.5, 0.0))
    patched = run_verify(cfg)
    text = patched.summary["von Oswald summary, as written"]
    assert "y-entry is NOT −(W0 + ΔW0) x_q" in text and "agrees with it" in text
    verdicts = {c.words: c.verdict() for c in patched.claims}
    assert verdicts["the layer's output is (W0 − ΔW0) x"] == HOLDS
    gd = next(c for c in patched.claims if c.words.startswith("one linear self-attention"))
    assert gd.verdict() == FAILS and gd.values == {"": 0.5}


def test_the_sign_distances_match_a_loop_in_the_test():
    """The measured distances against the GD step written out here (not by the construction)."""
    import numpy as np

    plus, minus = sign.literal_sign_distances(3)
    assert plus <= sign.TOLERANCE
    assert minus == pytest.approx(2.0, abs=1e-12)  # ‖−(W0+Δ)x + (W0−Δ)x‖ = 2‖Δx‖ exactly
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((7, 3)), rng.standard_normal((7, 2))
    xq, w0 = rng.standard_normal((1, 3)), rng.standard_normal((2, 3))
    delta = np.zeros((2, 3))
    for i in range(7):
        delta += 0.1 * np.outer(y[i] - w0 @ x[i], x[i])
    assert np.linalg.norm(delta @ xq[0]) > 0


def test_verify_summary_paragraphs_are_short_and_its_claims_hold_as_measured():
    result = run_verify(VerifyConfig())
    for text in paragraphs(result.summary):
        assert len(text.split()) <= MAX_WORDS, text
    sources = {c.source.split(" (")[0] for c in result.claims}
    assert {"Tan & Zhao 2026", "Goulet Coulombe 2025", "von Oswald et al. 2023"} <= sources
    tz = next(c for c in result.claims if c.source.startswith("Tan & Zhao"))
    worst = max(r["rel_err"] / r["tol"] for r in result.rows if "Tan & Zhao" in r["construction"])
    assert max(tz.values.values()) == worst
    # the float64 Tan & Zhao rows pass only their condition-scaled tolerance
    assert tz.verdict() == CONDITIONAL and "not to machine precision" in tz.verdict_text()


def test_the_layers_memory_conclusion_follows_the_measured_recall(monkeypatch):
    """The layers study's Tang claim and its lead sentence are built from the recall rows:
    lower Mesa's measured recall at N = d and the verdict and the sentence turn with it."""
    import attnreg.studies.layers.run as layers_run
    from attnreg.studies.layers.config import LayersConfig

    cfg = LayersConfig(
        d=3,
        n_ctx=6,
        batch=16,
        steps=2,
        eval_tasks=32,
        fit_tasks=32,
        explain_tasks=16,
        layers=["mesa"],
        tasks=["clean"],
        memory_d=4,
        memory_ratios=[0.5, 1.0, 2.0],
        memory_trials=3,
        memory_passes=2,
    )

    def mesa_claim(result):
        for record in result.figures:
            record.close()
        return next(c for c in result.claims if c.words.startswith("the regression"))

    measured = layers_run.run(cfg)
    claim = mesa_claim(measured)
    assert claim.verdict() == HOLDS and set(claim.values.values()) == {1.0}
    label = "Mesa stores N_max = d pairs exactly"
    against, held = measured.summary["lead"].split("Holds: ")
    assert label in held and label not in against

    real = layers_run.memory_rows

    def half_recalled(config):
        rows = real(config)
        for r in rows:
            if r["memory"] == "Mesa" and r["n"] == config.memory_d:
                r["recall"] = 0.5
        return rows

    monkeypatch.setattr(layers_run, "memory_rows", half_recalled)
    patched = layers_run.run(cfg)
    claim = mesa_claim(patched)
    assert set(claim.values.values()) == {0.5}  # N_max = 2 of d = 4 at every ρ
    assert claim.verdict() == FAILS
    assert claim.finding().startswith("The measurement contradicts the source")
    against, held = patched.summary["lead"].split("Holds: ")
    assert against.startswith("Contradicted") and label in against and label not in held
