"""Independent numpy references for the sequence layers (no layer code; several are the ones
``attnreg verify`` certifies against, from ``attnreg.studies.verify.references``: one set): each
layer written as the estimator it is — a weighted least-squares gradient step, the LMS loop, the
proximal (implicit) step, the decayed ridge solve per prefix, the kernel-weighted local fits —
and the rounding-error bounds the tests compare against. Arrays are ``(B, H, T, d)`` float64;
per-token parameters ``(B, H, T)``. The map is ``W`` (``d_v × d_k``), read out as
``o_t = W_t q_t``.
"""

import numpy as np

from attnreg.studies.verify import references as vref

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


# the references attnreg verify uses too (one set): their bounds carry a factor 4 that the tests
# here apply themselves
decay_weights = vref.decay_weights
log_budget = vref.log_budget
lms = vref.lms_iterates  # (outputs, Σ γ β ‖k‖ ‖v‖): the tests scale it to their bounds
weighted_sum = vref.decayed_terms  # (outputs, elementwise magnitudes)
softmax_weights = vref.softmax_weights


def proximal(q, k, v, beta):
    """Implicit online least squares (one head), from its normal equations
    (:func:`attnreg.studies.verify.references.implicit_step_loop`)."""
    return vref.implicit_step_loop(q, k, v, beta)[0]


def smoother(q, k, v, scale):
    """Nadaraya–Watson (one head) and the bound factor ``(d |scale| ‖q_t‖ max‖k_i‖ + t + d)
    max‖v_i‖_∞`` (:func:`attnreg.studies.verify.references.kernel_smoother`)."""
    out, bound = vref.kernel_smoother(q, k, v, scale)
    return out, bound / 4


def local_linear_fit(q, k, v, lam, scale):
    """The local-linear fit (one head) and its bound factor
    (:func:`attnreg.studies.verify.references.local_linear_fit`)."""
    out, bound = vref.local_linear_fit(q, k, v, lam, scale)
    return out, bound / 4
