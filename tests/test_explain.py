"""explain(): constructions come out as the estimator they were built from."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from cli_checks import one_line_error
from typer.testing import CliRunner

from attnreg.cli import app
from attnreg.constructions import LSAStack, OLSTransformer
from attnreg.data.tasks import von_oswald_tasks
from attnreg.estimators import MiniBatchLMS, MomentumLMS, MultiStepLMS, Ridge
from attnreg.explaining import FAMILIES, agreement, explain
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


@pytest.mark.parametrize(
    ("estimator", "family", "params"),
    [
        (MomentumLMS(0.05, 0.5), "momentum LMS", {"beta": 0.05, "momentum": 0.5}),
        (MiniBatchLMS(0.25, 4), "mini-batch LMS", {"eta": 0.25, "batch_size": 4}),
        (MiniBatchLMS(0.2, 8), "mini-batch LMS", {"eta": 0.2, "batch_size": 8}),
        (MultiStepLMS(0.5, 3), "multi-step LMS", {"beta": 0.5, "steps": 3}),
    ],
)
def test_each_lms_variant_is_recovered_with_its_parameters(estimator, family, params) -> None:
    """Momentum, mini-batch and multi-step LMS come out as their own family, not plain LMS,
    with the parameters they were built with (the discrete one exactly, the step to the
    search's tolerance); the steps are large enough (``β ‖x‖²`` up to 0.9) that plain LMS, whose
    R² is also reported, is measurably worse."""
    families = ("LMS", "momentum LMS", "mini-batch LMS", "multi-step LMS")
    ex = explain(estimator, _tasks(200, seed=4), families=families)
    assert ex.best == family
    fit = ex.fit(family)
    assert fit.r2 == pytest.approx(1.0, abs=1e-9) and ex.fit("LMS").r2 < 1 - 1e-6
    for name, value in params.items():
        assert fit.params[name] == pytest.approx(value, rel=1e-4)


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


def test_attnreg_explain_is_the_function_and_no_module_shadows_it() -> None:
    import importlib.util
    import inspect

    import attnreg
    import attnreg.explain_cli
    import attnreg.explaining

    assert inspect.isfunction(attnreg.explain)
    assert attnreg.explain is attnreg.explaining.explain is explain
    assert importlib.util.find_spec("attnreg.explain") is None
    ex = attnreg.explain(LSAStack.gd(10, 1, eta=0.5), _tasks(40), families=("GD",))
    assert ex.best == "GD"


def _constant(value: float):
    def predict(x_ctx, y_ctx, x_query):
        return torch.full((*x_query.shape[:-1], y_ctx.shape[-1]), value, dtype=torch.float64)

    return predict


@pytest.mark.parametrize("value", [0.0, 3.0])
def test_a_constant_or_zero_predictor_is_explained_by_no_family(value) -> None:
    """Outputs of zero variance: Σ(p − p̄)² = 0, so R² is undefined (NaN) for every family —
    before, the zero predictor was named "preconditioned GD" (Γ = 0 fits it exactly) and the
    constant one "OLS" with every R² = −inf."""
    t = _tasks(200)
    out = _constant(value)(t.x_ctx, t.y_ctx, t.x_query).numpy()
    assert np.var(out[100:]) == 0.0  # independent: the held-out outputs have zero variance
    ex = explain(_constant(value), t)
    assert ex.best is None
    assert all(np.isnan(f.r2) for f in ex.fits) and len(ex.fits) == len(FAMILIES)
    assert not any(row["best"] for row in ex.rows())
    assert ex.verdict().startswith("no family explains it") and "zero variance" in ex.verdict()


def test_a_predictor_no_family_fits_well_is_explained_by_no_family() -> None:
    t = _tasks(400)
    gen = torch.Generator().manual_seed(5)
    noise = torch.randn(400, 1, 1, generator=gen, dtype=torch.float64)

    def noisy(x_ctx, y_ctx, x_query):  # independent of the context: no estimator of it
        return noise

    ex = explain(noisy, t, families=("OLS", "GD", "ridge"))
    # OLS's held-out R², from numpy: per-task least squares, predictions on the query
    xc, yc, xq = (a.numpy()[200:] for a in (t.x_ctx, t.y_ctx, t.x_query))
    ols = np.stack(
        [q @ np.linalg.lstsq(a, b, rcond=None)[0] for a, b, q in zip(xc, yc, xq, strict=True)]
    )
    p = noise.numpy()[200:]
    r2_ols = 1 - ((ols - p) ** 2).sum() / ((p - p.mean()) ** 2).sum()
    assert ex.fit("OLS").r2 == pytest.approx(r2_ols, rel=1e-9)
    top = max(f.r2 for f in ex.fits)
    assert top < 0.5
    assert ex.best is None and f"{top:.4g} < min_r2 0.5" in ex.verdict()
    # with no floor the rule names the simplest family within tol of the highest R²
    loose = explain(noisy, t, families=("OLS", "GD", "ridge"), min_r2=-np.inf)
    assert loose.best == next(f.family for f in loose.fits if f.r2 >= top - loose.tol)
    with pytest.raises(ValueError, match="min_r2"):
        explain(noisy, t, min_r2=float("nan"))


@pytest.mark.parametrize(
    "shape", [lambda b, m: (b * m,), lambda b, m: (b, m, 2), lambda b, m: (b + 1, m, 1)]
)
def test_a_predictor_of_the_wrong_shape_is_a_clear_error(shape) -> None:
    t = _tasks(30)

    def wrong(x_ctx, y_ctx, x_query):
        return torch.zeros(shape(*x_query.shape[:2]), dtype=torch.float64)

    actual = shape(30, 1)
    with pytest.raises(ValueError, match="predictor") as info:
        explain(wrong, t)
    assert f"returned shape {actual}" in str(info.value)
    assert "expected (B, M, dy) = (30, 1, 1)" in str(info.value)


def test_agreement_with_a_constant_reference_is_undefined() -> None:
    r2, _cos, mse = agreement(torch.tensor([1.0, 2.0]), torch.tensor([2.0, 2.0]))
    assert np.isnan(r2) and mse == pytest.approx(0.5)
    assert np.isnan(agreement(torch.ones(3), torch.ones(3))[0])


runner = CliRunner()


@pytest.mark.parametrize(
    "option, needle",
    [
        (["--seed", "-1"], "seed"),
        (["--seed", str(2**63)], "seed"),
        (["--tasks", "0"], "tasks"),
        (["--tasks", "1"], "tasks"),
        (["--steps", "0"], "steps"),
        (["--tol", "nan"], "tol"),
        (["--min-r2", "nan"], "min_r2"),
        (["--inputs", "cauchy"], "inputs"),
        (["--construction", "lasso"], "construction"),
        (["--tasks", "100000000"], "GiB is available"),  # refused before allocating
    ],
)
def test_cli_bad_option_values_are_one_line_errors(option, needle) -> None:
    one_line_error(runner.invoke(app, ["explain", "--construction", "gd", *option]), needle)


def test_cli_bad_out_and_checkpoint_are_one_line_errors(tmp_path) -> None:
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    for out in (a_file, a_file / "below"):
        result = runner.invoke(app, ["explain", "--construction", "gd", "--out", str(out)])
        one_line_error(result, "--out", str(out))
    one_line_error(runner.invoke(app, ["explain", str(tmp_path / "none.pt")]), "checkpoint")
    one_line_error(runner.invoke(app, ["explain", str(tmp_path)]), "checkpoint")


def test_cli_out_writes_the_rows(tmp_path) -> None:
    out = tmp_path / "explained"
    result = runner.invoke(
        app, ["explain", "--construction", "gd", "--tasks", "40", "--json", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert json.loads((out / "explain_rows.json").read_text()) == json.loads(result.stdout)


def test_cli_a_zero_layer_is_explained_by_no_family(tmp_path) -> None:
    from attnreg.models import TrainableLSA, save_model

    model = TrainableLSA(4, seed=0)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    path = save_model(tmp_path / "zero.pt", model, {"n_ctx": 6})
    args = ["explain", str(path), "--tasks", "40", "--json", "--out", str(tmp_path / "ex")]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert len(rows) == len(FAMILIES) and all(r["r2"] is None and not r["best"] for r in rows)
    summary = json.loads((tmp_path / "ex" / "explain_summary.json").read_text())["summary"]
    assert "no family explains it" in summary["best family"]
    assert "zero variance" in summary["best family"]
    table = runner.invoke(app, ["explain", str(path), "--tasks", "40"])
    assert table.exit_code == 0 and "undefined" in table.output and "yes" not in table.output


def test_the_task_memory_check_refuses_what_does_not_fit_and_passes_what_does(monkeypatch):
    """The refusal names ``tasks`` and the memory available; a size that fits passes."""
    import psutil

    from attnreg.explain_cli import WORKING_COPIES, check_task_memory

    per_task = 8 * (10 + 1) * (10 + 1) * WORKING_COPIES + 8 * (100 + 100)
    available = type("Mem", (), {"available": 1000 * per_task})()
    monkeypatch.setattr(psutil, "virtual_memory", lambda: available)
    check_task_memory(1000, 10, 10)
    with pytest.raises(ValueError, match=r"tasks: 1001 tasks .*at most about 1000 tasks"):
        check_task_memory(1001, 10, 10)
