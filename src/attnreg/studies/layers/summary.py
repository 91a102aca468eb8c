"""The ``layers`` study's summary — a short lead (:func:`lead`) and one small table per section
(what each trained layer computes, :func:`trained_summary`; each memory's capacity,
:func:`memory_summary`), numbers from the rows and verdicts from the claims
(:mod:`~attnreg.studies.layers.claims`) — and its checks (thresholds: config fields)."""

from __future__ import annotations

from typing import Any

import numpy as np

from attnreg.studies.answers import summary_table
from attnreg.studies.layers.claims import WANG, WANG_CORRELATIONS
from attnreg.studies.layers.config import LAYERS, LayersConfig
from attnreg.studies.layers.memory import CONVERGED, capacity, memories
from attnreg.studies.ledger import CONDITIONAL, HOLDS, Claim
from attnreg.studies.paired import paired_z
from attnreg.studies.sources import TANG
from attnreg.thresholds import check


def lead(claims: list[Claim], named: int, trained: int, cfg: LayersConfig) -> str:
    """The answer in two or three short sentences: the claims the measurement contradicts (in
    full or in part) first, then the ones that hold, each named by a short label."""
    labels = (
        (
            WANG,
            "Prominent",
            "each trained layer is closer to its named estimator than to the target",
        ),
        (TANG, "", "Mesa stores N_max = d pairs exactly"),
    )
    found = [
        (label, claim)
        for source, start, label in labels
        for claim in claims
        if claim.source == source and claim.quote.text.startswith(start)
    ]
    memory = [(c.measurement.split(":")[0], c) for c in claims if c.quote == WANG_CORRELATIONS]
    against = [label for label, c in found if c.contradicted()]
    held = [label for label, c in found if c.verdict() in (HOLDS, CONDITIONAL)]
    beaten = "recall better than linear attention on correlated keys"
    if worse := [name for name, c in memory if c.contradicted()]:
        against.append(f"{', '.join(worse)} {beaten}")
    if better := [name for name, c in memory if c.verdict() in (HOLDS, CONDITIONAL)]:
        held.append(f"{', '.join(better)} {beaten}")
    parts = []
    if against:
        parts.append(f"Contradicted (in full or in part, see the ledger): {'; '.join(against)}.")
    if held:
        parts.append(f"Holds: {'; '.join(held)}.")
    return " ".join([*parts, f"{named} of {trained} trained layers are named by a family."])


def trained_summary(
    cfg: LayersConfig, layer_rows: list[dict[str, Any]]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The trained-layer table, and a check per clean layer of the study's own
    (:data:`~attnreg.studies.layers.config.LAYERS`: its best family's held-out R² ≥
    ``cfg.min_r2``; a registered layer at its example's arguments — random per-token gates and
    steps — is measured, not checked); ``layer_rows`` are the rows ``kind="layer"``."""
    checks = []
    table = []
    for r in layer_rows:
        learned = _learned(r)
        table.append(
            [
                r["tasks"],
                r["layer"],
                r["best_family"] or "none",
                r["best_params"] or "",
                f"{r['best_r2']:.4f}",
                learned,
                f"{r['loss_last']:.4g}",
                f"{r['optimal']}: {r['optimal_loss_last']:.4g}",
            ]
        )
        if r["tasks"] == "clean" and r["layer"] in LAYERS:
            checks.append(
                check(
                    f"clean {r['layer']}: best family's held-out R²", r["best_r2"], ">=", cfg.min_r2
                )
            )
    table_answer = summary_table(
        f"The estimator explain names for each trained layer (held-out R²), the layer's learned "
        f"scalar (on keys W_K x), and its loss at n = {cfg.n_ctx} beside the posterior mean's.",
        ["tasks", "layer", "estimator", "parameters", "R²", "learned", "loss", "optimal: loss"],
        table,
    )
    return {"what each trained layer computes": table_answer}, checks


def memory_summary(
    cfg: LayersConfig, mem: list[dict[str, Any]]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The memory table, and the check on Mesa's largest error at N ≤ d (≤
    ``cfg.max_mesa_error``); ``mem`` are the rows ``kind="memory"``."""
    d = cfg.memory_d
    mesa_err = max(r["max_error"] for r in mem if r["memory"] == "Mesa" and r["n"] <= d)
    rhos = cfg.memory_rhos
    conv = [r for r in mem if r["memory"] == CONVERGED]
    stops = {k: sum(r["stop"] == k for r in conv) for k in ("tolerance", "stalled", "cap")}
    cell = {(r["memory"], r["rho"], r["n"]): r for r in mem}

    def at_d(m: str, rho: float) -> str:
        r = cell.get((m, rho, d))
        if r is None:
            return "–"
        errs = np.asarray(r["trial_errors"])
        text = f"{errs.mean():.2g} ± {errs.std(ddof=1) / np.sqrt(errs.size):.1g}"
        lin = cell.get(("linear attention", rho, d))
        if lin is not None and m != "linear attention":
            text += f" (gain {paired_z(lin['trial_errors'], r['trial_errors']):.3g} SE)"
        return text

    table_answer = summary_table(
        f"N_max: the largest N (N/d = {', '.join(f'{x:g}' for x in cfg.memory_ratios)}; "
        f"d = {d}) with ≥ 1 − {cfg.recall_eps:g} of the pairs recalled. Error: the mean "
        f"relative squared recall error at N = d ± its SE over {cfg.memory_trials} trials "
        f"(regression memories: linear attention's minus theirs, in paired SEs). Mesa's "
        f"largest error at N ≤ d: {mesa_err:.1e}.",
        ["memory"]
        + [f"N_max, ρ = {rho:g}" for rho in rhos]
        + [f"error at N = d, ρ = {rho:g}" for rho in rhos],
        [
            [m]
            + [capacity(mem, m, rho, cfg.recall_eps) for rho in rhos]
            + [at_d(m, rho) for rho in rhos]
            for m in memories(cfg)
        ],
        note=f"{CONVERGED} wrote the pairs until the largest relative residual was "
        f"≤ {cfg.memory_tol:g} in {stops['tolerance']} of {len(conv)} cells (up to "
        f"{max((r['passes'] for r in conv), default=0)} passes); it stalled (no new lowest "
        f"residual in {cfg.memory_stall} passes) in {stops['stalled']} and reached the cap "
        f"({cfg.memory_passes} passes) in {stops['cap']}.",
    )
    checks = [
        check(
            "Mesa largest relative squared recall error at N ≤ d",
            mesa_err,
            "<=",
            cfg.max_mesa_error,
        )
    ]
    return {"memory: pairs recalled against N/d": table_answer}, checks


SYMBOL = {"mesa": "λ", "minibatch": "η"}
"""The learned scalar's symbol where it is not a step β."""


def _learned(row: dict[str, Any]) -> str:
    """``"β = 0.78"``, ``"β = 0.4, μ = 0.51"``: the layer's learned scalars, or ``""``."""
    if row["learned"] is None:
        return ""
    text = f"{SYMBOL.get(row['layer'], 'β')} = {row['learned']:.3g}"
    if row.get("learned_momentum") is not None:
        text += f", μ = {row['learned_momentum']:.3g}"
    return text
