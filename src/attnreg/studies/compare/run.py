"""``compare`` — attention variants against ridge regression (``studies.md`` → compare).

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

The trained OLS-Transformer (Tan & Zhao, arXiv 2604.13656) is :mod:`compare_ols_transformer`.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnreg.core.threads import torch_threads
from attnreg.core.validation import check_choice, check_positive, check_positive_int
from attnreg.data.regression import DATA_MODES, RegressionData, load_regression
from attnreg.estimators import OLS, Ridge
from attnreg.models.regressors import QK_MODES, VARIANTS, AttentionRegression
from attnreg.output import write_csv
from attnreg.studies.common import StudyResult
from attnreg.studies.compare_metrics import (
    cosine,
    hat_matrix,
    inverse_covariance,
    mse,
    relative_frobenius,
)
from attnreg.studies.compare_probe import multi_target_probe
from attnreg.training import PlateauWarning, TrainConfig, train

ROW_KEYS = (
    "data",
    "variant",
    "whitening",
    "qk",
    "layernorm",
    "seed",
    "train_mse",
    "test_mse",
    "cos_to_ridge",
    "hat_distance",
    "wqwk_invcov_corr",
)
# The cells whose matrices the figures show: (variant, whitening, qk, layernorm).
FIGURE_CELLS = (
    ("regression", False, "separate", False),
    ("regression", True, "separate", False),
    ("softmax", False, "separate", False),
    ("whitened", False, "shared", False),
)


@dataclass
class CompareConfig:
    """Settings of the compare study (every field has a default; quick profile = defaults)."""

    data_modes: list[str] = field(default_factory=lambda: list(DATA_MODES))
    variants: list[str] = field(default_factory=lambda: list(VARIANTS))
    whitening: list[bool] = field(default_factory=lambda: [False, True])
    qk: list[str] = field(default_factory=lambda: list(QK_MODES))
    layernorm: list[bool] = field(default_factory=lambda: [False, True])
    seed: int = 0
    seeds: int = 1
    ridge: float = 1e-3
    n_train: int = 200
    n_test: int = 200
    d: int = 8
    condition: float = 100.0
    noise: float = 0.5
    steps: int = 600
    lr: float = 0.02
    eval_every: int = 10
    patience: int = 15
    validation_fraction: float = 0.2
    init_scale: float = 0.5
    device: str = "cpu"
    threads: int = 1
    probe_steps: int = 3000
    ols_transformer: bool = True
    ols_steps: int = 1000
    ols_lr: float = 0.01
    shift_magnitudes: list[float] = field(default_factory=lambda: [0.0, 0.5, 1.0, 2.0, 4.0])

    @property
    def seed_list(self) -> list[int]:
        """The seeds run: ``seed, seed + 1, …, seed + seeds − 1``."""
        return list(range(self.seed, self.seed + self.seeds))

    def __post_init__(self) -> None:
        for mode in self.data_modes:
            check_choice("data_modes", mode, DATA_MODES)
        for variant in self.variants:
            check_choice("variants", variant, VARIANTS)
        for qk in self.qk:
            check_choice("qk", qk, QK_MODES)
        for name in ("data_modes", "variants", "whitening", "qk", "layernorm"):
            if not getattr(self, name):
                raise ValueError(f"{name}: must list at least one value")
        check_positive_int("seeds", self.seeds)
        check_positive("ridge", self.ridge)
        check_positive_int("steps", self.steps)
        check_positive_int("ols_steps", self.ols_steps)
        check_positive_int("probe_steps", self.probe_steps)
        check_positive("lr", self.lr)
        check_positive("ols_lr", self.ols_lr)
        check_positive_int("threads", self.threads)
        try:
            torch.empty(0, device=self.device)
        except (RuntimeError, AssertionError) as exc:
            raise ValueError(f"device: {self.device!r} is not usable here ({exc})") from exc
        if not 0 < self.validation_fraction < 1:
            raise ValueError(
                f"validation_fraction: must be in (0, 1), got {self.validation_fraction}"
            )


def quick_config(seed: int = 0, device: str = "cpu") -> CompareConfig:
    """The ``--quick`` profile: one seed, N = 200, ≤ 600 Adam steps per cell, 1000 for the
    OLS-Transformer (a minute or two on 2 cores)."""
    return CompareConfig(seed=seed, device=device)


def full_config(seed: int = 0, device: str = "cpu") -> CompareConfig:
    """The ``--full`` profile: three seeds, N = 500, up to 3000 steps per cell."""
    return CompareConfig(
        seed=seed,
        seeds=3,
        n_train=500,
        n_test=500,
        steps=3000,
        patience=30,
        probe_steps=6000,
        ols_steps=5000,
        shift_magnitudes=[0.0, 0.25, 0.5, 1.0, 2.0, 3.0, 4.0],
        device=device,
    )


def load_mode(config: CompareConfig, mode: str, seed: int) -> RegressionData:
    """The data mode ``mode`` at the config's sizes."""
    if mode == "synthetic":
        return load_regression(
            mode,
            seed,
            n_train=config.n_train,
            n_test=config.n_test,
            d=config.d,
            condition=config.condition,
            noise=config.noise,
        )
    if mode == "sine":
        return load_regression(mode, seed, n_train=config.n_train, n_test=config.n_test)
    return load_regression(mode, seed)


