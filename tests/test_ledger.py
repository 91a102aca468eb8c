"""The claims ledger: verdicts computed from the numbers, summaries as short prose and tables,
and conclusions that change when the measured number does."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from attnreg.studies.answers import (
    answer_text,
    format_against,
    paragraphs,
    summary_markdown,
    summary_table,
)
from attnreg.studies.ledger import (
    CONDITIONAL,
    EMPIRICAL,
    FAILS,
    HOLDS,
    OPEN,
    OPEN_QUESTION,
    PARTIAL,
    REDUCED,
    REMARK,
    UNTESTABLE,
    Claim,
    Quote,
    Regime,
    admonition,
    ledger_table,
    markdown,
    totals,
    totals_text,
)
from attnreg.studies.quotes import QUOTES, VON_OSWALD_SUMMARY_CLOSING, WOJIAO_LOCAL
from attnreg.studies.sources import TAN_ZHAO, TANG, VON_OSWALD_SUMMARY, WOJIAO
from attnreg.studies.verify import sign
from attnreg.studies.verify.config import VerifyConfig
from attnreg.studies.verify.run import run as run_verify
from attnreg.thresholds import Threshold

MAX_WORDS = 60
SOURCES_DIR = Path(__file__).resolve().parents[2] / "shared" / "sources"
DOCUMENTS = {
    TANG: "000_3ee4b2b19a7b907c.txt",
    TAN_ZHAO: "001_c9c24fba1aa0f932.txt",
    WOJIAO: "002_1de9ab908b5c6643.txt",
    VON_OSWALD_SUMMARY: "003_55a7d24bb45931a8.txt",
}
QUOTE = Quote(TANG, "its words", "a section")
ORIGIN = "a stated origin"


def _claim(
    values: dict[str, float],
    op: str = "<=",
    condition: str = "",
    kind: str = EMPIRICAL,
    regime: Regime | None = None,
) -> Claim:
    return Claim(
        QUOTE,
        kind,
        "a measured ratio",
        values,
        Threshold(op, 1.0, ORIGIN),
        regime=regime,
        condition=condition,
        reading="read as the ratio" if kind == REMARK else "",
    )


MET = Regime("the paper's setup", "the run's setup", True)
BELOW = Regime("the paper's setup", "a toy run", False, "the paper's depth")


@pytest.mark.parametrize(
    ("values", "op", "condition", "regime", "verdict"),
    [
        ({"": 0.5}, "<=", "", None, HOLDS),
        ({"": 1.0}, "<=", "", None, HOLDS),  # the threshold itself passes, as in a check
        ({"": 1.5}, "<=", "", None, FAILS),
        ({"": 1.5}, ">=", "", None, HOLDS),
        ({"": 0.5}, ">=", "", None, FAILS),
        ({"": 0.5}, "<=", "within its tolerance", None, CONDITIONAL),
        ({"a": 0.5, "b": 2.0}, "<=", "", None, PARTIAL),
        ({"a": 0.5, "b": 2.0, "c": 0.1}, "<=", "", None, PARTIAL),
        ({"a": math.nan}, "<=", "", None, UNTESTABLE),
        ({}, "<=", "", None, UNTESTABLE),
        ({"": 0.5}, "<=", "", MET, HOLDS),  # both sides of the regime gate
        ({"": 1.5}, "<=", "", MET, FAILS),
        ({"": 0.5}, "<=", "", BELOW, REDUCED),
        ({"": 1.5}, "<=", "", BELOW, REDUCED),
    ],
)
def test_the_verdict_is_computed_from_the_numbers(values, op, condition, regime, verdict):
    claim = _claim(values, op, condition, regime=regime)
    assert claim.verdict() == verdict
    row = claim.row()
    assert row["verdict"] == verdict and row["values"] == values
    assert row["threshold_origin"] == ORIGIN and row["kind"] == EMPIRICAL
    if verdict in (FAILS, PARTIAL):
        assert claim.why().startswith("Contradicted")
    if verdict == PARTIAL:
        good = [c for c, v in values.items() if v <= 1.0]
        assert claim.verdict_text() == f"partial {len(good)} of {len(values)}"
    if verdict == REDUCED:
        assert "a toy run" in claim.why() and "the paper's depth" in claim.why()
        assert row["paper_regime"] == "the paper's setup" and row["run_regime"] == "a toy run"


def test_a_regime_met_in_some_cases_judges_those_only():
    """A regime met cell by cell: the cases below it get no verdict and are named; the verdict
    and its count come from the others, on both sides of the threshold; with every case below
    it, no verdict at all."""

    def cells(values: dict[str, float], unmet: tuple[str, ...]) -> Claim:
        regime = Regime("the paper's setup", "the run's cells", True, "a plateau", unmet)
        return _claim(values, regime=regime)

    held = cells({"a": 0.5, "b": 2.0}, ("b",))
    assert held.verdict() == HOLDS and held.judged() == ["a"] and held.unmet() == ["b"]
    assert "No verdict on b" in held.why() and "a plateau" in held.why()
    assert held.row()["regime_unmet"] == ["b"]
    assert held.number() == "a: 0.5; b: 2 (below the regime)"
    assert held.why().startswith("Every case in the paper's regime (1) meets the threshold")
    failed = cells({"a": 1.5, "b": 0.5}, ("b",))
    assert failed.verdict() == FAILS
    assert failed.why().startswith("Contradicted: none of the 1 cases in the paper's regime")
    part = cells({"a": 0.5, "b": 0.5, "c": 1.5}, ("b",))
    assert part.verdict() == PARTIAL and part.verdict_text() == "partial 1 of 2"
    assert part.why().startswith("Contradicted on c; holds on a")
    assert cells({"a": 0.5}, ("a",)).verdict() == REDUCED
    assert cells({"a": 0.5}, ()).why() == f"Every case (1) meets the threshold ({ORIGIN})."
    with pytest.raises(ValueError, match="needed"):
        Regime("paper", "run", True, "", ("a",))


def test_an_open_question_gets_an_answer_and_no_verdict():
    claim = Claim(QUOTE, OPEN, "a cosine", {"a": 0.1}, answer="Not here: far from it.")
    assert claim.verdict() == OPEN_QUESTION and claim.why() == "Not here: far from it."
    with pytest.raises(ValueError, match="answer"):
        Claim(QUOTE, OPEN, "a cosine", {"a": 0.1})
    with pytest.raises(ValueError, match="threshold"):
        Claim(QUOTE, OPEN, "a cosine", {"a": 0.1}, Threshold("<=", 1, ORIGIN), answer="x")


def test_a_remark_is_judged_only_with_its_reading():
    with pytest.raises(ValueError, match="reads as a number"):
        Claim(QUOTE, REMARK, "a ratio", {"": 0.5}, Threshold("<=", 1.0, ORIGIN))
    judged = _claim({"": 0.5}, kind=REMARK)
    assert judged.verdict() == HOLDS and judged.row()["reading"] == "read as the ratio"
    unread = Claim(QUOTE, REMARK, "a ratio", {"": 0.5})
    assert unread.verdict() == UNTESTABLE and "not read as a number" in unread.why()


def test_a_claim_refuses_what_it_cannot_judge():
    with pytest.raises(ValueError, match="op"):
        Threshold("<", 1.0, ORIGIN)
    with pytest.raises(ValueError, match="origin"):
        Threshold("<=", 1.0, " ")
    with pytest.raises(ValueError, match="kind"):
        Claim(QUOTE, "theorem", "x", {"": 1.0}, Threshold("<=", 1.0, ORIGIN))
    with pytest.raises(ValueError, match="needs a threshold"):
        Claim(QUOTE, EMPIRICAL, "x", {"": 1.0})
    with pytest.raises(ValueError, match="needed"):
        Regime("paper", "run", False)


def test_a_paraphrase_is_never_shown_in_quotation_marks():
    para = Quote(TANG, "what the source means", "a section", verbatim=False)
    assert para.shown() == "(paraphrase) what the source means"
    assert QUOTE.shown() == "“its words”"
    claim = Claim(para, EMPIRICAL, "x", {"": 0.5}, Threshold("<=", 1.0, ORIGIN))
    for shown in (admonition([claim], "box"), markdown([claim.row()])):
        assert "(paraphrase) what the source means" in shown
        assert "“what the source means" not in shown


def _normalised(text: str) -> str:
    return " ".join(text.replace("**", "").split())


@pytest.mark.skipif(
    not SOURCES_DIR.is_dir(), reason="the source documents are not beside the project"
)
@pytest.mark.parametrize("quote", QUOTES, ids=lambda q: q.text[:30])
def test_every_quote_of_a_source_document_is_verbatim(quote):
    """Each quote appears, word for word, in its document (markdown bold and line breaks
    aside); and every source document quoted is the one its author wrote."""
    assert quote.verbatim
    text = (SOURCES_DIR / DOCUMENTS[quote.source]).read_text(encoding="utf-8")
    assert _normalised(quote.text) in _normalised(text)


def test_everything_is_matter_is_wojiao_yc_s():
    assert WOJIAO.authors == "wojiao-yc" and "Everything is matter" in WOJIAO.title
    assert "Goulet Coulombe" not in WOJIAO.cite()
    assert WOJIAO_LOCAL.source is WOJIAO


def test_totals_count_every_verdict():
    rows = [_claim({"": 0.5}).row(), _claim({"": 3.0}).row(), _claim({"": 3.0}).row()]
    assert totals(rows)[HOLDS] == 1 and totals(rows)[FAILS] == 2
    assert totals_text(rows) == "3 claims: 1 holds, 2 does not hold."


def test_numbers_are_shown_with_the_digits_that_separate_them_from_the_threshold():
    assert format_against(1.0002, 1.02) == "1.0002"
    assert format_against(1.00002, 1.0, digits=4) == "1.00002"  # more digits until it differs
    assert format_against(0.5, 1.0) == "0.5"
    assert format_against(0.99999, 1.0) == "0.99999"
    assert format_against(1.0, 1.0) == "1"


def test_check_lines_show_the_difference_from_the_limit():
    from attnreg.runs.cells import check_lines
    from attnreg.thresholds import check

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
    assert table["rows"][1][-1].startswith(f"✘ {FAILS}. Contradicted")
    assert table["lead"] == "2 claims: 1 holds, 1 does not hold."


def test_the_sign_conclusion_follows_the_measured_distances(monkeypatch):
    """verify's sentence and claims are built from the two distances: patch the measurement and
    the verdict and the sentence change with it."""
    cfg = VerifyConfig(dtypes=["float64"])
    measured = run_verify(cfg)
    text = measured.summary["von Oswald summary, as written"]
    assert "y-entry is −(W0 + ΔW0) x_q" in text and "off by 2.00" in text
    verdicts = {c.quote.text: c.verdict() for c in measured.claims}
    assert verdicts[VON_OSWALD_SUMMARY_CLOSING.text] == FAILS

    import attnreg.studies.verify.run as verify_run

    monkeypatch.setattr(verify_run, "literal_sign_distances", lambda seed: (0.5, 0.0))
    patched = run_verify(cfg)
    text = patched.summary["von Oswald summary, as written"]
    assert "y-entry is NOT −(W0 + ΔW0) x_q" in text and "agrees with it" in text
    verdicts = {c.quote.text: c.verdict() for c in patched.claims}
    assert verdicts[VON_OSWALD_SUMMARY_CLOSING.text] == HOLDS
    gd = next(c for c in patched.claims if c.quote.text.startswith("one linear self-attention"))
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
    sources = {c.source.short() for c in result.claims}
    assert {
        "Xiaojun Tan & Yuchen Zhao 2026",
        "Philippe Goulet Coulombe 2025",
        "von Oswald et al. 2023",
    } <= sources
    tz = next(c for c in result.claims if c.source is TAN_ZHAO)
    worst = max(r["rel_err"] / r["tol"] for r in result.rows if "Tan & Zhao" in r["construction"])
    assert max(tz.values.values()) == worst
    # the float64 Tan & Zhao rows pass only their condition-scaled tolerance
    assert tz.verdict() == CONDITIONAL and "not to machine precision" in tz.why()


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
        return next(c for c in result.claims if c.quote.text.startswith("the capacity"))

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
    assert claim.why().startswith("Contradicted")
    against, held = patched.summary["lead"].split("Holds: ")
    assert against.startswith("Contradicted") and label in against and label not in held
