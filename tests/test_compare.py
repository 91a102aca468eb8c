"""The compare study: baselines against scikit-learn, metrics against numpy, figures, CLI."""

import json
import math
import re

import numpy as np
import pytest
import torch
from sklearn.linear_model import LinearRegression
from sklearn.linear_model import Ridge as SkRidge
from typer.testing import CliRunner

from attnreg.cli import app
from attnreg.studies.answers import answer_text
from attnreg.studies.compare import in_context
from attnreg.studies.compare import ols_transformer as olstf
from attnreg.studies.compare.config import ROW_KEYS, CompareConfig
from attnreg.studies.compare.metrics import (
    best_scale_distance,
    cosine,
    hat_matrix,
    inverse_covariance,
    relative_frobenius,
)
from attnreg.studies.compare.probe import multi_target_probe
from attnreg.studies.compare.run import run
from attnreg.studies.compare.train import baseline_rows, load_mode, train_cell

U = np.finfo(np.float64).eps / 2  # unit roundoff

SMALL = {
    "data_modes": ["synthetic"],
    "variants": ["regression", "softmax", "whitened"],
    "whitening": [False, True],
    "qk": ["separate", "shared"],
    "layernorm": [False],
    "n_train": 60,
    "n_test": 40,
    "d": 4,
    "steps": 40,
    "ols_steps": 40,
    "probe_steps": 30,
    "shift_magnitudes": [0.0, 1.0],
    "tang_memories": 20,
    "tang_scale_n_train": 100,
    "tang_dks": [4, 16],
    "tang_seeds": 3,
    "icl_steps": 30,
    "icl_batch": 16,
    "icl_seeds": 2,
    "icl_null": 20,
}
SECTION_STEMS = [
    "compare_conventions",
    "compare_density",
    "compare_memories",
    "compare_tang_retrieval",
    "compare_tang_scaling",
    "compare_locality",
]


def _main_rows(rows):
    """The attention cells' and baselines' rows (the further sections' rows carry a "section")."""
    return [r for r in rows if "section" not in r]


@pytest.mark.parametrize("mode", ["synthetic", "diabetes", "sine"])
def test_baseline_rows_equal_scikit_learn(mode):
    cfg = CompareConfig()
    data = load_mode(cfg, mode, seed=3)
    rows, extras = baseline_rows(data, 3, cfg.ridge)
    ridge = SkRidge(alpha=cfg.ridge, fit_intercept=False).fit(data.x_train, data.y_train[:, 0])
    ols = LinearRegression(fit_intercept=False).fit(data.x_train, data.y_train[:, 0])
    by_name = {r["variant"]: r for r in rows}
    assert set(by_name) == {"ridge", "ols"}
    for name, est in (("ridge", ridge), ("ols", ols)):
        train_mse = np.mean((est.predict(data.x_train) - data.y_train[:, 0]) ** 2)
        test_mse = np.mean((est.predict(data.x_test) - data.y_test[:, 0]) ** 2)
        assert by_name[name]["train_mse"] == pytest.approx(train_mse, rel=1e-10, abs=1e-12)
        assert by_name[name]["test_mse"] == pytest.approx(test_mse, rel=1e-10, abs=1e-12)
        assert set(by_name[name]) == set(ROW_KEYS)
    np.testing.assert_allclose(
        extras["ridge_test"].numpy()[:, 0], ridge.predict(data.x_test), atol=1e-10
    )
    assert by_name["ridge"]["hat_distance"] == 0.0
    assert by_name["ridge"]["cos_to_ridge"] == pytest.approx(1.0, abs=1e-12)


