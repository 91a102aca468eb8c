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


def decayed_ridge(q, k, v, beta, alpha, lam):
    """Mesa (one head, :func:`attnreg.studies.verify.references.weighted_ridge_per_prefix`,
    ``lam`` a number or ``(d_k,)``) and its bound's magnitudes without verify's factor
    ``8 (d + n_t)``, which the tests here apply themselves."""
    lam = np.broadcast_to(np.asarray(lam, dtype=np.float64), (k.shape[1],))
    out, bound = vref.weighted_ridge_per_prefix(q, k, v, beta, alpha, lam)
    return out, bound / (8 * (k.shape[1] + vref.log_budget(alpha)))


# the references attnreg verify uses too (one set): their bounds carry a factor 4 that the tests
# here apply themselves
decay_weights = vref.decay_weights
log_budget = vref.log_budget
lms = vref.lms_iterates  # (outputs, Σ γ β ‖k‖ ‖v‖): the tests scale it to their bounds
weighted_sum = vref.decayed_terms  # (outputs, elementwise magnitudes)
softmax_weights = vref.softmax_weights
channel_weighted_sum = vref.channel_decayed_terms
diagonal_proximal = vref.diagonal_implicit_step


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
