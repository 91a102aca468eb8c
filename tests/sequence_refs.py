"""Independent numpy references for the sequence layers (no attnreg code): each layer written
as the estimator it is — a weighted least-squares gradient step, the LMS loop, the proximal
(implicit) step, the decayed ridge solve per prefix, the kernel-weighted local fits — and the
rounding-error bounds the tests compare against. Arrays are ``(B, H, T, d)`` float64; per-token
parameters ``(B, H, T)``. The map is ``W`` (``d_v × d_k``), read out as ``o_t = W_t q_t``.
"""

import numpy as np

U64 = np.finfo(np.float64).eps / 2
U32 = np.finfo(np.float32).eps / 2


def heads(fn, *arrays):
    """Apply ``fn`` to every (batch, head) slice of the arrays; stack the results (each part of
    a tuple result separately)."""
    b, h = arrays[0].shape[:2]
    results = [[fn(*(a[i, j] for a in arrays)) for j in range(h)] for i in range(b)]
    if isinstance(results[0][0], tuple):
        parts = len(results[0][0])
        return tuple(np.array([[r[p] for r in row] for row in results]) for p in range(parts))
    return np.array(results)


def decay_weights(alpha):
    """``γ[t, i] = Π_{i<j≤t} α_j`` for ``i ≤ t``, 0 above (one head, ``alpha (T,)``)."""
    t_len = len(alpha)
    g = np.zeros((t_len, t_len))
    for t in range(t_len):
        prod = 1.0
        for i in range(t, -1, -1):
            g[t, i] = prod
            prod *= alpha[i]
    return g


def weighted_sum(q, k, v, alpha):
    """``o_t = Σ_{i≤t} γ_{t,i} (q_tᵀ k_i) v_i`` (one head) and the elementwise magnitude
    ``Σ_{i≤t} γ_{t,i} (|q_t|ᵀ|k_i|) |v_i|`` that bounds its rounding."""
    g = decay_weights(alpha)
    return (g * (q @ k.T)) @ v, (g * (np.abs(q) @ np.abs(k).T)) @ np.abs(v)


def channel_weighted_sum(q, k, v, alpha):
    """One decay per key channel (one head, ``alpha (T, d_k)``): ``o_t = Σ_{i≤t} Σ_c q_{t,c}
    γ_{t,i,c} k_{i,c} v_i`` with ``γ_{t,i,c} = Π_{i<j≤t} α_{j,c}``, each channel's weights
    from :func:`decay_weights`, and the elementwise magnitude that bounds its rounding."""
    out, mag = np.zeros((len(q), v.shape[1])), np.zeros((len(q), v.shape[1]))
    for c in range(k.shape[1]):
        g = decay_weights(alpha[:, c])
        out += (g * np.outer(q[:, c], k[:, c])) @ v
        mag += (g * np.outer(np.abs(q[:, c]), np.abs(k[:, c]))) @ np.abs(v)
    return out, mag


def log_budget(alpha):
    """``n_t = (t + 1) · (1 + Σ_{j≤t} |log α_j|)`` per position: the summation length of a
    prefix plus the cumulative log-decay, whose rounding a log-space form carries (with one
    decay per channel, ``alpha (T, d_k)``, the largest channel's)."""
    t = np.arange(1, len(alpha) + 1)
    logs = np.abs(np.log(alpha))
    return t * (1 + np.cumsum(logs.max(-1) if logs.ndim == 2 else logs))


def lms(q, k, v, beta, alpha):
    """Online least squares (one head): ``W ← α_t W``, ``W ← W − β_t (W k_t − v_t) k_tᵀ`` (the
    gradient step on ``½‖W k_t − v_t‖²``), ``o_t = W q_t``; also the decayed magnitudes
    ``m_t = Σ_{i≤t} γ_{t,i} β_i ‖k_i‖ ‖v_i‖``."""
    w = np.zeros((v.shape[1], k.shape[1]))
    out, mags, mag = [], [], 0.0
    for t in range(len(k)):
        w = alpha[t] * w  # one factor, or (alpha (T, d_k)) one per column of W: W Diag(α_t)
        w = w - beta[t] * np.outer(w @ k[t] - v[t], k[t])
        mag = np.max(alpha[t]) * mag + beta[t] * np.linalg.norm(k[t]) * np.linalg.norm(v[t])
        out.append(w @ q[t])
        mags.append(mag)
    return np.array(out), np.array(mags)


def proximal(q, k, v, beta):
    """Implicit online least squares (one head): ``W_t = argmin ‖W − W_{t−1}‖² + β_t ‖W k_t −
    v_t‖²``, from its normal equations ``W (I + β k kᵀ) = W_{t−1} + β v kᵀ``."""
    d = k.shape[1]
    w = np.zeros((v.shape[1], d))
    out = []
    for t in range(len(k)):
        lhs = np.eye(d) + beta[t] * np.outer(k[t], k[t])
        w = np.linalg.solve(lhs, (w + beta[t] * np.outer(v[t], k[t])).T).T
        out.append(w @ q[t])
    return np.array(out)