@dataclass
class Cell:
    """One trained attention regressor: its row, its training record and (for the figure
    cells) its matrices."""

    row: dict[str, Any]
    training: dict[str, Any]
    matrices: dict[str, torch.Tensor] = field(default_factory=dict)


def _tensors(data: RegressionData, device: str) -> tuple[torch.Tensor, ...]:
    return tuple(
        torch.as_tensor(a, dtype=torch.float64, device=device)
        for a in (data.x_train, data.y_train, data.x_test, data.y_test)
    )


def baseline_rows(
    data: RegressionData, seed: int, lam: float, device: str = "cpu"
) -> tuple[list[dict[str, Any]], dict[str, torch.Tensor]]:
    """The ``ridge`` and ``ols`` rows (project estimators) and ridge's predictions/matrices."""
    xtr, ytr, xte, yte = _tensors(data, device)
    both = torch.cat([xtr, xte])
    ridge = Ridge(lam).predict(xtr, ytr, both)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ols = OLS().predict(xtr, ytr, both)
    n, d = xtr.shape
    h = hat_matrix(xtr, lam)
    s_inv = inverse_covariance(xtr)
    eye = torch.eye(d, dtype=xtr.dtype, device=xtr.device)
    metrics = {
        "ridge": (ridge, h, n * torch.linalg.inv(xtr.mT @ xtr + lam * eye)),
        "ols": (ols, xtr @ torch.linalg.pinv(xtr), s_inv),
    }
    rows = []
    for name, (pred, hat, metric) in metrics.items():
        rows.append(
            _row(data.name, name, None, None, None, seed)
            | {
                "train_mse": mse(pred[:n], ytr),
                "test_mse": mse(pred[n:], yte),
                "cos_to_ridge": cosine(pred[n:], ridge[n:]),
                "hat_distance": relative_frobenius(hat, h),
                "wqwk_invcov_corr": cosine(metric, s_inv),
            }
        )
    beta = torch.linalg.solve(xtr.mT @ xtr + lam * eye, xtr.mT @ ytr)
    extras = {
        "ridge_test": ridge[n:],
        "ridge_train": ridge[:n],
        "ridge_beta": beta,
        "hat": h,
        "s_inv": s_inv,
    }
    return rows, extras


def _row(
    data: str, variant: str, whitening: bool | None, qk: str | None, ln: bool | None, seed: int
) -> dict[str, Any]:
    return {
        "data": data,
        "variant": variant,
        "whitening": whitening,
        "qk": qk,
        "layernorm": ln,
        "seed": seed,
    }


