"""Tang's whitened dot product: "more robust to variances and correlations between features".

The compare study's section ``tang``, part ``retrieval`` (part ``scaling``, the √d_k remark, is
:mod:`~attnreg.studies.compare.tang_scaling`). ``N`` patterns ``x_μ ~ N(0, Σ_ρ)`` in ``d``
dimensions with the equicorrelated covariance ``Σ_ρ = (1 − ρ) I + ρ 11ᵀ`` (drawn as ``x = √(1−ρ) z +
√ρ c 1``, ``z ~ N(0, I_d)``, ``c ~ N(0, 1)``; the same draws ``z, c`` at every ``ρ``, so the
memories are paired across ``ρ``), stored as keys and values of one memory (auto-association,
Millidge et al. 2022's ``retrieve(q) = Xᵀ sep(sim(X, q))``). Similarities: plain dot
``x_νᵀ q`` and whitened dot ``x_νᵀ M q`` with ``M = (XᵀX)⁺`` (:func:`attnreg.core.whitened_metric`).
Separations: identity (``w = sim``) and softmax (``w = softmax(β sim)`` with ``β =
config.tang_beta / s̄``, ``s̄`` the memory's mean self-similarity ``mean_μ x_μᵀ M x_μ`` — the same
effective temperature for both similarities). A query is retrieved when the stored pattern with
the largest cosine to the retrieved vector ``r = Σ_ν w_ν x_ν`` is the queried one (scale-free,
so the unnormalised identity separation is judged on direction).

**The claim** (clean queries ``q = x_μ``, the stored patterns themselves): per memory, the drop
of its accuracy from the smallest to the largest ``ρ`` of ``config.tang_rhos``, plain dot minus
whitened dot, paired over the ``config.tang_memories`` memories (:func:`paired_z`). With the
identity separation the whitened retrieval of a stored pattern is exact by construction, for
every ``N``: ``r = Xᵀ X (XᵀX)⁺ x_μ = x_μ`` (``x_μ`` lies in the row space of ``X``), so those
cases measure only how much the plain dot product loses; with softmax (and ``N > d``, e.g.
``N = 2d`` in ``config.tang_patterns``) both similarities are measured.

**Sensitivity** (a summary, not a claim): queries ``q = x_μ + σ ε`` (``σ`` =
``config.tang_query_noise``) at the smallest and largest ``ρ``, with the softmax ``β`` at
``config.tang_beta`` × ¼, 1, 4.

Both the retrieval and the nearest-pattern read-out (the ``max`` separation over the unit
patterns) are computed by the attention core (:func:`attnreg.core.associate`).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import torch

from attnreg.core import ConditioningWarning, RankWarning, associate, whitened_metric
from attnreg.core.validation import check_choice
from attnreg.data.regression import RegressionData
from attnreg.studies.answers import summary_table
from attnreg.studies.common import FigureRecord, Section
from attnreg.studies.compare.config import CompareConfig
from attnreg.studies.ledger import REMARK, Claim
from attnreg.studies.paired import paired_z
from attnreg.studies.quotes import TANG_WHITENING
from attnreg.thresholds import Threshold

SECTION = "tang"
SEED_TAG = 4  # the section's stream: numpy SeedSequence([config.seed, SEED_TAG, part])
QUESTION = "Tang: is the whitened dot product more robust to correlated features?"
SENSITIVITY = "Tang: retrieval with noisy queries, per softmax β (a sensitivity)"
SIMILARITIES = ("dot", "whitened dot")
Z_LIMIT = 2.0
"""Two paired standard errors: a paired difference counts when its mean is more than this many
standard errors from zero (about a 95 % two-sided band for a normal mean)."""
SEPARATIONS = ("identity", "softmax")


def correlated_patterns(
    rng: np.random.Generator, memories: int, n: int, d: int, rho: float
) -> torch.Tensor:
    """``(memories, n, d)`` patterns ``x = √(1−ρ) z + √ρ c 1`` (covariance ``Σ_ρ``)."""
    z = rng.standard_normal((memories, n, d))
    c = rng.standard_normal((memories, n, 1))
    return mix(z, c, rho)


def mix(z: np.ndarray, c: np.ndarray, rho: float) -> torch.Tensor:
    """``√(1−ρ) z + √ρ c 1`` of the draws ``z (…, d)`` and ``c (…, 1)``."""
    return torch.from_numpy(math.sqrt(1 - rho) * z + math.sqrt(rho) * c)


def retrieval_accuracy(
    patterns: torch.Tensor,
    queries: torch.Tensor,
    similarity: str,
    separation: str,
    beta: float,
) -> float:
    """The mean of :func:`retrieval_hits` (the fraction of queries retrieved)."""
    return float(retrieval_hits(patterns, queries, similarity, separation, beta).mean())


def retrieval_hits(
    patterns: torch.Tensor,
    queries: torch.Tensor,
    similarity: str,
    separation: str,
    beta: float,
) -> torch.Tensor:
    """``(T, N)``: 1 where the query ``queries[:, μ]`` (one per stored pattern ``patterns[:, μ]``,
    ``(T, N, d)`` each) has a retrieval ``r = Xᵀ sep(sim(X, q))`` has its largest cosine with
    the queried pattern (module docstring; ``beta`` in units of the mean self-similarity).

    Softmax's per-memory ``β / s̄`` scales the queries (``β·sim(q, k) = sim(βq, k)`` for a
    bilinear similarity). The read-out is the core's ``max`` separation of ``r`` against the
    unit patterns ``x_ν/‖x_ν‖`` (``argmax_ν cos(r, x_ν)``: ``‖r‖`` is the same for every ``ν``),
    with each pattern's index as its value."""
    check_choice("similarity", similarity, SIMILARITIES)
    check_choice("separation", separation, SEPARATIONS)
    x, q = patterns, queries
    metric = None
    if similarity == "whitened dot":
        # N < d patterns are rank-deficient and ρ → 1 patterns ill-conditioned (κ ~ 1e9) by
        # design; the read-out is an argmax, which a u·κ ≈ 1e-7 relative error cannot move
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RankWarning)
            warnings.simplefilter("ignore", ConditioningWarning)
            metric = whitened_metric(x)
    if separation == "softmax":
        self_sim = ((x if metric is None else x @ metric) * x).sum(-1).mean(-1)
        q = q * (beta / self_sim)[:, None, None]
    core_similarity = "dot" if metric is None else "whitened_dot"
    r = associate(q, x, x, similarity=core_similarity, separation=separation, metric=metric)
    assert isinstance(r, torch.Tensor)
    unit = x / x.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)
    target = torch.arange(x.shape[1], dtype=x.dtype)
    index = target.expand(x.shape[0], -1).unsqueeze(-1)
    nearest = associate(r, unit, index, separation="max")
    assert isinstance(nearest, torch.Tensor)
    return (nearest[..., 0] == target).double()


