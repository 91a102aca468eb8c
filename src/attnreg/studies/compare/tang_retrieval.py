"""Tang's claim A: whitening keeps correlated patterns apart where the dot product fails.

The compare study's section ``tang``, part ``retrieval`` (part ``scaling``, the √d_k claim, is
:mod:`~attnreg.studies.compare.tang_scaling`). ``N`` patterns ``x_μ ~ N(0, Σ_ρ)`` in ``d``
dimensions with the equicorrelated covariance ``Σ_ρ = (1 − ρ) I + ρ 11ᵀ`` (drawn as ``x = √(1−ρ) z +
√ρ c 1``, ``z ~ N(0, I_d)``, ``c ~ N(0, 1)``), stored as keys and values of one memory
(auto-association, Millidge et al. 2022's ``retrieve(q) = Xᵀ sep(sim(X, q))``). Each stored
pattern is queried once with ``q = x_μ + σ ε`` (``σ`` = ``config.tang_query_noise``,
``ε ~ N(0, I_d)``). Similarities: plain dot ``x_νᵀ q`` and whitened dot ``x_νᵀ M q`` with
``M = (XᵀX)⁺`` (:func:`attnreg.core.whitened_metric`). Separations: identity (``w = sim``) and
softmax (``w = softmax(β sim)`` with ``β = config.tang_beta / s̄``, ``s̄`` the memory's mean
self-similarity ``mean_μ x_μᵀ M x_μ`` — the same effective temperature for both
similarities). A query is retrieved when the stored pattern with the largest cosine to the
retrieved vector ``r = Σ_ν w_ν x_ν`` is the queried one (scale-free, so the unnormalised
identity separation is judged on direction). Accuracy is over ``config.tang_memories`` memories
× ``N`` queries per ``(ρ, N)``; a combination fails at the first ``ρ`` of ``config.tang_rhos``
with accuracy below ``config.tang_accuracy``.

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
from attnreg.studies.common import FigureRecord, Section, summary_table
from attnreg.studies.compare.config import CompareConfig
from attnreg.studies.ledger import REMARK, Claim, Threshold
from attnreg.studies.quotes import TANG_WHITENING

SECTION = "tang"
SEED_TAG = 4  # the section's stream: numpy SeedSequence([config.seed, SEED_TAG, part])
QUESTION = "Tang: does whitening keep correlated patterns apart where the dot product fails?"
SIMILARITIES = ("dot", "whitened dot")
SEPARATIONS = ("identity", "softmax")


def correlated_patterns(
    rng: np.random.Generator, memories: int, n: int, d: int, rho: float
) -> torch.Tensor:
    """``(memories, n, d)`` patterns ``x = √(1−ρ) z + √ρ c 1`` (covariance ``Σ_ρ``)."""
    z = rng.standard_normal((memories, n, d))
    c = rng.standard_normal((memories, n, 1))
    return torch.from_numpy(math.sqrt(1 - rho) * z + math.sqrt(rho) * c)


def retrieval_accuracy(
    patterns: torch.Tensor,
    queries: torch.Tensor,
    similarity: str,
    separation: str,
    beta: float,
) -> float:
    """Fraction of queries ``queries[:, μ]`` (one per stored pattern ``patterns[:, μ]``,
    ``(T, N, d)`` each) whose retrieval ``r = Xᵀ sep(sim(X, q))`` has its largest cosine with
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
    return float((nearest[..., 0] == target).double().mean())


def retrieval_rows(cfg: CompareConfig) -> list[dict[str, Any]]:
    """One row per ``N`` × ``ρ`` × similarity × separation."""
    rows = []
    for n in cfg.tang_patterns:
        for i, rho in enumerate(cfg.tang_rhos):
            rng = np.random.default_rng([cfg.seed, SEED_TAG, 0, int(n), i])
            x = correlated_patterns(rng, cfg.tang_memories, int(n), cfg.tang_d, rho)
            q = x + cfg.tang_query_noise * torch.from_numpy(rng.standard_normal(tuple(x.shape)))
            for sim in SIMILARITIES:
                for sep in SEPARATIONS:
                    rows.append(
                        {
                            "section": SECTION,
                            "part": "retrieval",
                            "d": cfg.tang_d,
                            "n_patterns": int(n),
                            "rho": float(rho),
                            "similarity": sim,
                            "separation": sep,
                            "accuracy": retrieval_accuracy(x, q, sim, sep, cfg.tang_beta),
                            "queries": cfg.tang_memories * int(n),
                        }
                    )
    return rows


def failure_rho(rows: list[dict[str, Any]], threshold: float) -> float | None:
    """The smallest ``ρ`` of the rows (one combination) with accuracy below ``threshold``."""
    failed = [r["rho"] for r in rows if r["accuracy"] < threshold]
    return min(failed) if failed else None


def _cell(rows: list[dict[str, Any]], n: int, sim: str, sep: str) -> list[dict[str, Any]]:
    return [r for r in rows if (r["n_patterns"], r["similarity"], r["separation"]) == (n, sim, sep)]


