"""The sources whose claims attnreg tests: who wrote them, when, under what title and where they
stand, so that every row of the claims ledger names its source once and in the same words.

Four of them are the documents attnreg was started from (Tang's blog post, wojiao-yc's
"Everything is matter", the editorial summary of Tan & Zhao's paper and the blog summary of
von Oswald et al.'s mesa-optimization section); the others are the papers whose results the
studies re-measure. "Everything is matter" is wojiao-yc's post, a reflection on Tang's; Goulet
Coulombe's paper (arXiv 2504.09663) is a separate source.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    """One source: ``authors`` (as they sign), ``year``, ``title``, ``where`` (arXiv id, venue or
    address) and ``medium`` (``"paper"``, ``"blog post"``, ``"editorial summary"``)."""

    authors: str
    year: int
    title: str
    where: str
    medium: str = "paper"

    def short(self) -> str:
        """``"Authors year"``, the ledger's source column."""
        return f"{self.authors} {self.year}"

    def cite(self) -> str:
        """The full citation: authors, year, title, medium and where it stands."""
        medium = "" if self.medium == "paper" else f", {self.medium}"
        return f"{self.authors} {self.year}, “{self.title}”{medium}, {self.where}"


TANG = Source(
    "Mufeng Tang",
    2023,
    "Attention and Linear Regression",
    "c16mftang.github.io/attention.html (2023-11-10)",
    "blog post",
)
WOJIAO = Source(
    "wojiao-yc",
    2025,
    "Everything is matter (reflections on the blog “Attention and Linear Regression”)",
    "2025-07-16",
    "blog post",
)
TAN_ZHAO = Source(
    "Xiaojun Tan & Yuchen Zhao",
    2026,
    "Ordinary Least Squares is a Special Case of Transformer",
    "arXiv 2604.13656, as summarised by AIssential",
    "editorial summary",
)
VON_OSWALD_SUMMARY = Source(
    "summary author",
    2023,
    "Self-Attention Mimicking Gradient Descent (a summary of von Oswald et al., arXiv 2309.05858)",
    "2023-10-14",
    "blog post",
)
VON_OSWALD = Source(
    "von Oswald et al.",
    2023,
    "Transformers Learn In-Context by Gradient Descent",
    "ICML 2023, arXiv 2212.07677",
)
MESA = Source(
    "von Oswald et al.",
    2023,
    "Uncovering mesa-optimization algorithms in Transformers",
    "arXiv 2309.05858",
)
GOULET_COULOMBE = Source(
    "Philippe Goulet Coulombe",
    2025,
    "Ordinary Least Squares as an Attention Mechanism",
    "arXiv 2504.09663",
)
FU = Source(
    "Fu, Chen, Jia & Sharan",
    2024,
    "Transformers Learn to Achieve Second-Order Convergence Rates for In-Context Linear Regression",
    "NeurIPS 2024, arXiv 2310.17086",
)
GIANNOU = Source(
    "Giannou et al.",
    2025,
    "How Well Can Transformers Emulate In-context Newton's Method?",
    "AISTATS 2025, arXiv 2403.03183",
)
GARG = Source(
    "Garg, Tsipras, Liang & Valiant",
    2022,
    "What Can Transformers Learn In-Context? A Case Study of Simple Function Classes",
    "NeurIPS 2022, arXiv 2208.01066",
)
AKYUREK = Source(
    "Akyürek, Schuurmans, Andreas, Ma & Zhou",
    2023,
    "What learning algorithm is in-context learning? Investigations with linear models",
    "ICLR 2023, arXiv 2211.15661",
)
VLADYMYROV = Source(
    "Vladymyrov, von Oswald, Sandler & Ge",
    2024,
    "Linear Transformers are Versatile In-Context Learners",
    "NeurIPS 2024, arXiv 2402.14180",
)
RAMSAUER = Source(
    "Ramsauer et al.",
    2021,
    "Hopfield Networks is All You Need",
    "ICLR 2021, arXiv 2008.02217",
)
KROTOV_HOPFIELD = Source(
    "Krotov & Hopfield",
    2016,
    "Dense Associative Memory for Pattern Recognition",
    "NeurIPS 2016, arXiv 1606.01164",
)
AMIT = Source(
    "Amit, Gutfreund & Sompolinsky",
    1985,
    "Storing Infinite Numbers of Patterns in a Spin-Glass Model of Neural Networks",
    "Physical Review Letters 55, 1530",
)
MILLIDGE = Source(
    "Millidge, Salvatori, Song, Lukasiewicz & Bogacz",
    2022,
    "Universal Hopfield Networks: A General Framework for Single-Shot Associative Memory Models",
    "ICML 2022, arXiv 2202.04557",
)
WANG_SHI_FOX = Source(
    "Wang, Shi & Fox",
    2025,
    "Test-time regression: a unifying framework for designing sequence models with associative "
    "memory",
    "arXiv 2501.12352",
)
ATTNREG = Source(
    "attnreg",
    2026,
    "a question attnreg asks of the sources' constructions (no source states it)",
    "this package",
    "measurement",
)
"""Not a source: the owner of a question that attnreg measures and no source claims (its rows
are open questions, never verdicts on somebody's words)."""
