"""The layers study's claims ledger: every trained sequence layer is a regression (Wang, Shi &
Fox 2025) and the regression memory's capacity (Tang's regression-as-memory claim), tested by
the study's rows against the config's thresholds (the same as its checks) or the ones below."""

from __future__ import annotations

from typing import Any

from attnreg.studies.layers.config import LayersConfig
from attnreg.studies.layers.memory import capacity, memories
from attnreg.studies.ledger import EMPIRICAL, IDENTITY, REMARK, Claim, Quote, Threshold
from attnreg.studies.quotes import TANG_CAPACITY
from attnreg.studies.sources import WANG_SHI_FOX

WANG = WANG_SHI_FOX
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
                Quote(
                    WANG,
                    "every causal sequence layer computes a regression of its past pairs: each "
                    "trained layer is explained by one estimator",
                    "Sections 3–4, the test-time regression framework",
                    verbatim=False,
                ),
                REMARK,
                "held-out R² of the best estimator family (explain)",
                {f"{r['tasks']} · {r['layer']}": float(r["best_r2"]) for r in layers},
                Threshold(">=", cfg.min_r2, "the config's min_r2 (attnreg's; no source number)"),
                reading="a layer computes an estimator when that estimator explains its "
                "held-out predictions (R² of the layer's outputs)",
            )
        )
    mem = [r for r in rows if r.get("kind") == "memory"]
    if not mem:
        return out
    rhos = list(dict.fromkeys(r["rho"] for r in mem))
    d = cfg.memory_d
    out.append(
        Claim(
            TANG_CAPACITY,
            IDENTITY,
            f"Mesa's (λ → 0) N_max / d (d = {d}; largest N of the grid recalled, "
            f"ε = {cfg.recall_eps:g}), per key correlation",
            {f"ρ = {rho:g}": capacity(mem, "Mesa", rho, cfg.recall_eps) / d for rho in rhos},
            Threshold(">=", 1.0, "the source's own number, N_max = d"),
        )
    )
    correlated = [rho for rho in rhos if rho > 0]
    linear = {rho: capacity(mem, "linear attention", rho, cfg.recall_eps) for rho in correlated}
    if correlated:
        out.append(
            Claim(
                Quote(
                    WANG,
                    "on correlated keys the regression memories (DeltaNet, Mesa) recall more "
                    "pairs than the dot-product memory (linear attention)",
                    "the associative-memory discussion",
                    verbatim=False,
                ),
                EMPIRICAL,
                "N_max of the memory − N_max of linear attention (pairs)",
                {
                    f"{m}, ρ = {rho:g}": capacity(mem, m, rho, cfg.recall_eps) - linear[rho]
                    for m in memories(cfg)
                    if m != "linear attention"
                    for rho in correlated
                },
                Threshold(">=", MIN_GAIN, "one more pair than linear attention (the grid's step)"),
            )
        )
    return out