PerMemory = dict[tuple[int, float, str, str], np.ndarray]


def retrieval_rows(cfg: CompareConfig) -> tuple[list[dict[str, Any]], PerMemory]:
    """Clean queries: one row per ``N`` × ``ρ`` × similarity × separation, and the accuracy
    of every memory keyed by ``(N, ρ, similarity, separation)`` (for the paired comparison).
    Noisy queries (the
    sensitivity): one row per ``N`` × ``ρ`` (smallest, largest) × similarity × separation ×
    β factor (¼, 1, 4)."""
    rows = []
    per: PerMemory = {}
    lo, hi = min(cfg.tang_rhos), max(cfg.tang_rhos)
    for n in cfg.tang_patterns:
        rng = np.random.default_rng([cfg.seed, SEED_TAG, 0, int(n)])
        z = rng.standard_normal((cfg.tang_memories, int(n), cfg.tang_d))
        c = rng.standard_normal((cfg.tang_memories, int(n), 1))
        eps = torch.from_numpy(rng.standard_normal(z.shape))
        for rho in cfg.tang_rhos:
            x = mix(z, c, rho)
            cells = [(x, "clean", 1.0)]
            if rho in (lo, hi):
                noisy = x + cfg.tang_query_noise * eps
                cells += [(noisy, "noisy", f) for f in (0.25, 1.0, 4.0)]
            for q, kind, factor in cells:
                for sim in SIMILARITIES:
                    for sep in SEPARATIONS:
                        if sep == "identity" and factor != 1.0:
                            continue  # β does not enter the identity separation
                        hits = retrieval_hits(x, q, sim, sep, cfg.tang_beta * factor)
                        if kind == "clean":
                            per[(int(n), float(rho), sim, sep)] = hits.mean(-1).numpy()
                        rows.append(
                            {
                                "section": SECTION,
                                "part": "retrieval",
                                "queries": kind,
                                "d": cfg.tang_d,
                                "n_patterns": int(n),
                                "rho": float(rho),
                                "similarity": sim,
                                "separation": sep,
                                "beta": cfg.tang_beta * factor,
                                "accuracy": float(hits.mean()),
                                "n_queries": cfg.tang_memories * int(n),
                            }
                        )
    return rows, per


