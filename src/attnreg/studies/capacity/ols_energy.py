"""The OLS-Transformer as one quadratic step of the energy family
(:mod:`~attnreg.studies.capacity.energy`): its forward pass on its own context against the
projection, and the energy against ``½ RSS``, each within a least-squares error bound."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from attnreg.memory import EnergyMemory
from attnreg.studies.capacity import families as fam
from attnreg.studies.capacity.config import CapacityConfig
from attnreg.studies.capacity.energy import DTYPE, UNIT_ROUNDOFF


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
