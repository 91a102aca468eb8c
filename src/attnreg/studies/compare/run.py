"""``compare`` — attention variants against ridge regression.

The "Everything is matter" blog pipeline as one study: three data modes (synthetic linear with
a set condition number, scikit-learn's diabetes, a sine toy) × three attention regressors
(:class:`attnreg.models.regressors.AttentionRegression`: softmax, regression-like, whitened) ×
switches (data whitening on/off; ``W_q = W_k``, separate, or one ``d × d`` matrix; layer norm
on/off), each trained by full-batch Adam (:func:`attnreg.training.train`) on the training rows
(self-attention; early stopping on a validation split of the training rows), then evaluated
with all training rows as keys/values and the test rows as queries (cross-attention). Ridge
(λ = 1e-3, Hoerl & Kennard 1970) and OLS from :mod:`attnreg.estimators` are the baselines.

Rows (one per data mode × variant × switches × seed, plus the ``ridge`` / ``ols`` rows) have
exactly the keys of :data:`ROW_KEYS`:

* ``train_mse``, ``test_mse`` — on the (standardised / centred) targets;
* ``cos_to_ridge`` — cosine of the test predictions with ridge's;
* ``hat_distance`` — ``‖A − H‖_F / ‖H‖_F``, ``A`` the attention on the training rows, ``H`` the
  ridge hat matrix ``X (XᵀX + λI)⁻¹ Xᵀ``;
* ``wqwk_invcov_corr`` — cosine (uncentred correlation, i.e. after the best scale) of the
  effective ``W_q W_kᵀ`` in input coordinates with ``S⁻¹``, ``S = XᵀX/N``.

The trained OLS-Transformer (Tan & Zhao, arXiv 2604.13656) is
:mod:`attnreg.studies.compare.ols_transformer`.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

import numpy as np
import torch

from attnreg.core.threads import torch_threads
from attnreg.data.regression import RegressionData
from attnreg.progress import Progress
from attnreg.studies.common import Section, StudyResult
from attnreg.studies.compare.config import FIGURE_CELLS, SOFTMAX_CELL, CompareConfig
from attnreg.studies.compare.probe import multi_target_probe
from attnreg.studies.compare.sections import SECTIONS
from attnreg.studies.compare.train import Cell, baseline_rows, load_mode, train_cell


def run(config: CompareConfig | None = None, progress: Progress | None = None) -> StudyResult:
    """Run the study: every data mode × variant × switch × seed, the baselines, the trained
    OLS-Transformer, the figures, the tables and the summary (writes nothing).

    Runs with ``config.threads`` torch threads (1 by default: these matrices are small, and
    intra-op threads only add waiting on a shared machine), restored afterwards.
    """

    cfg = config or CompareConfig()
    with torch_threads(cfg.threads):
        return _run(cfg, progress or Progress.quiet())


def _run(cfg: CompareConfig, progress: Progress) -> StudyResult:
    from attnreg.studies.compare import locality as compare_locality

    wall0, cpu0 = time.perf_counter(), time.process_time()
    result = StudyResult("compare", asdict(cfg), [])
    cells, kept, datasets = cells_section(cfg, progress)
    result.add(cells)
    trained = {
        mode: {
            "softmax, trained": cell.matrices["test_weights"],
            "softmax, initial": cell.matrices["initial_test_weights"],
        }
        for (mode, *switches), cell in kept.items()
        if tuple(switches) == SOFTMAX_CELL
    }
    for label, section in SECTIONS:
        with progress.stage(label):
            if section is compare_locality.section:  # judged on the trained softmax layers
                result.add(compare_locality.section(cfg, datasets, trained))
            else:
                result.add(section(cfg, datasets))
    result.summary["timing"] = (
        f"wall {time.perf_counter() - wall0:.1f} s, CPU {time.process_time() - cpu0:.1f} s "
        f"({torch.get_num_threads()} torch threads)"
    )
    return result


def cells_section(
    cfg: CompareConfig, progress: Progress
) -> tuple[Section, dict[tuple[Any, ...], Cell], dict[str, RegressionData]]:
    """The attention cells (every data mode × variant × switch × seed) beside the baselines,
    the trained OLS-Transformer, the ``W_q W_kᵀ`` probe and its in-context training: their
    rows, summary, checks, claims, figures and tables; also the cells kept for the figures and
    the first seed's data per mode (the further sections read them)."""
    from attnreg.studies.compare import figures as compare_figures
    from attnreg.studies.compare import in_context as compare_in_context
    from attnreg.studies.compare import ols_transformer as compare_ols_transformer
    from attnreg.studies.compare import summary as compare_summary

    rows: list[dict[str, Any]] = []
    training: list[dict[str, Any]] = []
    kept: dict[tuple[Any, ...], Cell] = {}
    baselines: dict[str, dict[str, torch.Tensor]] = {}
    datasets: dict[str, RegressionData] = {}
    sklearn_gap = 0.0
    grid = [
        (v, w, q, ln)
        for v in cfg.variants
        for w in cfg.whitening
        for q in cfg.qk
        for ln in cfg.layernorm
    ]
    total = len(cfg.data_modes) * cfg.seeds * len(grid)
    with progress.stage("train attention cells", total=total) as bar:
        for mode in cfg.data_modes:
            for seed in cfg.seed_list:
                data = load_mode(cfg, mode, seed)
                base, extras = baseline_rows(data, seed, cfg.ridge, cfg.device)
                sklearn_gap = max(sklearn_gap, ridge_sklearn_gap(data, cfg.ridge, extras))
                rows.extend(base)
                first = seed == cfg.seed
                if first:
                    baselines[mode], datasets[mode] = extras, data
                for variant, white, qk, ln in grid:
                    keep = first and (variant, white, qk, ln) in FIGURE_CELLS
                    cell = train_cell(data, variant, white, qk, ln, seed, cfg, extras, keep)
                    rows.append(cell.row)
                    training.append(cell.training)
                    if keep:
                        kept[(mode, variant, white, qk, ln)] = cell
                    bar.advance(label=f"{mode} {variant}")
    ols_tf = None
    if cfg.ols_transformer:
        with progress.stage("OLS-Transformer"):
            ols_tf = compare_ols_transformer.run(cfg)
    probe = None
    if "synthetic" in cfg.data_modes and "regression" in cfg.variants:
        with progress.stage("W_q W_kᵀ probe"):
            probe = multi_target_probe(cfg)
    in_context = None
    if cfg.in_context:
        with progress.stage("W_q W_kᵀ trained in context"):
            in_context = compare_in_context.measure(cfg)
    summary = compare_summary.summarise(rows, training, sklearn_gap, ols_tf, cfg, probe)
    if in_context is not None:
        summary[compare_in_context.QUESTION] = compare_in_context.answer(in_context)
    checks = compare_summary.checks(rows, sklearn_gap, cfg)
    claims = compare_summary.claims(rows, ols_tf, cfg, in_context)
    figures = compare_figures.make_figures(rows, kept, baselines, datasets)
    tables = {"compare_training": training}
    if ols_tf is not None:
        figures += compare_ols_transformer.make_figures(ols_tf)
        tables |= compare_ols_transformer.tables(ols_tf)
    return Section(rows, summary, checks, figures, tables, claims), kept, datasets


def ridge_sklearn_gap(data: RegressionData, lam: float, extras: dict[str, torch.Tensor]) -> float:
    """``max |ŷ_ridge − ŷ_sklearn|`` over train and test rows, scikit-learn's
    ``Ridge(alpha=λ, fit_intercept=False)`` fitted on the same split (the data are centred, so
    this equals scikit-learn's fit with intercept on the synthetic and diabetes modes)."""
    from sklearn.linear_model import Ridge as SkRidge

    sk = SkRidge(alpha=lam, fit_intercept=False, solver="cholesky")
    sk.fit(data.x_train, data.y_train)
    ours = torch.cat([extras["ridge_train"], extras["ridge_test"]]).cpu().numpy()
    theirs = sk.predict(np.concatenate([data.x_train, data.x_test])).reshape(ours.shape)
    return float(np.abs(ours - theirs).max())
