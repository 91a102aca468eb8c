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

The module also gives the energy-descent rows (every ``F``, random and near-pattern queries,
several steps), the OLS-Transformer rows (its forward pass on its own context against one
quadratic step) and the cost rows (time per retrieval and state bytes per stored pattern at
``N_max``).
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


# ------------------------------------------------------------------------ energy descent


def _descent(mem: EnergyMemory, start: torch.Tensor, steps: int) -> tuple[float, float, float]:
    """Over ``steps`` updates from ``start``: the largest relative energy increase
    ``(E_{t+1} − E_t)/scale_t``, the smallest relative concave–convex margin
    ``(E_t − E_{t+1} − ½‖ξ_{t+1} − ξ_t‖²)/scale_t`` and the largest ``scale_t``. Here
    ``scale_t = max(|E_t|, |E_{t+1}|, ½‖ξ_t‖², ½‖ξ_{t+1}‖²)`` bounds both energy terms, so the
    round-off of ``E`` is at most about ``2(N + d) u · scale_t``."""
    x = start
    e = mem.energy(x)
    worst_increase, worst_margin, biggest = -math.inf, math.inf, 0.0
    for _ in range(steps):
        new = mem.step(x)
        e_new = mem.energy(new)
        half = 0.5 * (x * x).sum(-1)
        half_new = 0.5 * (new * new).sum(-1)
        scale = torch.stack([e.abs(), e_new.abs(), half, half_new]).amax(0).clamp_min(1e-300)
        moved = 0.5 * ((new - x) ** 2).sum(-1)
        worst_increase = max(worst_increase, float(((e_new - e) / scale).max()))
        worst_margin = min(worst_margin, float(((e - e_new - moved) / scale).min()))
        biggest = max(biggest, float(scale.max()))
        x, e = new, e_new
    return worst_increase, worst_margin, biggest


def energy_check_rows(config: CapacityConfig) -> list[dict[str, Any]]:
    """Energy along ``energy_check_steps`` steps of every ``F``, for
    ``N ∈ energy_check_n`` patterns of dimension ``energy_check_d``. The queries are random
    (Gaussian, norm about √d) or near a stored pattern (10 % of the bits flipped); there are
    ``energy_check_queries`` of each."""
    d, m, steps = config.energy_check_d, config.energy_check_queries, config.energy_check_steps
    rows = []
    for family in energy_families(config):
        for n in config.energy_check_n:
            gen = fam.cell_generator(config.seed, f"energy-check:{family.key}", d, n)
            k = random_binary(n, d, gen, DTYPE)
            mem = family.memory(n, config.energy_softmax_beta).store(k)
            random = torch.randn(m, d, generator=gen, dtype=DTYPE)
            target = k[torch.randint(0, n, (m,), generator=gen)]
            near = flip_bits(target, max(1, round(0.1 * d)), gen)
            for query, start in (("random", random), ("near-pattern", near)):
                increase, margin, scale = _descent(mem, start, steps)
                rows.append(
                    {
                        "kind": "energy_check",
                        "energy": family.key,
                        "model": f"energy({family.label})",
                        "d": d,
                        "n": n,
                        "query": query,
                        "queries": m,
                        "steps": steps,
                        "max_relative_increase": increase,
                        "min_relative_cccp_margin": margin,
                        "max_scale": scale,
                        "roundoff_bound": 2 * (n + d) * UNIT_ROUNDOFF,
                    }
                )
    return rows


# ------------------------------------------------------------------ the OLS-Transformer


