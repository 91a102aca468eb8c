"""Closed-form and iterative in-context estimators, all with one signature.

Every estimator answers ``predict(x_ctx, y_ctx, x_query)`` batched over tasks:
``(B, N, d), (B, N, dy), (B, M, d) -> (B, M, dy)`` (unbatched 2-D inputs, and 1-D ``y``, give
matching unbatched outputs). In the one form each is ``sep(X* M Xᵀ) · Y``. The closed forms (OLS,
ridge, GD) are the independent references of the constructions; the kernel smoother is an
attention form and runs through the attention core.

Conventions: the GD loss is ``L(W) = (1/2N) Σ ‖W x_i − y_i‖²`` with ``W`` of shape
``(dy, d)``; ridge penalises ``λ‖W‖²`` on the sum of squares (scikit-learn's ``Ridge(alpha=λ)``
without intercept).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch

from attnreg.core.attention import Attention
from attnreg.core.retrieval import whitened_metric
from attnreg.core.scaling import power_of_two_scale, rescale_tasks
from attnreg.core.scores import SIMILARITIES
from attnreg.core.validation import (
    ArrayLike,
    as_tensor,
    check_choice,
    check_finite_result,
    check_nonnegative,
    check_positive,
    check_positive_int,
    check_tasks,
    check_underflow,
    per_step,
)
from attnreg.core.whitening import RankWarning, covariance_scale, default_rtol
from attnreg.sequence import delta_rule


@runtime_checkable
class Predictor(Protocol):
    """Anything that predicts query targets from a context: the one signature of attnreg."""

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """``(B, N, d), (B, N, dy), (B, M, d) -> (B, M, dy)``."""
        ...


def _w0(w0: ArrayLike | None, b: int, dy: int, d: int, like: torch.Tensor) -> torch.Tensor:
    if w0 is None:
        return torch.zeros(b, dy, d, dtype=like.dtype, device=like.device)
    w = as_tensor("w0", w0, ndim=(2, 3)).to(like.dtype)
    if w.shape[-2:] != (dy, d) or (w.ndim == 3 and w.shape[0] != b):
        raise ValueError(
            f"w0: expected shape ({dy}, {d}) or ({b}, {dy}, {d}), got {tuple(w.shape)}"
        )
    return w.expand(b, dy, d)


@dataclass
class OLS:
    """Ordinary least squares: ``ŷ* = X* X⁺ Y`` (minimum-norm when ``N < d`` or rank-deficient).

    In the one form: ``M = (XᵀX)⁺``, identity separation. Solved by SVD (``torch.linalg.lstsq``,
    driver gelsd) with relative rank tolerance ``rtol`` (default ``max(N, d)·eps``).
    """

    rtol: float | None = None

    def __post_init__(self) -> None:
        if self.rtol is not None:
            self.rtol = check_nonnegative("rtol", self.rtol)

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """OLS predictions for the queries, fitted on each task's context."""
        xc, yc, xq, shape = check_tasks(x_ctx, y_ctx, x_query)
        n, d = xc.shape[1], xc.shape[2]
        rcond = default_rtol(n, d, xc.dtype) if self.rtol is None else self.rtol
        sol = torch.linalg.lstsq(xc, yc, rcond=rcond, driver="gelsd")
        if bool((sol.rank < d).any()):
            import warnings

            warnings.warn(
                f"x_ctx: rank-deficient design (rank {int(sol.rank.min())} < d = {d}); "
                "returning the minimum-norm solution",
                RankWarning,
                stacklevel=2,
            )
        return (xq @ sol.solution).reshape(shape)


