"""The source documents' inline TeX, shown as Unicode (no MathJax on the site)."""

from __future__ import annotations

import pytest

from attnreg.studies import quotes
from attnreg.studies.ledger import Quote
from attnreg.studies.tex import plain

QUOTES = [v for v in vars(quotes).values() if isinstance(v, Quote)]


@pytest.mark.parametrize(
    ("tex", "shown"),
    [
        (r"\(W_q W_k^\top\)", "W_q W_kᵀ"),
        (r"\((X^\top X)^{-1}\)", "(Xᵀ X)⁻¹"),
        (r"\(\sqrt d_k\)", "√d_k"),
        (r"\(N_{max}=d\)", "N_max=d"),
        (r"$$(W_0 - \Delta W_0) x_{\tau,\text{test}}$$", "(W_0 − ΔW_0) x_τ,test"),
        ("Softmax attention exponentially increases memory capacity.", None),
    ],
)
def test_plain_writes_the_sources_tex_in_unicode(tex, shown):
    assert plain(tex) == (tex if shown is None else shown)


@pytest.mark.parametrize("quote", QUOTES, ids=lambda q: q.text[:30])
def test_no_quote_shows_tex(quote):
    shown = quote.shown()
    assert "\\" not in shown and "$$" not in shown and "{" not in shown
    assert shown.startswith("“") == quote.verbatim


def test_the_ledgers_show_the_quote_without_tex_and_ledger_json_keeps_it():
    from attnreg.report.ledger_html import ledger_table
    from attnreg.studies.ledger import EMPIRICAL, Claim, admonition, markdown
    from attnreg.thresholds import Threshold

    claim = Claim(
        quotes.VON_OSWALD_SUMMARY_CLOSING,
        EMPIRICAL,
        "distance",
        {"case": 2.0},
        Threshold("<=", 1e-12, "rounding"),
    )
    row = claim.row()
    assert row["quote"] == quotes.VON_OSWALD_SUMMARY_CLOSING.text  # verbatim, TeX and all
    for page in (markdown([row]), ledger_table([row]), admonition([row], "box")):
        assert "(W_0 − ΔW_0) x_τ,test" in page and "\\Delta" not in page