def ols_energy_rows(config: CapacityConfig) -> list[dict[str, Any]]:
    """The OLS-Transformer's forward pass on its own context against one quadratic step.

    For a design ``X`` (``N × d``) and targets ``Y`` (``N × dy``), store the ``d`` feature
    columns of ``X`` as patterns of dimension ``N``: ``K = Xᵀ``, ``G = K Kᵀ = XᵀX``,
    ``P = X (XᵀX)⁻¹ Xᵀ``, the hat matrix. Each target column ``y`` is a state, and one
    quadratic step gives ``P y = ŷ``. The rows record four comparisons:

    * the layer's output ``attnreg.OLSTransformer().fit(X, Y)(X)`` against the step;
    * ``E(y) = ½ yᵀ(I − P)y`` against ``½ RSS`` from ``numpy.linalg.lstsq``;
    * ``E(ŷ)``, which is 0 (the step reaches the span);
    * ``P ŷ`` against ``ŷ`` (a fixed point).

    Each error is divided by the backward-error bound ``max(N, d) · u · κ(X)`` of a
    least-squares solve (``u`` the unit round-off, ``κ`` from the singular values). The
    columns of ``X`` are Gaussian, scaled from 1 down to ``10⁻³``."""
    from attnreg.constructions.ols import OLSTransformer

    rows = []
    for n, d in config.ols_energy_cases:
        gen = fam.cell_generator(config.seed, "ols-energy", d, n)
        # columns scaled from 1 to 1e-3: κ(X) near 10³, so the bound is not met by luck
        scales = torch.logspace(0, -3, d, dtype=DTYPE)
        x = torch.randn(n, d, generator=gen, dtype=DTYPE) * scales
        w = torch.randn(d, 2, generator=gen, dtype=DTYPE)
        y = x @ w + 0.5 * torch.randn(n, 2, generator=gen, dtype=DTYPE)
        out = OLSTransformer().fit(x, y)(x)[0]
        mem = EnergyMemory("quadratic").store(x.mT)
        step = mem.step(y.mT).mT
        again = mem.step(step.mT).mT
        energy = mem.energy(y.mT)
        after = mem.energy(step.mT)
        xn, yn = x.numpy(), y.numpy()
        coef, *_ = np.linalg.lstsq(xn, yn, rcond=None)
        half_rss = 0.5 * ((yn - xn @ coef) ** 2).sum(0)
        sv = np.linalg.svd(xn, compute_uv=False)
        bound = max(n, d) * UNIT_ROUNDOFF * float(sv[0] / sv[-1])
        y_scale = float(y.abs().max())
        forward_err = float((out - step).abs().max()) / y_scale
        energy_err = float(np.abs(energy.numpy() - half_rss).max() / half_rss.max())
        fixed = float((again - step).abs().max()) / y_scale
        rows.append(
            {
                "kind": "ols_energy",
                "model": "OLSTransformer",
                "n": n,
                "d": d,
                "targets": 2,
                "condition": float(sv[0] / sv[-1]),
                "error_bound": bound,
                "forward_vs_step": forward_err,
                "energy_vs_half_rss": energy_err,
                "energy_before": float(energy.max()),
                "half_rss_lstsq": float(half_rss.max()),
                "energy_after_relative": float(after.max() / energy.max()),
                "fixed_point": fixed,
                "worst_error_over_bound": max(forward_err, energy_err, fixed) / bound,
            }
        )
    return rows


# ------------------------------------------------------------------------------ the cost


def cost_rows(config: CapacityConfig, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Time per retrieval and state bytes per stored pattern at ``N_max`` for every energy
    family and ``d``, read out in pattern coordinates.

    The memory holds ``round(N_max)`` random ±1 patterns (seed ``config.seed``). A retrieval
    is one step plus the pattern read-out for a batch of ``cost_queries`` queries, on one
    thread; its time is the best of ``cost_repeats`` runs divided by the batch size. The
    state is what a retrieval reads (:meth:`~attnreg.memory.EnergyMemory.state_bytes`):
    ``K̃`` and ``K`` (``2 N d`` floats) for power and softmax. The quadratic energy's step and
    read-out form one linear map, ``S^{1/2} = K̃ᵀK`` (``d × d``), whatever ``N`` is; it is
    formed once at store time and applied as one matrix product. ``store_seconds`` covers the
    whitening, plus forming that map for the quadratic."""
    out = []
    by_key = {(r["family"], r["d"]): r for r in rows if r["kind"] == "capacity"}
    for family in energy_families(config):
        for d in family.dims:
            cap = by_key.get((f"energy:{family.key}@pattern", d))
            if cap is None or cap["n_max"] < 1:
                continue
            n = max(1, round(cap["n_max"]))
            gen = fam.cell_generator(config.seed, "energy-cost", d, n)
            k = random_binary(n, d, gen, DTYPE)
            q = flip_bits(k[torch.randint(0, n, (config.cost_queries,), generator=gen)], 1, gen)
            with torch_threads(1):
                t0 = time.perf_counter()
                mem = family.memory(n, config.energy_softmax_beta).store(k)
                if family.energy == "quadratic":
                    linear = mem.linear_map("pattern")
                    retrieve: Callable[[], Any] = functools.partial(torch.matmul, q, linear)
                else:
                    retrieve = functools.partial(mem.step, q, readout="pattern")
                retrieve()
                store = time.perf_counter() - t0
                best = math.inf
                for _ in range(config.cost_repeats):
                    t0 = time.perf_counter()
                    retrieve()
                    best = min(best, time.perf_counter() - t0)
            state = mem.state_bytes("pattern")
            out.append(
                {
                    "kind": "energy_cost",
                    "energy": family.key,
                    "model": f"energy({family.label})",
                    "d": d,
                    "n_max": cap["n_max"],
                    "n": n,
                    "seconds_per_retrieval": best / config.cost_queries,
                    "store_seconds": store,
                    "state_bytes": state,
                    "bytes_per_pattern": state / n,
                    "patterns_per_kib": n * 1024 / state,
                }
            )
    return out
