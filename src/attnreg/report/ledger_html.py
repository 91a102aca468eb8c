"""The claims ledger as HTML for the documentation site: the totals, then one table with a
coloured verdict per row (the classes of :func:`~attnreg.studies.ledger.verdict_class`, styled
by ``docs/assets/extra.css``), and the short box a tutorial opens with.

Both take ledger rows (:meth:`~attnreg.studies.ledger.Claim.row`, as a stored cell holds them);
every text is HTML-escaped.
"""

from __future__ import annotations

from html import escape
from typing import Any

from attnreg.studies.ledger import ICONS, VERDICTS, totals, totals_text, verdict_class
from attnreg.studies.tex import plain

MEANINGS = {
    "holds": "every case meets the threshold",
    "conditional": "every case meets it, under the condition the row states",
    "partial": "some cases meet it (n of m)",
    "does not hold": "no case meets it",
    "no verdict: reduced scale": "a trained-model claim measured below the paper's regime",
    "open question": "the source asks; the row gives the measured answer",
    "not testable": "nothing here can measure it (the row says why)",
}
"""One line per verdict, for the key under the totals."""


def verdict_key(rows: list[dict[str, Any]], every: bool = False) -> str:
    """The verdicts with their icon, colour and count (``every``: zeros too), each with its
    meaning as a tooltip."""
    counts = totals(rows)
    chips = [
        f'<span class="verdict-chip {verdict_class(v)}" title="{escape(MEANINGS[v])}">'
        f"{escape(ICONS[v])} {escape(v)} <b>{n}</b></span>"
        for v, n in counts.items()
        if n or every
    ]
    return f'<p class="verdict-key">{" ".join(chips)}</p>'


def _words(row: dict[str, Any]) -> str:
    quote = escape(plain(row["quote"]))  # the source's inline TeX in Unicode: no MathJax
    text = f"“{quote}”" if row["verbatim"] else f"<em>(paraphrase)</em> {quote}"
    return f'{text} <span class="ledger-muted">({escape(row["where"])})</span>'


def _number(row: dict[str, Any]) -> str:
    number = escape(row["number"]) if row["values"] else "—"
    return f'<span class="ledger-muted">{escape(row["measurement"])}:</span> {number}'


def _threshold(row: dict[str, Any]) -> str:
    if not row["threshold_text"]:
        return "—"
    origin = escape(row["threshold_origin"] or "")
    return f'{escape(row["threshold_text"])} <span class="ledger-muted">({origin})</span>'


def _regime(row: dict[str, Any]) -> str:
    if not row.get("paper_regime"):
        return ""
    return (
        f'<br><span class="ledger-muted">paper: {escape(row["paper_regime"])}; '
        f"run: {escape(row['run_regime'] or '')}</span>"
    )


def _why(row: dict[str, Any]) -> str:
    """The verdict's reason without the threshold's origin (the threshold column shows it)."""
    origin = row.get("threshold_origin")
    why = str(row["why"])
    return why.replace(f" ({origin})", "") if origin else why


def _verdict(row: dict[str, Any]) -> str:
    return (
        f'<strong class="verdict">{escape(row["icon"])} {escape(row["verdict_text"])}</strong>'
        f"<br>{escape(_why(row))}"
    )


def ledger_table(rows: list[dict[str, Any]]) -> str:
    """One table: verdict and why, source (with the row's ``study`` when it has one), claim in
    the source's words with where it stands, kind, the number with what it measures, and the
    threshold with its origin."""
    body = "".join(
        f'<tr class="{verdict_class(r["verdict"])}">'
        f'<td class="ledger-verdict">{_verdict(r)}</td>'
        f"<td>{escape(r['source_short'])}"
        + (f'<br><span class="ledger-muted">{escape(r["study"])}</span>' if r.get("study") else "")
        + f"</td><td>{_words(r)}{_regime(r)}</td><td>{escape(r['kind'])}</td>"
        f'<td class="ledger-number">{_number(r)}</td><td>{_threshold(r)}</td></tr>'
        for r in rows
    )
    return (
        '<div class="ledger-wrap"><table class="ledger">'
        "<thead><tr><th>verdict: why</th><th>source</th><th>claim (where)</th><th>kind</th>"
        f"<th>number</th><th>threshold (origin)</th></tr></thead><tbody>{body}</tbody>"
        "</table></div>"
    )


def ledger_page(rows: list[dict[str, Any]]) -> str:
    """The claims page's ledger: the totals, the coloured key, then the table."""
    return (
        f'<div class="ledger-page"><p class="ledger-totals"><strong>'
        f"{escape(totals_text(rows))}</strong></p>{verdict_key(rows)}{ledger_table(rows)}</div>"
    )


def opening(lead: str, rows: list[dict[str, Any]], ledger_href: str) -> str:
    """The box a page opens with: its conclusion (``lead``, stated without a verdict's
    direction), the totals of the claims it tests with their coloured key, and a link to the
    whole ledger."""
    totals_html = (
        f'<p class="ledger-totals"><strong>{escape(totals_text(rows))}</strong></p>'
        f"{verdict_key(rows)}"
        if rows
        else ""
    )
    return (
        '<div class="admonition abstract ledger-opening"><p class="admonition-title">'
        f"In short</p><p>{escape(lead)}</p>{totals_html}"
        "<p>Every verdict is computed from its number when the page is built; each row, with the "
        f"claim in its source's words and the verdict's reason, is in the <a href=\""
        f'{escape(ledger_href)}">claims ledger</a>.</p></div>'
    )


assert set(MEANINGS) == set(VERDICTS)