def diagonal_proximal(q, k, v, beta):
    """Longhorn's diagonal approximation (one head): ``W ← W diag(1 − ε k ⊙ k) + ε v kᵀ``."""
    w = np.zeros((v.shape[1], k.shape[1]))
    out = []
    for t in range(len(k)):
        eps = beta[t] / (1 + beta[t] * k[t] @ k[t])
        w = w * (1 - eps * k[t] ** 2)[None, :] + eps * np.outer(v[t], k[t])
        out.append(w @ q[t])
    return np.array(out)


def decayed_ridge(q, k, v, beta, alpha, lam):
    """Mesa (one head): ``W_t = argmin Σ_{i≤t} γ_{t,i} β_i ‖W k_i − v_i‖² + Σ_j λ_j ‖W e_j‖²``
    by least squares on the stacked rows ``√(γβ) k_i`` and ``√λ_j e_j``, ``o_t = W_t q_t``. Also
    the bound's ingredients: ``x = (H^{kk}+Λ)⁻¹ q``, ``‖(H^{kk}+Λ)⁻¹‖``, ``‖H^{kv}‖`` and the
    magnitudes ``Σ γβ‖k‖² + max λ``, ``Σ γβ‖k‖‖v‖``."""
    g = decay_weights(alpha)
    lam = np.broadcast_to(lam, (k.shape[1],))
    penalty = np.diag(np.sqrt(lam))
    out, parts = [], []
    for t in range(len(k)):
        c = np.sqrt(g[t, : t + 1] * beta[: t + 1])[:, None]
        rows = np.vstack([c * k[: t + 1], penalty])
        targets = np.vstack([c * v[: t + 1], np.zeros((len(lam), v.shape[1]))])
        w = np.linalg.lstsq(rows, targets, rcond=None)[0].T
        out.append(w @ q[t])
        a = rows.T @ rows
        inv = np.linalg.inv(a)
        x = inv @ q[t]
        kv = (c * k[: t + 1]).T @ (c * v[: t + 1])
        weights = g[t, : t + 1] * beta[: t + 1]
        mag_kk = weights @ (k[: t + 1] ** 2).sum(1) + lam.max()
        mag_kv = weights @ (np.linalg.norm(k[: t + 1], axis=1) * np.linalg.norm(v[: t + 1], axis=1))
        parts.append(
            np.linalg.norm(x) * (np.linalg.norm(inv, 2) * mag_kk * np.linalg.norm(kv, 2) + mag_kv)
        )
    return np.array(out), np.array(parts)


def softmax_weights(q, k, scale, t):
    """``w_{t,i} = softmax_{i≤t}(scale · q_tᵀ k_i)`` (one head)."""
    s = scale * (k[: t + 1] @ q[t])
    e = np.exp(s - s.max())
    return e / e.sum()


def smoother(q, k, v, scale):
    """Nadaraya–Watson (one head): ``o_t = argmin_b Σ_{i≤t} w_{t,i} ‖v_i − b‖²`` (weighted
    mean), and the bound factor ``(d |scale| ‖q_t‖ max‖k_i‖ + t + d) max‖v_i‖_∞``."""
    out, mags = [], []
    d = k.shape[1]
    for t in range(len(k)):
        w = softmax_weights(q, k, scale, t)
        out.append(w @ v[: t + 1])
        spread = d * abs(scale) * np.linalg.norm(q[t]) * np.linalg.norm(k[: t + 1], axis=1).max()
        mags.append((spread + t + 1 + d) * np.abs(v[: t + 1]).max())
    return np.array(out), np.array(mags)


def local_linear_fit(q, k, v, lam, scale):
    """The local-linear fit (one head): ``(b̂, Ŵ) = argmin Σ_{i≤t} w_{t,i} ‖v_i − b − W (k_i −
    q_t)‖² + λ ‖W‖²`` by least squares on the rows ``√w_i [1, (k_i − q_t)ᵀ]`` and ``[0, √λ e_jᵀ]``;
    returns the intercepts and the bound factor (the weighted problem's condition number times
    the magnitudes of the centred data and of ``Ŵ``)."""
    d, d_v = k.shape[1], v.shape[1]
    out, mags = [], []
    for t in range(len(k)):
        w = softmax_weights(q, k, scale, t)
        c = np.sqrt(w)[:, None]
        design = np.hstack([np.ones((t + 1, 1)), k[: t + 1] - q[t]])
        rows = np.vstack([c * design, np.hstack([np.zeros((d, 1)), np.sqrt(lam) * np.eye(d)])])
        targets = np.vstack([c * v[: t + 1], np.zeros((d, d_v))])
        coef = np.linalg.lstsq(rows, targets, rcond=None)[0]
        out.append(coef[0])
        sv = np.linalg.svd(rows, compute_uv=False)
        kappa = sv[0] / sv[-1]
        spread = d * abs(scale) * np.linalg.norm(q[t]) * np.linalg.norm(k[: t + 1], axis=1).max()
        size = np.abs(v[: t + 1]).max() + np.abs(coef[1:]).max() * np.abs(design).max()
        mags.append((spread + t + 1 + d) * kappa**2 * size)
    return np.array(out), np.array(mags)
