"""Independent references for ``attnreg verify``: numpy and scikit-learn only, no torch.

Each function takes unbatched numpy arrays ``X (N, d)``, ``Y (N, dy)``, ``X* (M, d)`` and
returns the reference predictions; they share no code with the constructions they check. The
sequence layers' references (the second half) take one sequence ``q, k (T, d)``, ``v (T, d_v)``.
Rank-deficient designs get the minimum-norm least-squares answer (``numpy.linalg.lstsq``, the
pseudo-inverse: singular values at or below ``max(N, d) · eps · σ_max`` count as zero).

Ridge at an extreme scale goes through scale equivariance, ``ŷ(aX, bY, aX*; λ) =
b ŷ(X, Y, X*; λ/a²)``: :func:`ridge_at_scale` gives ``λ/a²``, which may be 0 (underflow: ridge
becomes least squares, its ``α → 0`` limit) or infinite (overflow: the ``α → ∞`` limit, 0).
"""

from __future__ import annotations

import math
from typing import Any

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


def gradient_sum(w: NDArray[Any], x: NDArray[Any], y: NDArray[Any]) -> NDArray[Any]:
    """``Σ_i (W x_i − y_i) x_iᵀ``, the gradient of ``½ Σ_i ‖W x_i − y_i‖²``, summed one sample at
    a time in ``w``'s precision (float64 here, extended in the stacks' references)."""
    grad = np.zeros_like(w)
    for i in range(len(x)):
        grad += np.outer(w @ x[i] - y[i], x[i])
    return grad


def gd_loop(
    x: Array, y: Array, xq: Array, etas: list[float], w0: Array, precond: Array | None = None
) -> Array:
    """Explicit GD on ``(1/2N) Σ ‖W x_i − y_i‖²``, one sample at a time in the gradient sum."""
    n, d = x.shape
    w = w0.copy()
    g = np.eye(d) if precond is None else precond
    for eta in etas:
        w = w - eta * (gradient_sum(w, x, y) / n) @ g
    return xq @ w.T


def gd_sum_loop(x: Array, y: Array, xq: Array, etas: list[float], w0: Array) -> Array:
    """Explicit GD on the summed loss ``½ Σ_i ‖W x_i − y_i‖²`` (no ``1/N``) from ``W0``:
    ``W ← W − η Σ_i (W x_i − y_i) x_iᵀ``, one sample at a time in the gradient sum; returns
    ``X* Wᵀ`` after the steps (the von Oswald summary's convention)."""
    w = w0.copy()
    for eta in etas:
        w = w - eta * gradient_sum(w, x, y)
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


# ---- the sequence layers (attnreg.sequence), one sequence at a time ------------------------
# Arrays ``q, k (T, d)``, ``v (T, d_v)``, per-token parameters ``(T,)``; each returns the
# outputs ``(T, d_v)`` and the per-position magnitude ``m (T,)`` of the layer's rounding-error
# bound ``|ô_t − o_t| ≤ u · m_t`` (u the unit roundoff of the dtype the layer computes in), as
# stated per function. The regression map is ``W`` (``d_v × d``), read out as ``o_t = W_t q_t``.


def decay_weights(alpha: Array) -> Array:
    """``γ[t, i] = Π_{i<j≤t} α_j`` for ``i ≤ t`` and 0 above, by running products."""
    t_len = len(alpha)
    g = np.zeros((t_len, t_len))
    for t in range(t_len):
        prod = 1.0
        for i in range(t, -1, -1):
            g[t, i] = prod
            prod *= alpha[i]
    return g


def log_budget(alpha: Array) -> Array:
    """``n_t = (t + 1)(1 + Σ_{j≤t} |log α_j|)``: a prefix's summation length, widened by the
    cumulative log-decay whose rounding a log-space (chunked) form carries into ``γ`` (with one
    decay per key channel, ``alpha (T, d_k)``, the largest channel's)."""
    logs = np.abs(np.log(alpha))
    return np.arange(1, len(alpha) + 1) * (1 + np.cumsum(logs.max(-1) if logs.ndim == 2 else logs))