def failure_rho(rows: list[dict[str, Any]], threshold: float) -> float | None:
    """The smallest ``ρ`` of the rows (one combination) with accuracy below ``threshold``."""
    failed = [r["rho"] for r in rows if r["accuracy"] < threshold]
    return min(failed) if failed else None


def _cell(
    rows: list[dict[str, Any]], n: int, sim: str, sep: str, queries: str = "clean"
) -> list[dict[str, Any]]:
    return sorted(
        (
            r
            for r in rows
            if (r["queries"], r["n_patterns"], r["similarity"], r["separation"])
            == (queries, n, sim, sep)
        ),
        key=lambda r: r["rho"],
    )


def drops(per: PerMemory, n: int, sim: str, sep: str) -> np.ndarray:
    """Per memory, its clean-query accuracy at the smallest ρ minus at the largest."""
    rhos = [rho for (m, rho, s, p) in per if (m, s, p) == (n, sim, sep)]
    return per[(n, min(rhos), sim, sep)] - per[(n, max(rhos), sim, sep)]


def _summary(rows: list[dict[str, Any]], per: PerMemory, cfg: CompareConfig) -> dict[str, Any]:
    lo, hi = min(cfg.tang_rhos), max(cfg.tang_rhos)
    table = []
    for n in cfg.tang_patterns:
        for sep in SEPARATIONS:
            ends = {sim: _cell(rows, n, sim, sep) for sim in SIMILARITIES}
            acc = {sim: (sel[0]["accuracy"], sel[-1]["accuracy"]) for sim, sel in ends.items()}
            z = paired_z(drops(per, n, "dot", sep), drops(per, n, "whitened dot", sep))
            table.append([n, sep, *acc["dot"], *acc["whitened dot"], z])
    noisy = [
        [n, f"{sim} × {sep}", r["beta"] if sep == "softmax" else "", r["rho"], r["accuracy"]]
        for n in cfg.tang_patterns
        for sim in SIMILARITIES
        for sep in SEPARATIONS
        for r in _cell(rows, n, sim, sep, "noisy")
    ]
    return {
        QUESTION: summary_table(
            f"Retrieval of N equicorrelated Gaussian patterns in d = {cfg.tang_d}, the stored "
            f"patterns as the queries ({cfg.tang_memories} memories per cell, paired across ρ); "
            "the paired z of the accuracy drop, plain dot minus whitened.",
            [
                "N",
                "separation",
                f"dot, ρ = {lo:g}",
                f"dot, ρ = {hi:g}",
                f"whitened, ρ = {lo:g}",
                f"whitened, ρ = {hi:g}",
                "z: drop dot − drop whitened",
            ],
            table,
            note="With the identity separation the whitened retrieval of a stored pattern is "
            "exact by construction: r = XᵀX(XᵀX)⁺x_μ = x_μ for every N.",
        ),
        SENSITIVITY: summary_table(
            f"Noisy queries q = x_μ + σε (σ = {cfg.tang_query_noise:g}) at the smallest and "
            "largest ρ, softmax β in units of the mean self-similarity (a sensitivity, not a "
            "claim).",
            ["N", "similarity × separation", "β", "ρ", "accuracy"],
            noisy,
            note="For N ≥ d the whitened scores X(XᵀX)⁺q = e_μ + X(XᵀX)⁺ε amplify the query "
            "noise by the inverse of X's smallest singular value.",
        ),
    }


