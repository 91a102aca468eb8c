"""Gradient descent on the in-context least-squares loss ``L(W) = (1/2N) Σ ‖W x_i − y_i‖²``:
plain, preconditioned and GD++ steps from ``W0`` (the references of the LSA constructions)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from attnreg.core.results import check_finite_result
from attnreg.core.scaling import check_underflow
from attnreg.core.tasks import check_tasks
from attnreg.core.validation import (
    ArrayLike,
    as_tensor,
    check_nonnegative,
    check_positive,
    check_positive_int,
    per_step,
)


def _w0(w0: ArrayLike | None, b: int, dy: int, d: int, like: torch.Tensor) -> torch.Tensor:
    if w0 is None:
        return torch.zeros(b, dy, d, dtype=like.dtype, device=like.device)
    w = as_tensor("w0", w0, ndim=(2, 3)).to(like.dtype)
    if w.shape[-2:] != (dy, d) or (w.ndim == 3 and w.shape[0] != b):
        raise ValueError(
            f"w0: expected shape ({dy}, {d}) or ({b}, {dy}, {d}), got {tuple(w.shape)}"
        )
    return w.expand(b, dy, d)


def gd_weights(
    x: torch.Tensor,
    y: torch.Tensor,
    eta: float | Sequence[float],
    steps: int,
    w0: ArrayLike | None = None,
    gamma: ArrayLike | None = None,
) -> torch.Tensor:
    """K steps of (preconditioned) GD on ``L(W) = (1/2N) Σ ‖W x_i − y_i‖²``.

    ``W_{k+1} = W_k − η_k ∇L(W_k) Γ`` with ``∇L(W) = (W XᵀX − YᵀX)/N`` and ``Γ = I`` unless
    ``gamma`` is given (Ahn et al. 2023). Returns ``W_K`` of shape ``(B, dy, d)``.
    """
    b, n, d = x.shape
    etas = per_step("eta", eta, steps)
    for e in etas:
        check_positive("eta", e)
    w = _w0(w0, b, y.shape[-1], d, x).clone()
    s, c = x.mT @ x, y.mT @ x
    g = None if gamma is None else as_tensor("gamma", gamma, ndim=(2, 3)).to(x.dtype)
    for e in etas:
        grad = (w @ s - c) / n
        w = w - e * (grad if g is None else grad @ g)
    return w


@dataclass
class GD:
    """K steps of gradient descent from ``W0`` (von Oswald et al. 2023, "Transformers learn
    in-context by gradient descent"): ``W_{k+1} = W_k − η (W_k XᵀX − YᵀX)/N``; ``ŷ = W_K x_q``.

    One step from ``W0 = 0`` is the one form with ``M = (η/N) I``. ``eta`` may be a list, one
    learning rate per step.
    """

    eta: float | Sequence[float] = 1.0
    steps: int = 1
    w0: ArrayLike | None = None

    def __post_init__(self) -> None:
        self.steps = check_positive_int("steps", self.steps)
        for e in per_step("eta", self.eta, self.steps):
            check_positive("eta", e)

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """Predictions ``W_K x_q`` after K GD steps on each task's context."""
        xc, yc, xq, shape = check_tasks(x_ctx, y_ctx, x_query)

        def run(xc: torch.Tensor, yc: torch.Tensor, xq: torch.Tensor) -> torch.Tensor:
            return xq @ gd_weights(xc, yc, self.eta, self.steps, self.w0).mT

        out = check_finite_result(run(xc, yc, xq))
        return check_underflow(out, run, xc, yc, xq).reshape(shape)


@dataclass
class PreconditionedGD:
    """Preconditioned GD (Ahn et al. 2023, "Transformers learn to implement preconditioned
    gradient descent"): ``W_{k+1} = W_k − η ∇L(W_k) Γ``. For ``x ~ N(0, Σ)`` and one step from 0,
    the optimal ``Γ`` (with η = 1) is ``((1 + 1/N) Σ + (tr Σ / N) I)⁻¹``.
    """

    gamma: ArrayLike = field(default_factory=lambda: torch.eye(1))
    eta: float | Sequence[float] = 1.0
    steps: int = 1
    w0: ArrayLike | None = None

    def __post_init__(self) -> None:
        self.steps = check_positive_int("steps", self.steps)
        for e in per_step("eta", self.eta, self.steps):
            check_positive("eta", e)

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """Predictions after K preconditioned GD steps."""
        xc, yc, xq, shape = check_tasks(x_ctx, y_ctx, x_query)
        g = as_tensor("gamma", self.gamma, ndim=(2, 3)).to(xc.dtype)
        if g.shape[-2:] != (xc.shape[-1],) * 2:
            raise ValueError(
                f"gamma: expected shape (d, d) = {(xc.shape[-1],) * 2}, got {tuple(g.shape)}"
            )

        def run(xc: torch.Tensor, yc: torch.Tensor, xq: torch.Tensor) -> torch.Tensor:
            return xq @ gd_weights(xc, yc, self.eta, self.steps, self.w0, gamma=g).mT

        out = check_finite_result(run(xc, yc, xq))
        return check_underflow(out, run, xc, yc, xq).reshape(shape)


def optimal_preconditioner(sigma: ArrayLike, n: int) -> torch.Tensor:
    """Ahn et al. (2023), Thm 1: ``Γ* = ((1 + 1/N) Σ + (tr Σ / N) I)⁻¹`` for one layer, η = 1."""
    s = as_tensor("sigma", sigma, ndim=(2,))
    eye = torch.eye(s.shape[0], dtype=s.dtype)
    return torch.linalg.inv((1 + 1 / n) * s + (torch.trace(s) / n) * eye)


@dataclass
class GDPlusPlus:
    """GD++ (von Oswald et al. 2023, §4): each step also moves every input toward whiteness,
    ``x_j ← (I − γ XᵀX) x_j`` (context and query, γ without 1/N), while
    ``y_j ← y_j + (η/N)(W0 XᵀX − YᵀX) x_j``; the query starts at ``y_q = −W0 x_q`` and the
    prediction is ``−y_q``. With ``γ = 0`` this is plain GD. One ``(η, γ)`` for every step
    (recurrent) or a list per step (deep).
    """

    eta: float | Sequence[float] = 1.0
    gamma: float | Sequence[float] = 0.0
    steps: int = 1
    w0: ArrayLike | None = None

    def __post_init__(self) -> None:
        self.steps = check_positive_int("steps", self.steps)
        for e in per_step("eta", self.eta, self.steps):
            check_positive("eta", e)
        for g in per_step("gamma", self.gamma, self.steps):
            check_nonnegative("gamma", g)

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """Predictions after K GD++ steps on the tokens."""
        xc, yc, xqc, shape = check_tasks(x_ctx, y_ctx, x_query)
        n = xc.shape[1]
        w0 = _w0(self.w0, xc.shape[0], yc.shape[-1], xc.shape[-1], xc)

        def run(x: torch.Tensor, y: torch.Tensor, xq: torch.Tensor) -> torch.Tensor:
            yq = -(xq @ w0.mT)
            for eta, gamma in zip(
                per_step("eta", self.eta, self.steps),
                per_step("gamma", self.gamma, self.steps),
                strict=True,
            ):
                s = x.mT @ x
                lin = (s @ w0.mT - x.mT @ y) * (eta / n)
                x, y, xq, yq = x - gamma * x @ s, y + x @ lin, xq - gamma * xq @ s, yq + xq @ lin
            return -yq

        out = check_finite_result(run(xc, yc, xqc))
        return check_underflow(out, run, xc, yc, xqc).reshape(shape)
