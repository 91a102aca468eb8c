"""explain(): constructions come out as the estimator they were built from."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from attnreg.cli import app
from attnreg.constructions import LSAStack, OLSTransformer
from attnreg.data.tasks import von_oswald_tasks
from attnreg.estimators import Ridge
from attnreg.explain import agreement, explain
from attnreg.training import generator


def _tasks(n: int = 600, seed: int = 0):
    return von_oswald_tasks().sample(n, generator(seed), torch.float64)


def test_a_gd_layer_is_explained_as_gd_with_its_eta() -> None:
    ex = explain(LSAStack.gd(10, 1, eta=0.7), _tasks())
    assert ex.best == "GD"
    gd = ex.fit("GD")
    assert gd.params["eta"] == pytest.approx(0.7, rel=1e-9)
    assert gd.r2 == pytest.approx(1.0, abs=1e-12)


def test_ols_transformer_is_explained_as_ols() -> None:
    with pytest.warns(Warning):
        ex = explain(OLSTransformer(), _tasks(seed=1))
    assert ex.best == "OLS"
    assert ex.fit("GD").r2 < 0.9


def test_preconditioned_layer_and_ridge_are_recovered() -> None:
    rng = np.random.default_rng(2)
    a = rng.normal(size=(10, 10))
    gamma = np.eye(10) + 0.3 * (a + a.T) / 2
    layer = LSAStack.preconditioned(gamma, 1, eta=1.0)
    ex = explain(layer, _tasks(seed=2), families=("GD", "preconditioned GD"))
    assert ex.best == "preconditioned GD"
    assert np.allclose(np.array(ex.fit("preconditioned GD").params["gamma"]), gamma, atol=1e-8)
    ridge = explain(Ridge(2.0), _tasks(seed=3), families=("OLS", "GD", "ridge"))
    assert ridge.best == "ridge"
    assert ridge.fit("ridge").params["lam"] == pytest.approx(2.0, rel=1e-3)


def test_agreement_against_numpy() -> None:
    rng = np.random.default_rng(4)
    f, p = rng.normal(size=50), rng.normal(size=50)
    r2, cos, mse = agreement(torch.tensor(f), torch.tensor(p))
    assert r2 == pytest.approx(1 - ((f - p) ** 2).sum() / ((p - p.mean()) ** 2).sum())
    assert cos == pytest.approx(f @ p / np.linalg.norm(f) / np.linalg.norm(p))
    assert mse == pytest.approx(((f - p) ** 2).mean())


def test_bad_input() -> None:
    t = _tasks(20)
    with pytest.raises(ValueError, match="tasks"):
        explain(LSAStack.gd(10, 1), (t.x_ctx, t.y_ctx))
    with pytest.raises(ValueError, match="families"):
        explain(LSAStack.gd(10, 1), t, families=("GD", "lasso"))
    with pytest.raises(ValueError, match="x_ctx"):
        explain(LSAStack.gd(10, 1), (t.x_ctx[:, :0], t.y_ctx[:, :0], t.x_query))


def test_cli_explains_a_trained_checkpoint_as_gd(tmp_path) -> None:
    from attnreg.core.threads import torch_threads
    from attnreg.data.tasks import query_loss
    from attnreg.models import TrainableLSA, save_model
    from attnreg.training import TrainConfig, train

    sampler = von_oswald_tasks()
    model = TrainableLSA(10, seed=0)
    gen = generator(0)

    def loss_fn(step: int) -> torch.Tensor:
        t = sampler.sample(2048, gen)
        return query_loss(model.forward_predict(t.x_ctx, t.y_ctx, t.x_query), t.y_query)

    with torch_threads(1):  # small batched ops: one thread is fastest
        train(model, loss_fn, TrainConfig(steps=500, lr=3e-2, schedule="cosine"), progress=False)
    path = save_model(tmp_path / "lsa.pt", model, {"n_ctx": 10})
    runner = CliRunner()
    result = runner.invoke(app, ["explain", str(path), "--tasks", "500"])
    assert result.exit_code == 0, result.output
    assert "best family" in result.output and ": GD" in result.output
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"junk")
    bad = runner.invoke(app, ["explain", str(junk)])
    assert bad.exit_code != 0 and "checkpoint" in bad.output
    ols = runner.invoke(app, ["explain", "--construction", "ols-transformer", "--tasks", "300"])
    assert ols.exit_code == 0 and ": OLS" in ols.output


def test_a_predictor_returning_nan_is_a_clear_error() -> None:
    t = _tasks()

    def nan_predictor(x_ctx, y_ctx, x_query):
        return torch.full((*x_query.shape[:-1], 1), float("nan"), dtype=torch.float64)

    with pytest.raises(ValueError, match="predictor: its predictions on the tasks contain NaN"):
        explain(nan_predictor, t)