def test_metrics_against_numpy():
    rng = np.random.default_rng(0)
    x, q = rng.normal(size=(30, 4)), rng.normal(size=(5, 4))
    # norm-wise bounds u · n · κ(A) ‖A⁻¹‖ · … (the entries cancel: per-element relative
    # tolerances held only for the seed chosen); n = N + d
    a = x.T @ x + 0.1 * np.eye(4)
    expected = q @ np.linalg.solve(a, x.T)
    got = hat_matrix(torch.tensor(x), 0.1, torch.tensor(q)).numpy()
    inv_a = np.linalg.norm(np.linalg.inv(a), 2)
    bound = 8 * U * 34 * np.linalg.cond(a) * np.linalg.norm(q, 2) * inv_a * np.linalg.norm(x, 2)
    assert np.linalg.norm(got - expected, 2) <= bound
    cov = x.T @ x / 30
    got = inverse_covariance(torch.tensor(x)).numpy()
    bound = 8 * U * 34 * np.linalg.cond(cov) * np.linalg.norm(np.linalg.inv(cov), 2)
    assert np.linalg.norm(got - np.linalg.inv(cov), 2) <= bound
    a, b = rng.normal(size=(4, 4)), rng.normal(size=(4, 4))
    cos = a.ravel() @ b.ravel() / np.linalg.norm(a) / np.linalg.norm(b)
    assert cosine(torch.tensor(a), torch.tensor(b)) == pytest.approx(cos)
    assert cosine(torch.tensor(a), torch.tensor(-3 * a)) == pytest.approx(-1.0)
    rel = np.linalg.norm(a - b) / np.linalg.norm(b)
    assert relative_frobenius(torch.tensor(a), torch.tensor(b)) == pytest.approx(rel)
    dist, scale = best_scale_distance(torch.tensor(-0.25 * b), torch.tensor(b))
    assert dist == pytest.approx(0.0, abs=1e-12) and float(scale) == pytest.approx(-4.0)
    dist, _ = best_scale_distance(torch.tensor(a), torch.tensor(b))
    s = (a * b).sum() / (a * a).sum()
    assert dist == pytest.approx(np.linalg.norm(s * a - b) / np.linalg.norm(b))
    with pytest.raises(ValueError, match="shapes differ"):
        cosine(torch.ones(2), torch.ones(3))


def test_trained_whitened_regression_attention_is_within_5_percent_of_ridge():
    cfg = CompareConfig()
    data = load_mode(cfg, "synthetic", seed=0)
    _, extras = baseline_rows(data, 0, cfg.ridge)
    sk = SkRidge(alpha=cfg.ridge, fit_intercept=False).fit(data.x_train, data.y_train)
    ridge_mse = float(np.mean((sk.predict(data.x_test) - data.y_test) ** 2))
    cell = train_cell(data, "regression", True, "separate", False, 0, cfg, extras)
    assert cell.training["steps_run"] > 10
    assert cell.row["test_mse"] <= 1.05 * ridge_mse
    assert cell.row["cos_to_ridge"] > 0.99


def test_small_run_writes_every_figure_and_is_deterministic(tmp_path):
    cfg = CompareConfig(**SMALL)
    result = run(cfg)
    result.write(tmp_path)
    again = run(cfg)
    for figure in again.figures:
        figure.close()
    assert result.rows == again.rows
    main = _main_rows(result.rows)
    assert all(tuple(r) == ROW_KEYS for r in main)
    assert {r["section"] for r in result.rows if "section" in r} == {
        "conventions",
        "density",
        "memories",
        "tang",
        "locality",
    }
    trained = [r for r in main if r["variant"] not in ("ridge", "ols")]
    assert len(trained) == 3 * 2 * 2
    # locality is judged on the trained softmax layer; W_q W_kᵀ vs Σ⁻¹ is an open question
    # answered by the in-context training; every threshold says where it comes from
    local = next(c for c in result.claims if c.quote.text.startswith("Attention operates"))
    assert set(local.values) == {"synthetic"} and "paired" in local.threshold.origin
    metric = next(c for c in result.claims if "W_q W_k" in c.quote.text)
    assert metric.verdict() == "open question" and metric.answer == in_context.answer(
        in_context.measure(cfg)
    )
    assert in_context.QUESTION in result.summary
    for claim in result.claims:
        assert claim.threshold is None or "no source number" not in claim.threshold.origin
    stems = [
        "compare_heatmaps_synthetic",
        "compare_effective_weights",
        "compare_test_mse",
        "ols_transformer_functional",
        "ols_transformer_structural",
        "ols_transformer_shift",
        *SECTION_STEMS,
    ]
    for stem in stems:
        for ext in ("png", "svg"):
            assert (tmp_path / f"{stem}.{ext}").stat().st_size > 1000
    assert {f.path.name for f in result.figures} == {f"{s}.png" for s in stems}
    for name in ("compare_rows.csv", "compare_training.csv", "ols_transformer_shift.csv"):
        assert (tmp_path / name).stat().st_size > 100
    summary = json.loads((tmp_path / "compare_summary.json").read_text())["summary"]
    for question, numbers in _summary_numbers(result, cfg).items():
        for number in numbers:
            text = answer_text(summary[question])
            assert re.search(rf"(?<![\d.]){re.escape(number)}(?![\d])", text), (
                question,
                number,
                text,
            )


