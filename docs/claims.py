# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Claims of the sources, measured
#
# Every claim of the sources that attnreg tests — Tan & Zhao 2026 (OLS as a one-layer
# transformer), Goulet Coulombe 2025 (OLS as attention, the "Everything is matter" blog),
# von Oswald et al. 2023 (arXiv 2212.07677) with "Uncovering mesa-optimization algorithms in
# transformers" (arXiv 2309.05858), Tang (regression as memory; correlation and `√d_k`), the
# capacity laws of Amit et al., Krotov & Hopfield, Ramsauer et al. and Millidge et al., what
# depth buys (Giannou et al. 2025, arXiv 2403.03183; Fu et al. 2024, arXiv 2310.17086; Garg
# et al. 2022; Akyürek et al. 2022; Vladymyrov et al. 2024) and every sequence layer as a
# regression (Wang, Shi & Fox 2025, arXiv 2501.12352) — with the number that tests it and a
# verdict computed from that number against the stated threshold: *holds*, *holds with a
# condition* (which), *does not hold*, or *not testable*. Where the measurement contradicts
# the source, the row's first sentence says so.
#
# This page runs the quick profile (seed 0) of every study that lists claims — `verify`,
# `compare`, `icl`, `capacity`, `depth` and `layers` — when the site is built; the report
# (`attnreg report`) opens with the same ledger.

# %%
from IPython.display import HTML, display

from attnreg.studies.ledger import admonition
from attnreg.studies.registry import STUDIES

ledger = {}
for name, spec in STUDIES.items():
    if spec.ledger:
        result = spec.run(spec.profile("quick"))
        for figure in result.figures:
            figure.close()
        ledger[name] = result.claims

for name, claims in ledger.items():
    display(HTML(admonition(claims, f"attnreg {name}: {len(claims)} claims")))

# %%
from attnreg.studies.ledger import totals_text

print(totals_text([c.row() for claims in ledger.values() for c in claims]))