@dataclass
class Ridge:
    """Ridge regression: ``ŷ* = X* (XᵀX + λI)⁻¹ XᵀY`` (Gram form ``X* Xᵀ(XXᵀ + λI)⁻¹Y`` if N < d).

    ``covariance="mean"`` uses ``XᵀX/N + λI`` (λ per sample; equals gram ridge with ``Nλ``).
    Hoerl & Kennard (1970); scikit-learn ``Ridge(alpha=λ, fit_intercept=False)``.

    Scale: ridge is not scale-equivariant with a fixed λ (``ŷ(aX, bY, aX*; λ) = b ŷ(X, Y, X*;
    λ/a²)``). ``predict`` returns the answer of the given problem at any magnitude (1e±300
    included), computed by exact power-of-two rescaling; where that answer is outside the float
    range it raises a ``ValueError`` (never zeros or NaN). To keep the answer at the data's
    scale, scale λ with the square of the inputs' scale.
    """

    lam: float = 1e-3
    covariance: str = "gram"

    def __post_init__(self) -> None:
        self.lam = check_positive("lam", self.lam)
        check_choice("covariance", self.covariance, ("gram", "mean"))

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """Ridge predictions for the queries: the ridge solution of the given problem (the
        given λ, whatever the data's scale). Each task is rescaled by powers of two when its
        magnitude would over- or underflow ``XᵀX`` (ridge on ``X/s`` is ridge with ``λ/s²``,
        :mod:`attnreg.core.scaling`); an answer outside the float range (e.g. ``x* XᵀY / λ``
        for a design of magnitude 1e-300) is a ``ValueError``, never zeros."""
        xc, yc, xq, shape = check_tasks(x_ctx, y_ctx, x_query)
        n, d = xc.shape[1], xc.shape[2]
        xc, yc, rescaling = rescale_tasks(xc, yc, self.lam * covariance_scale(n, self.covariance))
        lam_t = torch.as_tensor(rescaling.ridge, dtype=xc.dtype).reshape(-1, 1, 1)
        # a rescaled λ/s² below eps·max diag(XᵀX) no longer changes XᵀX + λI in floating point
        # (X at 1e300: λ/s² ≈ 1e-600): the ridge answer is then the minimum-norm least-squares
        # one to that precision, and a solve would fail on a rank-deficient design
        vanished = (rescaling.x != 1) & (
            lam_t < torch.finfo(xc.dtype).eps * xc.square().sum(-2).amax(-1).view(-1, 1, 1)
        )
        lam_t = torch.where(vanished, torch.ones_like(lam_t), lam_t)  # those tasks: lstsq
        if n < d:
            gram = xc @ xc.mT + lam_t * torch.eye(n, dtype=xc.dtype, device=xc.device)
            coef = xc.mT @ torch.linalg.solve(gram, yc)
        else:
            s = xc.mT @ xc + lam_t * torch.eye(d, dtype=xc.dtype, device=xc.device)
            coef = torch.linalg.solve(s, xc.mT @ yc)
        if bool(vanished.any()):
            rcond = default_rtol(n, d, xc.dtype)
            least = torch.linalg.lstsq(xc, yc, rcond=rcond, driver="gelsd").solution
            coef = torch.where(vanished, least, coef)
        out = rescaling.answer(xq, lambda q: q @ coef)
        return check_finite_result(out).reshape(shape)


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


@dataclass
class KernelSmoother:
    """Nadaraya–Watson kernel smoother = softmax attention with values Y:
    ``ŷ* = softmax(β · sim(x*, X)) Y`` (Nadaraya 1964, Watson 1964; the one form with
    ``sep`` = softmax), through the attention core (fused kernel for bilinear similarities: no
    ``M × N`` matrix, whatever the width of ``Y``). ``whitened_dot`` uses ``(XᵀX)⁺``; its scores
    do not depend on the scale of ``X`` (shared by the queries), so they are computed on ``X``
    and the queries divided by a power of two at extreme magnitudes. The ``dot`` scores
    ``β x*ᵀx`` do: past the float range ``predict`` raises a ``ValueError``.
    """

    beta: float = 1.0
    similarity: str = "dot"

    def __post_init__(self) -> None:
        check_choice("similarity", self.similarity, SIMILARITIES)
        self.beta = check_positive("beta", self.beta)

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """Softmax-weighted average of the context targets."""
        xc, yc, xq, shape = check_tasks(x_ctx, y_ctx, x_query)
        metric = None
        if self.similarity == "whitened_dot":
            # q (XᵀX)⁺ xᵀ does not change when X and the queries share a power of two: divide
            # them by it where XᵀX would over- or underflow (exact)
            scale = power_of_two_scale(xc)
            if bool((scale != 1).any()):
                xc, xq = xc / scale, xq / scale
            metric = whitened_metric(xc)
        out = Attention(self.similarity, "softmax", self.beta)(xq, xc, yc, metric=metric)
        return check_finite_result(out).reshape(shape)


RECURRENT_BELOW = 64  # LMS runs the delta rule token by token up to this many tokens


@dataclass
class LMS:
    """Least mean squares (Widrow & Hoff 1960), the online estimator: one pass over the context
    in order, ``W_i = W_{i−1} + β (y_i − W_{i−1} x_i) x_iᵀ`` from ``W_0 = 0``; ``ŷ* = W_N x*``.

    It is the delta rule with keys ``x_i``, values ``y_i`` and step ``β``
    (:func:`attnreg.sequence.delta_rule`, computed by its chunked form: DeltaNet with
    ``W_Q = W_K = I`` *is* LMS). Stable when ``β ‖x_i‖² ≤ 2`` for every i. Unlike the other
    estimators its answer depends on the order of the context pairs.
    """

    beta: float = 0.1

    def __post_init__(self) -> None:
        check_positive("beta", self.beta)

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """``W_N x*`` after one LMS pass over each task's context. The queries are read out as
        tokens with zero key and value written after the context (a zero key leaves the state
        unchanged)."""
        xc, yc, xq, shape = check_tasks(x_ctx, y_ctx, x_query)
        n, m = xc.shape[1], xq.shape[1]
        mode = "recurrent" if xc.shape[1] + m <= RECURRENT_BELOW else "chunk"  # the faster one

        def run(xc: torch.Tensor, yc: torch.Tensor, xq: torch.Tensor) -> torch.Tensor:
            keys = torch.cat([xc, torch.zeros_like(xq)], dim=1).unsqueeze(1)
            zeros = yc.new_zeros(yc.shape[0], m, yc.shape[-1])
            values = torch.cat([yc, zeros], dim=1).unsqueeze(1)
            queries = torch.cat([torch.zeros_like(xc), xq], dim=1).unsqueeze(1)
            return delta_rule(queries, keys, values, self.beta, mode=mode)[:, 0, n:]

        out = check_finite_result(run(xc, yc, xq))
        return check_underflow(out, run, xc, yc, xq).reshape(shape)