def _mean(rows, key, **match):
    values = [r[key] for r in rows if all(r[k] == v for k, v in match.items())]
    assert values, match
    return sum(values) / len(values)


def _geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _summary_numbers(result, cfg) -> dict[str, list[str]]:
    """The numbers each summary answer must print, recomputed here from the rows and tables by
    loops (means over seeds, geometric means of ratios over the pooled cells)."""
    rows, modes = _main_rows(result.rows), cfg.data_modes
    base = {"layernorm": False}
    out: dict[str, list[str]] = {}
    corr = [
        f"regression-like · {m} · "
        + " · ".join(
            f"{_mean(rows, 'wqwk_invcov_corr', data=m, variant='regression', whitening=False, qk=qk, **base):.3g}"  # noqa: E501
            for qk in cfg.qk
        )
        for m in modes
    ]
    corr += [
        f"whitened (built in) · {m} · "
        + " · ".join(
            f"{_mean(rows, 'wqwk_invcov_corr', data=m, variant='whitened', whitening=False, qk='shared', **base):.3g}"  # noqa: E501
            if qk == "shared"
            else ""
            for qk in cfg.qk
        )
        for m in modes
    ]
    out["does the trained W_q W_kᵀ learn the inverse covariance?"] = corr

    def ratio(num, den, cells):
        return _geomean(
            [
                _mean(rows, "test_mse", **c, **num, **base)
                / _mean(rows, "test_mse", **c, **den, **base)
                for c in cells
            ]
        )

    white = []
    for v in cfg.variants:
        num, den = {"variant": v, "whitening": True}, {"variant": v, "whitening": False}
        cells = [{"data": m, "qk": qk} for m in modes for qk in cfg.qk]
        per = [ratio(num, den, [c for c in cells if c["data"] == m]) for m in modes]
        white.append(f"{v} · " + " · ".join(f"{x:.3g}" for x in [ratio(num, den, cells), *per]))
    out["does whitening help test MSE?"] = white
    shown = [qk for qk in ("single", "shared") if qk in cfg.qk]
    out["does one matrix W train as well as two factors?"] = [
        f"{m} · "
        + " · ".join(
            f"{ratio({'qk': qk}, {'qk': 'separate'}, [{'data': m, 'variant': v, 'whitening': w} for v in cfg.variants for w in cfg.whitening]):.3g}"  # noqa: E501
            for qk in shown
        )
        for m in modes
    ]
    out["... and when W_q W_kᵀ is identified (k targets at once)?"] = [
        f"κ(Σ) = {cfg.condition:g}",
        f"k = {2 * cfg.d} random targets",
        f"{cfg.probe_steps} Adam steps",
    ]
    curves, shifts = result.tables["ols_transformer_curves"], result.tables["ols_transformer_shift"]
    functional, structural, shift = [], [], []
    for name in dict.fromkeys(c["data"] for c in curves):
        curve = [c for c in curves if c["data"] == name]
        last = max(curve, key=lambda c: c["step"])
        below = [c["step"] for c in curve if c["rel_mse_to_ols_train"] < 1e-3]
        functional += [
            f"{name} · {last['rel_mse_to_ols_train']:.3g} · {last['rel_mse_to_ols_test']:.3g} · "
            f"{cfg.ols_steps} · {min(below) if below else 'never'}"
        ]
        structural += [f"{name} · {last['qk_distance']:.3g} · {last['vp_distance']:.3g}"]
        for kind in ("mean", "scale", "covariance"):
            sel = [r for r in shifts if (r["data"], r["shift"]) == (name, kind)]
            if not sel:  # no covariance shift for d = 1
                continue
            for m in sorted({min(r["magnitude"] for r in sel), max(r["magnitude"] for r in sel)}):
                at = {r["model"]: r["mse_to_truth"] for r in sel if r["magnitude"] == m}
                cells = [
                    at["trained (weights frozen)"],
                    at["constructed (weights frozen)"],
                    at["constructed (refitted = OLS)"],
                ]
                shift += [f"{name} · {kind} · {m:.3g} · " + " · ".join(f"{x:.3g}" for x in cells)]
    out["trained OLS-Transformer: functional convergence"] = functional
    out["trained OLS-Transformer: structural convergence"] = structural
    out["trained OLS-Transformer: shift sensitivity (MSE to X* w)"] = shift
    return out


