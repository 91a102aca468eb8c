"""Fitting the estimator families to a predictor's outputs: :func:`fit_family` finds each
family's best member and :func:`agreement` scores it (``R²``, cosine, MSE). The families, their
parameters and how each is fitted are tabled in :mod:`attnreg.explaining`, whose
:func:`~attnreg.explaining.explain` and the ``icl`` study use them."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from scipy import optimize

from attnreg.core.validation import check_positive_int
from attnreg.core.whitening import RankWarning
from attnreg.estimators import (
    GD,
    LMS,
    OLS,
    GDPlusPlus,
    KernelSmoother,
    LocalLinear,
    MiniBatchLMS,
    MomentumLMS,
    MultiStepLMS,
    PreconditionedGD,
    Predictor,
    Ridge,
    gd_weights,
)

FAMILIES = (
    "OLS",
    "GD",
    "ridge",
    "kernel smoother",
    "LMS",
    "GD++",
    "local linear",
    "momentum LMS",
    "mini-batch LMS",
    "multi-step LMS",
    "preconditioned GD",
)

MOMENTA = (0.0, 0.25, 0.5, 0.75, 0.9)
"""The momenta μ a momentum-LMS fit tries (each with its best step β)."""
BATCH_SIZES = (2, 4, 8, 16)
"""The batch sizes a mini-batch-LMS fit tries (each with its best rate η)."""
STEP_COUNTS = (2, 3, 4)
"""The steps per pair a multi-step-LMS fit tries (each with its best step β)."""


@dataclass
class FamilyFit:
    """One family's best member: its parameters, the predictor it is, and the agreement."""

    family: str
    params: dict[str, Any]
    r2: float
    cosine: float
    mse: float
    predictor: Predictor | None = field(default=None, repr=False)

    def row(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("predictor")
        out["params"] = _describe(self.params)
        return out


def _describe(params: dict[str, Any]) -> str:
    parts = []
    for key, value in params.items():
        if isinstance(value, float):
            parts.append(f"{key}={value:.4g}")
        elif isinstance(value, list):
            parts.append(f"{key}=<{len(value)}x{len(value[0]) if value else 0} matrix>")
        else:
            parts.append(f"{key}={value}")
    return ", ".join(parts)


def agreement(f: torch.Tensor, p: torch.Tensor) -> tuple[float, float, float]:
    """``(R², cosine, MSE)`` of predictions ``f`` against reference outputs ``p``:
    ``R² = 1 − Σ(f − p)² / Σ(p − p̄)²`` is ``NaN`` (undefined) when ``p`` is constant."""
    f64, p64 = f.detach().to(torch.float64).reshape(-1), p.detach().to(torch.float64).reshape(-1)
    res = float((f64 - p64).pow(2).sum())
    tot = float((p64 - p64.mean()).pow(2).sum())
    r2 = 1 - res / tot if tot > 0 else math.nan
    denom = float(f64.norm() * p64.norm())
    cos = float(f64 @ p64) / denom if denom > 0 else 0.0
    return r2, cos, res / f64.numel()


def _mse(f: torch.Tensor, p: torch.Tensor) -> float:
    value = float((f - p).pow(2).mean())
    return value if math.isfinite(value) else 1e300


def _mse_of(
    predictor: Predictor, xc: torch.Tensor, yc: torch.Tensor, xq: torch.Tensor, t: torch.Tensor
) -> float:
    """``_mse`` of ``predictor``'s answer, ``1e300`` where it overflows (a ``ValueError``)."""
    try:
        return _mse(predictor.predict(xc, yc, xq), t)
    except ValueError:
        return 1e300


def _search(loss: Callable[[float], float], lo: float, hi: float) -> float:
    """Minimise ``loss`` over ``[lo, hi]`` (a log-scale variable): a coarse grid, then Brent."""
    grid = np.linspace(lo, hi, 25)
    values = [loss(float(g)) for g in grid]
    k = int(np.argmin(values))
    a, b = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
    if a == b:
        return float(grid[k])
    res = optimize.minimize_scalar(loss, bounds=(a, b), method="bounded", options={"xatol": 1e-6})
    return float(res.x) if res.fun <= values[k] else float(grid[k])


def fit_family(
    family: str,
    x_ctx: torch.Tensor,
    y_ctx: torch.Tensor,
    x_query: torch.Tensor,
    target: torch.Tensor,
    steps: int = 1,
    score: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> FamilyFit:
    """The member of ``family`` whose predictions on ``(x_ctx, y_ctx, x_query)`` are closest (in
    MSE) to ``target (B, M, dy)``; float64 tensors from :func:`check_tasks`. The agreement
    (R², cosine, MSE) is measured on ``score = (x_ctx, y_ctx, x_query, target)`` if given
    (held-out tasks, so that a family with many parameters cannot win by over-fitting), else on
    the fitting tasks."""
    check_positive_int("steps", steps)
    xc, yc, xq, t = x_ctx, y_ctx, x_query, target
    _n, _d = xc.shape[1], xc.shape[2]
    scale = float((xc.pow(2).sum(-1)).mean())  # mean ‖x‖² ≈ tr Σ
    predictor: Predictor
    params: dict[str, Any]
    if family == "OLS":
        predictor, params = OLS(), {}
    elif family == "GD":
        g = GD(1.0, 1).predict(xc, yc, xq)
        eta1 = float((g * t).sum() / (g * g).sum().clamp_min(1e-300))
        eta1 = eta1 if eta1 > 0 else 1e-6
        if steps == 1:
            eta = eta1
        else:
            log_eta = _search(
                lambda le: _mse(GD(math.exp(le), steps).predict(xc, yc, xq), t),
                math.log(eta1) - 6,
                math.log(eta1) + 1,
            )
            eta = math.exp(log_eta)
        predictor, params = GD(eta, steps), {"eta": eta, "steps": steps}
    elif family == "ridge":
        lo, hi = math.log(1e-6 * scale), math.log(1e6 * scale)
        log_lam = _search(lambda ll: _mse(Ridge(math.exp(ll)).predict(xc, yc, xq), t), lo, hi)
        predictor, params = Ridge(math.exp(log_lam)), {"lam": math.exp(log_lam)}
    elif family == "kernel smoother":
        lo, hi = math.log(1e-3 / scale), math.log(1e3 / scale)
        log_beta = _search(
            lambda lb: _mse(KernelSmoother(math.exp(lb)).predict(xc, yc, xq), t), lo, hi
        )
        predictor, params = KernelSmoother(math.exp(log_beta)), {"beta": math.exp(log_beta)}
    elif family == "LMS":
        hi = math.log(2.0 / float(xc.pow(2).sum(-1).max()))
        log_beta = _search(
            lambda lb: _mse_of(LMS(math.exp(lb)), xc, yc, xq, t), hi - math.log(1e4), hi
        )
        predictor, params = LMS(math.exp(log_beta)), {"beta": math.exp(log_beta)}
    elif family in ("momentum LMS", "mini-batch LMS", "multi-step LMS"):
        predictor, params = _fit_online(family, xc, yc, xq, t)
    elif family == "local linear":
        beta, lam = _fit_local_linear(xc, yc, xq, t, scale)
        predictor, params = LocalLinear(beta, lam), {"beta": beta, "lam": lam}
    elif family == "GD++" and steps == 1:
        # one GD++ step predicts like one GD step (the x-update acts after the y-update)
        eta = fit_family("GD", xc, yc, xq, t, 1).params["eta"]
        predictor, params = GDPlusPlus(eta, 0.0, 1), {"eta": eta, "gamma": 0.0}
    elif family == "GD++":
        start = fit_family("GD", xc, yc, xq, t, steps).params["eta"]

        def loss(v: np.ndarray) -> float:
            model = GDPlusPlus(math.exp(float(v[0])), abs(float(v[1])) / scale, steps)
            return _mse(model.predict(xc, yc, xq), t)

        res = optimize.minimize(
            loss,
            np.array([math.log(start), 0.0]),
            method="Nelder-Mead",
            options={"xatol": 1e-6, "fatol": 1e-12, "maxiter": 400},
        )
        eta, gamma = math.exp(float(res.x[0])), abs(float(res.x[1])) / scale
        predictor, params = GDPlusPlus(eta, gamma, steps), {"eta": eta, "gamma": gamma}
    elif family == "preconditioned GD":
        gamma_m = _fit_preconditioner(xc, yc, xq, t, steps)
        predictor = PreconditionedGD(gamma_m, 1.0, steps)
        params = {"gamma": gamma_m.tolist(), "steps": steps}
    else:
        raise ValueError(f"family: unknown value {family!r}; valid names are {', '.join(FAMILIES)}")
    if score is not None:
        xc, yc, xq, t = score
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RankWarning)
        pred = predictor.predict(xc, yc, xq)
    r2, cos, mse = agreement(pred, t)
    return FamilyFit(family, params, r2, cos, mse, predictor)


def _fit_online(
    family: str, xc: torch.Tensor, yc: torch.Tensor, xq: torch.Tensor, t: torch.Tensor
) -> tuple[Predictor, dict[str, Any]]:
    """The LMS variant of ``family`` closest to ``t``: for each value of its discrete or
    second parameter (:data:`MOMENTA`, :data:`BATCH_SIZES`, :data:`STEP_COUNTS`) the step by a
    bounded Brent search on its log over four decades below one pair's stable limit
    ``2 / max ‖x_i‖²`` (heavy ball: ``2 (1 + μ) / max ‖x_i‖²``; a step that diverges scores
    as the worst), and the best of those."""
    top = float(xc.pow(2).sum(-1).max())

    def make(option: float, step: float) -> Predictor:
        if family == "momentum LMS":
            return MomentumLMS(step, option)
        if family == "mini-batch LMS":
            return MiniBatchLMS(step, int(option))
        return MultiStepLMS(step, int(option))

    def limit(option: float) -> float:
        return 2.0 * (1.0 + option) / top if family == "momentum LMS" else 2.0 / top

    options = {"momentum LMS": MOMENTA, "mini-batch LMS": BATCH_SIZES}.get(family, STEP_COUNTS)
    best: tuple[float, float, float] | None = None
    for option in options:
        hi = math.log(limit(option))

        def loss_at(log_step: float, option: float = option) -> float:
            return _mse_of(make(option, math.exp(log_step)), xc, yc, xq, t)

        log_step = _search(loss_at, hi - math.log(1e4), hi)
        loss = _mse_of(make(option, math.exp(log_step)), xc, yc, xq, t)
        if best is None or loss < best[0]:
            best = (loss, option, math.exp(log_step))
    assert best is not None
    _, option, step = best
    names = {
        "momentum LMS": {"beta": step, "momentum": option},
        "mini-batch LMS": {"eta": step, "batch_size": int(option)},
        "multi-step LMS": {"beta": step, "steps": int(option)},
    }
    return make(option, step), names[family]


def _fit_local_linear(
    xc: torch.Tensor, yc: torch.Tensor, xq: torch.Tensor, t: torch.Tensor, scale: float
) -> tuple[float, float]:
    """``(β, λ)`` of the local-linear fit closest to ``t``: the best of a 5 × 5 grid of
    ``log β ∈ log(1/scale) + [−5, 3]``, ``log λ ∈ log(scale) + [−9, 3]``, refined by
    Nelder–Mead."""

    def loss(v: np.ndarray) -> float:
        return _mse_of(LocalLinear(math.exp(float(v[0])), math.exp(float(v[1]))), xc, yc, xq, t)

    grid = [
        np.array([lb, ll])
        for lb in math.log(1 / scale) + np.linspace(-5, 3, 5)
        for ll in math.log(scale) + np.linspace(-9, 3, 5)
    ]
    start = min(grid, key=loss)
    res = optimize.minimize(
        loss, start, method="Nelder-Mead", options={"xatol": 1e-4, "fatol": 1e-14, "maxiter": 200}
    )
    best = res.x if res.fun <= loss(start) else start
    return math.exp(float(best[0])), math.exp(float(best[1]))


def _fit_preconditioner(
    xc: torch.Tensor, yc: torch.Tensor, xq: torch.Tensor, t: torch.Tensor, steps: int
) -> torch.Tensor:
    """Γ minimising ``Σ ‖ŷ_Γ − t‖²``: one step, ``ŷ = (1/N) YᵀX Γ x_q`` is linear in Γ (least
    squares on ``d²`` features); K steps: L-BFGS from the one-step fit."""
    n, d = xc.shape[1], xc.shape[2]
    c = yc.mT @ xc / n  # (B, dy, d)
    # ŷ[b, m, k] = Σ_{a,e} c[b, k, a] Γ[a, e] xq[b, m, e]
    feats = torch.einsum("bka,bme->bmkae", c, xq).reshape(-1, d * d)
    sol = torch.linalg.lstsq(feats, t.reshape(-1, 1), driver="gelsd").solution
    gamma = sol.reshape(d, d)
    if steps == 1:
        return gamma
    g = gamma.clone().requires_grad_(True)
    opt = torch.optim.LBFGS([g], max_iter=200, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        w = gd_weights(xc, yc, 1.0, steps, gamma=g)
        loss = (xq @ w.mT - t).pow(2).mean()
        loss.backward()
        return loss

    opt.step(closure)
    return g.detach()
