"""The memory side: store N pairs ``(k_i, v_i)`` in a causal layer, query it with the stored
keys, and measure what comes back, against ``N/d`` for correlated keys.

Keys: unit vectors with pairwise correlation about ρ (``k_i ∝ √(1−ρ) z_i + √ρ c``, ``z_i, c ~
N(0, I_d)``, one ``c`` per draw, then normalised, DeltaNet's convention); values ``v_i ~ N(0,
I_d)``. The N pairs are written as tokens, then N read-out tokens with zero key and value (a
zero key leaves every layer's state unchanged) and the stored keys as queries. A pair is
recalled when ``‖v̂_i − v_i‖² / ‖v_i‖² ≤ ε``; the graded measure is each trial's mean relative
squared error over its N pairs, every memory on the same draws (so differences are paired
over trials). Memories (float64):

* ``linear attention`` — ``S = Σ k_i v_iᵀ``, the dot-product (Hebbian) memory;
* ``DeltaNet`` — the delta rule with β = 1, one pass (each write is exact for its own key and
  disturbs the earlier ones where keys overlap);
* ``DeltaNet (to tol)`` — the same pairs written again, pass after pass (Kaczmarz's
  iteration, which converges to the minimum-norm interpolant when ``N ≤ d``), until the
  largest relative residual ``‖S k_i − v_i‖ / ‖v_i‖`` over the trials is at most
  ``memory_tol``, stops falling (no new lowest in ``memory_stall`` passes: ``N > d`` has no
  interpolant) or ``memory_passes`` passes (the cap) are done — which one is reported;
* ``Mesa`` — ridge with ``λ → 0``: ``Vᵀ K (KᵀK + λI)⁻¹ q``, the pseudo-inverse (whitened)
  memory, exact up to ``N = d`` (Tang's regression-as-memory claim, capacity ``N_max = d``).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from attnreg.sequence import delta_rule, linear_attention, mesa
from attnreg.studies.layers.config import LayersConfig


def correlated_pairs(
    gen: torch.Generator, trials: int, n: int, d: int, rho: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``trials`` draws of N unit keys with pairwise correlation about ρ and N Gaussian values:
    ``(trials, n, d)`` each, float64."""
    z = torch.randn(trials, n, d, generator=gen, dtype=torch.float64)
    c = torch.randn(trials, 1, d, generator=gen, dtype=torch.float64)
    keys = math.sqrt(1 - rho) * z + math.sqrt(rho) * c
    keys = keys / keys.norm(dim=-1, keepdim=True)
    values = torch.randn(trials, n, d, generator=gen, dtype=torch.float64)
    return keys, values


CONVERGED = "DeltaNet (to tol)"
"""The multi-pass delta-rule memory, written until its residual is below ``memory_tol``."""


def delta_passes(
    keys: torch.Tensor, values: torch.Tensor, tol: float, cap: int, stall: int
) -> tuple[torch.Tensor, dict[str, Any]]:
    """The delta rule with β = 1 (``S ← S + (v_i − S k_i) k_iᵀ``, unit keys) over the pairs,
    pass after pass, from ``S = 0``: the state ``(trials, d, d)`` and how it stopped —
    ``passes`` done, the largest relative residual ``max ‖S k_i − v_i‖ / ‖v_i‖`` over trials
    and pairs after the last pass, and ``stop``: ``"tolerance"`` (residual ≤ ``tol``),
    ``"stalled"`` (no new lowest residual in ``stall`` passes) or ``"cap"`` (``cap``
    passes)."""
    trials, n, d = keys.shape
    # one pass is affine in the state: S ← S A + B with A = P_1 ⋯ P_n, P_i = I − k_i k_iᵀ, and
    # B = Σ_i v_i k_iᵀ P_{i+1} ⋯ P_n (built by one pass from S = 0 and from S = I)
    eye = torch.eye(d, dtype=keys.dtype).expand(trials, d, d)
    a, b = eye.clone(), torch.zeros(trials, d, d, dtype=keys.dtype)
    for i in range(n):
        k, v = keys[:, i], values[:, i]
        a = a - torch.einsum("tij,tj->ti", a, k).unsqueeze(-1) * k.unsqueeze(-2)
        err = v - torch.einsum("tij,tj->ti", b, k)
        b = b + err.unsqueeze(-1) * k.unsqueeze(-2)
    state = torch.zeros(trials, d, d, dtype=keys.dtype)
    vnorm = values.norm(dim=-1)
    lowest, since = math.inf, 0
    residual = math.inf
    stop = "cap"
    passes = 0
    while passes < cap:
        passes += 1
        state = state @ a + b
        fitted = torch.einsum("tij,tnj->tni", state, keys)
        residual = float(((fitted - values).norm(dim=-1) / vnorm).max())
        if residual <= tol:
            stop = "tolerance"
            break
        if residual < lowest:
            lowest, since = residual, 0
        else:
            since += 1
            if since >= stall:
                stop = "stalled"
                break
    return state, {"passes": passes, "residual": residual, "stop": stop}


