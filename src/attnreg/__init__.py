"""attnreg: the bridge between transformer attention and classical statistics, executable.

Every predictor answers ``predict(x_ctx, y_ctx, x_query)`` batched over tasks
``(B, N, d), (B, N, dy), (B, M, d) -> (B, M, dy)``; every one is ``sep(X* M Xᵀ) · Y``.
"""

from attnreg.constructions import (
    LSAStack,
    MesaLayer,
    OLSAttention,
    OLSTransformer,
    VonOswaldSummaryLayer,
)
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
from attnreg.memory import (
    DenseAssociativeMemory,
    HebbianMemory,
    ModernHopfield,
    PseudoInverseMemory,
    UniversalHopfieldMemory,
)

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """Lazy exports that pull in heavier modules (scipy.optimize) only when used:
    ``attnreg.explain`` is :func:`attnreg.explaining.explain`."""
    if name == "explain":
        from attnreg.explaining import explain

        return explain
    raise AttributeError(f"module 'attnreg' has no attribute {name!r}")


__all__ = [
    "GD",
    "OLS",
    "DenseAssociativeMemory",
    "GDPlusPlus",
    "HebbianMemory",
    "KernelSmoother",
    "LSAStack",
    "Mesa",
    "MesaLayer",
    "ModernHopfield",
    "OLSAttention",
    "OLSTransformer",
    "PreconditionedGD",
    "Predictor",
    "PseudoInverseMemory",
    "RankWarning",
    "Ridge",
    "UniversalHopfieldMemory",
    "VonOswaldSummaryLayer",
    "__version__",
    "associate",
    "explain",
    "whitening_matrix",
]
