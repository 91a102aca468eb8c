"""One predictor contract, tested in one place (issue "One form, one path", item 4).

Every predictor of attnreg answers ``predict(x_ctx, y_ctx, x_query)``:
``(B, N, d), (B, N, dy), (B, M, d) -> (B, M, dy)`` (unbatched 2-D inputs and 1-D ``y`` give
matching unbatched outputs). :data:`REGISTRY` lists every one — estimators, constructions,
trained models, the memories' regression reader, ``ZeroPredictor`` and the trainable
OLS-Transformer — and every check below runs over every entry, as scikit-learn's
``parametrize_with_checks`` does for estimators. A new predictor is added to the registry once:
:func:`discovered_predictors` walks the package, and a predictor class without an entry fails.

Not in the registry: :class:`attnreg.sklearn.InContextRegressor` answers scikit-learn's
``fit(X, y)`` / ``predict(X)``, another signature (its own checks run through scikit-learn's
``parametrize_with_checks`` in ``test_sklearn_in_context.py``).

Per entry:

* ``kind``: ``"lstsq"`` — scale-equivariant regression, ``ŷ(sX, sY, sX*) = s ŷ(X, Y, X*)``;
  ``"ridge"`` — ``ŷ(sX, sY, sX*; λ) = s ŷ(X, Y, X*; λ/s²)``, which is ``s`` times least squares
  at ``s = 1e300`` and below the float range at ``s = 1e-300``: a ``ValueError`` saying the
  result underflowed (never zeros); ``"other"`` — a finite
  answer or a ``ValueError`` at extreme scale, never NaN/inf and never an answer that is zero or
  subnormal everywhere when the unscaled answer is not.
* ``dtype``: ``"input"`` — float32 in, float32 out; ``"model"`` — computed and returned in the
  model's dtype (``AttentionRegression``, ``TrainableOLSTransformer``; built here in float64).
* ``magnitude``: the error scale ``T`` of the computation on given data, from which every
  tolerance is ``C·u·T`` (``u`` the unit roundoff of the dtype, ``C = 64`` covering the
  constants ``γ_k`` of the chains of at most 64 operations at these sizes). For least squares
  and ridge ``T = (κ(XᵀX + λI) + κ(X))·max|ŷ|`` (the forward-error bound of the normal
  equations, Higham 2002 §20.4, plus the tied OLS-Transformer's ``κ(X)`` term); for polynomial
  forms (GD, GD++, linear attention) ``T`` is the same computation on ``|X|, |Y|, |X*|`` and
  absolute weights (the running-error bound of sums of products, Higham §3.1); for softmax
  forms ``T = (1 + max|score|)·max|value|`` (a relative error ``u`` in a score moves a softmax
  weight by ``u·|score|``).
* ``reference``: an independent numpy / scikit-learn reference where one exists.
"""

from __future__ import annotations

import importlib
import inspect
import math
import pkgutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
from refs import (
    gaussian_attention_max_score,
    gaussian_kernel,
    gd_predict,
    gdpp_predict,
    kernel_richardson_predict,
    lstsq_predict,
    newton_predict,
)
from scipy.special import softmax
from sklearn.linear_model import Ridge as SkRidge

import attnreg
from attnreg.constructions import KernelRichardsonStack, NewtonStack, VonOswaldSummaryLayer
from attnreg.core.whitening import ConditioningWarning, RankWarning
from attnreg.estimators import (
    LMS,
    LocalLinear,
    MiniBatchLMS,
    MomentumLMS,
    MultiStepLMS,
    ZeroPredictor,
)
from attnreg.memory import (
    HebbianMemory,
    MemoryRegressor,
    ModernHopfield,
    PseudoInverseMemory,
    UniversalHopfieldMemory,
)
from attnreg.models import (
    AttentionRegression,
    SoftmaxAttention,
    TrainableLSA,
    TrainableOLSTransformer,
)

Arr = np.ndarray
D, DY, N, M, B = 3, 2, 7, 4, 2
C = 64
U64, U32 = 2.0**-53, 2.0**-24
TINY64 = float(np.finfo(np.float64).tiny)
ETA, GAMMA, STEPS = 0.3, 0.02, 2
PRECOND = np.array([[1.5, 0.2, 0.0], [0.2, 1.0, 0.1], [0.0, 0.1, 0.8]])


# ----------------------------------------------------------------------------- references
def per_task(f: Callable[[Arr, Arr, Arr], Arr], x: Arr, y: Arr, q: Arr) -> Arr:
    return np.stack([f(x[b], y[b], q[b]) for b in range(len(x))])


def kappa(x: Arr, lam: float = 0.0) -> float:
    """max over tasks of ``κ(XᵀX + λI) + κ(X)``."""
    s = np.linalg.svd(x, compute_uv=False)
    return float(np.max((s[:, 0] ** 2 + lam) / (s[:, -1] ** 2 + lam) + s[:, 0] / s[:, -1]))


def ridge_ref(lam: float) -> Callable[[Arr, Arr, Arr], Arr]:
    def f(x: Arr, y: Arr, q: Arr) -> Arr:
        fit = SkRidge(alpha=lam, fit_intercept=False, solver="svd").fit(x, y)
        return fit.predict(q).reshape(len(q), -1)

    return f


def gd_abs(x: Arr, y: Arr, q: Arr, precond: Arr | None = None) -> Arr:
    """The GD loop on absolute values: the running-error magnitude of :func:`gd_predict`."""
    n, d = x.shape
    g = np.eye(d) if precond is None else np.abs(precond)
    ax, ay = np.abs(x), np.abs(y)
    w = np.zeros((y.shape[1], d))
    for _ in range(STEPS):
        w = w + ETA * (w @ ax.T @ ax + ay.T @ ax) / n @ g
    return np.abs(q) @ w.T


