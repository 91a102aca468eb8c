"""Task samplers: the von Oswald setup, Gaussian inputs, noise, shifts, bad input."""

from __future__ import annotations

import pytest
import torch

from attnreg.data.tasks import TaskSampler, random_covariance, von_oswald_tasks
from attnreg.training import generator


def test_von_oswald_tasks() -> None:
    s = von_oswald_tasks()
    t = s.sample(4000, generator(0), torch.float64)
    assert t.x_ctx.shape == (4000, 10, 10) and t.y_ctx.shape == (4000, 10, 1)
    assert t.x_query.shape == (4000, 1, 10) and t.y_query.shape == (4000, 1, 1)
    assert float(t.x_ctx.abs().max()) <= 0.5
    # y = wᵀx exactly, noise-free
    assert torch.allclose(t.y_ctx, t.x_ctx @ t.w.mT, atol=1e-12)
    assert torch.allclose(t.y_query, t.x_query @ t.w.mT, atol=1e-12)
    # U(-0.5, 0.5): variance 1/12; w ~ N(0, 1)
    assert float(t.x_ctx.var()) == pytest.approx(1 / 12, rel=0.02)
    assert float(t.w.var()) == pytest.approx(1.0, rel=0.05)


def test_gaussian_inputs_have_the_chosen_covariance() -> None:
    cov = random_covariance(4, condition=20.0, seed=1)
    evals = torch.linalg.eigvalsh(cov)
    assert float(evals.max() / evals.min()) == pytest.approx(20.0, rel=1e-8)
    s = TaskSampler(d=4, n_ctx=50, inputs="gaussian", covariance=cov)
    t = s.sample(2000, generator(1), torch.float64)
    x = t.x_ctx.reshape(-1, 4)
    empirical = x.T @ x / len(x)
    assert torch.allclose(empirical, cov, atol=0.05 * float(cov.abs().max()))


def test_noise_and_shifts() -> None:
    s = TaskSampler(d=3, n_ctx=20, noise_std=0.3, input_scale=2.0, teacher_scale=5.0)
    t = s.sample(3000, generator(2), torch.float64)
    resid = t.y_ctx - t.x_ctx @ t.w.mT
    assert float(resid.std()) == pytest.approx(0.3, rel=0.03)
    assert float(t.x_ctx.abs().max()) <= 1.0 and float(t.x_ctx.abs().max()) > 0.99
    assert float(t.w.std()) == pytest.approx(5.0, rel=0.05)


def test_determinism_and_context_subsets() -> None:
    s = von_oswald_tasks(n_ctx=20)
    a = s.sample(5, generator(3))
    b = s.sample(5, generator(3))
    assert torch.equal(a.x_ctx, b.x_ctx) and torch.equal(a.y_query, b.y_query)
    sub = a.with_context(4)
    assert sub.x_ctx.shape == (5, 4, 10) and torch.equal(sub.x_query, a.x_query)


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="n_ctx"):
        TaskSampler(n_ctx=0)
    with pytest.raises(ValueError, match="covariance"):
        TaskSampler(d=3, inputs="gaussian", covariance=torch.eye(4))
    with pytest.raises(ValueError, match="covariance"):
        TaskSampler(d=2, inputs="gaussian", covariance=[[1.0, 2.0], [2.0, 1.0]])
    with pytest.raises(ValueError, match="inputs"):
        TaskSampler(inputs="cauchy")
    with pytest.raises(ValueError, match="n"):
        von_oswald_tasks().sample(2, generator(0)).with_context(11)