def test_ols_transformer_training_converges_and_shift_is_measured():
    data = load_mode(CompareConfig(n_train=80, n_test=20, d=3), "synthetic", seed=1)
    _, curve, ref = olstf.train_one(data, steps=300, lr=0.01, seed=0, eval_every=10)
    assert curve[0]["step"] == 0 and curve[-1]["step"] == 300
    assert curve[-1]["rel_mse_to_ols_train"] < 1e-4 * curve[0]["rel_mse_to_ols_train"]
    ols = LinearRegression(fit_intercept=False).fit(data.x_train, data.y_train)
    with torch.no_grad():
        fitted = ref(torch.tensor(data.x_test), torch.tensor(data.x_train)).numpy()
    np.testing.assert_allclose(fitted, ols.predict(data.x_test), rtol=1e-8, atol=1e-10)
    x0, _ = olstf.shifted_sample(data, "mean", 0.0, 4000, 0.1, seed=0)
    x2, _ = olstf.shifted_sample(data, "mean", 2.0, 4000, 0.1, seed=0)
    np.testing.assert_allclose(
        (x2 - x0).numpy().mean(0), 2 * np.sqrt(np.diag(data.covariance)), rtol=1e-12
    )
    xs, _ = olstf.shifted_sample(data, "scale", 1.0, 4000, 0.1, seed=0)
    np.testing.assert_allclose(xs.numpy(), 2 * x0.numpy(), rtol=1e-12)
    xc, _ = olstf.shifted_sample(data, "covariance", 1e9, 20000, 0.1, seed=0)
    eig = np.linalg.eigvalsh(np.cov(xc.numpy().T))
    assert eig.max() / eig.min() < 1.2  # condition number → 1


def test_identified_w_q_w_k_is_learned_as_the_inverse_covariance():
    cfg = CompareConfig(
        n_train=100,
        n_test=50,
        d=3,
        condition=4.0,
        qk=["single"],
        whitening=[False, True],
        probe_steps=1500,
    )
    probe = multi_target_probe(cfg)
    assert set(probe) == {"single, whitening=False", "single, whitening=True"}
    for v in probe.values():
        assert v["targets"] == 6
        assert v["corr"] > 0.99
        assert v["test_mse_ratio"] < 1.05


def test_config_refuses_unknown_names():
    with pytest.raises(ValueError, match="data_modes: unknown value 'mnist'"):
        CompareConfig(data_modes=["mnist"])
    with pytest.raises(ValueError, match="variants: unknown value"):
        CompareConfig(variants=["linear"])
    with pytest.raises(ValueError, match="validation_fraction"):
        CompareConfig(validation_fraction=1.0)
    with pytest.raises(ValueError, match="seeds"):
        CompareConfig(seeds=0)
    with pytest.raises(ValueError, match="device: 'no-such-device'"):
        CompareConfig(device="no-such-device")


def test_cli_json_rows_and_errors(tmp_path):
    config = tmp_path / "small.json"
    config.write_text(json.dumps(SMALL | {"variants": ["regression"], "qk": ["single"]}))
    runner = CliRunner()
    out = tmp_path / "out"
    res = runner.invoke(
        app, ["compare", "--json", "--config", str(config), "--out", str(out), "--seed", "2"]
    )
    assert res.exit_code == 0, res.output
    rows = _main_rows(json.loads(res.stdout))
    assert all(list(r) == list(ROW_KEYS) for r in rows)
    assert {r["variant"] for r in rows} == {"regression", "ridge", "ols"}
    assert {r["seed"] for r in rows} == {2}
    assert (out / "compare_test_mse.png").stat().st_size > 0
    config.write_text(json.dumps({"steps_per_cell": 3}))
    bad = runner.invoke(app, ["compare", "--config", str(config), "--out", str(out)])
    assert bad.exit_code != 0
    assert "steps_per_cell" in bad.output
    both = runner.invoke(app, ["compare", "--quick", "--full", "--out", str(out)])
    assert both.exit_code != 0
    help_text = runner.invoke(app, ["compare", "--help"]).output
    for option in ("--quick", "--full", "--out", "--json", "--seed", "--device", "--config"):
        assert option in help_text