def decayed_sum(q: Array, k: Array, v: Array, alpha: Array) -> tuple[Array, Array]:
    """Linear attention: ``o_t = Σ_{i≤t} γ_{t,i} (q_tᵀ k_i) v_i`` (one gradient step of size 1
    from ``W = 0`` on ``½ Σ γ_{t,i} ‖W k_i − v_i‖²``). Bound: sums of products of length
    ``d + n_t``, ``m_t = 4 (d + n_t) max_c Σ_i γ_{t,i} |q_t|ᵀ|k_i| |v_{ic}|`` (the elementwise
    magnitude of :func:`decayed_terms`)."""
    out, mag = decayed_terms(q, k, v, alpha)
    return out, 4 * (k.shape[1] + log_budget(alpha)) * mag.max(axis=1)


def decayed_terms(q: Array, k: Array, v: Array, alpha: Array) -> tuple[Array, Array]:
    """:func:`decayed_sum`'s outputs and the elementwise magnitude
    ``Σ_{i≤t} γ_{t,i} (|q_t|ᵀ|k_i|) |v_i|`` that bounds their rounding."""
    g = decay_weights(alpha)
    return (g * (q @ k.T)) @ v, (g * (np.abs(q) @ np.abs(k).T)) @ np.abs(v)


def channel_decayed_terms(q: Array, k: Array, v: Array, alpha: Array) -> tuple[Array, Array]:
    """One decay per key channel (GLA, ``alpha (T, d_k)``): ``o_t = Σ_{i≤t} Σ_c q_{t,c}
    γ_{t,i,c} k_{i,c} v_i`` with ``γ_{t,i,c} = Π_{i<j≤t} α_{j,c}`` (each channel's weights from
    :func:`decay_weights`), and the elementwise magnitude that bounds its rounding."""
    out, mag = np.zeros((len(q), v.shape[1])), np.zeros((len(q), v.shape[1]))
    for c in range(k.shape[1]):
        g = decay_weights(alpha[:, c])
        out += (g * np.outer(q[:, c], k[:, c])) @ v
        mag += (g * np.outer(np.abs(q[:, c]), np.abs(k[:, c]))) @ np.abs(v)
    return out, mag


def lms_loop(q: Array, k: Array, v: Array, beta: Array, alpha: Array) -> tuple[Array, Array]:
    """The (gated) delta rule as online least squares: ``W ← α_t W`` (``W Diag(α_t)`` with one
    decay per key channel, ``alpha (T, d_k)``), then the gradient step
    ``W ← W − β_t (W k_t − v_t) k_tᵀ`` on ``½‖W k_t − v_t‖²``, ``o_t = W q_t``. Bound (for
    ``0 ≤ β_t ‖k_t‖² ≤ 2``, where each step is no expansion and rounding is not amplified): at
    most ``u · O(d + n_t) · m'_i`` added per step, ``m_t = 8 (d + n_t) (t + 1) ‖q_t‖ m'_t`` with
    ``m'_t`` of :func:`lms_iterates`."""
    out, mags = lms_iterates(q, k, v, beta, alpha)
    steps = np.arange(1, len(k) + 1)
    bound = 8 * (k.shape[1] + log_budget(alpha)) * steps * np.linalg.norm(q, axis=1)
    return out, bound * mags


def lms_iterates(q: Array, k: Array, v: Array, beta: Array, alpha: Array) -> tuple[Array, Array]:
    """:func:`lms_loop`'s outputs and the decayed magnitudes ``m'_t = Σ_{i≤t} γ_{t,i} β_i ‖k_i‖
    ‖v_i‖`` (``γ`` with the largest channel's decay) that its bound scales."""
    w = np.zeros((v.shape[1], k.shape[1]))
    out, mags, mag = [], [], 0.0
    for t in range(len(k)):
        w = alpha[t] * w
        w = w - beta[t] * np.outer(w @ k[t] - v[t], k[t])
        mag = np.max(alpha[t]) * mag + beta[t] * np.linalg.norm(k[t]) * np.linalg.norm(v[t])
        out.append(w @ q[t])
        mags.append(mag)
    return np.array(out), np.array(mags)


