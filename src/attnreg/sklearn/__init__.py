"""scikit-learn estimators whose fit builds (or trains) an attention layer and whose predict
runs its forward pass."""

from attnreg.sklearn.attention import AttentionRegressor
from attnreg.sklearn.in_context import InContextRegressor
from attnreg.sklearn.ols import OLSTransformerRegressor

__all__ = ["AttentionRegressor", "InContextRegressor", "OLSTransformerRegressor"]
