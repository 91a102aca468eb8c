"""Weight factories: transformer modules whose weights make their forward pass an estimator."""

from attnreg.constructions.gated import GatedUnit
from attnreg.constructions.kernel import KernelRichardsonStack
from attnreg.constructions.literal import VonOswaldSummaryLayer
from attnreg.constructions.lsa import LSAStack
from attnreg.constructions.mesa import MesaLayer
from attnreg.constructions.newton import NewtonStack, newton_alpha
from attnreg.constructions.ols import OLSAttention, OLSTransformer

__all__ = [
    "GatedUnit",
    "KernelRichardsonStack",
    "LSAStack",
    "MesaLayer",
    "NewtonStack",
    "OLSAttention",
    "OLSTransformer",
    "VonOswaldSummaryLayer",
    "newton_alpha",
]
