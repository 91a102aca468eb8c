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

from attnreg.estimators.gradient import (
    GD,
    GDPlusPlus,
    PreconditionedGD,
    gd_weights,
    optimal_preconditioner,
)
from attnreg.estimators.kernel import KernelSmoother, LocalLinear
from attnreg.estimators.least_squares import OLS, Predictor, Ridge, ZeroPredictor
from attnreg.estimators.lms_variants import MiniBatchLMS, MomentumLMS, MultiStepLMS
from attnreg.estimators.online import LMS, RECURRENT_BELOW, Mesa, causal_ridge

__all__ = [
    "GD",
    "LMS",
    "OLS",
    "RECURRENT_BELOW",
    "GDPlusPlus",
    "KernelSmoother",
    "LocalLinear",
    "Mesa",
    "MiniBatchLMS",
    "MomentumLMS",
    "MultiStepLMS",
    "PreconditionedGD",
    "Predictor",
    "Ridge",
    "ZeroPredictor",
    "causal_ridge",
    "gd_weights",
    "optimal_preconditioner",
]
