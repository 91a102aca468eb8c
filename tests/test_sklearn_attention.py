"""AttentionRegressor: the scikit-learn estimator contract, pipelines, and references."""

import numpy as np
import pytest
from sklearn.datasets import load_diabetes
from sklearn.linear_model import LinearRegression
from sklearn.model_selection import cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from attnreg.sklearn import AttentionRegressor


@parametrize_with_checks(
    [
        AttentionRegressor(max_iter=30),
        AttentionRegressor(variant="regression", whitening=True, qk="single", max_iter=30),
    ]
)
def test_sklearn_contract(estimator, check):
    check(estimator)


def test_pipeline_and_cross_val_score_on_diabetes():
    x, y = load_diabetes(return_X_y=True)
    pipe = make_pipeline(
        StandardScaler(), AttentionRegressor(variant="regression", max_iter=200, random_state=0)
    )
    scores = cross_val_score(pipe, x, y, cv=3, scoring="r2")
    reference = cross_val_score(LinearRegression(), x, y, cv=3, scoring="r2")
    assert np.all(np.isfinite(scores))
    assert scores.mean() > reference.mean() - 0.05  # linear data: as good as OLS, near enough


def test_whitening_built_in_with_shared_w_is_linear_regression():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 4)) @ rng.normal(size=(4, 4)) + 3.0
    y = x @ rng.normal(size=4) + 1.5 + 0.2 * rng.normal(size=120)
    q = rng.normal(size=(10, 4)) + 3.0
    est = AttentionRegressor(variant="whitened", qk="shared", max_iter=20, random_state=0)
    got = est.fit(x, y).predict(q)
    expected = LinearRegression().fit(x, y).predict(q)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_same_random_state_same_predictions_and_multioutput():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(50, 3)), rng.normal(size=(50, 2))
    a = AttentionRegressor(max_iter=40, random_state=3).fit(x, y).predict(x[:5])
    b = AttentionRegressor(max_iter=40, random_state=3).fit(x, y).predict(x[:5])
    assert a.shape == (5, 2)
    np.testing.assert_array_equal(a, b)


def test_bad_parameters_are_refused():
    x, y = np.ones((10, 2)), np.arange(10.0)
    with pytest.raises(ValueError, match="variant: unknown value 'tanh'"):
        AttentionRegressor(variant="tanh").fit(x, y)
    with pytest.raises(ValueError, match="validation_fraction"):
        AttentionRegressor(validation_fraction=1.0).fit(x, y)
    with pytest.raises(ValueError, match="n_samples = 1"):
        AttentionRegressor().fit(x[:1], y[:1])