def implicit_step_loop(q: Array, k: Array, v: Array, beta: Array) -> tuple[Array, Array]:
    """Longhorn: ``W_t = argmin_W ‖W − W_{t−1}‖²_F + β_t ‖W k_t − v_t‖²`` solved from its normal
    equations ``W (I + β_t k_t k_tᵀ) = W_{t−1} + β_t v_t k_tᵀ`` (``numpy.linalg.solve``),
    ``o_t = W_t q_t``. Bound: the delta rule's (:func:`lms_loop`) with the step
    ``ε_t = β_t / (1 + β_t ‖k_t‖²)`` (``ε_t ‖k_t‖² < 1``: no expansion)."""
    d = k.shape[1]
    w = np.zeros((v.shape[1], d))
    out = []
    for t in range(len(k)):
        lhs = np.eye(d) + beta[t] * np.outer(k[t], k[t])
        w = np.linalg.solve(lhs, (w + beta[t] * np.outer(v[t], k[t])).T).T
        out.append(w @ q[t])
    eps = beta / (1 + beta * (k * k).sum(1))
    return np.array(out), lms_loop(q, k, v, eps, np.ones(len(k)))[1]


def diagonal_implicit_step(q: Array, k: Array, v: Array, beta: Array) -> Array:
    """Longhorn's diagonal approximation: ``W ← W diag(1 − ε_t k_t ⊙ k_t) + ε_t v_t k_tᵀ`` with
    ``ε_t = β_t / (1 + β_t ‖k_t‖²)``, ``o_t = W_t q_t``."""
    w = np.zeros((v.shape[1], k.shape[1]))
    out = []
    for t in range(len(k)):
        eps = beta[t] / (1 + beta[t] * k[t] @ k[t])
        w = w * (1 - eps * k[t] ** 2)[None, :] + eps * np.outer(v[t], k[t])
        out.append(w @ q[t])
    return np.array(out)


def weighted_ridge_per_prefix(
    q: Array, k: Array, v: Array, beta: Array, alpha: Array, lam: Array
) -> tuple[Array, Array]:
    """Mesa: ``W_t = argmin_W Σ_{i≤t} γ_{t,i} β_i ‖W k_i − v_i‖² + Σ_j λ_j ‖W e_j‖²`` by
    ``numpy.linalg.lstsq`` on the stacked rows ``√(γβ) k_i`` and ``√λ_j e_j``, ``o_t = W_t q_t``.
    Bound (forming ``A_t = H^{kk}_t + Λ``, ``H^{kv}_t`` and one solve ``A_t x_t = q_t``):
    ``m_t = 8 (d + n_t) ‖x_t‖ (‖A_t⁻¹‖ M^{kk}_t ‖H^{kv}_t‖ + M^{kv}_t)`` with the magnitudes
    ``M^{kk}_t = Σ γβ‖k_i‖² + max λ``, ``M^{kv}_t = Σ γβ‖k_i‖‖v_i‖`` (the solve's error
    ``‖A⁻¹‖ ‖ΔA‖ ‖x‖``: ``u κ`` relative)."""
    g = decay_weights(alpha)
    penalty = np.diag(np.sqrt(lam))
    out, mags = [], []
    for t in range(len(k)):
        weights = g[t, : t + 1] * beta[: t + 1]
        c = np.sqrt(weights)[:, None]
        rows = np.vstack([c * k[: t + 1], penalty])
        targets = np.vstack([c * v[: t + 1], np.zeros((len(lam), v.shape[1]))])
        out.append(q[t] @ np.linalg.lstsq(rows, targets, rcond=None)[0])
        inverse = np.linalg.inv(rows.T @ rows)
        kv = (c * k[: t + 1]).T @ (c * v[: t + 1])
        norms = np.linalg.norm(k[: t + 1], axis=1)
        m_kk = weights @ norms**2 + lam.max()
        m_kv = weights @ (norms * np.linalg.norm(v[: t + 1], axis=1))
        x_norm = np.linalg.norm(inverse @ q[t])
        mags.append(x_norm * (np.linalg.norm(inverse, 2) * m_kk * np.linalg.norm(kv, 2) + m_kv))
    return np.array(out), 8 * (k.shape[1] + log_budget(alpha)) * np.array(mags)


