"""The layers study's claims ledger: Wang, Shi & Fox's (2025) framing of sequence layers as
test-time regressions — read on the trained layers, and on the memories (linear attention
against the regression memories on correlated keys) — and Tang's regression-as-memory capacity
(Mesa, ``N_max = d``).

Wang, Shi & Fox derive layers as regressions; they do not measure trained layers, so both of
their rows are *remarks* with attnreg's reading as a number:

* a trained layer computes the estimator ``explain`` names when that estimator's predictions
  are closer to the layer's outputs than the targets are (``MSE(layer, estimator) /
  MSE(layer, target) ≤ 1``, the null being the target itself as a predictor of the layer — an
  accurate estimator that does not reproduce the layer's own errors does not pass);
* linear attention "fails to capture inter-token correlations": on correlated keys (ρ > 0) a
  regression memory's mean relative recall error is below linear attention's, per ``(N, ρ)``,
  by more than 2 standard errors of the difference paired over the trials (every memory sees
  the same keys and values).
"""

from __future__ import annotations

import math
from typing import Any

from attnreg.studies.layers.config import LayersConfig
from attnreg.studies.layers.memory import capacity, memories
from attnreg.studies.ledger import IDENTITY, REMARK, Claim, Quote
from attnreg.studies.paired import paired_z
from attnreg.studies.quotes import TANG_CAPACITY
from attnreg.studies.sources import WANG_SHI_FOX
from attnreg.thresholds import Threshold

WANG = WANG_SHI_FOX
WANG_LAYERS = Quote(
    WANG,
    "Prominent layers, including linear attention, state-space models, fast-weight "
    "programmers, online learners, and softmax attention, arise as special cases defined by "
    "three design choices: the regression weights, the regressor function class, and the "
    "test-time optimization algorithm.",
    "Abstract",
)
WANG_CORRELATIONS = Quote(
    WANG,
    "Our approach clarifies how linear attention fails to capture inter-token correlations",
    "Abstract",
)
PAIRED_SES = 2.0
"""How many paired standard errors a memory's gain over linear attention must exceed."""
NULL_RATIO = 1.0
"""``MSE(layer, estimator) / MSE(layer, target)`` of the null predictor, the target itself."""


def trained_claims(rows: list[dict[str, Any]]) -> list[Claim]:
    """The claim on the trained layers (rows ``kind="layer"``; none without such rows)."""
    layers = [r for r in rows if r.get("kind") == "layer"]
    if not layers:
        return []
    return [
        Claim(
            WANG_LAYERS,
            REMARK,
            "MSE(layer, named estimator) / MSE(layer, target) on the held-out tasks (a "
            "layer whose estimator reproduces the targets — OLS on noiseless tasks — has "
            "no null to beat and is left out)",
            {
                f"{r['tasks']} · {r['layer']}": float(r["vs_target"])
                for r in layers
                if math.isfinite(r["vs_target"])
            },
            Threshold(
                "<=",
                NULL_RATIO,
                "a null measured in the same run: the held-out targets as a predictor of "
                "the layer's outputs (ratio 1)",
            ),
            reading="a trained layer computes the regression the framework derives when "
            "the estimator explain names (best held-out R² on the layer's outputs) is "
            "closer to the layer's outputs than the targets are",
        )
    ]


def memory_claims(rows: list[dict[str, Any]], cfg: LayersConfig) -> list[Claim]:
    """Tang's capacity claim and one claim per regression memory on correlated keys (rows
    ``kind="memory"``; none without such rows)."""
    mem = [r for r in rows if r.get("kind") == "memory"]
    if not mem:
        return []
    out = []
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
    cell = {(r["memory"], r["rho"], r["n"]): r for r in mem}
    for m in memories(cfg):
        if m == "linear attention":
            continue
        values = {}
        for (name, rho, n), r in cell.items():
            linear = cell.get(("linear attention", rho, n))
            if name != m or rho <= 0 or linear is None:
                continue
            values[f"ρ = {rho:g}, N = {n}"] = paired_z(linear["trial_errors"], r["trial_errors"])
        if values:
            out.append(
                Claim(
                    WANG_CORRELATIONS,
                    REMARK,
                    f"{m}: (linear attention's mean relative squared recall error − {m}'s) "
                    f"/ its standard error paired over {cfg.memory_trials} trials, per (ρ, N), "
                    f"d = {d}",
                    values,
                    Threshold(
                        ">=",
                        PAIRED_SES,
                        f"2 standard errors of the difference paired over the "
                        f"{cfg.memory_trials} trials (the same keys and values for every "
                        "memory)",
                    ),
                    reading=f"on correlated keys (ρ > 0) the regression memory {m} recalls "
                    "the stored values with a lower mean relative error than linear "
                    "attention",
                )
            )
    return out
