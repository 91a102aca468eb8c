"""The icl study: sensitivities, the line search, alignment, P4 workload, the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from attnreg.bench.icl_workload import train_one_layer_to_gd
from attnreg.cli import app
from attnreg.data.tasks import TaskSampler, line_search_eta, random_covariance, von_oswald_tasks
from attnreg.estimators import GD
from attnreg.models import TrainableLSA
from attnreg.studies.icl.config import ICLConfig
from attnreg.studies.icl.metrics import alignment, sensitivities
from attnreg.studies.icl.run import JSON_KEYS, json_rows, run
from attnreg.training import generator


def test_sensitivities_match_finite_differences() -> None:
    t = von_oswald_tasks(d=4, n_ctx=6, n_query=2).sample(3, generator(0), torch.float64)
    model = TrainableLSA(4, layers=2, heads=2, init_scale=0.5, dtype=torch.float64)
    got = sensitivities(model.forward_predict, t.x_ctx, t.y_ctx, t.x_query)  # (B, M, 1, d)
    h = 1e-6
    for j in range(4):
        step = torch.zeros_like(t.x_query)
        step[..., j] = h
        plus = model.forward_predict(t.x_ctx, t.y_ctx, t.x_query + step)
        minus = model.forward_predict(t.x_ctx, t.y_ctx, t.x_query - step)
        fd = ((plus - minus) / (2 * h)).detach()
        assert torch.allclose(got[..., 0, j], fd[..., 0], atol=1e-7)


def test_line_searched_eta_matches_the_gaussian_closed_form() -> None:
    # x ~ N(0, Σ), w ~ N(0, I), one GD step ŷ = η (1/N) yᵀX x_q. Independently:
    # E[g y_q] = tr Σ², E[g²] = ((N+1) tr Σ³ + tr Σ tr Σ²)/N  (Wishart moments), so
    # η* = N tr Σ² / ((N+1) tr Σ³ + tr Σ tr Σ²).
    d, n = 4, 8
    cov = random_covariance(d, condition=5.0, seed=3).numpy()
    s2, s3 = np.trace(cov @ cov), np.trace(cov @ cov @ cov)
    expected = n * s2 / ((n + 1) * s3 + np.trace(cov) * s2)
    sampler = TaskSampler(d=d, n_ctx=n, inputs="gaussian", covariance=cov)
    tasks = sampler.sample(100_000, generator(4), torch.float64)
    assert line_search_eta(tasks) == pytest.approx(expected, rel=0.02)


def test_alignment_of_gd_with_itself_and_with_a_scaled_gd() -> None:
    t = von_oswald_tasks().sample(200, generator(1), torch.float64)
    same = alignment(GD(2.0).predict, GD(2.0).predict, t.x_ctx, t.y_ctx, t.x_query)
    assert same["cos_sensitivity"] == pytest.approx(1.0, abs=1e-12)
    assert same["model_diff"] == 0 and same["pred_diff"] == 0
    half = alignment(GD(1.0).predict, GD(2.0).predict, t.x_ctx, t.y_ctx, t.x_query)
    # sensitivities are W1 = (η/N) yᵀX: same direction, half the norm
    w1 = (t.y_ctx.mT @ t.x_ctx / 10)[:, 0]
    assert half["cos_sensitivity"] == pytest.approx(1.0, abs=1e-12)
    assert half["model_diff"] == pytest.approx(float(w1.norm(dim=-1).mean()), rel=1e-10)


def test_p4_workload_reaches_the_gd_loss() -> None:
    res = train_one_layer_to_gd(seed=0, eval_tasks=2000)
    assert res["reached"] and res["ratio"] <= 1.02
    assert res["steps"] < 3000


def _tiny(**changes: object) -> ICLConfig:
    base: dict[str, object] = {
        "models": ["lsa-1"],
        "steps": 60,
        "eval_tasks": 500,
        "fit_tasks": 500,
        "batch": 256,
        "sweep_tasks": 50,
        "alignment_tasks": 50,
        "explain_tasks": 200,
        "eval_every": 20,
        "lr": 3e-2,
        "input_scales": [1.0, 2.0],
        "teacher_scales": [1.0],
    }
    base.update(changes)
    return ICLConfig(**base)  # type: ignore[arg-type]


def test_run_is_deterministic_and_json_has_exactly_the_keys(tmp_path) -> None:
    a = run(_tiny())
    a.write(tmp_path / "a")
    b = run(_tiny())
    rows_a, rows_b = json_rows(a), json_rows(b)
    assert rows_a == rows_b
    assert [tuple(r) for r in rows_a] == [JSON_KEYS]
    row = rows_a[0]
    # trained from a near-zero initialisation, the model must beat the zero predictor
    assert row["test_loss"] < next(r for r in a.rows if r["model"] == "zero")["test_loss"]
    assert (tmp_path / "a" / "checkpoints" / "lsa-1.pt").is_file()
    assert all(f.path.is_file() for f in a.figures)
    assert any("context examples" in f.caption for f in a.figures)
    sweep = [r for r in a.rows if r["kind"] == "context_sweep" and r["model"] == "OLS"]
    assert len(sweep) == 20


def test_cli_help_and_json(tmp_path) -> None:
    runner = CliRunner()
    help_text = runner.invoke(app, ["icl", "--help"]).output
    for option in ("--quick", "--full", "--out", "--json", "--seed", "--device", "--models"):
        assert option in help_text
    cfg = tmp_path / "tiny.yaml"
    # a few dozen steps do not reach GD: thresholds for this tiny run, then an impossible one
    tiny = {**_tiny().__dict__, "max_loss_ratio": 10.0, "max_eta_error": 10.0}
    tiny["min_sensitivity_cosine"] = 0.01
    cfg.write_text(json.dumps(tiny))
    cfg = cfg.rename(tmp_path / "tiny.json")
    result = runner.invoke(
        app, ["icl", "--config", str(cfg), "--out", str(tmp_path / "o"), "--json"]
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [sorted(r) for r in rows] == [sorted(JSON_KEYS)]
    checks = json.loads((tmp_path / "o" / "icl_summary.json").read_text())["checks"]
    assert [c["limit"] for c in checks] == [10.0, 0.01, 10.0]
    strict = runner.invoke(
        app,
        ["icl", "--config", str(cfg), "--set", "max_loss_ratio=0.5", "--out", str(tmp_path / "s")],
    )
    assert strict.exit_code == 1, strict.output  # a failing check: exit status 1
    assert "FAIL lsa-1 loss / line-searched GD's" in strict.output
    bad = runner.invoke(app, ["icl", "--models", "lsa-9"])
    assert bad.exit_code != 0 and "models" in bad.output


def test_multi_head_models_have_summary_lines_and_the_two_head_eta_check() -> None:
    result = run(_tiny(models=["lsa-1-2heads", "softmax-2heads"], steps=40))
    for figure in result.figures:
        figure.close()
    rows = {r["model"]: r for r in result.rows if r.get("kind") == "model"}
    lsa, soft = rows["lsa-1-2heads"], rows["softmax-2heads"]
    eta_err = abs(lsa["learned_eta"] - lsa["reference_eta"]) / lsa["reference_eta"]
    checks = {c["check"]: c for c in result.checks}
    assert checks["lsa-1-2heads learned η relative error"]["value"] == pytest.approx(eta_err)
    assert checks["lsa-1-2heads loss / line-searched GD's"]["value"] == pytest.approx(
        lsa["test_loss"] / lsa["reference_loss"]
    )
    text = result.summary["1-layer 2-head LSA vs line-searched GD"]
    assert f"learned η {lsa['learned_eta']:.4f} (2 heads summed)" in text
    assert f"({eta_err:.2%}, ≤ 5%)" in text
    soft_text = result.summary["1-layer 2-head softmax attention vs line-searched GD"]
    assert f"ratio {soft['test_loss'] / soft['reference_loss']:.4f}" in soft_text
    assert soft["learned_eta"] is None and not any("softmax" in name for name in checks)
