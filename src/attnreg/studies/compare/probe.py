"""A probe of the open question "does the trained ``W_q W_kᵀ`` learn ``S⁻¹``?".

With one target the fit ``ŷ = X M XᵀY / N`` identifies only the vector ``M XᵀY`` (``d`` numbers
of the ``d²`` in ``M``), so nothing pulls ``M`` towards ``S⁻¹``. When the same layer must serve
``k ≥ d`` targets at once (values ``Y = X W + noise`` with ``k`` random columns ``W``), the fit
requires ``M XᵀY = (XᵀX/N)⁻¹ XᵀY / N`` for a spanning set of right-hand sides, i.e. ``M ≈ S⁻¹``.
This probe trains the regression-like attention (layer norm off, data whitening off and on)
on the synthetic inputs with ``k = 2d`` targets for ``config.probe_steps`` Adam steps (no early
stop; the best validation state is kept) and reports the correlation of the effective
``W_q W_kᵀ`` with ``S⁻¹``. Without whitening the loss in ``M`` has condition number about
``κ(S)²``, so plain gradient steps approach ``S⁻¹`` slowly along its small-eigenvalue directions.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from attnreg.data.regression import RegressionData
from attnreg.studies.compare.config import CompareConfig
from attnreg.studies.compare.train import baseline_rows, load_mode, train_cell


def multi_target_probe(
    config: CompareConfig, targets_per_feature: int = 2
) -> dict[str, dict[str, float]]:
    """``{"<qk>, whitening=<bool>": {"corr": cos(W_q W_kᵀ, S⁻¹), "test_mse_ratio": test MSE /
    ridge's, "targets": k}}`` for the regression-like attention trained on
    ``k = targets_per_feature · d`` synthetic targets."""
    seed = config.seed
    data = load_mode(config, "synthetic", seed)
    rng = np.random.default_rng(seed + 7)
    k = targets_per_feature * data.d
    weights = rng.standard_normal((data.d, k))
    noise = config.noise

    def targets(x: np.ndarray) -> np.ndarray:
        return x @ weights + noise * rng.standard_normal((len(x), k))

    y_train, y_test = targets(data.x_train), targets(data.x_test)
    mean = y_train.mean(0)
    multi: RegressionData = replace(
        data, name="synthetic, k targets", y_train=y_train - mean, y_test=y_test - mean
    )
    rows, extras = baseline_rows(multi, seed, config.ridge, config.device)
    ridge_mse = next(r["test_mse"] for r in rows if r["variant"] == "ridge")
    long = replace(config, steps=config.probe_steps, patience=config.probe_steps)
    out = {}
    for white in config.whitening:
        for qk in config.qk:
            cell = train_cell(multi, "regression", white, qk, False, seed, long, extras)
            out[f"{qk}, whitening={white}"] = {
                "corr": float(cell.row["wqwk_invcov_corr"]),
                "test_mse_ratio": float(cell.row["test_mse"]) / ridge_mse,
                "targets": float(k),
            }
    return out
