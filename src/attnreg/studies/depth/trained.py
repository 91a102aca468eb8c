"""What trained deep layers do: linear attention stacks of several depths trained on
anisotropic in-context regression, each layer's prediction matched to the iterates of GD,
preconditioned GD and Newton–Schulz (:mod:`attnreg.studies.depth.iterates`).

Fu et al.'s metric (:func:`~attnreg.studies.depth.iterates.fu_trend`): the deepest stack's layers
matched by the cosine similarity of their error vectors ``Ŷ − y`` over each task's queries (as
many as context points: the length of Fu et al.'s error vector over the prefixes; the stacks
are trained at one context size, so the queries, not the prefixes, make the vector) against
Newton's iterates 0–23 and GD's on a log grid to 1024 steps; rows ``kind="fu_layer"`` and
``kind="fu_trend"``.

Models: :class:`attnreg.models.TrainableLSA` (``variant="full"``: free ``KQ = W_Kᵀ W_Q`` and
``PV = P W_V`` per layer — the same functions as the four factors, without the factorisation's
saddle; by default residual stream on, no LayerNorm: the von Oswald et al. 2023 architecture;
``train_residual`` / ``train_layernorm`` of the config switch either). Tasks:
``x ~ N(0, Σ)``, ``κ(Σ) = kappa``, ``w ~ N(0, I)``, noiseless labels, one query in training
(``N`` queries in evaluation); with ``train_rotation`` each task's ``Σ`` is the same spectrum under
its own random rotation (Fu et al.), else one ``Σ`` for every task. Each layer's
prediction is the read-out of the hidden state after it (minus the query's y-slot).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch

from attnreg.core.whitening import RankWarning
from attnreg.data.tasks import Tasks, TaskSampler, query_loss, random_covariance
from attnreg.estimators import OLS
from attnreg.models import TrainableLSA
from attnreg.progress import Progress
from attnreg.studies.depth.config import DepthConfig
from attnreg.studies.depth.iterates import (
    GD_GRID,
    METHODS,
    NEWTON_STEPS,
    best_matches,
    best_steps,
    error_cosines,
    fu_trend,
    gd_grid_iterates,
    method_iterates,
    newton_iterates,
)
from attnreg.training import TrainConfig, generator, train
from attnreg.training_config import TrainResult

PLATEAU = TrainConfig(steps=1)
"""Convergence is attnreg's plateau criterion (:func:`attnreg.plateaus.find_plateaus`): windows
of ``plateau_window`` steps, flat when the mean loss falls by less than ``plateau_rtol``."""


@dataclass(frozen=True)
class CellSampler:
    """Tasks of one (κ, N) cell: ``x ~ N(0, Σ)``, ``w ~ N(0, I)``, noiseless. ``rotate``: each
    task's ``Σ`` is the spectrum of :func:`random_covariance` (log-spaced, ``tr Σ = d``) under
    its own Haar-random rotation; else the one ``Σ = random_covariance(d, kappa, seed)``."""

    d: int
    n_ctx: int
    kappa: float
    seed: int
    rotate: bool = False
    n_query: int = 1

    @cached_property
    def sigma(self) -> torch.Tensor:
        """The fixed ``Σ`` (``rotate`` false), or the spectrum's diagonal matrix."""
        if not self.rotate:
            return random_covariance(self.d, self.kappa, seed=self.seed)
        lam = float(self.kappa) ** -torch.linspace(0, 1, self.d, dtype=torch.float64)
        return torch.diag(lam * self.d / lam.sum())

    @cached_property
    def fixed(self) -> TaskSampler:
        """The sampler of the fixed ``Σ`` (built once: its Cholesky factor is not free)."""
        return TaskSampler(
            d=self.d,
            n_ctx=self.n_ctx,
            n_query=self.n_query,
            inputs="gaussian",
            covariance=self.sigma,
        )

    def sample(self, batch: int, gen: torch.Generator, dtype: torch.dtype) -> Tasks:
        if not self.rotate:
            return self.fixed.sample(batch, gen, dtype)
        return self.sample_with_covariance(batch, gen, dtype)[0]

    def sample_with_covariance(
        self, batch: int, gen: torch.Generator, dtype: torch.dtype
    ) -> tuple[Tasks, torch.Tensor]:
        """``batch`` tasks and their covariance (``(d, d)``, or ``(B, d, d)`` when rotated)."""
        sigma = self.sigma
        if not self.rotate:
            return self.fixed.sample(batch, gen, dtype), sigma
        n, m, d = self.n_ctx, self.n_query, self.d
        z = torch.randn(batch, n + m, d, generator=gen, dtype=torch.float64)
        vecs, r = torch.linalg.qr(torch.randn(batch, d, d, generator=gen, dtype=torch.float64))
        vecs = vecs * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1)).unsqueeze(-2)  # Haar
        x = (z * torch.diagonal(sigma).sqrt()) @ vecs.mT
        w = torch.randn(batch, 1, d, generator=gen, dtype=torch.float64)
        y = x @ w.mT
        tasks = Tasks(x[:, :n], y[:, :n], x[:, n:], y[:, n:], w).to(dtype=dtype)
        return tasks, vecs @ sigma @ vecs.mT