def _summary(rows: list[dict[str, Any]], cfg: CompareConfig) -> dict[str, Any]:
    table = []
    for n in cfg.tang_patterns:
        for sim in SIMILARITIES:
            for sep in SEPARATIONS:
                sel = _cell(rows, n, sim, sep)
                rho = failure_rho(sel, cfg.tang_accuracy)
                last = max(sel, key=lambda r: r["rho"])
                first = min(sel, key=lambda r: r["rho"])
                table.append(
                    [
                        n,
                        f"{sim} × {sep}",
                        f"{rho:g}" if rho is not None else "never",
                        float(first["accuracy"]),
                        float(last["accuracy"]),
                    ]
                )
    lo, hi = min(r["rho"] for r in rows), max(r["rho"] for r in rows)
    return summary_table(
        f"Retrieval of N equicorrelated Gaussian patterns in d = {cfg.tang_d} (query noise σ = "
        f"{cfg.tang_query_noise:g}, {cfg.tang_memories} memories per cell); fails: the first ρ "
        f"with accuracy < {cfg.tang_accuracy:g}.",
        [
            "N",
            "similarity × separation",
            "fails at ρ",
            f"accuracy, ρ = {lo:g}",
            f"accuracy, ρ = {hi:g}",
        ],
        table,
        note="For N ≥ d the whitened scores X(XᵀX)⁺q = e_μ + X(XᵀX)⁺ε amplify the query noise "
        "by the inverse of X's smallest singular value.",
    )


def claims(rows: list[dict[str, Any]], cfg: CompareConfig) -> list[Claim]:
    """Tang's retrieval claim: the whitened dot product's accuracy at the largest ρ, per N and
    separation, against ``config.tang_accuracy``."""
    values = {}
    for n in cfg.tang_patterns:
        for sep in SEPARATIONS:
            sel = _cell(rows, n, "whitened dot", sep)
            values[f"N = {n}, {sep}"] = float(max(sel, key=lambda r: r["rho"])["accuracy"])
    rho = max(r["rho"] for r in rows)
    return [
        Claim(
            TANG_WHITENING,
            REMARK,
            f"whitened-dot retrieval accuracy at ρ = {rho:g}",
            values,
            Threshold(
                ">=", cfg.tang_accuracy, "the config's tang_accuracy (attnreg's; no source number)"
            ),
            reading="robust to correlation = the whitened dot product still retrieves the "
            "stored pattern at the largest correlation",
        )
    ]


def figure(rows: list[dict[str, Any]], cfg: CompareConfig) -> FigureRecord:
    """Accuracy against ρ per similarity × separation, one panel per N."""
    from attnreg.output import new_figure

    ns = list(dict.fromkeys(r["n_patterns"] for r in rows))
    fig, axes = new_figure(1, len(ns), figsize=(4.5 * len(ns), 3.6), squeeze=False)
    styles = {"dot": "--", "whitened dot": "-"}
    colours = {"identity": "tab:blue", "softmax": "tab:orange"}
    for ax, n in zip(axes[0], ns, strict=True):
        for sim in SIMILARITIES:
            for sep in SEPARATIONS:
                sel = [
                    r
                    for r in rows
                    if (r["n_patterns"], r["similarity"], r["separation"]) == (n, sim, sep)
                ]
                ax.plot(
                    [r["rho"] for r in sel],
                    [r["accuracy"] for r in sel],
                    styles[sim],
                    color=colours[sep],
                    marker="o",
                    markersize=3,
                    label=f"{sim} × {sep}",
                )
        ax.axhline(cfg.tang_accuracy, color="black", linewidth=0.5, linestyle=":")
        ax.set(xlabel="equicorrelation ρ", ylabel="retrieval accuracy", ylim=(0, 1.02))
        ax.set_title(f"N = {n} patterns, d = {cfg.tang_d}")
        ax.legend(fontsize=7)
    fig.suptitle("Correlated patterns: plain vs whitened dot similarity")
    return FigureRecord(
        name="compare_tang_retrieval",
        figure=fig,
        caption=(
            "Retrieval accuracy of equicorrelated Gaussian patterns against ρ (dotted: the "
            "failure threshold), plain and whitened dot, identity and softmax separation "
            "(compare config: tang_d, tang_patterns, tang_rhos, tang_memories, tang_query_noise, "
            "tang_beta)."
        ),
    )


def section(cfg: CompareConfig, datasets: dict[str, RegressionData]) -> Section:
    """The tang section's retrieval part (module docstring); empty when ``cfg.tang`` is off.
    Its data are its own (``datasets`` is not used)."""
    del datasets
    if not cfg.tang:
        return Section()
    rows = retrieval_rows(cfg)
    return Section(
        rows=rows,
        summary={QUESTION: _summary(rows, cfg)},
        figures=[figure(rows, cfg)],
        claims=claims(rows, cfg),
    )
