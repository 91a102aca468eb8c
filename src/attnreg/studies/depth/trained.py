"""What trained deep layers do: linear attention stacks of several depths trained on
anisotropic in-context regression, each layer's prediction matched to the iterates of GD,
preconditioned GD and Newton–Schulz (:mod:`attnreg.studies.depth.iterates`).

Models: :class:`attnreg.models.TrainableLSA` (``variant="full"``: free ``KQ = W_Kᵀ W_Q`` and
``PV = P W_V`` per layer — the same functions as the four factors, without the factorisation's
saddle; by default residual stream on, no LayerNorm: the von Oswald et al. 2023 architecture;
``train_residual`` / ``train_layernorm`` of the config switch either). Tasks:
``x ~ N(0, Σ)``, ``κ(Σ) = kappa``, ``w ~ N(0, I)``, noiseless labels, one query. Each layer's
prediction is the read-out of the hidden state after it (minus the query's y-slot).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from attnreg.core.whitening import RankWarning
from attnreg.data.tasks import Tasks, TaskSampler, query_loss, random_covariance
from attnreg.estimators import OLS
from attnreg.models import TrainableLSA
from attnreg.progress import Progress
from attnreg.studies.depth.config import DepthConfig
from attnreg.studies.depth.iterates import METHODS, best_matches, method_iterates
from attnreg.training import TrainConfig, generator, train


def train_stack(
    sampler: TaskSampler, layers: int, steps: int, cfg: DepthConfig, seed: int, progress: Progress
) -> TrainableLSA:
    """A ``layers``-deep LSA (residual stream and LayerNorm as ``cfg.train_residual`` and
    ``cfg.train_layernorm`` say) trained by Adam (cosine schedule, clip 10) on fresh batches of
    ``cfg.batch`` tasks from ``sampler`` (float32)."""
    model = TrainableLSA(
        sampler.d,
        1,
        layers,
        init_scale=cfg.init_scale,
        seed=seed,
        residual=cfg.train_residual,
        layernorm=cfg.train_layernorm,
    )
    gen = generator(seed)

    def loss_fn(step: int) -> torch.Tensor:
        t = sampler.sample(cfg.batch, gen, torch.float32)
        return query_loss(model.forward_predict(t.x_ctx, t.y_ctx, t.x_query), t.y_query)

    config = TrainConfig(
        steps=steps, lr=cfg.lr, schedule="cosine", clip=10.0, seed=seed, eval_every=steps
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a plateau is reported by the losses, not a warning
        train(model, loss_fn, config, progress=progress, description=f"{layers}-layer stack")
    return model


def ols_reference(tasks: Tasks) -> torch.Tensor:
    """The minimum-norm least-squares prediction on ``tasks``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RankWarning)
        return OLS().predict(tasks.x_ctx, tasks.y_ctx, tasks.x_query)


def layer_losses(preds: torch.Tensor, tasks: Tasks) -> list[float]:
    """``0.5 × MSE`` of every depth's prediction ``(L + 1, B, M, dy)`` on the tasks."""
    return [float(query_loss(p, tasks.y_query)) for p in preds]


def trained_rows(cfg: DepthConfig, progress: Progress) -> list[dict[str, Any]]:
    """Rows ``kind="trained"`` (one per stack × layer × method: ``best_match``,
    ``match_error``, ``residual_cosine``, the layer's ``loss``) and ``kind="iterate"`` (one
    per method × iterate: its ``loss``), for every κ × N × depth of the config."""
    rows: list[dict[str, Any]] = []
    cells = [(k, n) for k in cfg.train_kappas for n in cfg.train_n_ctx]
    for ci, (kappa, n) in enumerate(cells):
        sigma = random_covariance(cfg.train_d, kappa, seed=cfg.seed)
        sampler = TaskSampler(d=cfg.train_d, n_ctx=n, inputs="gaussian", covariance=sigma)
        test = sampler.sample(cfg.eval_tasks, generator(10**6 + cfg.seed + ci), torch.float64)
        ref = ols_reference(test)
        iterates = method_iterates(test, sigma, cfg.max_iterates)
        for method, preds in iterates.items():
            for k, loss in enumerate(layer_losses(preds, test)):
                rows.append(
                    {"kind": "iterate", "kappa": kappa, "n_ctx": n, "method": method}
                    | {"iterate": k, "loss": loss}
                )
        for depth in cfg.train_layers:
            seed = cfg.seed * 1000 + 100 * ci + depth
            model = train_stack(sampler, depth, cfg.steps, cfg, seed, progress)
            preds = model.depth_predictions(test.x_ctx, test.y_ctx, test.x_query)
            losses = layer_losses(preds, test)
            for method in METHODS:
                for match in best_matches(preds, iterates[method], ref):
                    rows.append(
                        {"kind": "trained", "kappa": kappa, "n_ctx": n, "layers": depth}
                        | {"method": method, **match, "loss": losses[match["layer"]]}
                    )
    return rows