def softmax_weights(q: Array, k: Array, scale: float, t: int) -> Array:
    """``w_{t,i} = softmax_{i≤t}(scale · q_tᵀ k_i)``, shifted by the largest score."""
    s = scale * (k[: t + 1] @ q[t])
    e = np.exp(s - s.max())
    return e / e.sum()


def _spread(q: Array, k: Array, scale: float, t: int) -> float:
    """``d |scale| ‖q_t‖ max_{i≤t} ‖k_i‖``: the rounding of the scores, relative in the weights."""
    reach = np.linalg.norm(k[: t + 1], axis=1).max()
    return float(k.shape[1] * abs(scale) * np.linalg.norm(q[t]) * reach)


def kernel_smoother(q: Array, k: Array, v: Array, scale: float) -> tuple[Array, Array]:
    """Softmax attention as the Nadaraya–Watson smoother: ``o_t = argmin_b Σ_{i≤t} w_{t,i}
    ‖v_i − b‖²``, the weighted mean. Bound: ``m_t = 4 (spread_t + t + 1 + d) max_{i≤t} |v_i|``
    (the scores' rounding, relative in the weights, and a convex sum of ``t + 1`` terms)."""
    out, mags = [], []
    for t in range(len(k)):
        out.append(softmax_weights(q, k, scale, t) @ v[: t + 1])
        spread = _spread(q, k, scale, t)
        mags.append(4 * (spread + t + 1 + k.shape[1]) * np.abs(v[: t + 1]).max())
    return np.array(out), np.array(mags)


def local_linear_fit(q: Array, k: Array, v: Array, lam: float, scale: float) -> tuple[Array, Array]:
    """Local linear attention: the intercept of ``min_{b, W} Σ_{i≤t} w_{t,i} ‖v_i − b − W (k_i −
    q_t)‖² + λ ‖W‖²_F`` by ``numpy.linalg.lstsq`` on the rows ``√w_i [1, (k_i − q_t)ᵀ]`` and
    ``[0, √λ e_jᵀ]``. Bound: ``m_t = 4 (spread_t + t + 1 + d) κ_t² (max|v_i| + max|Ŵ| max|k_i −
    q_t|)`` with ``κ_t`` the condition number of those rows (the layer solves the normal
    equations ``Σ^{kk}_t + λI``, whose condition is ``κ_t²``)."""
    d, d_v = k.shape[1], v.shape[1]
    out, mags = [], []
    ridge_rows = np.hstack([np.zeros((d, 1)), np.sqrt(lam) * np.eye(d)])
    for t in range(len(k)):
        c = np.sqrt(softmax_weights(q, k, scale, t))[:, None]
        design = np.hstack([np.ones((t + 1, 1)), k[: t + 1] - q[t]])
        rows = np.vstack([c * design, ridge_rows])
        targets = np.vstack([c * v[: t + 1], np.zeros((d, d_v))])
        coef = np.linalg.lstsq(rows, targets, rcond=None)[0]
        out.append(coef[0])
        sv = np.linalg.svd(rows, compute_uv=False)
        size = np.abs(v[: t + 1]).max() + np.abs(coef[1:]).max() * np.abs(design).max()
        spread = _spread(q, k, scale, t)
        mags.append(4 * (spread + t + 1 + d) * (sv[0] / sv[-1]) ** 2 * size)
    return np.array(out), np.array(mags)


# ---- the layers of 2025 (one sequence at a time, as above) ---------------------------------
# A layer whose state update need not be a contraction gets the bound its own error propagation
# gives: the rounding error ``δ_s`` made at step ``s`` (at most ``u · n · τ_s``, ``τ_s`` the
# magnitude of the terms summed, ``n`` their number per entry) reaches step ``t`` through the
# product of the update's Jacobians, so ``‖e_t‖ ≤ u · n · Σ_{s≤t} ‖J_t ⋯ J_{s+1}‖₂ τ_s``
# (:func:`propagated`, computed from the Jacobians of this very sequence).


