"""attnreg: the bridge between transformer attention and classical statistics, executable.

Every predictor answers ``predict(x_ctx, y_ctx, x_query)`` batched over tasks
``(B, N, d), (B, N, dy), (B, M, d) -> (B, M, dy)``; every one is ``sep(X* M Xᵀ) · Y``.
"""

from attnreg.constructions import LSAStack, MesaLayer, OLSAttention, OLSTransformer
from attnreg.core import RankWarning, associate, whitening_matrix
from attnreg.estimators import (
    GD,
    OLS,
    GDPlusPlus,
    KernelSmoother,
    Mesa,
    PreconditionedGD,
    Predictor,
    Ridge,
)

__version__ = "0.1.0"

__all__ = [
    "GD",
    "OLS",
    "GDPlusPlus",
    "KernelSmoother",
    "LSAStack",
    "Mesa",
    "MesaLayer",
    "OLSAttention",
    "OLSTransformer",
    "PreconditionedGD",
    "Predictor",
    "RankWarning",
    "Ridge",
    "__version__",
    "associate",
    "whitening_matrix",
]
