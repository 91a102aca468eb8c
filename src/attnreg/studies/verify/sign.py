"""What the literal von Oswald construction returns, measured: the query's y-entry after one
layer of the summary "Self-Attention Mimicking Gradient Descent" (tokens ``(y_i, x_i)``, query
``(−W0 x_q, x_q)``, context sum not divided by N) is ``−(W0 + ΔW0) x_q`` with
``ΔW0 = η Σ_i (y_i − W0 x_i) x_iᵀ``; so the prediction (minus that entry) is the GD-updated
``W1 x_q``, and the summary's closing ``(W0 − ΔW0) x`` has the sign of ``ΔW0`` reversed.

The sentence and the two claims are computed from the two measured distances: change a number
and the conclusion changes with it."""

from __future__ import annotations

import numpy as np
import torch

from attnreg.constructions import VonOswaldSummaryLayer
from attnreg.studies.ledger import IDENTITY, Claim, Quote
from attnreg.studies.quotes import VON_OSWALD_SUMMARY_CLOSING
from attnreg.studies.sources import VON_OSWALD
from attnreg.thresholds import Threshold

TOLERANCE = 1e-12
"""A float64 distance below this is "equal": the products are of a few ``O(1)`` terms (d = 3,
N = 7), so rounding gives about ``u·N·d ≈ 5e-15``; 1e-12 leaves a margin of 200."""


def literal_sign_distances(
    seed: int, d: int = 3, dy: int = 2, n: int = 7, eta: float = 0.1
) -> tuple[float, float]:
    """One task (float64, seeded): the y-entry's distance to ``−(W0 + ΔW0) x_q`` (the GD step)
    and to the summary's ``−(W0 − ΔW0) x_q``, each relative to ``‖ΔW0 x_q‖``."""
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal((n, d)), rng.standard_normal((n, dy))
    xq, w0 = rng.standard_normal((1, d)), rng.standard_normal((dy, d))
    delta = eta * (y - x @ w0.T).T @ x  # η Σ_i (y_i − W0 x_i) x_iᵀ, by numpy
    layer = VonOswaldSummaryLayer(d, dy, eta=eta, w0=torch.from_numpy(w0))
    token = layer.query_tokens(*(torch.from_numpy(a) for a in (x, y, xq)))
    y_entry = token[0, :dy].numpy()
    scale = np.linalg.norm(delta @ xq[0])
    plus = np.linalg.norm(y_entry + (w0 + delta) @ xq[0]) / scale
    minus = np.linalg.norm(y_entry + (w0 - delta) @ xq[0]) / scale
    return float(plus), float(minus)


def sign_sentence(plus: float, minus: float) -> str:
    """The conclusion, computed from the two distances (:data:`TOLERANCE` decides)."""
    gd = "is" if plus <= TOLERANCE else "is NOT"
    closing = (
        "agrees with it"
        if minus <= TOLERANCE
        else f"is off by {minus:.2f} ‖ΔW0 x_q‖ (the sign of ΔW0 reversed)"
    )
    return (
        f"After one layer the query's y-entry {gd} −(W0 + ΔW0) x_q, the GD step (relative "
        f"distance {plus:.1e}, tolerance {TOLERANCE:.0e}); the summary's closing (W0 − ΔW0) x "
        f"{closing}."
    )


def sign_claims(plus: float, minus: float) -> list[Claim]:
    """von Oswald et al.'s claim and its summary's formula, tested by the two distances."""
    origin = (
        "float64 rounding of a few O(1) products, u·N·d ≈ 5e-15, with a margin of 200 (TOLERANCE)"
    )
    return [
        Claim(
            Quote(
                VON_OSWALD,
                "one linear self-attention layer with the constructed weights performs one "
                "gradient-descent step on the in-context regression loss",
                "Proposition 1",
                verbatim=False,
            ),
            IDENTITY,
            "relative distance of the y-entry to −(W0 + ΔW0) x_q",
            {"": plus},
            Threshold("<=", TOLERANCE, origin),
        ),
        Claim(
            VON_OSWALD_SUMMARY_CLOSING,
            IDENTITY,
            "relative distance of the y-entry to −(W0 − ΔW0) x_q",
            {"": minus},
            Threshold("<=", TOLERANCE, origin),
        ),
    ]


def literal_sign_check(seed: int, d: int = 3, dy: int = 2, n: int = 7, eta: float = 0.1) -> str:
    """The measured sentence for one seeded task (:func:`literal_sign_distances`)."""
    return sign_sentence(*literal_sign_distances(seed, d, dy, n, eta))