def propagated(jacobians: list[Array], terms: list[float]) -> Array:
    """``Σ_{s≤t} ‖J_t ⋯ J_{s+1}‖₂ τ_s`` for every ``t`` (``J_t`` the update's Jacobian at step
    ``t``, ``τ_s`` the magnitude of the terms rounded at step ``s``)."""
    if not jacobians:
        return np.zeros(0)
    m = len(jacobians[0])
    products = np.zeros((0, m, m))
    out = []
    for jac in jacobians:
        products = np.concatenate([jac @ products, np.eye(m)[None]])
        norms = np.linalg.norm(products, 2, axis=(1, 2)) * np.asarray(terms[: len(products)])
        out.append(sum(norms))
    return np.array(out)


def lms_steps(q: Array, k: Array, v: Array, beta: Array, alpha: Array) -> tuple[Array, Array]:
    """DeltaProduct as ``n_h`` LMS steps per token: ``W ← α_t W``, then for each step ``j``
    ``W ← W − β_{t,j} (W k_{t,j} − v_{t,j}) k_{t,j}ᵀ``; ``o_t = W q_t`` (``k (T, n_h, d)``,
    ``v (T, n_h, d_v)``, ``beta (T, n_h)``). Bound: :func:`lms_loop`'s over the ``n_h (t + 1)``
    non-expansive steps so far (``0 ≤ β ‖k‖² ≤ 2``)."""
    w = np.zeros((v.shape[-1], k.shape[-1]))
    out, mags, mag = [], [], 0.0
    for t in range(len(k)):
        w = alpha[t] * w
        mag *= alpha[t]
        for j in range(k.shape[1]):
            w = w - beta[t, j] * np.outer(w @ k[t, j] - v[t, j], k[t, j])
            mag += beta[t, j] * np.linalg.norm(k[t, j]) * np.linalg.norm(v[t, j])
        out.append(w @ q[t])
        mags.append(mag)
    steps = k.shape[1] * np.arange(1, len(k) + 1)
    bound = 8 * (k.shape[-1] + log_budget(alpha)) * steps * np.linalg.norm(q, axis=1)
    return np.array(out), bound * np.array(mags)


def dplr_loop(
    q: Array, k: Array, v: Array, a: Array, b: Array, alpha: Array
) -> tuple[Array, Array]:
    """The generalized delta rule: ``W ← W (Diag(α_t) + b_t a_tᵀ) + v_t k_tᵀ`` (``W`` read before
    the decay in ``W b_t``), ``o_t = W q_t``; ``alpha (T, d)``. Bound: :func:`propagated` with
    the Jacobian ``(Diag(α_t) + b_t a_tᵀ)ᵀ`` per row of ``W``, ``n = d + 3``."""
    w = np.zeros((v.shape[1], k.shape[1]))
    out, jacobians, terms = [], [], []
    for t in range(len(k)):
        step = np.diag(alpha[t]) + np.outer(b[t], a[t])
        terms.append(
            np.linalg.norm(w) * np.abs(step).sum(0).max()
            + np.linalg.norm(v[t]) * np.linalg.norm(k[t])
        )
        w = w @ step + np.outer(v[t], k[t])
        jacobians.append(step.T)
        out.append(w @ q[t])
    bound = 4 * (k.shape[1] + 3) * propagated(jacobians, terms) * np.linalg.norm(q, axis=1)
    return np.array(out), bound