def claims(per: PerMemory, cfg: CompareConfig) -> list[Claim]:
    """Tang's whitening remark: per ``N`` and separation, the paired z (over the memories) of
    the clean-query accuracy drop from the smallest to the largest ρ, plain dot minus whitened
    dot, against :data:`Z_LIMIT`."""
    values = {
        f"N = {n}, {sep}": paired_z(drops(per, n, "dot", sep), drops(per, n, "whitened dot", sep))
        for n in cfg.tang_patterns
        for sep in SEPARATIONS
    }
    lo, hi = min(cfg.tang_rhos), max(cfg.tang_rhos)
    return [
        Claim(
            TANG_WHITENING,
            REMARK,
            f"accuracy drop from ρ = {lo:g} to ρ = {hi:g}, plain dot minus whitened dot, stored "
            "patterns as queries (paired z over the memories)",
            values,
            Threshold(
                ">=", Z_LIMIT, f"{Z_LIMIT:g} paired standard errors over the memories (Z_LIMIT)"
            ),
            reading="more robust to correlations = as ρ grows the plain dot product loses "
            "more accuracy than the whitened one, by more than two paired standard errors",
        )
    ]


def figure(rows: list[dict[str, Any]], cfg: CompareConfig) -> FigureRecord:
    """Clean-query accuracy against ρ per similarity × separation, one panel per N."""
    from attnreg.output import new_figure

    ns = list(dict.fromkeys(r["n_patterns"] for r in rows))
    # about 4 inches a panel: at the docs' 965-px column, labels stay above 9 px (test_docs)
    fig, axes = new_figure(1, len(ns), figsize=(3.9 * len(ns) + 0.4, 3.8), squeeze=False)
    styles = {"dot": "--", "whitened dot": "-"}
    colours = {"identity": "tab:blue", "softmax": "tab:orange"}
    for ax, n in zip(axes[0], ns, strict=True):
        for sim in SIMILARITIES:
            for sep in SEPARATIONS:
                sel = _cell(rows, n, sim, sep)
                ax.plot(
                    [r["rho"] for r in sel],
                    [r["accuracy"] for r in sel],
                    styles[sim],
                    color=colours[sep],
                    marker="o",
                    markersize=3,
                    label=f"{sim} × {sep}",
                )
        ax.set(xlabel="equicorrelation ρ", ylabel="retrieval accuracy", ylim=(0, 1.02))
        ax.set_title(f"N = {n} patterns, d = {cfg.tang_d}", fontsize=10)
        ax.legend(fontsize=9)
    fig.tight_layout()
    return FigureRecord(
        name="compare_tang_retrieval",
        figure=fig,
        caption=(
            "Retrieval accuracy of equicorrelated Gaussian patterns, the stored patterns as the "
            "queries, against ρ: plain and whitened dot, identity and softmax separation "
            "(compare config: tang_d, tang_patterns, tang_rhos, tang_memories, tang_beta)."
        ),
    )


def section(cfg: CompareConfig, datasets: dict[str, RegressionData]) -> Section:
    """The tang section's retrieval part (module docstring); empty when ``cfg.tang`` is off.
    Its data are its own (``datasets`` is not used)."""
    del datasets
    if not cfg.tang:
        return Section()
    rows, per = retrieval_rows(cfg)
    return Section(
        rows=rows,
        summary=_summary(rows, per, cfg),
        figures=[figure(rows, cfg)],
        claims=claims(per, cfg),
    )
