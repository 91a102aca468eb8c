"""The compare study's data modes: seeded, with the promised statistics."""

import numpy as np
import pytest
from sklearn.datasets import load_diabetes

from attnreg.data.regression import (
    covariance_with_condition,
    diabetes,
    load_regression,
    simple_linear,
    sine,
    synthetic_linear,
)


@pytest.mark.parametrize("condition", [1.0, 10.0, 1e3])
def test_covariance_has_the_set_condition_number(condition):
    sigma = covariance_with_condition(6, condition, np.random.default_rng(3))
    eig = np.linalg.eigvalsh(sigma)
    assert eig.max() / eig.min() == pytest.approx(condition, rel=1e-8)
    assert eig.max() == pytest.approx(1.0, rel=1e-10)


def test_synthetic_is_seeded_centred_and_linear():
    a = synthetic_linear(n_train=300, n_test=50, d=5, condition=20, noise=0.0, seed=4)
    b = synthetic_linear(n_train=300, n_test=50, d=5, condition=20, noise=0.0, seed=4)
    c = synthetic_linear(n_train=300, n_test=50, d=5, condition=20, noise=0.0, seed=5)
    np.testing.assert_array_equal(a.x_train, b.x_train)
    assert not np.allclose(a.x_train, c.x_train)
    np.testing.assert_allclose(a.x_train.mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(a.y_train.mean(), 0, atol=1e-12)
    # noise-free: the centred targets are exactly x w (centring keeps the slope)
    coef = np.linalg.lstsq(a.x_train, a.y_train[:, 0], rcond=None)[0]
    np.testing.assert_allclose(coef, a.true_weights, rtol=1e-9)
    assert a.x_train.shape == (300, 5) and a.y_test.shape == (50, 1)
    sample_cov = np.cov(a.x_train.T)
    eig = np.linalg.eigvalsh(sample_cov)
    assert 8 < eig.max() / eig.min() < 50  # population κ = 20, sample of 300


def test_diabetes_is_standardised_with_training_statistics():
    data = diabetes(test_fraction=0.25, seed=1)
    x, y = load_diabetes(return_X_y=True, scaled=False)
    assert data.x_train.shape[0] + data.x_test.shape[0] == len(x) == 442
    assert data.x_test.shape[0] == round(0.25 * 442)
    np.testing.assert_allclose(data.x_train.mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(data.x_train.std(0), 1, rtol=1e-12)
    np.testing.assert_allclose(data.y_train.std(), 1, rtol=1e-12)
    # the split is a permutation of the shipped rows: undo the standardisation of one row
    y_std = data.info["y_std"]
    restored = np.sort(np.concatenate([data.y_train, data.y_test])[:, 0] * y_std)
    np.testing.assert_allclose(restored - restored.mean(), np.sort(y) - y.mean(), atol=1e-9)
    again = diabetes(test_fraction=0.25, seed=1)
    np.testing.assert_array_equal(again.x_test, data.x_test)


def test_sine_features_and_targets():
    data = sine(n_train=50, n_test=10, frequency=2.0, noise=0.0, seed=0)
    t = data.x_train[:, 0]
    np.testing.assert_allclose(data.x_train[:, 1], t**2)
    np.testing.assert_allclose(data.x_train[:, 2], 1.0)
    np.testing.assert_allclose(data.y_train[:, 0], np.sin(2.0 * t), atol=1e-15)
    assert np.abs(t).max() <= 3.0


def test_simple_linear_is_y_equals_2x():
    data = simple_linear(n_train=40, noise=0.0, seed=2)
    np.testing.assert_allclose(data.y_train, 2 * data.x_train)


def test_load_regression_dispatches_and_refuses_bad_input():
    assert load_regression("sine", seed=0, n_train=5, n_test=2).x_train.shape == (5, 3)
    with pytest.raises(ValueError, match="valid names are synthetic, diabetes, sine"):
        load_regression("boston")
    with pytest.raises(ValueError, match="n_train"):
        synthetic_linear(n_train=1)
    with pytest.raises(ValueError, match="condition"):
        synthetic_linear(condition=0.5)
    with pytest.raises(ValueError, match="noise"):
        sine(noise=-1.0)
    with pytest.raises(ValueError, match="test_fraction"):
        diabetes(test_fraction=1.5)
