"""Pattern sets and corruptions against direct checks written here."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnreg.data.patterns import (
    add_noise,
    check_binary,
    corrupt,
    digits_patterns,
    flip_bits,
    make_patterns,
    mask_half,
    random_binary,
    random_sphere,
)
from attnreg.training import generator


def test_binary_patterns_are_pm_one_and_deterministic():
    a = random_binary(50, 17, generator(3))
    b = random_binary(50, 17, generator(3))
    c = random_binary(50, 17, generator(4))
    assert a.shape == (50, 17)
    assert set(np.unique(a.numpy()).tolist()) == {-1.0, 1.0}
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    # roughly balanced: 850 fair coins, mean within 5 standard errors of 0
    assert abs(float(a.mean())) < 5 / np.sqrt(a.numel())


def test_sphere_patterns_have_norm_sqrt_d():
    x = random_sphere(40, 9, generator(0), torch.float64)
    np.testing.assert_allclose(np.linalg.norm(x.numpy(), axis=1), np.sqrt(9), rtol=1e-12)


@settings(max_examples=30, deadline=None)
@given(d=st.integers(1, 40), data=st.data(), seed=st.integers(0, 10_000))
def test_flip_bits_flips_exactly_k_coordinates(d, data, seed):
    k = data.draw(st.integers(0, d))
    x = random_binary(7, d, generator(seed))
    y = flip_bits(x, k, generator(seed + 1))
    differing = (x.numpy() != y.numpy()).sum(axis=1)
    assert (differing == k).all()
    assert ((y.numpy() == x.numpy()) | (y.numpy() == -x.numpy())).all()


def test_mask_half_and_noise():
    x = torch.arange(1.0, 13.0).reshape(2, 6)
    m = mask_half(x)
    np.testing.assert_array_equal(m.numpy()[:, :3], x.numpy()[:, :3])
    assert (m.numpy()[:, 3:] == 0).all()
    g1, g2 = generator(5), generator(5)
    noisy = add_noise(x, 0.5, g1)
    ref = x + 0.5 * torch.randn(x.shape, generator=g2, dtype=torch.float64).float()
    np.testing.assert_allclose(noisy.numpy(), ref.numpy(), rtol=1e-6)
    assert torch.equal(corrupt(x, "clean", 0, generator(0)), x)
    assert torch.equal(corrupt(x, "mask", 0, generator(0)), m)


def test_digits_are_the_sklearn_images_scaled():
    from sklearn.datasets import load_digits

    images, labels = digits_patterns(torch.float64)
    raw = load_digits()
    assert images.shape == (1797, 64)
    np.testing.assert_allclose(images.numpy(), raw.data / 16.0)
    np.testing.assert_array_equal(labels, raw.target)
    subset = make_patterns("digits", 10, 64, generator(1), torch.float64)
    rows = {tuple(r) for r in (raw.data / 16.0).tolist()}
    assert all(tuple(r) in rows for r in subset.tolist())


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="k"):
        flip_bits(torch.ones(2, 3), 4, generator(0))
    with pytest.raises(ValueError, match=r"patterns.*\+1/-1"):
        check_binary("patterns", torch.tensor([[1.0, 0.5]]))
    with pytest.raises(ValueError, match="binary, sphere, digits"):
        make_patterns("cube", 3, 3, generator(0))
    with pytest.raises(ValueError, match="d"):
        make_patterns("digits", 3, 10, generator(0))
    with pytest.raises(ValueError, match="clean, flips, noise, mask"):
        corrupt(torch.ones(2, 2), "blur", 1, generator(0))
    with pytest.raises(ValueError, match="sigma"):
        add_noise(torch.ones(2, 2), -1.0, generator(0))
