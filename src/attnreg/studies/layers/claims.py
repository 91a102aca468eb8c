"""The layers study's claims ledger: every trained sequence layer is a regression (Wang, Shi &
Fox 2025) and the regression memory's capacity (Tang's regression-as-memory claim), tested by
the study's rows against the config's thresholds (the same as its checks) or the ones below."""

from __future__ import annotations

from typing import Any

from attnreg.studies.layers.config import LayersConfig
from attnreg.studies.layers.memory import capacity, memories
from attnreg.studies.ledger import Claim

WANG = "Wang, Shi & Fox 2025 (arXiv 2501.12352)"
TANG = "Tang (regression as memory)"
MIN_GAIN = 1
"""A memory "beats" linear attention at a correlation ρ when it recalls at least this many more
pairs (its ``N_max`` minus linear attention's, on the grid of N)."""


def layers_claims(rows: list[dict[str, Any]], cfg: LayersConfig) -> list[Claim]:
    """One claim on the trained layers (rows ``kind="layer"``: the held-out R² of the estimator
    :func:`~attnreg.explaining.explain` names) and two on the memories (rows ``kind="memory"``)."""
    out = []
    layers = [r for r in rows if r.get("kind") == "layer"]
    if layers:
        out.append(
            Claim(
                WANG,
                "every causal sequence layer computes a regression of its past pairs: each "
                "trained layer is explained by one estimator",
                "held-out R² of the best estimator family (explain)",
                ">=",
                cfg.min_r2,
                {f"{r['tasks']} · {r['layer']}": float(r["best_r2"]) for r in layers},
            )
        )
    mem = [r for r in rows if r.get("kind") == "memory"]
    if not mem:
        return out
    rhos = list(dict.fromkeys(r["rho"] for r in mem))
    d = cfg.memory_d
    out.append(
        Claim(
            TANG,
            "the regression (pseudo-inverse) memory — Mesa with λ → 0 — stores N_max = d pairs "
            "exactly, whatever the correlation of the keys",
            f"Mesa's N_max / d (d = {d}; largest N of the grid recalled, ε = {cfg.recall_eps:g})",
            ">=",
            1.0,
            {f"ρ = {rho:g}": capacity(mem, "Mesa", rho, cfg.recall_eps) / d for rho in rhos},
        )
    )
    correlated = [rho for rho in rhos if rho > 0]
    linear = {rho: capacity(mem, "linear attention", rho, cfg.recall_eps) for rho in correlated}
    if correlated:
        out.append(
            Claim(
                TANG,
                "on correlated keys the regression memories (DeltaNet, Mesa) recall more pairs "
                "than the dot-product memory (linear attention)",
                "N_max of the memory − N_max of linear attention (pairs)",
                ">=",
                MIN_GAIN,
                {
                    f"{m}, ρ = {rho:g}": capacity(mem, m, rho, cfg.recall_eps) - linear[rho]
                    for m in memories(cfg)
                    if m != "linear attention"
                    for rho in correlated
                },
            )
        )
    return out