def token_loop(
    x: Arr, y: Arr, q: Arr, kq: Arr, pv: Arr, *, softmax_sep: bool, absolute: bool = False
) -> Arr:
    """von Oswald tokens ``e = (x, y)``, queries ``(x*, 0)``; per layer and head
    ``e_j ← e_j + PV_h · mean_i e_i (e_iᵀ KQ_h e_j)`` (linear) or ``Σ_i softmax_i(e_iᵀ KQ_h e_j)
    e_i`` (softmax); prediction ``−y*``. ``kq``, ``pv``: ``(L, H, D, D)``. With ``absolute``:
    the magnitude ``T`` of the computation (absolute values; softmax bounded by
    ``(1 + max|score|) · max_i |e_i|``)."""
    n, d = x.shape
    e = np.concatenate([np.hstack([x, y]), np.hstack([q, np.zeros((len(q), y.shape[1]))])])
    if absolute:
        e, kq, pv = np.abs(e), np.abs(kq), np.abs(pv)
    for layer in range(kq.shape[0]):
        ctx = e[:n].copy()
        update = np.zeros_like(e)
        for h in range(kq.shape[1]):
            scores = e @ kq[layer, h].T @ ctx.T  # (T, N): e_iᵀ KQ e_j
            if softmax_sep and absolute:
                mixed = (1 + scores.max()) * np.broadcast_to(ctx.max(0), e.shape)
            elif softmax_sep:
                mixed = softmax(scores, axis=1) @ ctx
            else:
                mixed = scores @ ctx / n
            update = update + mixed @ pv[layer, h].T
        e = e + update
    return e[n:, d:] if absolute else -e[n:, d:]


def products(model: Any) -> tuple[Arr, Arr]:
    sets = [0 if model.recurrent else i for i in range(model.n_layers)]
    kq = torch.stack([model.key_query(i) for i in sets]).detach().numpy()
    pv = torch.stack([model.value_projection(i) for i in sets]).detach().numpy()
    return kq, pv


def gdpp_products(n: int, dy: int) -> tuple[Arr, Arr]:
    """GD++ in the token loop's mean form: ``KQ = [[I, 0], [0, 0]]``,
    ``PV = [[−γN I, 0], [0, −η I]]`` (γ on the context sum, η on the mean)."""
    width = D + dy
    kq = np.zeros((STEPS, 1, width, width))
    pv = np.zeros((STEPS, 1, width, width))
    kq[:, 0, :D, :D] = np.eye(D)
    pv[:, 0, :D, :D] = -GAMMA * n * np.eye(D)
    pv[:, 0, D:, D:] = -ETA * np.eye(dy)
    return kq, pv


def kernel_ref(beta: float, similarity: str = "dot") -> Callable[[Arr, Arr, Arr], Arr]:
    def f(x: Arr, y: Arr, q: Arr) -> Arr:
        if similarity == "dot":
            scores = q @ x.T
        elif similarity == "whitened_dot":
            scores = q @ np.linalg.pinv(x.T @ x) @ x.T
        else:  # euclidean
            scores = -np.linalg.norm(q[:, None, :] - x[None, :, :], axis=-1)
        return softmax(beta * scores, axis=1) @ y

    return f


def kernel_magnitude(beta: float, similarity: str = "dot") -> Callable[..., float]:
    def f(p: Any, x: Arr, y: Arr, q: Arr) -> float:
        if similarity == "euclidean":
            top = np.max(np.linalg.norm(q[:, :, None] - x[:, None], axis=-1))
            return (1 + beta * top) * np.abs(y).max()
        top = np.abs(q).max() * np.abs(x).max() * x.shape[-1]
        if similarity == "whitened_dot":
            top *= kappa(x)
        return (1 + beta * top) * np.abs(y).max()

    return f


def weights(p: Any, *names: str) -> list[Arr]:
    return [getattr(p, n).detach().numpy() for n in names]


def attention_regression_ref(p: Any, x: Arr, y: Arr, q: Arr) -> Arr:
    wq, wk = weights(p, "w_q", "w_k")
    qp, kp = q @ wq, x @ wk
    if p.variant == "softmax":
        return softmax(qp @ kp.T / math.sqrt(p.d_k), axis=1) @ y
    if p.variant == "whitened":
        cov = kp.T @ kp / len(x) + p.whiten_ridge * np.eye(kp.shape[1])
        return qp @ np.linalg.solve(cov, kp.T @ y) / len(x)
    return qp @ kp.T @ y / len(x)


def attention_regression_magnitude(p: Any, x: Arr, y: Arr, q: Arr) -> float:
    wq, wk = (np.abs(w) for w in weights(p, "w_q", "w_k"))
    if p.variant == "softmax":
        top = np.abs(q @ wq).max() * np.abs(x @ wk).max() * p.d_k / math.sqrt(p.d_k)
        return (1 + top) * np.abs(y).max()
    if p.variant == "whitened":  # OLS on the projected keys, ridge N·whiten_ridge
        ref = per_task(lambda a, b, c: attention_regression_ref(p, a, b, c), x, y, q)
        return kappa(x @ weights(p, "w_k")[0], p.whiten_ridge * x.shape[1]) * np.abs(ref).max()
    linear = np.abs(q) @ wq @ (np.abs(x) @ wk).swapaxes(-1, -2) @ np.abs(y) / x.shape[1]
    return float(linear.max())


def tols_ref(p: Any, x: Arr, y: Arr, q: Arr) -> Arr:
    wq, wk, wv, wp = weights(p, "w_q", "w_k", "w_v", "w_p")
    return (q @ wq) @ (x @ wk).T @ (x @ wv) @ wp / len(x)


def tols_magnitude(p: Any, x: Arr, y: Arr, q: Arr) -> float:
    a = [np.abs(w) for w in weights(p, "w_q", "w_k", "w_v", "w_p")]
    return float(tols_ref_abs(a, np.abs(x), np.abs(q)).max())


def tols_ref_abs(a: list[Arr], x: Arr, q: Arr) -> Arr:
    wq, wk, wv, wp = a
    return (q @ wq) @ (x @ wk).swapaxes(-1, -2) @ (x @ wv) @ wp / x.shape[1]


# ----------------------------------------------------------------------------- registry
@dataclass(frozen=True)
class Entry:
    """One predictor: ``make(dy)`` builds a fresh one for ``d = D`` features."""

    name: str
    make: Callable[[int], Any]
    kind: str  # "lstsq" | "ridge" | "other"
    magnitude: Callable[[Any, Arr, Arr, Arr], float]  # (predictor, x, y, q) -> T, batched
    reference: Callable[[Any, Arr, Arr, Arr], Arr] | None = None  # one task
    lam: float = 0.0  # the gram-form λ of a "ridge" entry
    dtype: str = "input"  # "input" | "model"
    refuses_huge: bool = False  # a "ridge" entry that may refuse 1e300 with a ValueError
    fixed_d: bool = False  # built for d = D (trained models)


