"""Tang's open question "``W_q W_kᵀ`` is trainable whereas ``(XᵀX)⁻¹`` is computed from the
tokens": does a trained ``W_q W_kᵀ`` become the inverse covariance?

Trained on one data set, the regression-like layer's loss moves ``M = W_q W_kᵀ`` only along
the direction that changes ``M XᵀY`` (see :mod:`~attnreg.studies.compare.probe`), so that run
cannot answer. Here the layer is trained *in context across many tasks* that share one input
covariance: every task draws a fresh ``w ~ N(0, I_d)``, ``config.icl_context`` context rows and
one query ``x ~ N(0, Σ)`` (``Σ`` fixed: a seeded random rotation of eigenvalues geometric from 1
to ``1/config.icl_condition``, trace ``d``), ``y = wᵀx`` (von Oswald et al. 2023's noiseless
tasks). The layer is :class:`attnreg.models.regressors.AttentionRegression` (regression-like,
separate ``W_q``, ``W_k``, no whitening, no layer norm): ``ŷ* = x*ᵀ W_q W_kᵀ Xᵀ y / N``, trained
by :func:`attnreg.training.train` (Adam, ``config.icl_steps`` steps of ``config.icl_batch`` fresh
tasks) from ``config.icl_seeds`` seeded random initialisations.

Measured: the cosine (after the best scale, :func:`~attnreg.studies.compare.metrics.cosine`) of
the trained ``W_q W_kᵀ`` with ``Σ⁻¹`` per seed, against a null measured the same way: the
cosine of ``config.icl_null`` random initialisations (the same initialiser, other seeds) and of
the identity. The reference is the loss's own minimiser, for Gaussian inputs
``M* = ((N + 1)/N Σ + tr(Σ)/N I)⁻¹`` (Ahn et al. 2023, single layer; ``E[S²] = (N+1)/N Σ² +
tr(Σ)/N Σ`` for the Wishart ``S = XᵀX/N``): even the best fixed ``M`` is ``Σ⁻¹`` only as
``N → ∞``, and ``S⁻¹`` (each context's own) is not a fixed matrix at all.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

from attnreg.models.regressors import AttentionRegression
from attnreg.plateaus import PlateauWarning
from attnreg.studies.compare.config import CompareConfig
from attnreg.studies.compare.metrics import cosine
from attnreg.studies.paired import standard_error
from attnreg.training import TrainConfig, generator, train

QUESTION = "does W_q W_kᵀ trained in context across tasks (one Σ) learn Σ⁻¹?"
SEED_TAG = 11  # the stream of Σ: numpy SeedSequence([config.seed, SEED_TAG])


def covariance(d: int, condition: float, rng: np.random.Generator) -> torch.Tensor:
    """``Σ = Q diag(λ) Qᵀ``, ``λ`` geometric from 1 to ``1/condition`` scaled to trace ``d``, ``Q``
    a random rotation (QR of a Gaussian matrix)."""
    vecs, r = np.linalg.qr(rng.standard_normal((d, d)))
    vecs = vecs * np.sign(np.diag(r))
    lam = condition ** -np.linspace(0, 1, d)
    lam = lam * d / lam.sum()
    return torch.from_numpy((vecs * lam) @ vecs.T)


def optimal_metric(sigma: torch.Tensor, n: int) -> torch.Tensor:
    """The minimiser of the in-context loss over a fixed ``M``:
    ``((N + 1)/N Σ + tr(Σ)/N I)⁻¹``."""
    d = sigma.shape[0]
    eye = torch.eye(d, dtype=sigma.dtype)
    return torch.linalg.inv((n + 1) / n * sigma + torch.trace(sigma) / n * eye)


def tasks(chol: torch.Tensor, batch: int, n: int, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    """``batch`` tasks: context ``(B, N, d)``, targets ``(B, N, 1)``, query ``(B, 1, d)`` and
    its target ``(B, 1, 1)``; ``x = z Lᵀ`` (``L Lᵀ = Σ``), ``y = x w``, ``w ~ N(0, I_d)``."""
    d = chol.shape[0]
    x = torch.randn(batch, n + 1, d, generator=gen, dtype=chol.dtype) @ chol.mT
    w = torch.randn(batch, d, 1, generator=gen, dtype=chol.dtype)
    y = x @ w
    return x[:, :n], y[:, :n], x[:, n:], y[:, n:]


def train_layer(
    sigma: torch.Tensor, cfg: CompareConfig, seed: int
) -> tuple[AttentionRegression, float]:
    """The regression-like layer trained in context (module docstring) from the initialisation
    ``seed``; returns it and its final training loss (mean over the last tenth of the steps)."""
    d, n = sigma.shape[0], cfg.icl_context
    model = AttentionRegression(
        d, "regression", qk="separate", init_scale=cfg.init_scale, seed=seed
    )
    chol = torch.linalg.cholesky(sigma)
    gen = generator(seed)

    def loss_fn(step: int) -> torch.Tensor:
        xc, yc, xq, yq = tasks(chol, cfg.icl_batch, n, gen)
        return ((model(xq, xc, yc) - yq) ** 2).mean()

    tc = TrainConfig(steps=cfg.icl_steps, lr=cfg.icl_lr, seed=seed, eval_every=cfg.icl_steps)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PlateauWarning)
        result = train(model, loss_fn, tc, progress=False, generators=[gen])
    tail = result.losses[-max(1, cfg.icl_steps // 10) :]
    return model, float(sum(tail) / len(tail))


def measure(cfg: CompareConfig) -> dict[str, Any]:
    """Cosines with ``Σ⁻¹``: ``trained`` (per seed), ``null`` (random initialisations),
    ``identity``, ``optimal`` (``M*``) and ``trained_vs_optimal`` (per seed), with ``Σ``'s size
    and the final losses."""
    sigma = covariance(cfg.icl_d, cfg.icl_condition, np.random.default_rng([cfg.seed, SEED_TAG]))
    inv = torch.linalg.inv(sigma)
    best = optimal_metric(sigma, cfg.icl_context)
    trained, vs_best, losses = [], [], []
    for s in range(cfg.icl_seeds):
        model, loss = train_layer(sigma, cfg, cfg.seed + s)
        m = model.qk_product
        trained.append(cosine(m, inv))
        vs_best.append(cosine(m, best))
        losses.append(loss)
    null = [
        cosine(
            AttentionRegression(
                cfg.icl_d, "regression", qk="separate", init_scale=cfg.init_scale, seed=seed
            ).qk_product,
            inv,
        )
        for seed in range(cfg.seed + cfg.icl_seeds, cfg.seed + cfg.icl_seeds + cfg.icl_null)
    ]
    return {
        "trained": trained,
        "trained_vs_optimal": vs_best,
        "losses": losses,
        "null": null,
        "identity": cosine(torch.eye(cfg.icl_d, dtype=inv.dtype), inv),
        "optimal": cosine(best, inv),
        "d": cfg.icl_d,
        "context": cfg.icl_context,
        "condition": cfg.icl_condition,
    }


def answer(m: dict[str, Any]) -> str:
    """The open question's answer, computed from :func:`measure`'s numbers."""
    trained = np.asarray(m["trained"])
    null = np.asarray(m["null"])
    top = float(np.quantile(np.abs(null), 0.95))
    above = bool(trained.min() > max(top, m["identity"]))
    return (
        f"Trained in context (one Σ, d = {m['d']}, N = {m['context']}, κ = {m['condition']:g}): "
        f"cos(W_q W_kᵀ, Σ⁻¹) = {trained.mean():.3f} ± {standard_error(m['trained']):.2g} over "
        f"{trained.size} seeds, "
        + ("above" if above else "not above")
        + f" the null ({null.size} random initialisations, 95th percentile {top:.2f}; identity "
        f"{m['identity']:.2f}); the loss's minimiser has cosine {m['optimal']:.3f} with Σ⁻¹, "
        f"the trained matrix {np.mean(m['trained_vs_optimal']):.3f} with it."
    )
