"""Independent references for ``attnreg verify``: numpy and scikit-learn only, no torch.

Each function takes unbatched numpy arrays ``X (N, d)``, ``Y (N, dy)``, ``X* (M, d)`` and
returns the reference predictions; they share no code with the constructions they check.
Rank-deficient designs get the minimum-norm least-squares answer (``numpy.linalg.lstsq``, the
pseudo-inverse: singular values at or below ``max(N, d) · eps · σ_max`` count as zero).

Ridge at an extreme scale goes through scale equivariance, ``ŷ(aX, bY, aX*; λ) =
b ŷ(X, Y, X*; λ/a²)``: :func:`ridge_at_scale` gives ``λ/a²``, which may be 0 (underflow: ridge
becomes least squares, its ``α → 0`` limit) or infinite (overflow: the ``α → ∞`` limit, 0).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray
from sklearn.linear_model import Ridge as SkRidge

Array = NDArray[np.float64]


def lstsq(x: Array, y: Array, xq: Array) -> Array:
    """``X* β̂`` with ``β̂`` from ``numpy.linalg.lstsq`` (minimum-norm)."""
    return xq @ np.linalg.lstsq(x, y, rcond=None)[0]


def ridge_at_scale(lam: float, k: int) -> float:
    """``λ/a²`` for ``a = 2^k``: the ridge of the unscaled problem equivalent to ridge ``λ`` on
    data scaled by ``a`` (``ŷ(aX, bY, aX*; λ) = b ŷ(X, Y, X*; λ/a²)``). Exact where float64
    holds it; 0 when it underflows, ``inf`` when it overflows."""
    if lam == 0 or k == 0:
        return float(lam)
    exponent = math.frexp(lam)[1] - 2 * k
    if exponent > 1024:
        return math.inf
    if exponent < -1075:
        return 0.0
    return math.ldexp(lam, -2 * k)


def sklearn_ridge(x: Array, y: Array, xq: Array, alpha: float) -> Array:
    """scikit-learn ``Ridge(alpha, fit_intercept=False)`` (solver "svd"); its limits at
    ``alpha = 0`` (minimum-norm least squares, :func:`lstsq`) and ``alpha = inf`` (0)."""
    if alpha == 0:
        return lstsq(x, y, xq)
    if math.isinf(alpha):
        return np.zeros((len(xq), y.shape[1]))
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


def gd_sum_loop(x: Array, y: Array, xq: Array, etas: list[float], w0: Array) -> Array:
    """Explicit GD on the summed loss ``½ Σ_i ‖W x_i − y_i‖²`` (no ``1/N``) from ``W0``:
    ``W ← W − η Σ_i (W x_i − y_i) x_iᵀ``, one sample at a time in the gradient sum; returns
    ``X* Wᵀ`` after the steps (the von Oswald summary's convention)."""
    w = w0.copy()
    for eta in etas:
        grad = np.zeros_like(w)
        for i in range(x.shape[0]):
            grad += np.outer(w @ x[i] - y[i], x[i])
        w = w - eta * grad
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
    """``W_t x_t`` with ``W_t`` the ridge solution on the first t tokens, solved afresh each t
    from the SVD ``X_t = U Σ Vᵀ``: ``W_tᵀ = V diag(σ/(σ² + λ)) Uᵀ Y_t`` (stable for any ``λ > 0``,
    however small); ``λ = 0`` is minimum-norm least squares per prefix, ``λ = inf`` gives 0."""
    out = np.zeros((x.shape[0], y.shape[1]))
    if math.isinf(lam):
        return out
    for t in range(x.shape[0]):
        xt, yt = x[: t + 1], y[: t + 1]
        if lam == 0:
            beta = np.linalg.lstsq(xt, yt, rcond=None)[0]
        else:
            u, s, vt = np.linalg.svd(xt, full_matrices=False)
            beta = vt.T @ ((s / (s**2 + lam))[:, None] * (u.T @ yt))
        out[t] = x[t] @ beta
    return out