def lstsq_magnitude(p: Any, x: Arr, y: Arr, q: Arr) -> float:
    return kappa(x) * np.abs(per_task(lstsq_predict, x, y, q)).max()


def ridge_magnitude(lam: float) -> Callable[..., float]:
    def f(p: Any, x: Arr, y: Arr, q: Arr) -> float:
        return kappa(x, lam) * np.abs(per_task(ridge_ref(lam), x, y, q)).max()

    return f


def gd_magnitude(precond: Arr | None = None) -> Callable[..., float]:
    def f(p: Any, x: Arr, y: Arr, q: Arr) -> float:
        return float(per_task(lambda a, b, c: gd_abs(a, b, c, precond), x, y, q).max())

    return f


def gdpp_magnitude(p: Any, x: Arr, y: Arr, q: Arr) -> float:
    kq, pv = gdpp_products(x.shape[1], y.shape[-1])
    loop = lambda a, b, c: token_loop(a, b, c, kq, pv, softmax_sep=False, absolute=True)  # noqa: E731
    return float(per_task(loop, x, y, q).max())


NEWTON_ALPHA = 1e-3  # inside 2/‖XᵀX‖₂² for the contract's data (κ(X) < 6, N = 7, D = 3)


def newton_magnitude(p: Any, x: Arr, y: Arr, q: Arr) -> float:
    """The Newton loop on absolute values, times the longest chain of roundings: every layer of
    the ``1 + 2·STEPS`` is a product chain over ``N + D`` keys and three token widths."""

    def loop(a: Arr, b: Arr, c: Arr) -> Arr:
        g = np.abs(a).T @ np.abs(a)
        m = NEWTON_ALPHA * g
        for _ in range(STEPS):
            m = 2 * m + m @ g @ m
        return np.abs(c) @ m.T @ (np.abs(a).T @ np.abs(b))

    chain = (1 + 2 * STEPS) * (x.shape[-2] + D + 3 * (4 * D + 2 * y.shape[-1]))
    return chain / C * float(per_task(loop, x, y, q).max())


KERNEL_H, KERNEL_LAM = 1.5, 0.5  # bandwidth and ridge of the kernel Richardson entry (ω = 1)


def kernel_richardson_magnitude(p: Any, x: Arr, y: Arr, q: Arr) -> float:
    """The Richardson loop on absolute values (``w ← w + P(|Y| + (K + λI) w)``, read out as
    ``k(x*, ·)ᵀ w``), times the growth ``√(N κ(P))`` of a rounding error through the iteration,
    the softmax's score factor ``2n + 4WS`` (width W, ``n = 3W + N + 1``, S the largest score)
    and the ``STEPS + 2`` layers that round; over C (the tolerance is ``C·u·T``)."""

    def one(a: Arr, b: Arr, c: Arr) -> float:
        n, dy = b.shape
        k = gaussian_kernel(a, a, KERNEL_H) + KERNEL_LAM * np.eye(n)
        deg = k.sum(1)
        w = np.zeros_like(b)
        for _ in range(STEPS):
            w = w + (np.abs(b) + k @ w) / deg[:, None]
        width = D + 4 * dy + 5
        score = gaussian_attention_max_score(a, c, KERNEL_H, KERNEL_LAM)
        chain = 2 * (3 * width + n + 1) + 4 * width * score + 2 * width + 3 * dy + 2
        growth = math.sqrt(n * deg.max() / deg.min())
        readout = gaussian_kernel(c, a, KERNEL_H).sum(1).max() * np.abs(w).max()
        return growth * chain * (STEPS + 2) * readout / C

    return max(one(x[b], y[b], q[b]) for b in range(len(x)))


def token_magnitude(p: Any, x: Arr, y: Arr, q: Arr) -> float:
    kq, pv = products(p)
    soft = isinstance(p, SoftmaxAttention)
    loop = lambda a, b, c: token_loop(a, b, c, kq, pv, softmax_sep=soft, absolute=True)  # noqa: E731
    return float(per_task(loop, x, y, q).max())


def token_ref(p: Any, x: Arr, y: Arr, q: Arr) -> Arr:
    kq, pv = products(p)
    return token_loop(x, y, q, kq, pv, softmax_sep=isinstance(p, SoftmaxAttention))


LMS_BETA, LOCAL_BETA, LOCAL_LAM = 0.05, 0.5, 0.1


def lms_loop(x: Arr, y: Arr, q: Arr, absolute: bool = False) -> Arr:
    """One LMS pass ``W ← W + β (y_i − W x_i) x_iᵀ``; with ``absolute``: the same recursion on
    absolute values (``W ← W (I + β|x_i||x_i|ᵀ) + β|y_i||x_i|ᵀ``), its running-error magnitude."""
    w = np.zeros((y.shape[1], x.shape[1]))
    for xi, yi in zip(x, y, strict=True):
        if absolute:
            w = w + LMS_BETA * (np.abs(yi)[:, None] + w @ np.abs(xi)[:, None]) * np.abs(xi)
        else:
            w = w + LMS_BETA * (yi[:, None] - w @ xi[:, None]) * xi
    return (np.abs(q) if absolute else q) @ w.T


VARIANT_MU, VARIANT_BATCH, VARIANT_STEPS = 0.5, 4, 2


