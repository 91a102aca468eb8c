"""The energy family of the capacity study: one whitened similarity, four separations.

Tan & Zhao (arXiv 2604.13656) call the OLS-Transformer an associative memory of linear
capacity and say that softmax makes the capacity exponential. This module measures that claim
as one family of energies ``E_F(ξ) = −Σ_i F(s_i) + ½ ξᵀξ`` with the same whitened similarity
``s = G^{-1/2} K ξ``, varying only ``F`` (:mod:`attnreg.memory.energy`):

* the quadratic ``s²/2``, whose step is the projection;
* ``|s|ⁿ/n`` for ``n = 3, 4`` (``n = 2`` is the quadratic);
* softmax with ``β = β₀ √N``. The whitened similarities of ``N > d`` patterns shrink like
  ``1/√N`` (``‖s‖ ≤ ‖ξ‖``), so a fixed ``β`` would blur the retrieval. With ``β₀ √N``, the
  scores ``β s`` of a stored ±1 pattern stay near ``β₀ d`` for ``N ≫ d``, as for the dot
  similarity.

All families use the same patterns. Every ``(seed, d, N)`` evaluation draws its ±1 patterns,
targets and ``flips`` flipped bits from :func:`~attnreg.studies.capacity.families.cell_generator`
with the key ``"energy"``, whatever ``F`` is. Each query gets one step, read out two ways; a
query counts as recalled when the sign of the read-out equals its stored pattern in every
coordinate (the study's exact-recall criterion):

* ``state`` — the step's own result ``ξ₁ = K̃ᵀ F'(s)``. For the quadratic this is the
  projection ``P q`` (the pseudo-inverse memory). For strong separations ``ξ₁`` is close to
  the whitened pattern ``k̃_j``, whose sign differs from ``k_j`` wherever whitening mixes the
  patterns (``G`` ill-conditioned, ``N`` near ``d``).
* ``pattern`` — ``S^{1/2} ξ₁ = Kᵀ F'(s)``. This is the same step decoded into pattern
  coordinates: ``S^{1/2}`` maps each ``k̃_i`` to ``k_i``.

The family's other measurements have their own modules: the energy descent
(:mod:`~attnreg.studies.capacity.energy_descent`), the OLS-Transformer as one quadratic step
(:mod:`~attnreg.studies.capacity.ols_energy`) and the cost at ``N_max``
(:mod:`~attnreg.studies.capacity.cost`).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnreg.core.threads import torch_threads
from attnreg.data.patterns import flip_bits, random_binary
from attnreg.memory import (
    EnergyMemory,
    dam_capacity_theory,
    family_decode,
    family_step,
    whitened_patterns,
)
from attnreg.studies.capacity import families as fam
from attnreg.studies.capacity.config import CapacityConfig
from attnreg.studies.capacity.sweeps import SMALL_WORK, search_capacity

PATTERN_KEY = "energy"
READOUTS = ("state", "pattern")
DTYPE = torch.float64
UNIT_ROUNDOFF = float(torch.finfo(DTYPE).eps) / 2

Tick = Callable[[str], None]
RateFn = Callable[[int, int, torch.Generator], tuple[float, float]]


@dataclass(frozen=True)
class EnergyFamily:
    """One separation ``F`` of the energy family, measured at ``dims``."""

    key: str
    energy: str
    power: int
    label: str
    dims: tuple[int, ...]

    def memory(self, n: int, beta0: float) -> EnergyMemory:
        """The memory of ``n`` patterns (softmax: ``β = β₀ √n``)."""
        return EnergyMemory(self.energy, power=self.power, beta=beta0 * math.sqrt(n))

    def theory(self, d: int, flips: int, epsilon: float) -> float:
        """Reference curve: ``d/2`` for the quadratic (a flipped bit ``l`` survives the
        projection when ``P_ll ≥ ½``, and ``P_ll ≈ N/d``); Krotov & Hopfield's
        ``d^{n−1}/(2(2n−3)!! ln d)`` for ``|s|ⁿ/n``; the nearest-pattern bound for softmax."""
        if self.energy == "quadratic":
            return d / 2
        if self.energy == "power":
            return dam_capacity_theory(d, self.power)
        return fam.nearest_pattern_bound(d, flips, epsilon)


def energy_families(config: CapacityConfig) -> list[EnergyFamily]:
    """The four separations of the family, with their dimensions from ``config``."""
    c = config
    return [
        EnergyFamily(
            "quadratic", "quadratic", 2, "s^2/2 (projection)", tuple(c.energy_quadratic_d)
        ),
        EnergyFamily("power3", "power", 3, "|s|^3/3", tuple(c.energy_power3_d)),
        EnergyFamily("power4", "power", 4, "|s|^4/4", tuple(c.energy_power4_d)),
        EnergyFamily(
            "softmax",
            "softmax",
            2,
            f"softmax (beta = {c.energy_softmax_beta:g} sqrt N)",
            tuple(c.energy_softmax_d),
        ),
    ]


def energy_rates(family: EnergyFamily, config: CapacityConfig) -> RateFn:
    """``(d, N, gen) -> (state rate, pattern rate)``. The rates are exact-recall fractions of
    ``config.queries`` queries (``energy_flips`` flipped bits, one step), spread over
    ``R = min(128, ⌈queries/N⌉)`` memories as in
    :func:`~attnreg.studies.capacity.families.replicated`. The ``R`` memories are evaluated
    as one batch."""
    flips, queries, beta0 = config.energy_flips, config.queries, config.energy_softmax_beta

    def rates(d: int, n: int, gen: torch.Generator) -> tuple[float, float]:
        reps = min(128, -(-queries // n))
        per = -(-queries // reps)
        k = random_binary(reps * n, d, gen, DTYPE).to(config.device).view(reps, n, d)
        pick = torch.randint(0, n, (reps, per), generator=gen).to(config.device)
        target = torch.gather(k, 1, pick.unsqueeze(-1).expand(reps, per, d))
        q = flip_bits(target.reshape(reps * per, d), flips, gen).view(reps, per, d)
        whitened = whitened_patterns(k)
        beta = beta0 * math.sqrt(n)
        state = family_step(q, whitened, family.energy, power=family.power, beta=beta)
        pattern = family_decode(state, whitened, k)  # S^{1/2} ξ₁ = Kᵀ F'(s)
        hits = [(torch.sign(r) == target).all(dim=-1) for r in (state, pattern)]
        return float(hits[0].double().mean()), float(hits[1].double().mean())

    return rates


def energy_capacity_rows(
    config: CapacityConfig, family: EnergyFamily, d: int, tick: Tick
) -> list[dict[str, Any]]:
    """One capacity row per read-out at dimension ``d``, each averaged over the seeds. The two
    searches share their evaluations: the same ``(seed, d, N)`` patterns give both rates."""
    start = time.perf_counter()
    rate_fn = energy_rates(family, config)
    per_seed: dict[str, list[int]] = {r: [] for r in READOUTS}
    evaluations = 0
    for i in range(config.seeds):
        seed = config.seed + i
        memo: dict[int, tuple[float, float]] = {}

        def rate(
            n: int, j: int, seed: int = seed, memo: dict[int, tuple[float, float]] = memo
        ) -> float:
            if n not in memo:
                work = config.queries * d * max(n, d)
                with torch_threads(1 if work < SMALL_WORK else None):
                    memo[n] = rate_fn(d, n, fam.cell_generator(seed, PATTERN_KEY, d, n))
            return memo[n][j]

        for j, readout in enumerate(READOUTS):
            n_max, _ = search_capacity(
                functools.partial(rate, j=j), config.epsilon, 1 / 64, config.n_limit
            )
            per_seed[readout].append(n_max)
        evaluations += len(memo)
        tick(f"energy:{family.key} d={d} seed={seed}")
    seconds = time.perf_counter() - start
    return [
        {
            "kind": "capacity",
            "family": f"energy:{family.key}@{readout}",
            "model": f"energy({family.label})",
            "patterns": "binary",
            "query": f"flips:{config.energy_flips}",
            "d": d,
            "n_max": float(np.mean(per_seed[readout])),
            "n_max_theory": float(family.theory(d, config.energy_flips, config.epsilon)),
            "epsilon": config.epsilon,
            "seeds": config.seeds,
            "n_max_std": float(np.std(per_seed[readout])),
            "n_max_per_seed": ";".join(str(v) for v in per_seed[readout]),
            "evaluations": evaluations,
            "seconds": seconds,
            "energy": family.key,
            "separation": family.label,
            "readout": readout,
            "similarity": "whitened G^-1/2 K xi",
        }
        for readout in READOUTS
    ]
