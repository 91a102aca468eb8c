"""The words of the four source documents that the claims ledger quotes, verbatim, each with
where it stands in its document (the tests check every one against the documents' text).

A claim that quotes one of these documents takes its :class:`~attnreg.studies.ledger.Quote`
from here, so the same sentence is never typed twice."""

from __future__ import annotations

from attnreg.studies.ledger import Quote
from attnreg.studies.sources import TAN_ZHAO, TANG, VON_OSWALD_SUMMARY, WOJIAO

TANG_CAPACITY = Quote(
    TANG,
    "the capacity of a linear regression AM model (on condition of perfect recall) should be "
    "\\(N_{max}=d\\)",
    "section “Interpretations”, on linear regression as associative memory",
)
TANG_WHITENING = Quote(
    TANG,
    "the product \\(X_i^\\top S^{-1} X_j\\) is in fact a ‘whitened’ dot product that makes the "
    "similarity measure more robust to variances and correlations between features",
    "section “Interpretations”",
)
TANG_SQRT_DK = Quote(
    TANG,
    "Conceptually, the division by \\(\\sqrt d_k\\) in self-attention seems to serve the same "
    "purpose as to handle variable key/query pairs, although it doesn’t help handle the "
    "correlated features like a whitening matrix does.",
    "section “Interpretations”",
)
TANG_TRAINABLE_METRIC = Quote(
    TANG,
    "the matrix \\(W_q W_k^\\top\\) in attention is trainable whereas the inverse covariance "
    "matrix \\((X^\\top X)^{-1}\\) is directly calculated from the embedded tokens. These "
    "differences opens up a few questions",
    "section “Some open questions worth looking into”",
)
WOJIAO_LOCAL = Quote(
    WOJIAO,
    "Attention operates locally, relying on similarity or context via softmax or whitening.",
    "section “Highlights & Observations”",
)
TAN_ZHAO_SPECIAL_CASE = Quote(
    TAN_ZHAO,
    "OLS regression is a special case of a single-layer Linear Transformer, solvable in one "
    "forward pass.",
    "Key insights",
)
TAN_ZHAO_MEMORIES = Quote(
    TAN_ZHAO,
    'This "OLS-Transformer" model reveals a decoupled slow and fast memory mechanism, where '
    "weight matrices act as slow memory for long-term patterns and attention scores function "
    "as fast memory for real-time contextual associations.",
    "Summary",
)
TAN_ZHAO_SOFTMAX_CAPACITY = Quote(
    TAN_ZHAO,
    "Softmax attention exponentially increases memory capacity over linear attention.",
    "Principles",
)
VON_OSWALD_SUMMARY_CLOSING = Quote(
    VON_OSWALD_SUMMARY,
    "After one step of gradient descent, the prediction becomes: "
    "$$(W_0 - \\Delta W_0) x_{\\tau,\\text{test}}$$",
    "section “Approximation”",
)
VON_OSWALD_SUMMARY_MIMIC = Quote(
    VON_OSWALD_SUMMARY,
    "a linear self-attention layer in a Transformer architecture can mimic a single step of "
    "gradient descent for a linear regression task",
    "opening paragraph",
)

QUOTES = (
    TANG_CAPACITY,
    TANG_WHITENING,
    TANG_SQRT_DK,
    TANG_TRAINABLE_METRIC,
    WOJIAO_LOCAL,
    TAN_ZHAO_SPECIAL_CASE,
    TAN_ZHAO_MEMORIES,
    TAN_ZHAO_SOFTMAX_CAPACITY,
    VON_OSWALD_SUMMARY_CLOSING,
    VON_OSWALD_SUMMARY_MIMIC,
)
"""Every quote of the four source documents."""