def lms_variant_loop(kind: str) -> Callable[..., Arr]:
    """The LMS variants as numpy loops, step ``LMS_BETA``: ``"momentum"`` (``M ← μ M + e xᵀ``,
    ``W ← W − β M``), ``"minibatch"`` (one step per batch of ``VARIANT_BATCH`` pairs, the
    gradient at the batch's start), ``"multistep"`` (``VARIANT_STEPS`` steps per pair); with
    ``absolute``: the same recursions on absolute values, their running-error magnitude."""

    def loop(x: Arr, y: Arr, q: Arr, absolute: bool = False) -> Arr:
        w = np.zeros((y.shape[1], x.shape[1]))
        m = np.zeros_like(w)

        def error(w: Arr, xi: Arr, yi: Arr) -> Arr:  # W x − y, or its magnitude |y| + W|x|
            if absolute:
                return np.outer(np.abs(yi) + w @ np.abs(xi), np.abs(xi))
            return np.outer(w @ xi - yi, xi)

        sign = 1.0 if absolute else -1.0
        if kind == "minibatch":
            for start in range(0, len(x), VARIANT_BATCH):
                pairs = zip(
                    x[start : start + VARIANT_BATCH], y[start : start + VARIANT_BATCH], strict=True
                )
                w = w + sign * LMS_BETA * sum(error(w, xi, yi) for xi, yi in pairs)
        else:
            for xi, yi in zip(x, y, strict=True):
                if kind == "momentum":
                    m = VARIANT_MU * m + error(w, xi, yi)
                    w = w + sign * LMS_BETA * m
                else:
                    for _ in range(VARIANT_STEPS):
                        w = w + sign * LMS_BETA * error(w, xi, yi)
        return (np.abs(q) if absolute else q) @ w.T

    return loop


def variant_entry(name: str, kind: str, make: Callable[[int], Any]) -> Entry:
    loop = lms_variant_loop(kind)
    return Entry(
        name,
        make,
        "other",
        lambda p, x, y, q: float(per_task(lambda a, b, c: loop(a, b, c, True), x, y, q).max()),
        np_ref(loop),
    )


def local_linear_loop(x: Arr, y: Arr, q: Arr, magnitude: bool = False) -> Arr:
    """Per query: softmax weights, weighted means, centred moments and the intercept of the
    local-linear ridge fit; with ``magnitude``: ``(1 + β max|score|) (|ȳ| + κ(S) ‖S⁻¹‖ ‖Σʸˣ‖
    ‖x* − x̄‖)``, the error scale (softmax weights to u·|score|, the solve to u·κ(S))."""
    out = []
    for xq in q:
        scores = LOCAL_BETA * x @ xq
        w = softmax(scores)
        xm, ym = w @ x, w @ y
        xc, yc = x - xm, y - ym
        s = (xc * w[:, None]).T @ xc + LOCAL_LAM * np.eye(x.shape[1])
        syx = (yc * w[:, None]).T @ xc
        if magnitude:
            slope = np.linalg.cond(s) * np.linalg.norm(np.linalg.inv(s), 2)
            size = np.abs(ym).max() + slope * np.linalg.norm(syx, 2) * np.linalg.norm(xq - xm)
            out.append(np.full(y.shape[1], (1 + np.abs(scores).max()) * size))
        else:
            out.append(ym + syx @ np.linalg.solve(s, xq - xm))
    return np.array(out)


def np_ref(f: Callable[[Arr, Arr, Arr], Arr]) -> Callable[[Any, Arr, Arr, Arr], Arr]:
    return lambda p, x, y, q: f(x, y, q)


GD_REF = np_ref(lambda x, y, q: gd_predict(x, y, q, [ETA] * STEPS))
PGD_REF = np_ref(lambda x, y, q: gd_predict(x, y, q, [ETA] * STEPS, precond=PRECOND))
GDPP_REF = np_ref(lambda x, y, q: gdpp_predict(x, y, q, [ETA] * STEPS, [GAMMA] * STEPS))
LSTSQ_REF = np_ref(lstsq_predict)
MEAN_RIDGE = 0.05  # per-sample λ of the "mean" covariance entries: gram λ = N·0.05

