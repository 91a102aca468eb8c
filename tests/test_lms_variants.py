"""The LMS variants — momentum, mini-batches, several steps per pair — against references written
here: ``torch.optim.SGD`` with momentum stepping ``W`` one pair at a time, and numpy loops of the
mini-batch and multi-step updates. Float64; the bound is the loops' forward rounding error: the
same loop on absolute values gives each step's magnitude, and every step adds at most
``(d + 2) u`` of it (``u`` the unit roundoff), accumulated over the ``N · steps`` updates."""

import numpy as np
import pytest
import torch

from attnreg.estimators import LMS, MiniBatchLMS, MomentumLMS, MultiStepLMS

U = 2.0**-53


def tasks(seed, n=13, d=4, dy=2, m=3, scale=0.4):
    rng = np.random.default_rng(seed)
    return (
        scale * rng.standard_normal((2, n, d)),
        rng.standard_normal((2, n, dy)),
        rng.standard_normal((2, m, d)),
    )


def bound(magnitude, xq, updates, d):
    """``8 (d + 2) u · updates · |A| |x*|`` per query, ``A`` the absolute-value loop's map."""
    return 8 * (d + 2) * U * updates * (np.abs(xq) @ magnitude.T)


def sgd_momentum(xc, yc, xq, beta, mu):
    """``torch.optim.SGD(lr=β, momentum=μ)`` on ``½‖W x_i − y_i‖²``, one pair per step."""
    outs, mags = [], []
    for x, y, q in zip(xc, yc, xq, strict=True):
        w = torch.zeros(y.shape[1], x.shape[1], dtype=torch.float64, requires_grad=True)
        opt = torch.optim.SGD([w], lr=beta, momentum=mu)
        a, buf = np.zeros((y.shape[1], x.shape[1])), np.zeros((y.shape[1], x.shape[1]))
        for xi, yi in zip(x, y, strict=True):
            opt.zero_grad()
            loss = 0.5 * (w @ torch.as_tensor(xi) - torch.as_tensor(yi)).pow(2).sum()
            loss.backward()
            opt.step()
            buf = mu * buf + np.outer(a @ np.abs(xi) + np.abs(yi), np.abs(xi))
            a = a + beta * buf
        outs.append(q @ w.detach().numpy().T)
        mags.append(a)
    return np.array(outs), mags


def mini_batch(xc, yc, xq, eta, size):
    outs, mags = [], []
    for x, y, q in zip(xc, yc, xq, strict=True):
        w, a = np.zeros((y.shape[1], x.shape[1])), np.zeros((y.shape[1], x.shape[1]))
        for start in range(0, len(x), size):
            xb, yb = x[start : start + size], y[start : start + size]
            grad = sum(np.outer(w @ xi - yi, xi) for xi, yi in zip(xb, yb, strict=True))
            grow = sum(
                np.outer(a @ np.abs(xi) + np.abs(yi), np.abs(xi))
                for xi, yi in zip(xb, yb, strict=True)
            )
            w, a = w - eta * grad, a + eta * grow
        outs.append(q @ w.T)
        mags.append(a)
    return np.array(outs), mags


def multi_step(xc, yc, xq, beta, steps):
    outs, mags = [], []
    for x, y, q in zip(xc, yc, xq, strict=True):
        w, a = np.zeros((y.shape[1], x.shape[1])), np.zeros((y.shape[1], x.shape[1]))
        for xi, yi in zip(x, y, strict=True):
            for _ in range(steps):
                w = w - beta * np.outer(w @ xi - yi, xi)
                a = a + beta * np.outer(a @ np.abs(xi) + np.abs(yi), np.abs(xi))
        outs.append(q @ w.T)
        mags.append(a)
    return np.array(outs), mags


def check(got, want, mags, xq, updates):
    for b, a in enumerate(mags):
        tol = bound(a, xq[b], updates, xq.shape[-1])
        assert np.all(np.abs(got[b] - want[b]) <= tol)


@pytest.mark.parametrize(("beta", "mu"), [(0.3, 0.0), (0.3, 0.5), (0.1, 0.9), (0.5, 1.0)])
def test_momentum_lms_is_sgd_with_momentum(beta, mu):
    xc, yc, xq = tasks(1)
    want, mags = sgd_momentum(xc, yc, xq, beta, mu)
    got = MomentumLMS(beta, mu).predict(xc, yc, xq).numpy()
    check(got, want, mags, xq, len(xc[0]))


@pytest.mark.parametrize("size", [1, 4, 13, 20])
def test_mini_batch_lms_steps_once_per_batch(size):
    """Batches of 4 over 13 pairs leave a last batch of one; 13 and 20 are one batch."""
    xc, yc, xq = tasks(2)
    want, mags = mini_batch(xc, yc, xq, 0.2, size)
    got = MiniBatchLMS(0.2, size).predict(xc, yc, xq).numpy()
    check(got, want, mags, xq, len(xc[0]))


@pytest.mark.parametrize("steps", [1, 2, 5])
def test_multi_step_lms_repeats_the_step_on_each_pair(steps):
    xc, yc, xq = tasks(3)
    want, mags = multi_step(xc, yc, xq, 0.3, steps)
    got = MultiStepLMS(0.3, steps).predict(xc, yc, xq).numpy()
    check(got, want, mags, xq, len(xc[0]) * steps)


def test_with_one_plain_step_each_variant_is_lms():
    """The special cases against the loop of plain LMS (momentum 0, batches of one, one step)."""
    xc, yc, xq = tasks(4, n=3, d=6)  # N < d
    want, mags = multi_step(xc, yc, xq, 0.4, 1)
    for model in (LMS(0.4), MomentumLMS(0.4, 0.0), MiniBatchLMS(0.4, 1), MultiStepLMS(0.4, 1)):
        check(model.predict(xc, yc, xq).numpy(), want, mags, xq, 3)


def test_bad_parameters_are_refused_by_name():
    with pytest.raises(ValueError, match="momentum"):
        MomentumLMS(0.1, 1.5)
    with pytest.raises(ValueError, match="beta"):
        MomentumLMS(-0.1, 0.5)
    with pytest.raises(ValueError, match="batch_size"):
        MiniBatchLMS(0.1, 0)
    with pytest.raises(ValueError, match="steps"):
        MultiStepLMS(0.1, 0)
