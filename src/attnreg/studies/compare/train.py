"""Training and measuring one cell of the ``compare`` study (an attention regressor on one data
mode with one set of switches) and the ridge / OLS baseline rows it is measured against."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from attnreg.core.threads import torch_threads
from attnreg.data.regression import RegressionData, load_regression
from attnreg.estimators import OLS, Ridge
from attnreg.models.regressors import AttentionRegression
from attnreg.plateaus import PlateauWarning
from attnreg.studies.compare.config import CompareConfig
from attnreg.studies.compare.metrics import (
    cosine,
    hat_matrix,
    inverse_covariance,
    mse,
    relative_frobenius,
)
from attnreg.training import TrainConfig, TrainResult, train


def split_rows(
    n: int, validation_fraction: float, seed: int, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """The training rows' seeded split: ``(fit, validation)`` row indices, the validation part
    ``max(1, round(validation_fraction · n))`` rows of a random permutation."""
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).to(device)
    n_val = max(1, round(validation_fraction * n))
    return perm[n_val:], perm[:n_val]


def fit_recipe(
    model: torch.nn.Module,
    loss_fn: Callable[[int], torch.Tensor],
    eval_fn: Callable[[], float],
    config: CompareConfig,
    seed: int,
) -> TrainResult:
    """The compare study's training recipe: full-batch Adam (``config.steps``, ``config.lr``),
    gradient norm clipped to 1, early stopping on ``eval_fn`` every ``config.eval_every`` steps
    with ``config.patience`` and the best weights restored, in ``config.threads`` threads."""
    tc = TrainConfig(
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
        return train(model, loss_fn, tc, eval_fn=eval_fn, progress=False)


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
    loo = variant == "softmax"
    fit, val = split_rows(xtr.shape[0], config.validation_fraction, seed, xtr.device)
    model = AttentionRegression(
        data.d, variant, whitening, qk, layernorm, init_scale=config.init_scale, seed=seed
    ).to(config.device)
    yf, yv = ytr[fit], ytr[val]
    names = ["attn.hook_weights", "attn.hook_scores"]
    initial = None
    if keep_matrices:  # the untrained layer's attention on the test queries (locality's null)
        with torch.no_grad(), torch_threads(config.threads):
            initial = model.run_with_cache(xte, xtr, ytr, names=names, method="forward")[1]

    def loss_fn(step: int) -> torch.Tensor:
        return ((model(xtr, xtr, ytr, exclude_self=loo)[fit] - yf) ** 2).mean()

    def eval_fn() -> float:
        return mse(model(xtr, xtr, ytr, exclude_self=True)[val], yv)

    result = fit_recipe(model, loss_fn, eval_fn, config, seed)
    with torch.no_grad(), torch_threads(config.threads):
        args = (xtr, xtr, ytr, loo)
        train_pred, cache = model.run_with_cache(*args, names=names, method="forward")
        a_train = cache["attn.hook_weights"][0]
        scores_train = cache["attn.hook_scores"][0]
        test_pred, test_cache = model.run_with_cache(xte, xtr, ytr, names=names, method="forward")
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
        matrices = {
            "weights": a_train,
            "scores": scores_train,
            "metric": metric,
            "test_weights": test_cache["attn.hook_weights"][0],
        }
        if initial is not None:
            matrices["initial_test_weights"] = initial["attn.hook_weights"][0]
        if variant != "softmax":
            matrices["beta"] = metric @ xtr.mT @ ytr / xtr.shape[0]  # M XᵀY / N
    return Cell(row, training, matrices)