REGISTRY = [
    # estimators
    Entry("OLS", lambda dy: attnreg.OLS(), "lstsq", lstsq_magnitude, LSTSQ_REF),
    Entry(
        "Ridge",
        lambda dy: attnreg.Ridge(0.5),
        "ridge",
        ridge_magnitude(0.5),
        np_ref(ridge_ref(0.5)),
        lam=0.5,
    ),
    Entry(
        "Ridge-mean",
        lambda dy: attnreg.Ridge(MEAN_RIDGE, covariance="mean"),
        "ridge",
        ridge_magnitude(N * MEAN_RIDGE),
        np_ref(ridge_ref(N * MEAN_RIDGE)),
        lam=N * MEAN_RIDGE,
    ),
    Entry("GD", lambda dy: attnreg.GD(ETA, STEPS), "other", gd_magnitude(), GD_REF),
    Entry(
        "GDPlusPlus",
        lambda dy: attnreg.GDPlusPlus(ETA, GAMMA, STEPS),
        "other",
        gdpp_magnitude,
        GDPP_REF,
    ),
    Entry(
        "PreconditionedGD",
        lambda dy: attnreg.PreconditionedGD(PRECOND, ETA, STEPS),
        "other",
        gd_magnitude(PRECOND),
        PGD_REF,
    ),
    Entry(
        "KernelSmoother",
        lambda dy: attnreg.KernelSmoother(0.5),
        "other",
        kernel_magnitude(0.5),
        np_ref(kernel_ref(0.5)),
    ),
    Entry(
        "KernelSmoother-whitened",
        lambda dy: attnreg.KernelSmoother(0.5, similarity="whitened_dot"),
        "other",
        kernel_magnitude(0.5, "whitened_dot"),
        np_ref(kernel_ref(0.5, "whitened_dot")),
    ),
    Entry(
        "LMS",
        lambda dy: LMS(LMS_BETA),
        "other",
        # the recursion on absolute values: N steps of 2d + 2 operations each, within C = 64
        lambda p, x, y, q: float(per_task(lambda a, b, c: lms_loop(a, b, c, True), x, y, q).max()),
        np_ref(lms_loop),
    ),
    variant_entry("MomentumLMS", "momentum", lambda dy: MomentumLMS(LMS_BETA, VARIANT_MU)),
    variant_entry("MiniBatchLMS", "minibatch", lambda dy: MiniBatchLMS(LMS_BETA, VARIANT_BATCH)),
    variant_entry("MultiStepLMS", "multistep", lambda dy: MultiStepLMS(LMS_BETA, VARIANT_STEPS)),
    Entry(
        "LocalLinear",
        lambda dy: LocalLinear(LOCAL_BETA, LOCAL_LAM),
        "other",
        lambda p, x, y, q: float(
            per_task(lambda a, b, c: local_linear_loop(a, b, c, True), x, y, q).max()
        ),
        np_ref(local_linear_loop),
    ),
    Entry(
        "Mesa",
        lambda dy: attnreg.Mesa(0.5),
        "ridge",
        ridge_magnitude(0.5),
        np_ref(ridge_ref(0.5)),
        lam=0.5,
    ),
    # constructions
    Entry(
        "OLSTransformer", lambda dy: attnreg.OLSTransformer(), "lstsq", lstsq_magnitude, LSTSQ_REF
    ),
    Entry(
        "OLSTransformer-ridge",
        lambda dy: attnreg.OLSTransformer(ridge=0.5),
        "ridge",
        ridge_magnitude(0.5),
        np_ref(ridge_ref(0.5)),
        lam=0.5,
    ),
    Entry(
        "OLSTransformer-tan-zhao",
        lambda dy: attnreg.OLSTransformer(convention="tan-zhao"),
        "lstsq",
        lstsq_magnitude,
        LSTSQ_REF,
    ),
    Entry(
        "VonOswaldSummaryLayer",  # the summary's plain sum: η/N per step is the package's GD
        lambda dy: VonOswaldSummaryLayer(D, dy, eta=ETA / N, steps=STEPS),
        "other",
        gd_magnitude(),
        GD_REF,
    ),
    Entry("OLSAttention", lambda dy: attnreg.OLSAttention(), "lstsq", lstsq_magnitude, LSTSQ_REF),
    Entry(
        "OLSAttention-mean-ridge",
        lambda dy: attnreg.OLSAttention(ridge=MEAN_RIDGE, covariance="mean"),
        "ridge",
        ridge_magnitude(N * MEAN_RIDGE),
        np_ref(ridge_ref(N * MEAN_RIDGE)),
        lam=N * MEAN_RIDGE,
    ),
    Entry(
        "MesaLayer",
        lambda dy: attnreg.MesaLayer(1.0),
        "ridge",
        ridge_magnitude(1.0),
        np_ref(ridge_ref(1.0)),
        lam=1.0,
        refuses_huge=True,
    ),
    Entry(
        "LSAStack.gd",
        lambda dy: attnreg.LSAStack.gd(D, dy, ETA, STEPS),
        "other",
        gd_magnitude(),
        GD_REF,
        fixed_d=True,
    ),
    Entry(
        "LSAStack.gd_plus_plus",
        lambda dy: attnreg.LSAStack.gd_plus_plus(D, dy, N, ETA, GAMMA, STEPS),
        "other",
        gdpp_magnitude,
        GDPP_REF,
        fixed_d=True,
    ),
    Entry(
        "LSAStack.preconditioned",
        lambda dy: attnreg.LSAStack.preconditioned(PRECOND, dy, ETA, STEPS),
        "other",
        gd_magnitude(PRECOND),
        PGD_REF,
        fixed_d=True,
    ),
    Entry(
        "NewtonStack",
        lambda dy: NewtonStack(D, dy, STEPS, NEWTON_ALPHA),
        "other",
        newton_magnitude,
        np_ref(lambda x, y, q: newton_predict(x, y, q, NEWTON_ALPHA, STEPS)),
        fixed_d=True,
    ),
    Entry(
        "KernelRichardsonStack",
        lambda dy: KernelRichardsonStack(D, dy, STEPS, KERNEL_H, KERNEL_LAM),
        "other",
        kernel_richardson_magnitude,
        np_ref(
            lambda x, y, q: kernel_richardson_predict(x, y, q, KERNEL_H, KERNEL_LAM, 1.0, STEPS)
        ),
        fixed_d=True,
    ),
    # trained models (tiny, float64, fixed seeds)
    Entry(
        "TrainableLSA-full",
        lambda dy: TrainableLSA(D, dy, layers=2, heads=2, init_scale=0.3, dtype=torch.float64),
        "other",
        token_magnitude,
        token_ref,
        fixed_d=True,
    ),
    Entry(
        "TrainableLSA-gdpp",
        lambda dy: TrainableLSA(D, dy, variant="gdpp", init_scale=0.3, seed=1, dtype=torch.float64),
        "other",
        token_magnitude,
        token_ref,
        fixed_d=True,
    ),
    Entry(
        "TrainableLSA-factored-recurrent",
        lambda dy: TrainableLSA(
            D,
            dy,
            layers=2,
            recurrent=True,
            variant="factored",
            init_scale=0.5,
            seed=2,
            dtype=torch.float64,
        ),
        "other",
        token_magnitude,
        token_ref,
        fixed_d=True,
    ),
    Entry(
        "SoftmaxAttention",
        lambda dy: SoftmaxAttention(D, dy, init_scale=0.3, dtype=torch.float64),
        "other",
        token_magnitude,
        token_ref,
        fixed_d=True,
    ),
    Entry(
        "AttentionRegression-softmax",
        lambda dy: AttentionRegression(D, "softmax"),
        "other",
        attention_regression_magnitude,
        attention_regression_ref,
        dtype="model",
        fixed_d=True,
    ),
    Entry(
        "AttentionRegression-regression",
        lambda dy: AttentionRegression(D, "regression"),
        "other",
        attention_regression_magnitude,
        attention_regression_ref,
        dtype="model",
        fixed_d=True,
    ),
    Entry(
        "AttentionRegression-whitened",
        lambda dy: AttentionRegression(D, "whitened"),
        "other",
        attention_regression_magnitude,
        attention_regression_ref,
        dtype="model",
        fixed_d=True,
    ),
    Entry(
        "TrainableOLSTransformer",
        lambda dy: TrainableOLSTransformer(D, dy),
        "other",
        tols_magnitude,
        tols_ref,
        dtype="model",
        fixed_d=True,
    ),
    # the icl study's zero reference
    Entry(
        "ZeroPredictor",
        lambda dy: ZeroPredictor(),
        "other",
        lambda p, x, y, q: 0.0,
        np_ref(lambda x, y, q: np.zeros((len(q), y.shape[1]))),
    ),
    # the memories' regression reader
    Entry(
        "MemoryRegressor-PseudoInverse",
        lambda dy: MemoryRegressor(PseudoInverseMemory()),
        "lstsq",
        lstsq_magnitude,
        LSTSQ_REF,
    ),
    Entry(
        "MemoryRegressor-ModernHopfield",
        lambda dy: MemoryRegressor(ModernHopfield(beta=0.5)),
        "other",
        kernel_magnitude(0.5),
        np_ref(kernel_ref(0.5)),
    ),
    Entry(
        "MemoryRegressor-UniversalHopfield",
        lambda dy: MemoryRegressor(lambda: UniversalHopfieldMemory("euclidean", "softmax")),
        "other",
        kernel_magnitude(1.0, "euclidean"),
        np_ref(kernel_ref(1.0, "euclidean")),
    ),
]
IDS = [e.name for e in REGISTRY]
WITH_REFERENCE = [e for e in REGISTRY if e.reference is not None]