@dataclass
class LocalLinear:
    """Kernel-weighted local-linear regression at the query (Cleveland 1979; Fan & Gijbels
    1996): ``ŷ* = ȳ + Σ^{yx} (Σ^{xx} + λI)⁻¹ (x* − x̄)``, the intercept of
    ``min_{b, W} Σ_i w_i ‖y_i − b − W (x_i − x*)‖² + λ‖W‖²`` with the softmax weights
    ``w_i = softmax_i(β x*ᵀ x_i)``, the weighted means ``x̄ = Σ w_i x_i``, ``ȳ`` and the centred
    weighted moments ``Σ^{xx} = Σ w_i (x_i − x̄)(x_i − x̄)ᵀ``, ``Σ^{yx}``. It is what local linear
    attention (:func:`attnreg.sequence.local_linear_attention`, Zuo et al. 2025) computes at
    its last position; the kernel smoother is its local-constant special case.
    """

    beta: float = 1.0
    lam: float = 1e-3

    def __post_init__(self) -> None:
        check_positive("beta", self.beta)
        check_positive("lam", self.lam)

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """The local-linear fit's intercept at every query."""
        xc, yc, xq, shape = check_tasks(x_ctx, y_ctx, x_query)
        w = torch.softmax(self.beta * (xq @ xc.mT), dim=-1)  # (B, M, N)
        x_mean, y_mean = w @ xc, w @ yc
        x_centred = xc.unsqueeze(1) - x_mean.unsqueeze(-2)  # (B, M, N, d)
        y_centred = yc.unsqueeze(1) - y_mean.unsqueeze(-2)
        weighted = x_centred * w.unsqueeze(-1)
        eye = torch.eye(xc.shape[-1], dtype=xc.dtype, device=xc.device)
        s_xx = weighted.mT @ x_centred + self.lam * eye
        s_xy = weighted.mT @ y_centred
        slope = torch.linalg.solve(s_xx, (xq - x_mean).unsqueeze(-1))
        out = y_mean + (s_xy.mT @ slope).squeeze(-1)
        return check_finite_result(out).reshape(shape)


def causal_ridge(
    keys: torch.Tensor, values: torch.Tensor, queries: torch.Tensor, lam: float
) -> torch.Tensor:
    """``o_t = W_t q_t`` with ``W_t = argmin Σ_{i≤t} ‖W k_i − v_i‖² + λ‖W‖²`` for every t, by a
    direct batched solve per prefix: ``W_t = (Σ_{i≤t} v_i k_iᵀ)(Σ_{i≤t} k_i k_iᵀ + λI)⁻¹``.
    """
    check_positive("lam", lam)
    outer = torch.cumsum(keys.unsqueeze(-1) * keys.unsqueeze(-2), dim=1)
    eye = torch.eye(keys.shape[-1], dtype=keys.dtype, device=keys.device)
    cross = torch.cumsum(keys.unsqueeze(-1) * values.unsqueeze(-2), dim=1)  # Σ k vᵀ
    # W_tᵀ = (S_t + λI)⁻¹ Σ k vᵀ ; o_t = W_t q_t = (W_tᵀ)ᵀ q_t
    wt = torch.linalg.solve(outer + lam * eye, cross)
    return (queries.unsqueeze(-2) @ wt).squeeze(-2)


@dataclass
class Mesa:
    """The mesa layer's estimator (von Oswald et al. 2023, arXiv 2309.05858): causal ridge
    regression. ``predict`` fits ``W_N`` on the whole context (= ridge with λ, with
    :class:`Ridge`'s contract at extreme magnitudes); :meth:`causal` returns ``W_t q_t`` at
    every prefix t.
    """

    lam: float = 1.0

    def __post_init__(self) -> None:
        self.lam = check_positive("lam", self.lam)

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """Queries predicted with the ridge solution on the full context."""
        return Ridge(self.lam).predict(x_ctx, y_ctx, x_query)

    def causal(self, keys: ArrayLike, values: ArrayLike, queries: ArrayLike) -> torch.Tensor:
        """``(B, T, d), (B, T, dv), (B, T, d) -> (B, T, dv)``: causal ridge at every prefix."""
        k, v, q, _ = check_tasks(keys, values, queries)
        if q.shape[1] != k.shape[1]:
            raise ValueError(
                f"queries must have one row per key: keys {tuple(k.shape)}, "
                f"queries {tuple(q.shape)}"
            )
        return causal_ridge(k, v, q, self.lam)


class ZeroPredictor:
    """Predicts 0 for every query (the loss every model starts from)."""

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """Zeros of the one signature's shape ``(B, M, dy)`` (or unbatched), in the inputs'
        common dtype; the inputs are validated like every predictor's (``check_tasks``)."""
        xc, _, _, shape = check_tasks(x_ctx, y_ctx, x_query)
        return torch.zeros(shape, dtype=xc.dtype, device=xc.device)