def train_cell(
    data: RegressionData,
    variant: str,
    whitening: bool,
    qk: str,
    layernorm: bool,
    seed: int,
    config: CompareConfig,
    extras: dict[str, torch.Tensor],
    keep_matrices: bool = False,
) -> Cell:
    """Train one attention regressor on ``data`` and measure it (see module docstring).

    Every training row is a key/value (the same context the test queries attend to). The
    training rows are split (seeded) into fit and validation rows: the loss is the MSE of the
    fit rows' predictions (leave-one-out for softmax, which could otherwise copy its own
    target; with the row itself for the others, whose fit is then ``H Y``); early stopping and
    the restored best weights follow the MSE of the validation rows' leave-one-out predictions
    (their targets are values for the other rows, never a training target or their own value).
    """
    xtr, ytr, xte, yte = _tensors(data, config.device)
    n = xtr.shape[0]
    loo = variant == "softmax"
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).to(xtr.device)
    n_val = max(1, round(config.validation_fraction * n))
    val, fit = perm[:n_val], perm[n_val:]
    model = AttentionRegression(
        data.d, variant, whitening, qk, layernorm, init_scale=config.init_scale, seed=seed
    ).to(config.device)
    yf, yv = ytr[fit], ytr[val]

    def loss_fn(step: int) -> torch.Tensor:
        return ((model(xtr, xtr, ytr, exclude_self=loo)[fit] - yf) ** 2).mean()

    def eval_fn() -> float:
        return mse(model(xtr, xtr, ytr, exclude_self=True)[val], yv)

    cfg = TrainConfig(
        steps=config.steps,
        lr=config.lr,
        clip=1.0,
        seed=seed,
        eval_every=config.eval_every,
        patience=config.patience,
        restore_best=True,
        plateau_window=max(config.steps // 4, 1),
    )
    with warnings.catch_warnings(), torch_threads(config.threads):
        warnings.simplefilter("ignore", PlateauWarning)
        result = train(model, loss_fn, cfg, eval_fn=eval_fn, progress=False)
    with torch.no_grad(), torch_threads(config.threads):
        names = ["attn.hook_weights", "attn.hook_scores"]
        args = (xtr, xtr, ytr, loo)
        train_pred, cache = model.run_with_cache(*args, names=names, method="forward")
        a_train = cache["attn.hook_weights"][0]
        scores_train = cache["attn.hook_scores"][0]
        test_pred = model(xte, xtr, ytr)
        metric = model.effective_metric(xtr)[0]
    row = _row(data.name, variant, whitening, qk, layernorm, seed) | {
        "train_mse": mse(train_pred, ytr),
        "test_mse": mse(test_pred, yte),
        "cos_to_ridge": cosine(test_pred, extras["ridge_test"]),
        "hat_distance": relative_frobenius(a_train, extras["hat"]),
        "wqwk_invcov_corr": cosine(metric, extras["s_inv"]),
    }
    training = {
        "data": data.name,
        "variant": variant,
        "whitening": whitening,
        "qk": qk,
        "layernorm": layernorm,
        "seed": seed,
        "steps_run": result.steps_run,
        "best_step": result.best_step,
        "best_val_mse": result.best_metric,
        "stopped": result.stopped,
        "stuck": result.stuck,
        "seconds": result.seconds,
        "cpu_seconds": result.cpu_seconds,
    }
    matrices: dict[str, torch.Tensor] = {}
    if keep_matrices:
        matrices = {"weights": a_train, "scores": scores_train, "metric": metric}
        if variant != "softmax":
            matrices["beta"] = metric @ xtr.mT @ ytr / n  # effective weights M XᵀY / N
    return Cell(row, training, matrices)


def run(
    config: CompareConfig | None = None,
    out_dir: str | Path | None = None,
    progress: bool = False,
) -> StudyResult:
    """Run the study: every data mode × variant × switch × seed, the baselines, the trained
    OLS-Transformer, the figures (into ``out_dir`` if given) and the summary.

    Runs with ``config.threads`` torch threads (1 by default: these matrices are small, and
    intra-op threads only add waiting on a shared machine), restored afterwards.
    """

    cfg = config or CompareConfig()
    with torch_threads(cfg.threads):
        return _run(cfg, out_dir, progress)


def _run(cfg: CompareConfig, out_dir: str | Path | None, progress: bool) -> StudyResult:
    from attnreg.studies import compare_figures, compare_ols_transformer, compare_summary

    wall0, cpu0 = time.perf_counter(), time.process_time()
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
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc="compare", disable=not progress, file=sys.stderr, leave=False)
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
                bar.update(1)
    bar.close()
    ols_tf = compare_ols_transformer.run(cfg) if cfg.ols_transformer else None
    probe = None
    if "synthetic" in cfg.data_modes and "regression" in cfg.variants:
        probe = multi_target_probe(cfg)
    result = StudyResult("compare", asdict(cfg), rows)
    result.summary = compare_summary.summarise(rows, training, sklearn_gap, ols_tf, cfg, probe)
    if out_dir is not None:
        out = Path(out_dir)
        result.figures = compare_figures.make_figures(rows, kept, baselines, datasets, out)
        if ols_tf is not None:
            result.figures += compare_ols_transformer.make_figures(ols_tf, out)
            compare_ols_transformer.write_tables(ols_tf, out)
        write_csv(training, out / "compare_training.csv")
    result.summary["timing"] = (
        f"wall {time.perf_counter() - wall0:.1f} s, CPU {time.process_time() - cpu0:.1f} s "
        f"({torch.get_num_threads()} torch threads)"
    )
    if out_dir is not None:
        result.write(out)
        (out / "compare_summary.json").write_text(json.dumps(result.summary, indent=2))
    return result


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