# ----------------------------------------------------------------------------- helpers
def data(seed: int, dy: int = DY) -> tuple[Arr, Arr, Arr]:
    """``B`` random tasks ``(N, D), (N, dy), (M, D)``: κ(X) < 6 for the seeds used."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=(B, N, D)), rng.normal(size=(B, N, dy)), rng.normal(size=(B, M, D))


def run(p: Any, *args: Any) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("error", RankWarning)  # the data here is well conditioned
        warnings.simplefilter("error", ConditioningWarning)
        out = p.predict(*args)
    assert isinstance(out, torch.Tensor)
    return out


def as_np(t: torch.Tensor) -> Arr:
    return t.detach().to(torch.float64).numpy()


def assert_close(got: torch.Tensor | Arr, expected: Arr, tol: float, what: str = "") -> None:
    g = as_np(got) if isinstance(got, torch.Tensor) else np.asarray(got, dtype=np.float64)
    assert g.shape == expected.shape, (what, g.shape, expected.shape)
    err = float(np.max(np.abs(g - expected))) if g.size else 0.0
    assert err <= tol, f"{what}: max error {err:.3g} > tolerance {tol:.3g}"


def tolerance(entry: Entry, p: Any, x: Arr, y: Arr, q: Arr, u: float = U64) -> float:
    return C * u * entry.magnitude(p, x, y, q)


@pytest.fixture(params=REGISTRY, ids=IDS)
def entry(request: pytest.FixtureRequest) -> Entry:
    return request.param


# ----------------------------------------------------------------------------- checks
def test_batched_matches_unbatched(entry: Entry) -> None:
    x, y, q = data(1)
    p = entry.make(DY)
    copies = [a.copy() for a in (x, y, q)]
    out = run(p, x, y, q)
    assert out.shape == (B, M, DY)
    assert all(np.array_equal(a, c) for a, c in zip((x, y, q), copies, strict=True))  # not mutated
    tol = tolerance(entry, p, x, y, q)
    for b in range(B):
        one = run(p, x[b], y[b], q[b])
        assert one.shape == (M, DY)
        assert_close(one, as_np(out[b]), tol, f"task {b}")


def test_vector_y_gives_vector_output(entry: Entry) -> None:
    x, y, q = data(2, dy=1)
    p = entry.make(1)
    full = as_np(run(p, x, y, q))
    tol = tolerance(entry, p, x, y, q)
    batched = run(p, x, y[..., 0], q)  # (B, N) targets with batched x: (B, M) answers
    assert batched.shape == (B, M)
    assert_close(batched, full[..., 0], tol, "batched 1-D y")
    single = run(p, x[0], y[0, :, 0], q[0])
    assert single.shape == (M,)
    assert_close(single, full[0, :, 0], tol, "unbatched 1-D y")


def test_numpy_torch_and_lists_agree(entry: Entry) -> None:
    x, y, q = data(3)
    p = entry.make(DY)
    expected = as_np(run(p, x, y, q))
    tol = tolerance(entry, p, x, y, q)
    tensors = [torch.from_numpy(a) for a in (x, y, q)]
    assert_close(run(p, *tensors), expected, tol, "torch")
    assert_close(run(p, x.tolist(), y.tolist(), q.tolist()), expected, tol, "nested lists")
    assert_close(run(p, x, tensors[1], q.tolist()), expected, tol, "mixed")
    grads = [t.clone().requires_grad_(True) for t in tensors]
    assert_close(run(p, *grads), expected, tol, "tensors that require grad")


def test_float_dtypes(entry: Entry) -> None:
    x, y, q = data(4)
    p = entry.make(DY)
    assert run(p, x, y, q).dtype == torch.float64
    x32, y32, q32 = (a.astype(np.float32) for a in (x, y, q))
    got = run(p, x32, y32, q32)
    rounded = [a.astype(np.float64) for a in (x32, y32, q32)]
    exact = as_np(run(p, *rounded))  # the float64 answer on the float32 data
    if entry.dtype == "input":
        assert got.dtype == torch.float32
        tol = tolerance(entry, p, *rounded, u=U32)
    else:
        assert got.dtype == torch.float64, "computed and returned in the model's dtype"
        tol = tolerance(entry, p, *rounded)
    assert_close(got, exact, tol, "float32")
    mixed = run(p, x32, y, q32)  # mixed float32/float64: the widest dtype
    assert mixed.dtype == torch.float64
    assert_close(mixed, as_np(run(p, rounded[0], y, rounded[2])), tolerance(entry, p, *rounded))


def test_non_contiguous_inputs(entry: Entry) -> None:
    x, y, q = data(5)
    p = entry.make(DY)
    expected = as_np(run(p, x, y, q))
    tol = tolerance(entry, p, x, y, q)

    def transposed(a: Arr) -> torch.Tensor:
        t = torch.from_numpy(a.transpose(0, 2, 1).copy()).transpose(1, 2)
        assert not t.is_contiguous()
        return t

    def strided(a: Arr) -> torch.Tensor:
        big = torch.zeros(a.shape[0], 2 * a.shape[1], 2 * a.shape[2], dtype=torch.float64)
        big[:, ::2, ::2] = torch.from_numpy(a)
        return big[:, ::2, ::2]

    def reversed_view(a: Arr) -> Arr:
        view = a[:, ::-1].copy()[:, ::-1]
        assert view.strides[1] < 0
        return view

    for name, make in (
        ("transposed", transposed),
        ("strided", strided),
        ("fortran", np.asfortranarray),
        ("negative strides", reversed_view),
    ):
        assert_close(run(p, make(x), make(y), make(q)), expected, tol, name)
    # stride-0 batch: one task broadcast to B tasks
    one = [torch.from_numpy(a[:1]).expand(B, -1, -1) for a in (x, y, q)]
    tiled = [np.repeat(a[:1], B, axis=0) for a in (x, y, q)]
    assert_close(run(p, *one), as_np(run(p, *tiled)), tol, "expanded batch")


@pytest.mark.parametrize(
    ("shape", "message"),
    [((0, N, D), "B = 0"), ((B, 0, D), "N = 0"), ((B, N, 0), "d = 0")],
    ids=["B=0", "N=0", "d=0"],
)
def test_empty_tasks_are_refused(entry: Entry, shape: tuple[int, int, int], message: str) -> None:
    b, n, d = shape
    p = entry.make(DY)
    with pytest.raises(ValueError, match=message):
        p.predict(np.zeros((b, n, d)), np.zeros((b, n, DY)), np.zeros((b, M, d)))


def test_zero_queries_give_an_empty_answer(entry: Entry) -> None:
    x, y, q = data(13)
    p = entry.make(DY)
    assert run(p, x, y, q[:, :0]).shape == (B, 0, DY)
    assert run(p, x[0], y[0], q[0, :0]).shape == (0, DY)


def integer_data() -> dict[str, tuple[Any, Any, Any]]:
    """Small integers and booleans (full-rank designs); the float64 twins are the references."""
    rng = np.random.default_rng(6)
    signed = [rng.integers(-3, 4, size=s) for s in ((B, N, D), (B, N, DY), (B, M, D))]
    unsigned = [rng.integers(0, 6, size=s) for s in ((B, N, D), (B, N, DY), (B, M, D))]
    flags = [rng.integers(0, 2, size=s).astype(bool) for s in ((B, N, D), (B, N, DY), (B, M, D))]
    for x in (signed[0], unsigned[0], flags[0]):
        assert (
            np.linalg.matrix_rank(x[0].astype(float))
            == D
            == np.linalg.matrix_rank(x[1].astype(float))
        )
    return {
        "int64 numpy": tuple(signed),
        "int32 torch": tuple(torch.from_numpy(a.astype(np.int32)) for a in signed),
        **{
            f"{kind} numpy": tuple(a.astype(kind) for a in unsigned)
            for kind in ("uint8", "uint16", "uint32", "uint64")
        },
        **{  # torch has no min/max kernels for uint16/32/64: read like numpy's unsigned
            f"{kind} torch": tuple(
                torch.from_numpy(a.astype(np.int64)).to(getattr(torch, kind)) for a in unsigned
            )
            for kind in ("uint8", "uint16", "uint32", "uint64")
        },
        "bool numpy": tuple(flags),
        "bool torch": tuple(torch.from_numpy(a) for a in flags),
    }


def test_integer_and_bool_inputs_equal_float64(entry: Entry) -> None:
    p = entry.make(DY)
    for name, args in integer_data().items():
        floats = [np.asarray(a, dtype=np.float64) for a in args]
        expected = as_np(run(p, *floats))
        got = run(p, *args)
        assert got.dtype == torch.float64, name
        assert_close(got, expected, tolerance(entry, p, *floats), name)


def test_inexact_integers_and_half_floats_are_refused(entry: Entry) -> None:
    x, y, q = data(7)
    p = entry.make(DY)
    big = np.full((B, N, D), 2**53, dtype=np.int64)
    with pytest.raises(ValueError, match="2\\*\\*53"):
        p.predict(big, y, q)
    with pytest.raises(ValueError, match="2\\*\\*53"):
        p.predict(x, y, np.full((B, M, D), 2**60, dtype=np.uint64))
    with pytest.raises(ValueError, match="x_query: integer values of magnitude >= 2\\*\\*53"):
        p.predict(x, y, torch.full((B, M, D), 2**60, dtype=torch.uint64))
    with pytest.raises(ValueError, match="float16"):
        p.predict(x.astype(np.float16), y, q)
    with pytest.raises(ValueError, match="bfloat16"):
        p.predict(x, torch.from_numpy(y).to(torch.bfloat16), q)


BAD_INDEX = {"x_ctx": (1, 2, 0), "y_ctx": (0, 3, 1), "x_query": (1, 0, 2)}


@pytest.mark.parametrize("argument", list(BAD_INDEX))
def test_non_finite_inputs_name_the_argument(entry: Entry, argument: str) -> None:
    p = entry.make(DY)
    for value, kind in ((np.nan, "NaN"), (np.inf, "Inf"), (-np.inf, "Inf")):
        args = dict(zip(("x_ctx", "y_ctx", "x_query"), data(8), strict=True))
        args[argument][BAD_INDEX[argument]] = value
        expected = f"{argument}: contains {kind} at index {BAD_INDEX[argument]}"
        with pytest.raises(ValueError, match=expected.replace("(", "\\(").replace(")", "\\)")):
            p.predict(args["x_ctx"], args["y_ctx"], args["x_query"])
        one = {k: v[BAD_INDEX[argument][0]] for k, v in args.items()}  # unbatched
        with pytest.raises(ValueError, match=f"{argument}: contains {kind} at index"):
            p.predict(one["x_ctx"], one["y_ctx"], one["x_query"])


def test_shape_mismatches_are_refused(entry: Entry) -> None:
    x, y, q = data(9)
    p = entry.make(DY)
    both = [  # disagreeing shapes: the message states both
        (x, y[:, :-1], q, ("x_ctx", "y_ctx")),
        (x, y, np.zeros((B, M, D + 1)), ("x_ctx", "x_query")),
        (x, np.zeros((B + 1, N, DY)), q, ("x_ctx", "y_ctx")),
        (x, y, np.zeros((B + 1, M, D)), ("x_ctx", "x_query")),
        (x, y, q[0], ("x_ctx", "x_query")),
        (x[0], y, q[0], ("x_ctx", "y_ctx")),
        (x[0], y[0, :-1, 0], q[0], ("x_ctx", "y_ctx")),
    ]
    for xc, yc, xq, names in both:
        shapes = {"x_ctx": xc.shape, "y_ctx": yc.shape, "x_query": xq.shape}
        with pytest.raises(ValueError) as info:
            p.predict(xc, yc, xq)
        for name in names:
            assert str(tuple(shapes[name])) in str(info.value), (names, str(info.value))
    wrong_rank = [
        (x[0, 0], y[0, :, 0], q[0]),  # 1-D x_ctx
        (x[None], y[None], q[None]),  # 4-D everything
        (x, y[None], q),  # 4-D y_ctx
        (x, y, q[0, 0]),  # 1-D x_query
    ]
    for xc, yc, xq in wrong_rank:
        with pytest.raises(ValueError, match=r"-D|rank|both"):
            p.predict(xc, yc, xq)
    if entry.fixed_d:  # built for d = D: other widths are refused, not misread
        with pytest.raises(ValueError, match=r"d = 3|fit this model"):
            p.predict(np.zeros((B, N, D + 1)), y, np.zeros((B, M, D + 1)))


@pytest.mark.parametrize("scale", [1e300, 1e-300], ids=["1e300", "1e-300"])
def test_extreme_scale(entry: Entry, scale: float) -> None:
    x, y, q = data(10)
    p = entry.make(DY)
    base = as_np(run(p, x, y, q))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConditioningWarning)
            got = p.predict(x * scale, y * scale, q * scale)
    except ValueError as exc:
        if entry.kind == "ridge" and scale < 1:  # ŷ ≈ s³ X*XᵀY/λ ≈ 1e-900: below the range
            assert "underflowed" in str(exc), str(exc)
            return
        refusable = entry.kind == "other" or (entry.refuses_huge and scale > 1)
        assert refusable, f"{entry.name} must answer at scale {scale:g}: {exc}"
        assert str(exc)
        return
    g = as_np(got)
    assert np.all(np.isfinite(g)), g
    if entry.kind == "lstsq":  # the predictor's own unscaled answer, times the scale
        assert_close(g, base * scale, scale * tolerance(entry, p, x, y, q), "equivariance")
    elif entry.kind == "ridge":
        # ŷ(sX, sY, sX*; λ) = s ŷ(X, Y, X*; λ/s²): least squares for s = 1e300 (λ/s² ≈ 1e-600
        # relative); for s = 1e-300 the answer is below the float range (the ValueError above)
        assert scale > 1, f"{entry.name}: returned {g} where the answer is about 1e-900"
        expected = scale * per_task(lstsq_predict, x, y, q)
        assert_close(g, expected, scale * C * U64 * lstsq_magnitude(p, x, y, q), "ridge")
    elif np.abs(base).max() >= TINY64:  # never silently zero (or subnormal) everywhere
        assert np.abs(g).max() >= TINY64, f"{entry.name}: silent underflow to {g}"


@pytest.mark.parametrize("entry", WITH_REFERENCE, ids=[e.name for e in WITH_REFERENCE])
def test_matches_independent_reference(entry: Entry) -> None:
    x, y, q = data(11)
    p = entry.make(DY)
    assert entry.reference is not None
    ref = entry.reference
    expected = per_task(lambda a, b, c: ref(p, a, b, c), x, y, q)
    assert_close(run(p, x, y, q), expected, tolerance(entry, p, x, y, q), entry.name)


PREDICT_ARGS = ["x_ctx", "y_ctx", "x_query"]


def discovered_predictors() -> set[type]:
    """Every concrete class defined in a module of ``attnreg`` whose ``predict`` takes the one
    signature ``(x_ctx, y_ctx, x_query)`` (the :class:`attnreg.Predictor` protocol), found by
    walking the package: no hand-written list for a new predictor to escape."""
    found: set[type] = set()
    for info in pkgutil.walk_packages(attnreg.__path__, "attnreg."):
        if info.name.endswith(".__main__"):  # runs the CLI when imported
            continue
        module = importlib.import_module(info.name)
        for cls in vars(module).values():
            if not inspect.isclass(cls) or cls.__module__ != module.__name__:
                continue
            if getattr(cls, "_is_protocol", False) or inspect.isabstract(cls):
                continue
            if not issubclass(cls, attnreg.Predictor):
                continue
            params = list(inspect.signature(cls.predict).parameters)[1:]
            if params == PREDICT_ARGS:
                found.add(cls)
    return found


def unregistered(classes: set[type]) -> set[type]:
    """The classes among ``classes`` that no :data:`REGISTRY` entry builds."""
    return classes - {type(e.make(DY)) for e in REGISTRY}


def test_every_predictor_is_registered() -> None:
    """Every predictor class of the package has a registry entry (a new one must be added)."""
    found = discovered_predictors()
    # the discovery sees the known predictors (if it found nothing, the check below were void)
    assert {attnreg.OLS, attnreg.LSAStack, TrainableLSA, MemoryRegressor} <= found
    missing = unregistered(found)
    names = sorted(c.__name__ for c in missing)
    assert not missing, f"predictors without a contract entry: {names}"
    assert all(isinstance(e.make(DY), attnreg.Predictor) for e in REGISTRY)


def test_an_unregistered_predictor_is_flagged(monkeypatch: pytest.MonkeyPatch) -> None:
    """The discovery finds a new predictor class in any attnreg module and flags it missing."""

    class Throwaway(attnreg.GD):
        def predict(self, x_ctx: Any, y_ctx: Any, x_query: Any) -> torch.Tensor:
            return super().predict(x_ctx, y_ctx, x_query)

    class NotAPredictor:  # sklearn-style predict(X): another signature, not discovered
        def predict(self, x: Any) -> Any:
            return x

    for cls in (Throwaway, NotAPredictor):
        cls.__module__ = "attnreg.estimators"
        monkeypatch.setattr(attnreg.estimators, cls.__name__, cls, raising=False)
    found = discovered_predictors()
    assert Throwaway in found and NotAPredictor not in found
    assert unregistered(found) == {Throwaway}


def test_memory_regressor_refuses_pattern_only_memories() -> None:
    with pytest.raises(ValueError, match="HebbianMemory stores patterns only"):
        MemoryRegressor(HebbianMemory())
    with pytest.raises(ValueError, match="store/retrieve"):
        MemoryRegressor(lambda: object())


def test_memory_regressor_leaves_its_template_untouched() -> None:
    template = PseudoInverseMemory(ridge=0.1)
    x, y, q = data(12)
    out = MemoryRegressor(template).predict(x, y, q)
    assert not hasattr(template, "keys_")
    expected = per_task(ridge_ref(0.1), x, y, q)
    assert_close(out, expected, C * U64 * ridge_magnitude(0.1)(None, x, y, q))
