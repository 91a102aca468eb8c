"""The inline TeX of the source documents' sentences, shown as Unicode.

The ledger quotes its sources verbatim, and two of them write their mathematics in TeX
(``\\(W_q W_k^\\top\\)``, ``$$(W_0 - \\Delta W_0) x_{\\tau,\\text{test}}$$``). The docs and the
report load no MathJax (it would come from a CDN), so :func:`plain` shows the same symbols in
Unicode — ``W_q W_kᵀ``, ``(W₀ − ΔW₀) x_τ,test`` — the words unchanged; ``ledger.json`` keeps the
source's own text.
"""

from __future__ import annotations

import re

DELIMITERS = re.compile(r"\\\(|\\\)|\$\$")
COMMANDS = (
    (r"^\top", "ᵀ"),
    (r"^{-1}", "⁻¹"),
    (r"\sqrt ", "√"),
    (r"\Delta ", "Δ"),
    (r"\tau", "τ"),
    (r"\text", ""),
    (" - ", " − "),
)
SUBSCRIPT = re.compile(r"_\{([^{}]*)\}")
BRACES = re.compile(r"\{([^{}]*)\}")


def plain(text: str) -> str:
    """``text`` with its TeX delimiters dropped and the commands the sources use written in
    Unicode (``^\\top`` → ᵀ, ``^{-1}`` → ⁻¹, ``\\sqrt`` → √, ``\\Delta`` → Δ, ``\\tau`` → τ,
    ``_{ab}`` → ``_ab``); text without TeX is returned unchanged."""
    out = DELIMITERS.sub("", text)
    for tex, uni in COMMANDS:
        out = out.replace(tex, uni)
    while True:  # innermost braces first: x_{τ,{test}} → x_{τ,test} → x_τ,test
        flat = BRACES.sub(r"\1", SUBSCRIPT.sub(r"_\1", out))
        if flat == out:
            return out
        out = flat
