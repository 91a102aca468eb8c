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

# %% tags=["remove-input"]
# The ledger: every study that lists claims, its quick profile at seed 0, read from the build's
# results store (run here, in parallel, if no page of this build has run it yet).
from IPython.display import HTML, display

from attnreg.report.ledger_html import ledger_page
from attnreg.stored import claim_rows, run_missing, study_cell
from attnreg.studies.registry import STUDIES

studies = [name for name, spec in STUDIES.items() if spec.ledger]
run_missing(studies)
rows = [{"study": name} | row for name in studies for row in claim_rows(study_cell(name))]
display(HTML(ledger_page(rows)))

# %% [markdown]
# Each row is one claim of a source, in its words (“…” verbatim, with where it stands; a
# paraphrase is marked as one), its kind (a proved *identity*, an *empirical* result of the
# source, a hedged *remark*, an *open question*), the number that tests it — what is measured,
# then its value per case, ± a standard error where there are seeds — and the threshold with
# where it comes from. The verdict is computed from the number against the threshold when this
# page is built:
#
# * **✔ holds** — every case meets the threshold; **◐ conditional** — every case meets it,
#   under the condition the row states;
# * **◑ partial n of m** — n of the m cases meet it (the row names the others first);
#   **✘ does not hold** — no case meets it;
# * **◷ no verdict: reduced scale** — a claim about trained models, measured below the
#   paper's regime (the row says what scale it would need); where a run meets the regime in
#   some cases only, those are judged and the others are marked "(below the regime)";
# * **? open question** — the source asks; the row gives the measured answer, no verdict;
#   **– not testable** — nothing here measures it (the row says why).
#
# The sources: Tan & Zhao 2026 (OLS as a one-layer transformer), Tang 2023 (*Attention and
# Linear Regression*), wojiao-yc 2025 (*Everything is matter*), von Oswald et al. 2023 (arXiv
# 2212.07677) with *Uncovering mesa-optimization algorithms in transformers* (arXiv 2309.05858),
# the capacity laws of Amit et al., Krotov & Hopfield, Ramsauer et al. and Millidge et al.,
# what depth buys (Giannou et al. 2025, Fu et al. 2024, Garg et al. 2022, Akyürek et al. 2022,
# Vladymyrov et al. 2024) and every sequence layer as a regression (Wang, Shi & Fox 2025).
#
# The numbers come from the quick profile (seed 0) of each study that lists claims — `verify`,
# `compare`, `icl`, `capacity`, `depth` and `layers` — run once per site build and shared with
# the tutorials; `attnreg report` opens with the same ledger and writes it to `ledger.json`.
# The code of this page: `docs/claims.py` in the repository.
