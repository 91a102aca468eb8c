"""The memory side: store N pairs ``(k_i, v_i)`` in a causal layer, query it with the stored
keys, and measure what comes back, against ``N/d`` for correlated keys.

Keys: unit vectors with pairwise correlation about ρ (``k_i ∝ √(1−ρ) z_i + √ρ c``, ``z_i, c ~
N(0, I_d)``, one ``c`` per draw, then normalised, DeltaNet's convention); values ``v_i ~ N(0,
I_d)``. The N pairs are written as tokens, then N read-out tokens with zero key and value (a
zero key leaves every layer's state unchanged) and the stored keys as queries. A pair is
recalled when ``‖v̂_i − v_i‖² / ‖v_i‖² ≤ ε``. Memories (float64):

* ``linear attention`` — ``S = Σ k_i v_iᵀ``, the dot-product (Hebbian) memory;
* ``DeltaNet`` — the delta rule with β = 1, one pass (each write is exact for its own key and
  disturbs the earlier ones where keys overlap);
* ``DeltaNet ×P`` — the same pairs written P times: Kaczmarz's iteration, which converges to
  the minimum-norm interpolant when ``N ≤ d``;
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


def recall(
    memory: str, keys: torch.Tensor, values: torch.Tensor, cfg: LayersConfig
) -> torch.Tensor:
    """The values read back at the stored keys, ``(trials, n, d)``: the pairs written (``P``
    times for ``DeltaNet ×P``), then read out."""
    n = keys.shape[1]
    passes = cfg.memory_passes if memory.startswith("DeltaNet ×") else 1
    k = torch.cat([keys.repeat(1, passes, 1), torch.zeros_like(keys)], 1).unsqueeze(1)
    v = torch.cat([values.repeat(1, passes, 1), torch.zeros_like(values)], 1).unsqueeze(1)
    q = torch.cat([torch.zeros_like(keys).repeat(1, passes, 1), keys], 1).unsqueeze(1)
    if memory == "linear attention":
        out = linear_attention(q, k, v)
    elif memory == "Mesa":
        out = mesa(q, k, v, 1.0, lam=cfg.memory_lam)
    else:
        out = delta_rule(q, k, v, 1.0)
    return out[:, 0, -n:]


def memories(cfg: LayersConfig) -> list[str]:
    """The memories measured, in order."""
    return ["linear attention", "DeltaNet", f"DeltaNet ×{cfg.memory_passes}", "Mesa"]


def memory_rows(cfg: LayersConfig) -> list[dict[str, Any]]:
    """One row per memory × ρ × N: mean, median and largest relative squared error, and the
    fraction of pairs recalled."""
    d = cfg.memory_d
    rows: list[dict[str, Any]] = []
    for i, rho in enumerate(cfg.memory_rhos):
        for j, ratio in enumerate(cfg.memory_ratios):
            n = max(1, round(ratio * d))
            gen = torch.Generator().manual_seed(cfg.seed * 10**6 + 1000 * i + j)
            keys, values = correlated_pairs(gen, cfg.memory_trials, n, d, rho)
            for memory in memories(cfg):
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
