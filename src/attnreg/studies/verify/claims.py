"""The verify study's claims ledger: each source's construction is exact, tested by the worst
``rel_err / tol`` of its certificate rows per dtype (a row passes at ≤ 1).

The tolerance of a row is condition-scaled (``max(base, u · κ)``,
:mod:`~attnreg.studies.verify.construction_rows`), so "exact" holds with that condition: the claim's
condition names the largest relative error, which on the ill-conditioned design is far above
the unit roundoff."""

from __future__ import annotations

from typing import Any

from attnreg.studies.ledger import Claim
from attnreg.studies.verify.config import unit_roundoff

MACHINE = 1000
"""A relative error within ``MACHINE · u`` (u the unit roundoff of the dtype) counts as machine
precision; a larger one that passes only its condition-scaled tolerance makes the claim hold
with that condition."""

SOURCES = (
    (
        "Tan & Zhao 2026 (arXiv 2604.13656)",
        "a one-layer transformer with W_Q = W_K = W_V = L, L Lᵀ = (XᵀX)⁻¹, computes OLS exactly",
        "Tan & Zhao",
    ),
    (
        "Goulet Coulombe 2025 (arXiv 2504.09663)",
        "OLS is attention: ŷ* = X* (XᵀX)⁻¹ XᵀY = (X* L)(X L)ᵀ Y",
        "OLS-attention",
    ),
    (
        "von Oswald et al. 2023 (arXiv 2212.07677)",
        "stacked linear self-attention layers perform gradient-descent steps (GD, GD++)",
        "LSA",
    ),
    (
        'von Oswald et al. 2023, "Uncovering mesa-optimization algorithms" (arXiv 2309.05858)',
        "the mesa layer solves the ridge regression of every prefix of the context",
        "mesa layer",
    ),
)


def certificate_claims(rows: list[dict[str, Any]], dtypes: list[str]) -> list[Claim]:
    """One claim per source: the worst ``rel_err / tol`` of its rows in each dtype, ≤ 1."""
    claims = []
    for source, words, key in SOURCES:
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
            Claim(source, words, "worst relative error / tolerance", "<=", 1.0, values, condition)
        )
    return claims
