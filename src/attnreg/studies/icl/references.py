"""The icl study's reference estimators: fitted on separate tasks, evaluated on the same
evaluation tasks as the trained models (von Oswald et al. 2023; Ahn et al. 2023)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from attnreg.data.tasks import Tasks, TaskSampler, eval_loss, line_search_eta
from attnreg.estimators import (
    GD,
    OLS,
    PreconditionedGD,
    Predictor,
    Ridge,
    ZeroPredictor,
    optimal_preconditioner,
)
from attnreg.family_fit import fit_family
from attnreg.studies.icl.config import ModelSpec


@dataclass
class Reference:
    """A fitted reference estimator and its loss on the evaluation tasks."""

    name: str
    predictor: Predictor
    loss: float
    eta: float | None = None
    params: dict[str, Any] = field(default_factory=dict)


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
        elif name.startswith(("GD x", "GD++ x")):  # "GD x2": two fitted steps of GD
            family, steps = name.split(" x")
            f = fit_family(family, *args, steps=int(steps))
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