def converged(losses: list[float]) -> tuple[bool, float]:
    """Whether the run's loss has stopped falling: the mean over the last window of
    ``PLATEAU.plateau_window`` steps is within ``PLATEAU.plateau_rtol`` (relative) of the
    window before, up or down (a loss that rose by more has not settled either); and that
    relative fall (nan, not converged, with fewer than two windows' steps)."""
    window = PLATEAU.plateau_window
    if len(losses) < 2 * window:
        return False, math.nan
    last = sum(losses[-window:]) / window
    before = sum(losses[-2 * window : -window]) / window
    fall = (before - last) / abs(before) if before else math.nan
    return bool(math.isfinite(fall) and abs(fall) < PLATEAU.plateau_rtol), fall


def train_stack(
    sampler: TaskSampler | CellSampler,
    layers: int,
    steps: int,
    cfg: DepthConfig,
    seed: int,
    progress: Progress,
    start: TrainableLSA | None = None,
) -> tuple[TrainableLSA, TrainResult]:
    """A ``layers``-deep LSA (residual stream and LayerNorm as ``cfg.train_residual`` and
    ``cfg.train_layernorm`` say) trained by Adam (cosine schedule, clip 10) on fresh batches of
    ``cfg.batch`` tasks from ``sampler`` (in ``cfg.train_dtype``), and the run's result (its
    losses); from its seeded initialisation at ``cfg.lr``, or grown from the shallower stack
    ``start`` (:meth:`TrainableLSA.grow_from`) at ``cfg.train_grow_lr``."""
    model = TrainableLSA(
        sampler.d,
        1,
        layers,
        init_scale=cfg.init_scale,
        seed=seed,
        residual=cfg.train_residual,
        layernorm=cfg.train_layernorm,
        dtype=getattr(torch, cfg.train_dtype),
    )
    lr = cfg.lr
    if start is not None:
        model.grow_from(start)
        lr = cfg.train_grow_lr
    gen = generator(seed)

    def loss_fn(step: int) -> torch.Tensor:
        t = sampler.sample(cfg.batch, gen, getattr(torch, cfg.train_dtype))
        return query_loss(model.forward_predict(t.x_ctx, t.y_ctx, t.x_query), t.y_query)

    config = TrainConfig(
        steps=steps, lr=lr, schedule="cosine", clip=10.0, seed=seed, eval_every=steps
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a plateau is reported by the losses, not a warning
        result = train(
            model, loss_fn, config, progress=progress, description=f"{layers}-layer stack"
        )
    return model, result


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
    ``match_error``, ``residual_cosine``, the layer's ``loss``), ``kind="iterate"`` (one per
    method × iterate: its ``loss``), for every κ × N × depth of the config; and for the deepest
    stack of each cell Fu et al.'s metric: ``kind="fu_layer"`` (one per layer: ``best_newton``,
    ``newton_cosine``, ``best_gd``, ``gd_cosine``) and ``kind="fu_trend"`` (one per cell:
    :func:`~attnreg.studies.depth.iterates.fu_trend`'s numbers, the run's scale and its
    convergence: ``converged``, ``loss_fall``, ``loss``, ``gd_loss``)."""
    rows: list[dict[str, Any]] = []
    cells = [(k, n) for k in cfg.train_kappas for n in cfg.train_n_ctx]
    deepest = max(cfg.train_layers)
    for ci, (kappa, n) in enumerate(cells):
        cell = CellSampler(cfg.train_d, n, kappa, cfg.seed, cfg.train_rotation)
        evaluation = CellSampler(cfg.train_d, n, kappa, cfg.seed, cfg.train_rotation, n_query=n)
        test, sigma = evaluation.sample_with_covariance(
            cfg.eval_tasks, generator(10**6 + cfg.seed + ci), torch.float64
        )
        ref = ols_reference(test)
        iterates = method_iterates(test, sigma, cfg.max_iterates)
        for method, preds in iterates.items():
            for k, loss in enumerate(layer_losses(preds, test)):
                rows.append(
                    {"kind": "iterate", "kappa": kappa, "n_ctx": n, "method": method}
                    | {"iterate": k, "loss": loss}
                )
        depths = sorted(cfg.train_layers) if cfg.train_grow else cfg.train_layers
        model: TrainableLSA | None = None
        for depth in depths:
            seed = cfg.seed * 1000 + 100 * ci + depth
            start: TrainableLSA | None = model if cfg.train_grow else None
            model, result = train_stack(cell, depth, cfg.steps, cfg, seed, progress, start)
            preds = model.depth_predictions(test.x_ctx, test.y_ctx, test.x_query)
            losses = layer_losses(preds, test)
            for method in METHODS:
                for match in best_matches(preds, iterates[method], ref):
                    rows.append(
                        {"kind": "trained", "kappa": kappa, "n_ctx": n, "layers": depth}
                        | {"method": method, **match, "loss": losses[match["layer"]]}
                    )
            if depth != deepest:
                continue
            rows += fu_rows(cfg, (kappa, n), test, preds, result, ci)
            for s in range(1, cfg.fu_seeds):
                model, result = deepest_stack(cell, depths, cfg, ci, 10_000 * s, progress)
                preds = model.depth_predictions(test.x_ctx, test.y_ctx, test.x_query)
                rows += fu_rows(cfg, (kappa, n), test, preds, result, ci, s)
    return rows


def deepest_stack(
    cell: CellSampler,
    depths: list[int],
    cfg: DepthConfig,
    index: int,
    offset: int,
    progress: Progress,
) -> tuple[TrainableLSA, TrainResult]:
    """Another seed of cell ``index``'s deepest stack (its seeds shifted by ``offset``): trained
    from its initialisation, or with ``cfg.train_grow`` at the end of its own chain of the
    shallower depths (trained, not reported)."""
    chain = depths if cfg.train_grow else [max(depths)]
    model: TrainableLSA | None = None
    for depth in chain:
        seed = cfg.seed * 1000 + 100 * index + depth + offset
        model, result = train_stack(cell, depth, cfg.steps, cfg, seed, progress, model)
    assert model is not None
    return model, result


def fu_rows(
    cfg: DepthConfig,
    cell: tuple[float, int],
    test: Tasks,
    preds: torch.Tensor,
    result: TrainResult,
    index: int,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Fu et al.'s metric on the deepest stack of one cell trained with seed number ``seed``
    (:func:`trained_rows`); every row carries ``seed``."""
    kappa, n = cell
    depth = preds.shape[0] - 1
    newton = newton_iterates(test, NEWTON_STEPS)
    gd = gd_grid_iterates(test)
    exact = gd[1 : depth + 1]  # GD steps 1…L: the null, a stack that is exact GD
    layer = preds[1:]
    newton_cos = error_cosines(layer, newton, test.y_query)
    gd_cos = error_cosines(layer, gd, test.y_query)
    trend = fu_trend(
        newton_cos,
        gd_cos,
        error_cosines(exact, newton, test.y_query),
        error_cosines(exact, gd, test.y_query),
        cfg.fu_bootstrap,
        cfg.seed * 1000 + index + 100_000 * seed,
    )
    newton_best = best_steps(newton_cos, list(range(NEWTON_STEPS + 1)))
    gd_best = best_steps(gd_cos, GD_GRID)
    head = {"kappa": kappa, "n_ctx": n, "layers": depth, "seed": seed}
    rows = [
        {"kind": "fu_layer", **head, "layer": ell + 1}
        | {"best_newton": newton_best[ell], "newton_cosine": float(newton_cos[ell].mean(-1).max())}
        | {"best_gd": gd_best[ell], "gd_cosine": float(gd_cos[ell].mean(-1).max())}
        for ell in range(depth)
    ]
    ok, fall = converged(result.losses)
    gd_at_depth = gd_grid_iterates(test, (depth,))[0]
    scale = {
        "d": cfg.train_d,
        "steps": len(result.losses),
        "rotation": cfg.train_rotation,
        "grown": cfg.train_grow,
        "converged": ok,
        "loss_fall": fall,
        "loss": float(query_loss(preds[-1], test.y_query)),
        "gd_loss": float(query_loss(gd_at_depth, test.y_query)),
    }
    rows.append({"kind": "fu_trend", **head, **scale, **trend})
    return rows
