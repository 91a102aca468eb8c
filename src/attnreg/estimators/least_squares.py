"""The least-squares estimators: ordinary least squares and ridge (the references the
OLS-Transformer and the whitened attention are checked against), the :class:`Predictor`
protocol they share with every predictor, and the zero baseline."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from attnreg.core.results import check_finite_result
from attnreg.core.scaling import rescale_tasks
from attnreg.core.tasks import check_tasks
from attnreg.core.validation import ArrayLike, check_choice, check_nonnegative, check_positive
from attnreg.core.whitening import RankWarning, covariance_scale, default_rtol


@runtime_checkable
class Predictor(Protocol):
    """Anything that predicts query targets from a context: the one signature of attnreg."""

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """``(B, N, d), (B, N, dy), (B, M, d) -> (B, M, dy)``."""
        ...


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


class ZeroPredictor:
    """Predicts 0 for every query (the loss every model starts from)."""

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """Zeros of the one signature's shape ``(B, M, dy)`` (or unbatched), in the inputs'
        common dtype; the inputs are validated like every predictor's (``check_tasks``)."""
        xc, _, _, shape = check_tasks(x_ctx, y_ctx, x_query)
        return torch.zeros(shape, dtype=xc.dtype, device=xc.device)
