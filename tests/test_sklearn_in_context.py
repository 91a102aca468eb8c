"""InContextRegressor: the scikit-learn contract and its predictions."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from attnreg.sklearn import InContextRegressor


@parametrize_with_checks(
    [
        InContextRegressor(),
        InContextRegressor(model="ols"),
        InContextRegressor(model="gd++", steps=2, gamma=0.01),
    ]
)
def test_sklearn_contract(estimator, check) -> None:
    check(estimator)


def test_gd_predictions_equal_an_explicit_gd_loop() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 4))
    y = X @ rng.normal(size=4) + 1.5
    Xq = rng.normal(size=(5, 4))
    reg = InContextRegressor(model="gd", eta=0.3, steps=3).fit(X, y)
    xm, ym = X.mean(0), y.mean()
    xc, yc = X - xm, y - ym
    w = np.zeros(4)
    for _ in range(3):
        w = w - 0.3 * (xc.T @ (xc @ w - yc)) / len(X)
    assert np.allclose(reg.predict(Xq), (Xq - xm) @ w + ym, atol=1e-10)


def test_ols_model_is_least_squares_and_default_eta() -> None:
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + 0.1 * rng.normal(size=40)
    from sklearn.linear_model import LinearRegression

    ref = LinearRegression().fit(X, y)
    reg = InContextRegressor(model="ols").fit(X, y)
    assert np.allclose(reg.predict(X), ref.predict(X), atol=1e-9)
    gd = InContextRegressor().fit(X, y)
    xc = X - X.mean(0)
    assert gd.eta_ == pytest.approx(40 / np.linalg.eigvalsh(xc.T @ xc)[-1])


def test_bad_input() -> None:
    X, y = np.ones((4, 2)), np.ones(4)
    with pytest.raises(ValueError, match="model"):
        InContextRegressor(model="mlp").fit(X, y)
    with pytest.raises(ValueError, match="checkpoint"):
        InContextRegressor(model="checkpoint").fit(X, y)
    with pytest.raises(ValueError, match="eta"):
        InContextRegressor(eta=-1.0).fit(X, y)


def test_checkpoint_model_runs_a_trained_stack(tmp_path) -> None:
    from attnreg.models import TrainableLSA, gd_products, save_model

    kq, pv = gd_products(3, 1, 0.5)
    path = save_model(tmp_path / "gd.pt", TrainableLSA.from_products(kq, pv))
    rng = np.random.default_rng(3)
    X, y, Xq = rng.normal(size=(12, 3)), rng.normal(size=12), rng.normal(size=(4, 3))
    reg = InContextRegressor(model="checkpoint", checkpoint=str(path)).fit(X, y)
    xm, ym = X.mean(0), y.mean()
    w1 = 0.5 * (X - xm).T @ (y - ym) / len(X)  # one GD step from 0, η = 0.5
    assert np.allclose(reg.predict(Xq), (Xq - xm) @ w1 + ym, atol=1e-10)
    with pytest.raises(ValueError, match="checkpoint"):
        InContextRegressor(model="checkpoint", checkpoint=str(path)).fit(np.ones((5, 4)), y[:5])
