"""Independent numpy / scikit-learn references written for the tests (no attnreg code)."""

import numpy as np


def lstsq_predict(x, y, q):
    return q @ np.linalg.lstsq(x, y, rcond=None)[0]


def ridge_predict(x, y, q, lam):
    return q @ np.linalg.solve(x.T @ x + lam * np.eye(x.shape[1]), x.T @ y)


def gd_predict(x, y, q, etas, w0=None, precond=None):
    n, d = x.shape
    w = np.zeros((y.shape[1], d)) if w0 is None else w0.copy()
    g = np.eye(d) if precond is None else precond
    for eta in etas:
        grad = sum(np.outer(w @ x[i] - y[i], x[i]) for i in range(n)) / n
        w = w - eta * grad @ g
    return q @ w.T


def gdpp_predict(x, y, q, etas, gammas):
    """Token loop: e_j <- e_j + P W_V sum_i e_i e_i^T W_K^T W_Q e_j with the GD++ weights."""
    n, d = x.shape
    dy = y.shape[1]
    tokens = np.concatenate([np.hstack([x, y]), np.hstack([q, np.zeros((len(q), dy))])])
    for eta, gamma in zip(etas, gammas, strict=True):
        kq = np.zeros((d + dy, d + dy))
        kq[:d, :d] = np.eye(d)
        pv = np.zeros((d + dy, d + dy))
        pv[:d, :d] = -gamma * np.eye(d)
        pv[d:, d:] = -(eta / n) * np.eye(dy)
        ctx = tokens[:n].copy()
        new = tokens.copy()
        for j in range(len(tokens)):
            acc = sum(ctx[i] * (ctx[i] @ kq @ tokens[j]) for i in range(n))
            new[j] = tokens[j] + pv @ acc
        tokens = new
    return -tokens[n:, d:]


def ridge_per_prefix(x, y, lam):
    out = []
    for t in range(len(x)):
        xt, yt = x[: t + 1], y[: t + 1]
        out.append(x[t] @ np.linalg.solve(xt.T @ xt + lam * np.eye(x.shape[1]), xt.T @ yt))
    return np.array(out)


def newton_predict(x, y, q, alpha, steps, lam=0.0):
    """Newton–Schulz M_{k+1} = 2M_k − M_k S M_k from M_0 = αS, S = XᵀX + λI; ŷ = x*ᵀ Mᵀ XᵀY."""
    s = x.T @ x + lam * np.eye(x.shape[1])
    m = alpha * s
    for _ in range(steps):
        m = 2 * m - m @ s @ m
    return q @ m.T @ (x.T @ y)


def gaussian_kernel(a, b, h):
    """k(a_i, b_j) = exp(−‖a_i − b_j‖² / (2h²)), from the pairwise differences."""
    return np.exp(-((a[:, None, :] - b[None, :, :]) ** 2).sum(-1) / (2 * h * h))


def kernel_richardson_iterates(x, y, h, lam, omega, steps):
    """α_0 = 0, α_{t+1} = α_t + ω (D + λI)⁻¹ (Y − (K + λI) α_t), D = diag(K 1): all iterates."""
    k = gaussian_kernel(x, x, h)
    p = 1.0 / (k.sum(1) + lam)
    a = np.zeros_like(y)
    out = [a]
    for _ in range(steps):
        a = a + omega * p[:, None] * (y - k @ a - lam * a)
        out.append(a)
    return out


def kernel_richardson_predict(x, y, q, h, lam, omega, steps):
    """Σ_i k(x*, x_i) α_K,i after ``steps`` Richardson steps."""
    return gaussian_kernel(q, x, h) @ kernel_richardson_iterates(x, y, h, lam, omega, steps)[-1]


def gaussian_attention_max_score(x, q, h, lam):
    """The largest ``|β · score|`` of the Gaussian-kernel attention with a sink of weight λ:
    query tokens (context, sink at 0, queries) against the keys (context:
    ``(x_q·x_k − ‖x_k‖²/2)/h²``; sink: ``‖x_q‖²/(2h²) + ln λ``)."""
    tokens = np.concatenate([x, np.zeros((1, x.shape[1])), q])
    ctx = (tokens @ x.T - (x * x).sum(1)[None, :] / 2) / h**2
    sink = (tokens * tokens).sum(1) / (2 * h**2) + np.log(lam)
    return float(max(np.abs(ctx).max(), np.abs(sink).max()))
