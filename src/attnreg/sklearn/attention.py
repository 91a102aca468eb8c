"""``AttentionRegressor``: a trained attention layer as a scikit-learn regressor."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from attnreg.core.threads import torch_threads
from attnreg.core.validation import check_choice, check_positive, check_positive_int
from attnreg.core.whitening import RankWarning
from attnreg.models.regressors import QK_MODES, VARIANTS, AttentionRegression
from attnreg.plateaus import PlateauWarning
from attnreg.training import TrainConfig, train


class AttentionRegressor(RegressorMixin, BaseEstimator):
    """Regression by one trained attention layer whose keys/values are the training rows.

    ``fit`` standardises ``X`` and ``y`` (training mean and standard deviation), then trains
    :class:`attnreg.models.regressors.AttentionRegression` by full-batch Adam
    (:func:`attnreg.training.train`): the training rows attend to all training rows
    (self-attention; leave-one-out for ``variant="softmax"``) and the loss is the MSE of a
    seeded fit split, with early stopping on the leave-one-out MSE of the remaining
    ``validation_fraction`` of rows. ``predict`` lets the new rows attend to the training rows
    (cross-attention), ``ŷ* = sep(s(X*, X)) · Y``, and undoes the standardisation.

    Variants (see :mod:`attnreg.models.regressors`): ``"softmax"`` (Vaswani et al. 2017; a
    Nadaraya–Watson smoother), ``"regression"`` (no softmax: ``X* W_q W_kᵀ XᵀY / N``, Goulet
    Coulombe, arXiv 2504.09663) and ``"whitened"`` (keys whitened inside the layer; with
    ``qk="shared"`` it is OLS for any invertible ``W``, Tan & Zhao, arXiv 2604.13656).

    Parameters
    ----------
    variant : {"softmax", "regression", "whitened"}, default "softmax"
    whitening : bool, default False
        Whiten the inputs by the training covariance (symmetric ``S^{-1/2}``) first.
    qk : {"shared", "separate", "single"}, default "separate"
        ``W_q = W_k``, two matrices, or one ``d × d`` matrix ``W``.
    layernorm : bool, default False
        Layer normalisation of queries and keys before the projections.
    max_iter : int, default 300
        Maximum number of Adam steps.
    learning_rate : float, default 0.02
    validation_fraction : float, default 0.2
        Share of the training rows held out for early stopping (none if fewer than 5 rows).
    patience : int, default 15
        Evaluations (every 10 steps) without improvement before stopping.
    init_scale : float, default 0.5
        Initial weights are ``N(0, init_scale² / d)``.
    random_state : int, RandomState instance or None, default None
        Seeds the split, the initial weights and the training.
    n_threads : int or None, default 1
        torch intra-op threads during ``fit`` / ``predict`` (restored afterwards; ``None``
        keeps the current setting). One thread is fastest for a few hundred rows.

    Attributes
    ----------
    module_ : AttentionRegression — the trained layer (attention readable by name).
    n_iter_ : int — Adam steps run.
    n_features_in_ : int
    """

    def __init__(
        self,
        variant: str = "softmax",
        whitening: bool = False,
        qk: str = "separate",
        layernorm: bool = False,
        max_iter: int = 300,
        learning_rate: float = 0.02,
        validation_fraction: float = 0.2,
        patience: int = 15,
        init_scale: float = 0.5,
        random_state: Any = None,
        n_threads: int | None = 1,
    ) -> None:
        self.variant = variant
        self.whitening = whitening
        self.qk = qk
        self.layernorm = layernorm
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.validation_fraction = validation_fraction
        self.patience = patience
        self.init_scale = init_scale
        self.random_state = random_state
        self.n_threads = n_threads

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        return tags

    def _check_params(self) -> None:
        check_choice("variant", self.variant, VARIANTS)
        check_choice("qk", self.qk, QK_MODES)
        check_positive_int("max_iter", self.max_iter)
        check_positive_int("patience", self.patience)
        check_positive("learning_rate", self.learning_rate)
        check_positive("init_scale", self.init_scale)
        if not 0 <= self.validation_fraction < 1:
            raise ValueError(
                f"validation_fraction: must be in [0, 1), got {self.validation_fraction!r}"
            )

    def fit(self, X: Any, y: Any) -> AttentionRegressor:
        """Train the attention layer on ``(X, y)``; returns ``self``."""
        self._check_params()
        X, y = validate_data(self, X, y, multi_output=True, y_numeric=True, dtype=np.float64)
        n = X.shape[0]
        if n < 2:
            raise ValueError(
                f"AttentionRegressor needs at least 2 samples (a query and a key), got "
                f"n_samples = {n}"
            )
        y2 = np.asarray(y, dtype=np.float64).reshape(n, -1)
        self._multi = y.ndim == 2
        self._x_mean, self._x_scale = X.mean(0), _scale(X.std(0))
        self._y_mean, self._y_scale = y2.mean(0), _scale(y2.std(0))
        xc = torch.tensor((X - self._x_mean) / self._x_scale)
        yc = torch.tensor((y2 - self._y_mean) / self._y_scale)
        rng = check_random_state(self.random_state)
        seed = int(rng.randint(np.iinfo(np.int32).max))
        perm = torch.as_tensor(rng.permutation(n))
        n_val = round(self.validation_fraction * n) if n >= 5 else 0
        val, fit = perm[:n_val], perm[n_val:] if n_val else perm
        loo = self.variant == "softmax"
        model = AttentionRegression(
            X.shape[1],
            self.variant,
            bool(self.whitening),
            self.qk,
            bool(self.layernorm),
            init_scale=self.init_scale,
            seed=seed,
        )

        def loss_fn(step: int) -> torch.Tensor:
            return ((model(xc, xc, yc, exclude_self=loo)[fit] - yc[fit]) ** 2).mean()

        def eval_fn() -> float:
            pred = model(xc, xc, yc, exclude_self=True)[val]
            return float(((pred - yc[val]) ** 2).mean())

        cfg = TrainConfig(
            steps=self.max_iter,
            lr=self.learning_rate,
            seed=seed,
            eval_every=min(10, self.max_iter),
            patience=self.patience if n_val else None,
            restore_best=True,
            plateau_window=max(self.max_iter // 4, 1),
        )
        with warnings.catch_warnings(), torch_threads(self.n_threads):
            warnings.simplefilter("ignore", PlateauWarning)
            warnings.simplefilter("ignore", RankWarning)
            result = train(model, loss_fn, cfg, eval_fn if n_val else None, progress=False)
        self.module_ = model
        self.n_iter_ = result.steps_run
        self._x_ctx, self._y_ctx = xc, yc
        return self

    def predict(self, X: Any) -> NDArray[np.float64]:
        """``ŷ* = A(X*, X_train) · Y_train`` in the original units."""
        check_is_fitted(self, "module_")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        xq = torch.tensor((X - self._x_mean) / self._x_scale)
        with torch.no_grad(), warnings.catch_warnings(), torch_threads(self.n_threads):
            warnings.simplefilter("ignore", RankWarning)
            out = self.module_(xq, self._x_ctx, self._y_ctx).numpy()
        out = out * self._y_scale + self._y_mean
        return out if self._multi else out[:, 0]


def _scale(std: NDArray[np.float64]) -> NDArray[np.float64]:
    """Standard deviations with zeros (constant columns) replaced by 1."""
    return np.where(std > 0, std, 1.0)