def instrumental_lms(
    q: Array, k: Array, p: Array, v: Array, beta: Array, alpha: Array
) -> tuple[Array, Array]:
    """Comba as the LMS step of instrumental-variable regression: ``W ← α_t W``,
    ``W ← W + β_t (v_t − W p_t) k_tᵀ`` (error at the regressor ``p_t``, step along the instrument
    ``k_t``), ``o_t = W q_t``. Bound: :func:`propagated` with the Jacobian
    ``α_t (I − β_t p_t k_tᵀ)ᵀ`` per row of ``W``, ``n = d + 3``."""
    d = k.shape[1]
    w = np.zeros((v.shape[1], d))
    out, jacobians, terms = [], [], []
    for t in range(len(k)):
        w = alpha[t] * w
        terms.append(
            np.linalg.norm(w) * (1 + beta[t] * np.linalg.norm(p[t]) * np.linalg.norm(k[t]))
            + beta[t] * np.linalg.norm(v[t]) * np.linalg.norm(k[t])
        )
        w = w + beta[t] * np.outer(v[t] - w @ p[t], k[t])
        jacobians.append(alpha[t] * (np.eye(d) - beta[t] * np.outer(p[t], k[t])).T)
        out.append(w @ q[t])
    bound = 4 * (d + 3) * propagated(jacobians, terms) * np.linalg.norm(q, axis=1)
    return np.array(out), bound


def momentum_lms(
    q: Array, k: Array, p: Array, v: Array, beta: Array, eta: Array, mu: Array, alpha: Array
) -> tuple[Array, Array]:
    """The momentum delta rule in fla's convention: ``e = Sᵀ p_t − v_t``,
    ``M ← μ_t M + η_t k_t eᵀ``, ``S ← α_t S − β_t M``, ``o_t = Sᵀ q_t`` (heavy-ball online least
    squares when ``p = k``; Titans' memory with ``β = 1``, ``η = θ``). Bound:
    :func:`propagated` with the Jacobian of the pair ``(S, M)`` per column of the values,
    ``n = d + 4``."""
    d = k.shape[1]
    s = np.zeros((d, v.shape[1]))
    m = np.zeros_like(s)
    out, jacobians, terms = [], [], []
    for t in range(len(k)):
        push = eta[t] * np.outer(k[t], p[t])
        terms.append(
            np.linalg.norm(s) * (alpha[t] + np.abs(push).sum())
            + np.linalg.norm(m)
            + eta[t] * np.linalg.norm(k[t]) * np.linalg.norm(v[t])
        )
        m = mu[t] * m + eta[t] * np.outer(k[t], s.T @ p[t] - v[t])
        s = alpha[t] * s - beta[t] * m
        top = np.hstack([alpha[t] * np.eye(d) - beta[t] * push, -beta[t] * mu[t] * np.eye(d)])
        bottom = np.hstack([push, mu[t] * np.eye(d)])
        jacobians.append(np.vstack([top, bottom]))
        out.append(s.T @ q[t])
    bound = 4 * (d + 4) * propagated(jacobians, terms) * np.linalg.norm(q, axis=1)
    return np.array(out), bound


def mini_batch_gd(q: Array, k: Array, v: Array, lr: Array, batch: int) -> tuple[Array, Array]:
    """TTT-Linear without its LayerNorm: per mini-batch of ``batch`` tokens the gradients
    ``G_i = (W₀ k_i − v_i) k_iᵀ`` of ``½‖W k_i − v_i‖²`` at the batch's starting map ``W₀``;
    ``o_t = (W₀ − η_t Σ_{i≤t} G_i) q_t``; the next batch starts from
    ``W₀ − η_e Σ_{batch} G_i`` (``e`` its last token). Bound: the running bound on absolute
    values, ``n = d + batch + 2``."""
    w0 = np.zeros((v.shape[1], k.shape[1]))
    mag0 = np.zeros_like(w0)
    out, mags = [], []
    for start in range(0, len(k), batch):
        grad, grad_mag = np.zeros_like(w0), np.zeros_like(w0)
        for t in range(start, min(start + batch, len(k))):
            grad = grad + np.outer(w0 @ k[t] - v[t], k[t])
            grad_mag = grad_mag + np.outer(mag0 @ np.abs(k[t]) + np.abs(v[t]), np.abs(k[t]))
            out.append((w0 - lr[t] * grad) @ q[t])
            mags.append(((mag0 + lr[t] * grad_mag) @ np.abs(q[t])).max())
        w0 = w0 - lr[t] * grad
        mag0 = mag0 + lr[t] * grad_mag
    return np.array(out), 4 * (k.shape[1] + batch + 2) * np.array(mags)


