"""Loss against context position: the study's tasks as sequences, the trained layers' and the
estimators' losses at every context size ``n = 1 … N`` (Garg et al. 2022's curve, read out of
one causal pass for a layer).

References at every position, on the same evaluation tasks: the posterior mean (ridge with
``λ = σ²``, the Bayes-optimal predictor for ``w ~ N(0, I)`` and noise ``σ``; OLS, minimum-norm
below ``n = d``, when ``σ = 0``), one GD step with the η line-searched per position on separate
fit tasks, and LMS with the one β (fitted on the fit tasks) that minimises the mean loss over
positions.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch
from scipy import optimize

from attnreg.core.whitening import RankWarning
from attnreg.data.tasks import Tasks, TaskSampler, random_covariance
from attnreg.estimators import GD, OLS, Predictor, Ridge
from attnreg.sequence import delta_rule
from attnreg.studies.layers.config import LayersConfig


def make_sampler(cfg: LayersConfig, kind: str) -> TaskSampler:
    """``"clean"``: icl's tasks (``x ~ U(−0.5, 0.5)^d``, no noise); ``"noisy"``: Gaussian inputs
    with a random covariance of condition number ``cfg.condition`` and the same trace
    (``d/12``), labels with noise ``cfg.noise_std``."""
    if kind == "clean":
        return TaskSampler(d=cfg.d, n_ctx=cfg.n_ctx)
    cov = random_covariance(cfg.d, cfg.condition, seed=cfg.seed) / 12
    return TaskSampler(
        d=cfg.d, n_ctx=cfg.n_ctx, inputs="gaussian", covariance=cov, noise_std=cfg.noise_std
    )


def sequence(tasks: Tasks) -> tuple[torch.Tensor, torch.Tensor]:
    """The tasks as sequences of ``N + 1`` examples: ``x (B, N+1, d)``, ``y (B, N+1, dy)``."""
    return torch.cat([tasks.x_ctx, tasks.x_query], 1), torch.cat([tasks.y_ctx, tasks.y_query], 1)


def position_losses(pred: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """``0.5 × MSE`` at every position: ``pred (B, N, dy)`` against ``y[:, 1:]`` -> ``(N,)``."""
    err = (pred.detach().to(torch.float64) - y[:, 1:].to(torch.float64)).pow(2)
    return (0.5 * err.mean(dim=(0, 2))).numpy()


def prefix_predictions(predictor: Predictor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``predictor`` fitted on the first n pairs and read at ``x_{n+1}``, for n = 1 … N."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RankWarning)
        outs = [
            predictor.predict(x[:, :n], y[:, :n], x[:, n : n + 1]) for n in range(1, x.shape[1])
        ]
    return torch.cat(outs, dim=1)


def lms_positions(x: torch.Tensor, y: torch.Tensor, beta: float) -> torch.Tensor:
    """LMS with step β read out at every position (the delta rule with ``W_Q = W_K = I``)."""
    n = x.shape[1] - 1
    q, k, v = x[:, 1:].unsqueeze(1), x[:, :n].unsqueeze(1), y[:, :n].unsqueeze(1)
    return delta_rule(q, k, v, beta, mode="recurrent")[:, 0]


def fit_lms_beta(x: torch.Tensor, y: torch.Tensor) -> float:
    """The β minimising LMS's mean loss over positions on ``(x, y)``, by a bounded search on
    ``log β`` up to the stable ``2 / max ‖x_i‖²``."""
    hi = math.log(2.0 / float(x.pow(2).sum(-1).max()))

    def loss(log_beta: float) -> float:
        try:
            value = float(position_losses(lms_positions(x, y, math.exp(log_beta)), y).mean())
        except ValueError:  # overflow
            return 1e300
        return value if math.isfinite(value) else 1e300

    res = optimize.minimize_scalar(
        loss, bounds=(hi - math.log(1e3), hi), method="bounded", options={"xatol": 1e-3}
    )
    return math.exp(float(res.x))


def gd_positions(
    fit: tuple[torch.Tensor, torch.Tensor], test: tuple[torch.Tensor, torch.Tensor]
) -> tuple[np.ndarray, np.ndarray]:
    """One GD step with the η line-searched on ``fit`` at every position: ``(losses on test,
    η per position)``. The prediction is linear in η, so the line search is exact."""
    g_fit = prefix_predictions(GD(1.0, 1), *fit)
    y_fit = fit[1][:, 1:]
    eta = ((g_fit * y_fit).sum(dim=(0, 2)) / (g_fit * g_fit).sum(dim=(0, 2))).clamp_min(1e-12)
    g_test = prefix_predictions(GD(1.0, 1), *test)
    return position_losses(g_test * eta[None, :, None], test[1]), eta.numpy()


def reference_curves(
    cfg: LayersConfig,
    kind: str,
    fit: tuple[torch.Tensor, torch.Tensor],
    test: tuple[torch.Tensor, torch.Tensor],
) -> dict[str, tuple[np.ndarray, dict[str, float]]]:
    """The references' losses at every position on ``test`` and their parameters."""
    noise = cfg.noise_std if kind == "noisy" else 0.0
    optimal: Predictor = Ridge(noise**2) if noise > 0 else OLS()
    name = f"ridge (λ = σ² = {noise**2:g})" if noise > 0 else "OLS"
    curves: dict[str, tuple[np.ndarray, dict[str, float]]] = {
        name: (position_losses(prefix_predictions(optimal, *test), test[1]), {})
    }
    gd_loss, eta = gd_positions(fit, test)
    curves["GD (η per position)"] = (gd_loss, {"eta_last": float(eta[-1])})
    beta = fit_lms_beta(*fit)
    curves[f"LMS (β = {beta:.3g})"] = (
        position_losses(lms_positions(*test, beta), test[1]),
        {"beta": beta},
    )
    return curves
