"""OLSTransformerRegressor: scikit-learn's contract, and equality with LinearRegression/Ridge."""

import numpy as np
import pytest
from sklearn.linear_model import LinearRegression, Ridge
from sklearn.model_selection import cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from attnreg.sklearn import OLSTransformerRegressor


@parametrize_with_checks([OLSTransformerRegressor(), OLSTransformerRegressor(ridge=0.5)])
def test_sklearn_contract(estimator, check):
    check(estimator)


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_equals_linear_regression_with_intercept(fit_intercept):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 4)) + 3.0
    y = x @ rng.normal(size=4) + 2.0 + 0.1 * rng.normal(size=50)
    ours = OLSTransformerRegressor(fit_intercept=fit_intercept).fit(x, y)
    sk = LinearRegression(fit_intercept=fit_intercept).fit(x, y)
    np.testing.assert_allclose(ours.coef_, sk.coef_, rtol=1e-10)
    np.testing.assert_allclose(ours.intercept_, sk.intercept_, atol=1e-10)
    xt = rng.normal(size=(7, 4))
    np.testing.assert_allclose(ours.predict(xt), sk.predict(xt), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(("covariance", "scale"), [("gram", 1), ("mean", 40)])
def test_ridge_equals_sklearn_ridge_multioutput(covariance, scale):
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(40, 5)), rng.normal(size=(40, 3))
    ours = OLSTransformerRegressor(ridge=0.3, covariance=covariance).fit(x, y)
    sk = Ridge(alpha=0.3 * scale).fit(x, y)
    np.testing.assert_allclose(ours.coef_, sk.coef_, rtol=1e-10)
    np.testing.assert_allclose(ours.predict(x[:5]), sk.predict(x[:5]), rtol=1e-10)
    assert ours.predict(x[:5]).shape == (5, 3)


def test_in_a_pipeline_with_cross_validation():
    from sklearn.datasets import load_diabetes

    x, y = load_diabetes(return_X_y=True)
    ours = cross_val_score(make_pipeline(StandardScaler(), OLSTransformerRegressor()), x, y, cv=3)
    sk = cross_val_score(make_pipeline(StandardScaler(), LinearRegression()), x, y, cv=3)
    np.testing.assert_allclose(ours, sk, rtol=1e-10)


def test_bad_parameters_are_named():
    x, y = np.ones((5, 2)), np.ones(5)
    with pytest.raises(ValueError, match="ridge"):
        OLSTransformerRegressor(ridge=-1).fit(x, y)
    with pytest.raises(ValueError, match="covariance"):
        OLSTransformerRegressor(covariance="x").fit(x, y)
