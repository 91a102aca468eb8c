"""The verify study's claims ledger: each source's construction is exact, tested by the worst
``rel_err / tol`` of its certificate rows per dtype (a row passes at ≤ 1).

The tolerance of a row is condition-scaled (``max(base, u · κ)``,
:mod:`~attnreg.studies.verify.construction_rows`), so "exact" holds with that condition: the claim's
condition names the largest relative error, which on the ill-conditioned design is far above
the unit roundoff."""

from __future__ import annotations

from typing import Any

from attnreg.studies.ledger import IDENTITY, Claim, Quote
from attnreg.studies.quotes import TAN_ZHAO_SPECIAL_CASE
from attnreg.studies.sources import GOULET_COULOMBE, MESA, VON_OSWALD
from attnreg.studies.verify.config import unit_roundoff
from attnreg.thresholds import Threshold

MACHINE = 1000
"""A relative error within ``MACHINE · u`` (u the unit roundoff of the dtype) counts as machine
precision; a larger one that passes only its condition-scaled tolerance makes the claim hold
with that condition."""

TOLERANCE_ORIGIN = (
    "each certificate row's error bound max(base, u·κ), u the dtype's unit roundoff and κ the "
    "design's condition number (verify's tolerance)"
)

SOURCES = (
    (
        TAN_ZHAO_SPECIAL_CASE,
        "Tan & Zhao",
    ),
    (
        Quote(
            GOULET_COULOMBE,
            "OLS is attention: ŷ* = X* (XᵀX)⁻¹ XᵀY = (X* L)(X L)ᵀ Y, the fitted values are "
            "attention with queries X* L, keys X L and values Y",
            "the paper's main identity",
            verbatim=False,
        ),
        "OLS-attention",
    ),
    (
        Quote(
            VON_OSWALD,
            "stacked linear self-attention layers with the constructed weights perform "
            "gradient-descent steps (GD, GD++) on the in-context regression loss",
            "Proposition 1 and its multi-layer construction",
            verbatim=False,
        ),
        "LSA",
    ),
    (
        Quote(
            MESA,
            "the mesa layer solves the ridge regression of every prefix of the context",
            "the mesa layer's definition",
            verbatim=False,
        ),
        "mesa layer",
    ),
)


def certificate_claims(rows: list[dict[str, Any]], dtypes: list[str]) -> list[Claim]:
    """One claim per source: the worst ``rel_err / tol`` of its rows in each dtype, ≤ 1."""
    claims = []
    for quote, key in SOURCES:
        mine = [r for r in rows if key in r["construction"]]
        values = {
            dtype: max(r["rel_err"] / r["tol"] for r in mine if r["dtype"] == dtype)
            for dtype in dtypes
            if any(r["dtype"] == dtype for r in mine)
        }
        worst = max((r for r in mine if r["dtype"] == dtypes[0]), key=lambda r: r["rel_err"])
        unit = unit_roundoff(dtypes[0])
        condition = (
            f"to the condition-scaled tolerance max(base, u·κ), not to machine precision: the "
            f"largest {dtypes[0]} relative error is {worst['rel_err']:.1e} ({worst['shape']})"
            if worst["rel_err"] > MACHINE * unit
            else ""
        )
        claims.append(
            Claim(
                quote,
                IDENTITY,
                "worst relative error / tolerance",
                values,
                Threshold("<=", 1.0, TOLERANCE_ORIGIN),
                condition=condition,
            )
        )
    return claims
