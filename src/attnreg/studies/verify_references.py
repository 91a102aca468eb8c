"""Independent references for ``attnreg verify``: numpy and scikit-learn only, no torch.

Each function takes unbatched numpy arrays ``X (N, d)``, ``Y (N, dy)``, ``X* (M, d)`` and
returns the reference predictions; they share no code with the constructions they check.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from sklearn.linear_model import Ridge as SkRidge

Array = NDArray[np.float64]


def lstsq(x: Array, y: Array, xq: Array) -> Array:
    """``X* β̂`` with ``β̂`` from ``numpy.linalg.lstsq`` (minimum-norm)."""
    return xq @ np.linalg.lstsq(x, y, rcond=None)[0]


def sklearn_ridge(x: Array, y: Array, xq: Array, alpha: float) -> Array:
    """scikit-learn ``Ridge(alpha, fit_intercept=False)`` (solver "svd")."""
    model = SkRidge(alpha=alpha, fit_intercept=False, solver="svd").fit(x, y)
    return model.predict(xq).reshape(len(xq), -1)


def gd_loop(
    x: Array, y: Array, xq: Array, etas: list[float], w0: Array, precond: Array | None = None
) -> Array:
    """Explicit GD on ``(1/2N) Σ ‖W x_i − y_i‖²``, one sample at a time in the gradient sum."""
    n, d = x.shape
    w = w0.copy()
    g = np.eye(d) if precond is None else precond
    for eta in etas:
        grad = np.zeros_like(w)
        for i in range(n):
            grad += np.outer(w @ x[i] - y[i], x[i])
        w = w - eta * (grad / n) @ g
    return xq @ w.T


def gd_plus_plus_loop(
    x: Array, y: Array, xq: Array, etas: list[float], gammas: list[float]
) -> Array:
    """GD++ token dynamics as a per-token loop: ``x_j ← x_j − γ Σ_i x_i x_iᵀ x_j``,
    ``y_j ← y_j − (η/N) Σ_i y_i x_iᵀ x_j`` for context and query tokens (query y starts at 0)."""
    n = x.shape[0]
    xs, ys = x.copy(), y.copy()
    qx, qy = xq.copy(), np.zeros((xq.shape[0], y.shape[1]))
    for eta, gamma in zip(etas, gammas, strict=True):
        s = sum(np.outer(xs[i], xs[i]) for i in range(n))
        c = sum(np.outer(ys[i], xs[i]) for i in range(n))
        new_xs = np.array([xj - gamma * s @ xj for xj in xs])
        new_ys = np.array([yj - (eta / n) * c @ xj for xj, yj in zip(xs, ys, strict=True)])
        new_qx = np.array([xj - gamma * s @ xj for xj in qx])
        new_qy = np.array([yj - (eta / n) * c @ xj for xj, yj in zip(qx, qy, strict=True)])
        xs, ys, qx, qy = new_xs, new_ys, new_qx, new_qy
    return -qy


def ridge_per_prefix(x: Array, y: Array, lam: float) -> Array:
    """``W_t x_t`` with ``W_t`` the ridge solution on the first t tokens, solved afresh each t."""
    out = np.zeros((x.shape[0], y.shape[1]))
    for t in range(x.shape[0]):
        xt, yt = x[: t + 1], y[: t + 1]
        beta = np.linalg.solve(xt.T @ xt + lam * np.eye(x.shape[1]), xt.T @ yt)
        out[t] = x[t] @ beta
    return out
