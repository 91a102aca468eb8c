"""``OLSTransformerRegressor``: scikit-learn regression by a constructed attention layer."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from attnreg.constructions.ols import CONVENTIONS, OLSTransformer
from attnreg.core.validation import check_choice, check_nonnegative
from attnreg.core.whitening import COVARIANCES, RankWarning


class OLSTransformerRegressor(RegressorMixin, BaseEstimator):
    """Linear regression computed by the OLS-Transformer of Tan & Zhao (arXiv 2604.13656).

    ``fit`` centres ``X`` and ``y`` (when ``fit_intercept``; the intercept is not penalised, as
    in scikit-learn) and builds the one-layer linear transformer with ``W_Q = W_K = W_V = L``,
    ``W_P = Lᵀ XᵀY / c`` from the training data; ``predict`` runs its forward pass,
    ``(X* L)(X L)ᵀ(X L) W_P / c + intercept = X* β̂ + b``. With ``ridge = λ > 0`` it equals
    scikit-learn's ``Ridge(alpha=λ)`` for ``covariance="gram"`` (``alpha = nλ`` for ``"mean"``).

    Parameters
    ----------
    ridge : float, default 0.0
        λ ≥ 0 added to ``S`` before whitening.
    fit_intercept : bool, default True
        Centre ``X`` and ``y`` and fit an unpenalised intercept.
    covariance : {"gram", "mean"}, default "gram"
        ``S = XᵀX`` or ``S = XᵀX / n``.
    convention : {"package", "tan-zhao"}, default "package"
        ``"package"``: ``L`` from the SVD of ``X``. ``"tan-zhao"``: the layer as Tan & Zhao write
        it, ``L = V Λ^{-1/2}`` from the eigendecomposition ``S = V Λ Vᵀ`` and an identity
        feed-forward block ``W_FFN = I`` applied before ``W_P``
        (:class:`attnreg.constructions.OLSTransformer`); the same predictions, to the normal
        equations' accuracy ``u · κ(S)``.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,) or (n_targets, n_features)
    intercept_ : float or ndarray of shape (n_targets,)
    layer_ : OLSTransformer — the constructed attention layer (weights ``w_q, w_k, w_v, w_p``).
    rank_ : int — numerical rank of the (centred) design.
    n_features_in_ : int
    """

    def __init__(
        self,
        ridge: float = 0.0,
        fit_intercept: bool = True,
        covariance: str = "gram",
        convention: str = "package",
    ) -> None:
        self.ridge = ridge
        self.fit_intercept = fit_intercept
        self.covariance = covariance
        self.convention = convention

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        return tags

    def fit(self, X: Any, y: Any) -> OLSTransformerRegressor:
        """Build the attention layer from ``(X, y)``; returns ``self``."""
        check_nonnegative("ridge", self.ridge)
        check_choice("covariance", self.covariance, COVARIANCES)
        check_choice("convention", self.convention, CONVENTIONS)
        X, y = validate_data(self, X, y, multi_output=True, y_numeric=True, dtype=np.float64)
        y2 = y.reshape(len(y), -1).astype(np.float64)
        x_mean = X.mean(axis=0) if self.fit_intercept else np.zeros(X.shape[1])
        y_mean = y2.mean(axis=0) if self.fit_intercept else np.zeros(y2.shape[1])
        xc = torch.from_numpy(X - x_mean).unsqueeze(0)
        yc = torch.from_numpy(y2 - y_mean).unsqueeze(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RankWarning)
            self.layer_ = OLSTransformer(
                ridge=self.ridge, covariance=self.covariance, convention=self.convention
            ).fit(xc, yc)
        assert self.layer_.whitening is not None
        self.rank_ = int(self.layer_.whitening.rank[0])
        if self.rank_ < X.shape[1] and self.ridge == 0:
            warnings.warn(
                f"X: rank-deficient design (rank {self.rank_} < n_features = {X.shape[1]}); "
                "the minimum-norm solution is used",
                RankWarning,
                stacklevel=2,
            )
        beta = self.layer_.coefficients[0].numpy()  # (d, dy)
        self._x_mean, self._y_mean, self._multi = x_mean, y_mean, y.ndim == 2
        intercept = y_mean - x_mean @ beta
        self.coef_ = beta.T if self._multi else beta[:, 0]
        self.intercept_ = intercept if self._multi else float(intercept[0])
        return self

    def predict(self, X: Any) -> NDArray[np.float64]:
        """Run the layer's forward pass on the (centred) rows of ``X`` and add the intercept."""
        check_is_fitted(self, "layer_")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        out = self.layer_(torch.from_numpy(X - self._x_mean).unsqueeze(0))[0].numpy()
        out = out + self._y_mean
        return out if self._multi else out[:, 0]
