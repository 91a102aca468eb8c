"""The energy family's descent check: every separation ``F`` of
:mod:`~attnreg.studies.capacity.energy` lowers its energy at every step (the concave–convex
procedure's margin), from random and from near-pattern queries, to rounding."""

from __future__ import annotations

import math
from typing import Any

import torch

from attnreg.data.patterns import flip_bits, random_binary
from attnreg.memory import EnergyMemory
from attnreg.studies.capacity import families as fam
from attnreg.studies.capacity.config import CapacityConfig
from attnreg.studies.capacity.energy import DTYPE, UNIT_ROUNDOFF, energy_families


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
