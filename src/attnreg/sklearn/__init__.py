"""scikit-learn estimators whose fit builds (or trains) an attention layer and whose predict
runs its forward pass."""

from attnreg.sklearn.ols import OLSTransformerRegressor

__all__ = ["OLSTransformerRegressor"]
