"""The icl study's reference estimators: fitted on separate tasks, evaluated on the same
evaluation tasks as the trained models (von Oswald et al. 2023; Ahn et al. 2023)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from attnreg.core.validation import check_tasks
from attnreg.core.whitening import ConditioningWarning, RankWarning
from attnreg.data.tasks import Tasks, TaskSampler, query_loss
from attnreg.estimators import GD, OLS, PreconditionedGD, Predictor, Ridge, optimal_preconditioner
from attnreg.explain import fit_family
from attnreg.studies.icl.config import ModelSpec


@dataclass
class Reference:
    """A fitted reference estimator and its loss on the evaluation tasks."""

    name: str
    predictor: Predictor
    loss: float
    eta: float | None = None
    params: dict[str, Any] = field(default_factory=dict)


class ZeroPredictor:
    """Predicts 0 for every query (the loss every model starts from)."""

    def predict(self, x_ctx: Any, y_ctx: Any, x_query: Any) -> torch.Tensor:
        """Zeros of the one signature's shape ``(B, M, dy)`` (or unbatched), in the inputs'
        common dtype; the inputs are validated like every predictor's (``check_tasks``)."""
        xc, _, _, shape = check_tasks(x_ctx, y_ctx, x_query)
        return torch.zeros(shape, dtype=xc.dtype, device=xc.device)


def eval_loss(predictor: Predictor | Callable[..., torch.Tensor], tasks: Tasks) -> float:
    """``0.5 × MSE`` of ``predictor`` on the tasks' queries (float64 inputs)."""
    predict = predictor.predict if hasattr(predictor, "predict") else predictor
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RankWarning)
        warnings.simplefilter("ignore", ConditioningWarning)
        with torch.no_grad():
            out = predict(tasks.x_ctx, tasks.y_ctx, tasks.x_query)
    return float(query_loss(out.to(torch.float64).reshape(tasks.y_query.shape), tasks.y_query))


def line_search_eta(tasks: Tasks) -> float:
    """The one-step GD η minimising the query loss on ``tasks``: with ``g = (1/N) x_qᵀ XᵀY``
    the prediction is ``η g``, so the line search is exact, ``η* = ⟨g, y_q⟩ / ⟨g, g⟩``."""
    g = GD(1.0, 1).predict(tasks.x_ctx, tasks.y_ctx, tasks.x_query)
    return float((g * tasks.y_query).sum() / (g * g).sum())


def fit_references(
    sampler: TaskSampler, fit: Tasks, test: Tasks, names: list[str]
) -> dict[str, Reference]:
    """Fit every named reference on ``fit`` (float64) and evaluate it on ``test``."""
    refs: dict[str, Reference] = {}
    args = (fit.x_ctx, fit.y_ctx, fit.x_query, fit.y_query)
    for name in names:
        if name == "GD":
            eta = line_search_eta(fit)
            pred: Predictor = GD(eta, 1)
            refs[name] = Reference(name, pred, eval_loss(pred, test), eta, {"eta": eta})
        elif name.startswith("GD x"):
            k = int(name.split("x")[1])
            f = fit_family("GD", *args, steps=k)
            assert f.predictor is not None
            refs[name] = Reference(
                name, f.predictor, eval_loss(f.predictor, test), f.params["eta"], f.params
            )
        elif name.startswith("GD++ x"):
            k = int(name.split("x")[1])
            f = fit_family("GD++", *args, steps=k)
            assert f.predictor is not None
            refs[name] = Reference(
                name, f.predictor, eval_loss(f.predictor, test), f.params["eta"], f.params
            )
        elif name == "preconditioned GD (fitted)":
            f = fit_family("preconditioned GD", *args, steps=1)
            assert f.predictor is not None
            refs[name] = Reference(name, f.predictor, eval_loss(f.predictor, test), 1.0)
        elif name == "preconditioned GD (optimal)":
            gamma = optimal_preconditioner(sampler.input_covariance, sampler.n_ctx)
            pred = PreconditionedGD(gamma, 1.0, 1)
            refs[name] = Reference(name, pred, eval_loss(pred, test), 1.0)
        elif name == "OLS":
            refs[name] = Reference(name, OLS(), eval_loss(OLS(), test))
        elif name == "ridge":
            lam = max(sampler.noise_std**2, 1e-3)
            refs[name] = Reference(
                name, Ridge(lam), eval_loss(Ridge(lam), test), None, {"lam": lam}
            )
        elif name == "zero":
            refs[name] = Reference(name, ZeroPredictor(), eval_loss(ZeroPredictor(), test))
        else:  # pragma: no cover - names are internal
            raise ValueError(f"reference: unknown name {name!r}")
    return refs


def references_for(spec_tasks: str, specs: list[ModelSpec]) -> list[str]:
    names = ["GD", "OLS", "ridge", "zero"]
    for spec in specs:
        if spec.reference not in names:
            names.append(spec.reference)
        if spec.layers > 1:
            for extra in (f"GD x{spec.layers}", f"GD++ x{spec.layers}"):
                if extra not in names:
                    names.append(extra)
    if spec_tasks == "gaussian":
        names += [
            n
            for n in ("preconditioned GD (fitted)", "preconditioned GD (optimal)")
            if n not in names
        ]
    return names
