"""Regression data sets for the compare study: synthetic linear, diabetes, sine toy; all seeded.

Every mode returns a :class:`RegressionData` of float64 numpy arrays with ``y`` of shape
``(N, 1)``. The training rows are the context (keys / values) of an attention regressor and
the test rows its queries. Preprocessing uses training statistics only:

* ``synthetic`` — ``x ~ N(0, Σ)`` with ``Σ = Q diag(λ) Qᵀ``, ``λ`` geometric from 1 to ``1/κ``
  (condition number ``κ``, random rotation ``Q``), known ``w``, ``y = xᵀw + σ ε``; ``x`` and
  ``y`` centred by the training means (so a no-intercept fit equals a fit with intercept).
* ``diabetes`` — scikit-learn's shipped diabetes data (442 × 10, Efron et al. 2004), a seeded
  train/test split, ``x`` and ``y`` standardised with the training mean and standard deviation.
* ``sine`` — ``y = sin(a·t) + σ ε`` with ``t ~ U(−r, r)`` and features ``φ(t) = (t, t², 1)``:
  ridge on ``φ`` is a quadratic fit, while softmax attention can express a Gaussian kernel in
  ``t`` (score ``β t* t − (β/2) t² · 1``), so the toy separates linear from kernel smoothing.

The "Everything is matter" blog pipeline (the compare study) uses these three modes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from attnreg.core.validation import check_choice, check_nonnegative, check_positive

DATA_MODES = ("synthetic", "diabetes", "sine")

Array = NDArray[np.float64]


@dataclass
class RegressionData:
    """A train/test regression split.

    ``true_weights`` is the known ``w`` (synthetic only), ``covariance`` the population
    ``Σ`` of the inputs (synthetic only), ``feature_names`` one name per column.
    """

    name: str
    x_train: Array
    y_train: Array
    x_test: Array
    y_test: Array
    feature_names: list[str]
    true_weights: Array | None = None
    covariance: Array | None = None
    info: dict[str, float] = field(default_factory=dict)

    @property
    def d(self) -> int:
        """Number of features."""
        return int(self.x_train.shape[1])


def _check_size(name: str, value: int, minimum: int) -> int:
    if isinstance(value, bool) or int(value) != value or int(value) < minimum:
        raise ValueError(f"{name}: must be an integer >= {minimum}, got {value!r}")
    return int(value)


def random_rotation(d: int, rng: np.random.Generator) -> Array:
    """A Haar-random orthogonal ``d × d`` matrix (QR of a Gaussian matrix, signs fixed)."""
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))


def covariance_with_condition(d: int, condition: float, rng: np.random.Generator) -> Array:
    """``Σ = Q diag(λ) Qᵀ`` with ``λ_i = κ^{−i/(d−1)}`` (from 1 down to ``1/κ``), ``Q`` random."""
    _check_size("d", d, 1)
    if not np.isfinite(condition) or condition < 1:
        raise ValueError(f"condition: must be a finite number >= 1, got {condition}")
    eig = condition ** (-np.arange(d) / max(d - 1, 1))
    q = random_rotation(d, rng)
    sigma: Array = (q * eig) @ q.T
    return (sigma + sigma.T) / 2


def synthetic_linear(
    n_train: int = 200,
    n_test: int = 200,
    d: int = 8,
    condition: float = 100.0,
    noise: float = 0.5,
    seed: int = 0,
) -> RegressionData:
    """Synthetic linear data: ``x ~ N(0, Σ)`` with ``κ(Σ) = condition``, ``w ~ N(0, I)``,
    ``y = xᵀw + noise · ε``; centred by the training means."""
    n_train = _check_size("n_train", n_train, 2)
    n_test = _check_size("n_test", n_test, 1)
    d = _check_size("d", d, 1)
    check_nonnegative("noise", noise)
    rng = np.random.default_rng(seed)
    sigma = covariance_with_condition(d, condition, rng)
    w = rng.standard_normal(d)
    chol = np.linalg.cholesky(sigma)
    x = rng.standard_normal((n_train + n_test, d)) @ chol.T
    y = x @ w + noise * rng.standard_normal(n_train + n_test)
    xtr, xte, ytr, yte = x[:n_train], x[n_train:], y[:n_train], y[n_train:]
    xm, ym = xtr.mean(0), ytr.mean()
    return RegressionData(
        "synthetic",
        xtr - xm,
        (ytr - ym)[:, None],
        xte - xm,
        (yte - ym)[:, None],
        [f"x{i}" for i in range(d)],
        true_weights=w,
        covariance=sigma,
        info={"condition": float(condition), "noise": float(noise)},
    )


def diabetes(test_fraction: float = 0.25, seed: int = 0) -> RegressionData:
    """scikit-learn's diabetes data (``load_diabetes(scaled=False)``), split with a seeded
    permutation, ``x`` and ``y`` standardised by training statistics."""
    from sklearn.datasets import load_diabetes

    check_positive("test_fraction", test_fraction)
    if test_fraction >= 1:
        raise ValueError(f"test_fraction: must be < 1, got {test_fraction}")
    bunch = load_diabetes(scaled=False)
    x, y = np.asarray(bunch.data, dtype=np.float64), np.asarray(bunch.target, np.float64)
    perm = np.random.default_rng(seed).permutation(len(x))
    n_test = max(1, round(test_fraction * len(x)))
    test, train = perm[:n_test], perm[n_test:]
    xm, xs = x[train].mean(0), x[train].std(0)
    ym, ys = y[train].mean(), y[train].std()
    return RegressionData(
        "diabetes",
        (x[train] - xm) / xs,
        ((y[train] - ym) / ys)[:, None],
        (x[test] - xm) / xs,
        ((y[test] - ym) / ys)[:, None],
        list(bunch.feature_names),
        info={"y_std": float(ys)},
    )


def sine(
    n_train: int = 200,
    n_test: int = 200,
    frequency: float = 1.5,
    noise: float = 0.1,
    x_range: float = 3.0,
    seed: int = 0,
) -> RegressionData:
    """Sine toy: ``t ~ U(−r, r)``, ``y = sin(a·t) + noise · ε``, features ``(t, t², 1)``."""
    n_train = _check_size("n_train", n_train, 2)
    n_test = _check_size("n_test", n_test, 1)
    check_positive("frequency", frequency)
    check_positive("x_range", x_range)
    check_nonnegative("noise", noise)
    rng = np.random.default_rng(seed)
    t = rng.uniform(-x_range, x_range, n_train + n_test)
    y = np.sin(frequency * t) + noise * rng.standard_normal(n_train + n_test)
    phi = np.stack([t, t**2, np.ones_like(t)], axis=1)
    return RegressionData(
        "sine",
        phi[:n_train],
        y[:n_train, None],
        phi[n_train:],
        y[n_train:, None],
        ["t", "t^2", "1"],
        info={"frequency": float(frequency), "noise": float(noise)},
    )


def simple_linear(
    n_train: int = 100,
    n_test: int = 100,
    slope: float = 2.0,
    noise: float = 0.1,
    seed: int = 0,
) -> RegressionData:
    """Tan & Zhao's toy (arXiv 2604.13656): ``x ~ N(0, 1)``, ``y = slope · x + noise · ε``."""
    n_train = _check_size("n_train", n_train, 1)
    n_test = _check_size("n_test", n_test, 1)
    check_nonnegative("noise", noise)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_train + n_test, 1))
    y = slope * x + noise * rng.standard_normal((n_train + n_test, 1))
    return RegressionData(
        "y=2x",
        x[:n_train],
        y[:n_train],
        x[n_train:],
        y[n_train:],
        ["x"],
        true_weights=np.array([float(slope)]),
        covariance=np.eye(1),
        info={"noise": float(noise)},
    )


def load_regression(name: str, seed: int = 0, **sizes: int | float) -> RegressionData:
    """The data mode ``name`` (one of ``DATA_MODES``) with seed ``seed``; ``sizes`` are passed
    to the mode's function (``n_train``, ``n_test``, ``d``, ``condition``, ``noise`` …)."""
    check_choice("name", name, DATA_MODES)
    if name == "synthetic":
        return synthetic_linear(seed=seed, **sizes)  # type: ignore[arg-type]
    if name == "diabetes":
        return diabetes(seed=seed, **sizes)
    return sine(seed=seed, **sizes)  # type: ignore[arg-type]
