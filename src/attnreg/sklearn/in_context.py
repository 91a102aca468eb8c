"""``InContextRegressor``: scikit-learn regression by in-context learning in attention.

``fit`` only stores the context (the training rows are the prompt); ``predict`` builds the
token sequence ``[(x_i, y_i)]_{i≤n} ++ [(x_q, 0)]`` and runs an attention stack on it:

* ``model="gd"``: ``steps`` linear self-attention layers constructed as GD steps on
  ``L(W) = (1/2n) Σ ‖W x_i − y_i‖²`` (von Oswald et al. 2023, Prop. 1); ``eta=None`` uses
  ``η = n / λ_max(XᵀX)`` (the ``1/L`` step of the smooth loss);
* ``model="gd++"``: GD++ layers with ``(eta, gamma)`` (von Oswald et al. 2023, §4);
* ``model="ols"``: the OLS-Transformer of Tan & Zhao (one layer, exact OLS);
* ``model="checkpoint"``: a trained model saved by ``attnreg icl`` (``checkpoint`` path); it
  must have been trained with ``n_features_in_`` inputs and one target.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from attnreg.constructions import LSAStack, OLSTransformer
from attnreg.core.validation import check_choice, check_nonnegative, check_positive_int
from attnreg.core.whitening import ConditioningWarning, RankWarning

MODELS = ("gd", "gd++", "ols", "checkpoint")


class InContextRegressor(RegressorMixin, BaseEstimator):
    """Regression by an attention stack reading the training set as its context.

    Parameters
    ----------
    model : {"gd", "gd++", "ols", "checkpoint"}, default "gd"
    eta : float or None, default None
        GD learning rate (``None``: ``n / λ_max(XᵀX)`` on the centred context).
    steps : int, default 1
        Number of layers (= GD / GD++ steps).
    gamma : float, default 0.0
        GD++ input-whitening rate γ (``model="gd++"``).
    checkpoint : str or None
        Path of a trained model (``model="checkpoint"``).
    fit_intercept : bool, default True
        Centre ``X`` and ``y`` on the context means; predictions add the mean of ``y`` back.

    Attributes
    ----------
    x_ctx_, y_ctx_ : ndarray — the stored (centred) context.
    eta_ : float — the learning rate used (GD / GD++).
    n_features_in_ : int
    """

    def __init__(
        self,
        model: str = "gd",
        eta: float | None = None,
        steps: int = 1,
        gamma: float = 0.0,
        checkpoint: str | None = None,
        fit_intercept: bool = True,
    ) -> None:
        self.model = model
        self.eta = eta
        self.steps = steps
        self.gamma = gamma
        self.checkpoint = checkpoint
        self.fit_intercept = fit_intercept

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        tags.regressor_tags.poor_score = self.model != "ols"
        return tags

    def fit(self, X: Any, y: Any) -> InContextRegressor:
        """Store the (centred) context; returns ``self``."""
        check_choice("model", self.model, MODELS)
        check_positive_int("steps", self.steps)
        check_nonnegative("gamma", self.gamma)
        if self.eta is not None and not self.eta > 0:
            raise ValueError(f"eta: must be a finite number > 0, got {self.eta}")
        if self.model == "checkpoint" and not self.checkpoint:
            raise ValueError("checkpoint: a path is required with model='checkpoint'")
        X, y = validate_data(self, X, y, multi_output=True, y_numeric=True, dtype=np.float64)
        y2 = y.reshape(len(y), -1).astype(np.float64)
        self._x_mean = X.mean(axis=0) if self.fit_intercept else np.zeros(X.shape[1])
        self._y_mean = y2.mean(axis=0) if self.fit_intercept else np.zeros(y2.shape[1])
        self._multi = y.ndim == 2
        self.x_ctx_ = X - self._x_mean
        self.y_ctx_ = y2 - self._y_mean
        n = X.shape[0]
        top = float(np.linalg.eigvalsh(self.x_ctx_.T @ self.x_ctx_)[-1]) if n else 0.0
        self.eta_ = float(self.eta) if self.eta is not None else (n / top if top > 0 else 1.0)
        self._trained = None
        if self.model == "checkpoint":
            from attnreg.models import load_model

            trained, _ = load_model(str(self.checkpoint))
            if trained.d != X.shape[1] or trained.dy != y2.shape[1]:
                raise ValueError(
                    f"checkpoint: the model takes d = {trained.d}, dy = {trained.dy}; the data "
                    f"has {X.shape[1]} features and {y2.shape[1]} targets"
                )
            self._trained = trained
        return self

    def _run(self, xq: NDArray[np.float64]) -> NDArray[np.float64]:
        xc, yc = self.x_ctx_, self.y_ctx_
        n, d = xc.shape
        dy = yc.shape[1]
        xc_t, yc_t = torch.from_numpy(xc)[None], torch.from_numpy(yc)[None]
        xq_t = torch.from_numpy(xq)[None]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RankWarning)
            warnings.simplefilter("ignore", ConditioningWarning)
            if self.model == "gd":
                out = LSAStack.gd(d, dy, self.eta_, self.steps).predict(xc_t, yc_t, xq_t)
            elif self.model == "gd++":
                stack = LSAStack.gd_plus_plus(d, dy, n, self.eta_, self.gamma, self.steps)
                out = stack.predict(xc_t, yc_t, xq_t)
            elif self.model == "ols":
                out = OLSTransformer().predict(xc_t, yc_t, xq_t)
            else:
                assert self._trained is not None
                out = self._trained.predict(xc_t, yc_t, xq_t)
        return out[0].detach().to(torch.float64).numpy().reshape(len(xq), dy)

    def predict(self, X: Any) -> NDArray[np.float64]:
        """Run the attention stack on context + the rows of ``X`` as queries."""
        check_is_fitted(self, "x_ctx_")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        out = self._run(X - self._x_mean)
        if self.fit_intercept:
            out = out + self._y_mean
        return out if self._multi else out[:, 0]
