"""Transformer modules whose weights are set so that their forward pass equals an estimator."""

from attnreg.constructions.lsa import LinearSelfAttention, LSAStack, gd_layer
from attnreg.constructions.mesa import MesaLayer
from attnreg.constructions.ols import OLSAttention, OLSTransformer

__all__ = [
    "LSAStack",
    "LinearSelfAttention",
    "MesaLayer",
    "OLSAttention",
    "OLSTransformer",
    "gd_layer",
]