def recall(
    memory: str, keys: torch.Tensor, values: torch.Tensor, cfg: LayersConfig
) -> torch.Tensor:
    """The values read back at the stored keys, ``(trials, n, d)``: the pairs written once
    (written until the residual is below ``memory_tol`` for :data:`CONVERGED`), then read
    out."""
    if memory == CONVERGED:
        state, _ = delta_passes(keys, values, cfg.memory_tol, cfg.memory_passes, cfg.memory_stall)
        return torch.einsum("tij,tnj->tni", state, keys)
    n = keys.shape[1]
    k = torch.cat([keys, torch.zeros_like(keys)], 1).unsqueeze(1)
    v = torch.cat([values, torch.zeros_like(values)], 1).unsqueeze(1)
    q = torch.cat([torch.zeros_like(keys), keys], 1).unsqueeze(1)
    if memory == "linear attention":
        out = linear_attention(q, k, v)
    elif memory == "Mesa":
        out = mesa(q, k, v, 1.0, lam=cfg.memory_lam)
    else:
        out = delta_rule(q, k, v, 1.0)
    return out[:, 0, -n:]


def memories(cfg: LayersConfig) -> list[str]:
    """The memories measured, in order."""
    return ["linear attention", "DeltaNet", CONVERGED, "Mesa"]


def memory_rows(cfg: LayersConfig) -> list[dict[str, Any]]:
    """One row per memory × ρ × N: mean, median and largest relative squared error, the
    fraction of pairs recalled, each trial's mean relative squared error (``trial_errors``, the
    same draws for every memory) and, for :data:`CONVERGED`, how its passes stopped."""
    d = cfg.memory_d
    rows: list[dict[str, Any]] = []
    for i, rho in enumerate(cfg.memory_rhos):
        for j, ratio in enumerate(cfg.memory_ratios):
            n = max(1, round(ratio * d))
            gen = torch.Generator().manual_seed(cfg.seed * 10**6 + 1000 * i + j)
            keys, values = correlated_pairs(gen, cfg.memory_trials, n, d, rho)
            for memory in memories(cfg):
                run: dict[str, Any] = {}
                if memory == CONVERGED:
                    state, run = delta_passes(
                        keys, values, cfg.memory_tol, cfg.memory_passes, cfg.memory_stall
                    )
                    got = torch.einsum("tij,tnj->tni", state, keys)
                else:
                    got = recall(memory, keys, values, cfg)
                err = (got - values).pow(2).sum(-1) / values.pow(2).sum(-1)
                rows.append(
                    {
                        "kind": "memory",
                        "memory": memory,
                        "rho": rho,
                        "n": n,
                        "d": d,
                        "n_over_d": n / d,
                        "mean_error": float(err.mean()),
                        "median_error": float(err.median()),
                        "max_error": float(err.max()),
                        "recall": float((err <= cfg.recall_eps).double().mean()),
                        "trial_errors": [float(e) for e in err.mean(-1)],
                        "passes": run.get("passes", 1),
                        "residual": run.get("residual", math.nan),
                        "stop": run.get("stop", ""),
                        "seed": cfg.seed,
                    }
                )
    return rows


def capacity(rows: list[dict[str, Any]], memory: str, rho: float, eps: float) -> int:
    """The largest N of the grid up to which (every smaller N included) at least ``1 − ε`` of
    the pairs are recalled; 0 if none."""
    best = 0
    mine = sorted(
        (r for r in rows if r["memory"] == memory and r["rho"] == rho), key=lambda r: r["n"]
    )
    for r in mine:
        if r["recall"] < 1 - eps:
            break
        best = r["n"]
    return best