def fenwick_segments(t: int) -> list[tuple[int, int, int]]:
    """``[(level, first, end), …]``: ``[0, t)`` split by the binary digits of ``t`` — for each
    set bit ``b`` the ``2^b`` positions below ``t`` with the digits under ``b`` cleared, at level
    ``b + 1`` — and ``t`` itself at level 0 (log-linear attention's levels)."""
    out = [(0, t, t + 1)]
    for b in range(t.bit_length()):
        if t >> b & 1:
            base = t - t % (1 << b)
            out.append((b + 1, base - (1 << b), base))
    return out


def level_weighted_sum(
    q: Array, k: Array, v: Array, lam: Array, alpha: Array
) -> tuple[Array, Array]:
    """Log-linear attention: ``o_t = Σ_{i≤t} λ_{t, ℓ} γ_{t,i} (q_tᵀ k_i) v_i`` over the Fenwick
    segments of :func:`fenwick_segments` (``lam (T, L)``). Bound: :func:`decayed_sum`'s with
    the weights ``|λ| γ``."""
    g = decay_weights(alpha)
    out, mags = [], []
    for t in range(len(k)):
        o, m = np.zeros(v.shape[1]), np.zeros(v.shape[1])
        for level, first, end in fenwick_segments(t):
            for i in range(first, end):
                w = lam[t, level] * g[t, i]
                o = o + w * (q[t] @ k[i]) * v[i]
                m = m + abs(w) * (np.abs(q[t]) @ np.abs(k[i])) * np.abs(v[i])
        out.append(o)
        mags.append(m.max())
    return np.array(out), 4 * (k.shape[1] + log_budget(alpha)) * np.array(mags)


def gated_smoother(
    q: Array, k: Array, v: Array, forget: Array, scale: float
) -> tuple[Array, Array]:
    """Forgetting attention as the Nadaraya–Watson smoother with the kernel
    ``e^{scale q_tᵀ k_i} Π_{i<j≤t} f_j``, the weighted mean written out (the gates as
    products). Bound: :func:`kernel_smoother`'s, the spread of the exponents widened by the
    cumulative ``Σ |log f|``."""
    out, mags = [], []
    for t in range(len(k)):
        logits = scale * (k[: t + 1] @ q[t])
        gates = np.array([np.prod(forget[i + 1 : t + 1]) for i in range(t + 1)])
        weights = np.exp(logits - logits.max()) * gates
        out.append(weights @ v[: t + 1] / weights.sum())
        spread = _spread(q, k, scale, t) + np.abs(np.log(forget[: t + 1])).sum()
        mags.append(4 * (spread + t + 1 + k.shape[1]) * np.abs(v[: t + 1]).max())
    return np.array(out), np.array(mags)


def stick_breaking(
    q: Array, k: Array, v: Array, scale: float, attend_current: bool = False
) -> tuple[Array, Array]:
    """Stick-breaking attention: at each ``t`` the stick broken from the nearest visible key
    backwards, ``A = σ(z) · stick``, ``stick ← stick · (1 − σ(z))``, ``o_t = Σ A_i v_i``.
    Bound: ``m_t = 8 (t + 1)(1 + max |z|) max |v|`` (each weight a product of ``t`` factors
    formed in log space by the layer, the logits' rounding relative in each)."""
    out, mags = [], []
    for t in range(len(k)):
        stick, o, top = 1.0, np.zeros(v.shape[1]), 0.0
        for i in range(t if attend_current else t - 1, -1, -1):
            z = scale * q[t] @ k[i]
            p = 1 / (1 + np.exp(-z))
            o = o + stick * p * v[i]
            stick *= 1 - p
            top = max(top, abs(z))
        out.append(o)
        mags.append(8 * (t + 1) * (1 + top) * np.abs(v[: t + 1]).max())
    return np.array(out), np.array(mags)
