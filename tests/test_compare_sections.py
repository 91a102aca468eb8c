"""The compare study's further sections: each quantity against an independent computation
(Python loops, numpy, numpy lstsq), and a tiny compare run that produces their rows, summaries
and figures."""

import math
import re

import numpy as np
import pytest
import torch
from sklearn.linear_model import Ridge as SkRidge

from attnreg.models.regressors import AttentionRegression
from attnreg.studies.answers import answer_text
from attnreg.studies.compare import (
    conventions,
    density,
    locality,
    memories,
    tang_retrieval,
    tang_scaling,
)
from attnreg.studies.compare.config import ROW_KEYS, CompareConfig
from attnreg.studies.compare.run import run
from attnreg.studies.compare.sections import SECTIONS
from attnreg.studies.compare.train import load_mode

EPS = np.finfo(np.float64).eps
U = EPS / 2  # unit roundoff

TINY = {
    "data_modes": ["synthetic", "sine"],
    "variants": ["regression"],
    "whitening": [False],
    "qk": ["separate"],
    "layernorm": [False],
    "n_train": 40,
    "n_test": 20,
    "d": 3,
    "steps": 20,
    "ols_transformer": False,
    "probe_steps": 20,
    "tang_d": 6,
    "tang_patterns": [4],
    "tang_rhos": [0.0, 0.9],
    "tang_memories": 10,
    "tang_scale_d": 3,
    "tang_scale_n_train": 60,
    "tang_dks": [2, 8],
    "tang_scale_rhos": [0.0, 0.9],
    "tang_seeds": 2,
    "icl_steps": 20,
    "icl_batch": 8,
    "icl_seeds": 2,
    "icl_null": 10,
    "beta_multipliers": [0.5, 1.0, 2.0],
}
SECTION_NAMES = {"conventions", "density", "memories", "tang", "locality"}


def _bound(*arrays: np.ndarray, ops: float = 1.0) -> float:
    """A float64 round-off bound: ``ops · eps · (product of the operands' largest entries)``."""
    return ops * EPS * math.prod(float(np.abs(a).max()) for a in arrays)


# ----------------------------------------------------------------------------- locality
def test_participation_ratio_and_distance_against_python_loops():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(5, 7))
    a[1] = 0.0
    a[1, 3] = -2.0  # one row only: PR = 1
    a[2] = 0.3  # all rows equally: PR = N
    xc, xq = rng.normal(size=(7, 3)), rng.normal(size=(5, 3))
    pr = locality.participation_ratio(torch.tensor(a)).numpy()
    rel = locality.relative_distance(torch.tensor(a), torch.tensor(xc), torch.tensor(xq)).numpy()
    for m in range(5):
        s1 = s2 = num = den = dall = 0.0
        for i in range(7):
            s1 += abs(a[m, i])
            s2 += a[m, i] ** 2
            dist = math.sqrt(sum((xc[i, k] - xq[m, k]) ** 2 for k in range(3)))
            num += abs(a[m, i]) * dist
            den += abs(a[m, i])
            dall += dist / 7
        assert pr[m] == pytest.approx(s1 * s1 / s2, rel=1e-13)
        assert rel[m] == pytest.approx(num / den / dall, rel=1e-12)
        assert 1 - 1e-12 <= pr[m] <= 7 + 1e-12
    assert pr[1] == pytest.approx(1.0, rel=1e-15)
    assert pr[2] == pytest.approx(7.0, rel=1e-14)


def test_locality_operators_are_the_closed_forms():
    rng = np.random.default_rng(1)
    x, xq = rng.normal(size=(20, 3)), rng.normal(size=(4, 3))
    expected = {
        "ridge hat": xq @ np.linalg.solve(x.T @ x + 0.1 * np.eye(3), x.T),
        "regression-like": xq @ x.T / 20,
        "whitened": xq @ np.linalg.inv(x.T @ x / 20) @ x.T / 20,
        "softmax": np.exp(xq @ x.T / math.sqrt(3))
        / np.exp(xq @ x.T / math.sqrt(3)).sum(1, keepdims=True),
    }
    for name, want in expected.items():
        got = locality.operator_weights(name, torch.tensor(x), torch.tensor(xq), 0.1).numpy()
        # a d × d solve with κ(XᵀX) < 100 here: relative error ≤ ~1e3 · eps
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e3 * EPS * np.abs(want).max())


# ----------------------------------------------------------------------------- density
def test_density_predictions_against_numpy():
    rng = np.random.default_rng(2)
    n, d = 30, 3
    x = rng.normal(size=(n, d)) @ np.diag([1.0, 0.5, 2.0])
    y, xq = rng.normal(size=(n, 1)), rng.normal(size=(6, d))
    s_inv = np.linalg.inv(x.T @ x / n)
    sim = xq @ s_inv @ x.T
    xt, yt, qt = torch.tensor(x), torch.tensor(y), torch.tensor(xq)
    weights = density.density_attention(xt, yt, qt, "identity")[1].numpy()
    np.testing.assert_allclose(weights, sim / n, rtol=1e-10, atol=1e-12)
    # identity separation: the OLS prediction (numpy lstsq)
    ols = xq @ np.linalg.lstsq(x, y, rcond=None)[0]
    got = density.density_attention(xt, yt, qt, "identity")[0].numpy()
    np.testing.assert_allclose(got, ols, rtol=1e-10, atol=1e-12)
    for power in (2, 3, 4):
        want = np.zeros((6, 1))
        for m in range(6):
            norm = sum(abs(sim[m, i]) ** power for i in range(n))
            want[m] = sum(sim[m, i] ** power / norm * y[i] for i in range(n))
        got = density.density_attention(xt, yt, qt, "power", power=power)[0].numpy()
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    beta = 0.7
    e = np.exp(beta * sim - (beta * sim).max(1, keepdims=True))
    want = (e / e.sum(1, keepdims=True)) @ y
    got = density.density_attention(xt, yt, qt, "softmax", beta=beta)[0].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_validated_beta_is_the_argmin_of_the_validation_path():
    rng = np.random.default_rng(3)
    x, y = torch.tensor(rng.normal(size=(50, 2))), torch.tensor(rng.normal(size=(50, 1)))
    mults = [0.25, 1.0, 4.0]

    def predict(xc, yc, xq, beta):
        return density.density_attention(xc, yc, xq, "softmax", beta=beta)[0]

    beta, path = density.validated_beta(x, y, predict, mults, 0.2, np.random.default_rng(7))
    fit, val = density.validation_split(50, 0.2, np.random.default_rng(7))
    assert len(val) == 10 and sorted([*fit, *val]) == list(range(50))
    for b, v in path:
        pred = predict(x[fit], y[fit], x[val], b).numpy()
        assert v == pytest.approx(float(np.mean((pred - y[val].numpy()) ** 2)), rel=1e-12)
    assert beta == min(path, key=lambda bv: bv[1])[0]
    assert [b for b, _ in path] == pytest.approx([m / math.sqrt(2) for m in mults])


# ----------------------------------------------------------------------------- memories
def test_slow_fast_swap_against_numpy_lstsq():
    rng = np.random.default_rng(4)
    d = 3
    xa, xb = rng.normal(size=(25, d)), rng.normal(size=(25, d)) * [1.0, 2.0, 0.5]
    ya, yb = rng.normal(size=(25, 1)), rng.normal(size=(25, 1))
    xq = rng.normal(size=(7, d))
    beta_a = np.linalg.lstsq(xa, ya, rcond=None)[0]
    beta_b = np.linalg.lstsq(xb, yb, rcond=None)[0]
    s_a, s_b = xa.T @ xa / 25, xb.T @ xb / 25
    a = (torch.tensor(xa), torch.tensor(ya))
    b = (torch.tensor(xb), torch.tensor(yb))
    q = torch.tensor(xq)
    cases = {
        ("A", "A"): xq @ beta_a,
        ("B", "B"): xq @ beta_b,
        ("A", "B"): xq @ np.linalg.solve(s_a, s_b) @ beta_a,
        ("B", "A"): xq @ np.linalg.solve(s_b, s_a) @ beta_b,
    }
    ctx = {"A": a, "B": b}
    for (slow, fast), want in cases.items():
        got = memories.swapped_prediction(ctx[slow], ctx[fast][0], q).numpy()
        # a few d × d solves, κ(S) < 20: relative error ≤ ~1e3 · eps of the largest entry
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e3 * EPS * np.abs(want).max())
    # the fitted layer itself is untouched by a swap
    layer = memories.fit_layer(*a)
    memories.swap_fast_memory(layer, b[0])
    np.testing.assert_allclose(layer(q)[0].numpy(), xq @ beta_a, rtol=1e-10, atol=1e-12)


def test_memories_rows_follow_the_slow_weights_when_targets_differ():
    cfg = CompareConfig(n_train=80, n_test=30, d=3, condition=4.0, noise=0.1)
    data = load_mode(cfg, "synthetic", 0)
    rows = memories.measure_mode(data, cfg, np.random.default_rng(0))
    assert {r["scenario"] for r in rows} == {"same task", "different w"}
    get = {(r["scenario"], r["slow"], r["fast"]): r for r in rows}
    assert get[("same task", "B", "B")]["mse_to_ols_b"] < 1e-20
    # ‖S⁺S − I‖_F/√d ≲ d · κ(S) · eps, with d = 3 and κ(S) ≈ 4–10 here
    assert get[("same task", "A", "A")]["fast_mismatch"] < 100 * EPS
    diff_ab, diff_ba = get[("different w", "A", "B")], get[("different w", "B", "A")]
    assert diff_ba["rel_mse_to_ols_b"] < diff_ab["rel_mse_to_ols_b"]


# ----------------------------------------------------------------------------- tang
def test_correlated_pattern_accuracy_against_a_numpy_loop():
    rng = np.random.default_rng(5)
    t, n, d, rho = 6, 4, 6, 0.7
    x = tang_retrieval.correlated_patterns(rng, t, n, d, rho)
    q = x + 0.3 * torch.tensor(rng.normal(size=tuple(x.shape)))
    xs, qs = x.numpy(), q.numpy()
    for sim in tang_retrieval.SIMILARITIES:
        for sep in tang_retrieval.SEPARATIONS:
            correct = 0
            for k in range(t):
                keys = xs[k]
                metric = np.eye(d) if sim == "dot" else np.linalg.pinv(keys.T @ keys)
                self_sim = np.mean([keys[i] @ metric @ keys[i] for i in range(n)])
                for mu in range(n):
                    scores = np.array([qs[k, mu] @ metric @ keys[i] for i in range(n)])
                    if sep == "softmax":
                        z = 5.0 / self_sim * scores
                        w = np.exp(z - z.max())
                        w = w / w.sum()
                    else:
                        w = scores
                    r = sum(w[i] * keys[i] for i in range(n))
                    cos = [
                        r @ keys[i] / np.linalg.norm(r) / np.linalg.norm(keys[i]) for i in range(n)
                    ]
                    correct += int(np.argmax(cos) == mu)
            got = tang_retrieval.retrieval_accuracy(x, q, sim, sep, beta=5.0)
            assert got == correct / (t * n), (sim, sep)


def test_correlated_patterns_have_the_equicorrelated_covariance():
    n, d, rho = 40000, 4, 0.6
    x = tang_retrieval.correlated_patterns(np.random.default_rng(6), 1, n, d, rho)[0].numpy()
    want = (1 - rho) * np.eye(d) + rho * np.ones((d, d))
    # sample covariance entries have standard deviation ≤ √(2/n) ≈ 0.007: allow 5 of them
    np.testing.assert_allclose(x.T @ x / n, want, atol=5 * math.sqrt(2 / n))


def test_scale_vs_correlation_pieces_against_numpy():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(50, 3)) @ np.array([[2.0, 0.0, 0.0], [1.5, 0.5, 0.0], [0.3, 0.2, 0.1]])
    xt, y = rng.normal(size=(8, 3)), rng.normal(size=(50, 1))
    tx, ty, tq = torch.tensor(x), torch.tensor(y), torch.tensor(xt)
    xs, xts = tang_scaling.preprocess("standardised", tx, tq)
    np.testing.assert_allclose(xs.numpy(), (x - x.mean(0)) / x.std(0), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(xts.numpy(), (xt - x.mean(0)) / x.std(0), rtol=1e-12, atol=1e-13)
    xw, xtw = tang_scaling.preprocess("whitened", tx, tq)
    np.testing.assert_allclose(xw.numpy().T @ xw.numpy() / 50, np.eye(3), atol=1e-9)
    # regression-like attention on whitened data with c = 1 is OLS on the whitened data
    w = xw.numpy()
    ols = xtw.numpy() @ np.linalg.lstsq(w, y, rcond=None)[0]
    got = tang_scaling.linear_regression_attention(xw, ty, xtw).numpy()
    np.testing.assert_allclose(got, ols, rtol=1e-7, atol=1e-8)
    e = np.exp(0.4 * xt @ x.T)
    np.testing.assert_allclose(
        tang_scaling.softmax_regression(tx, ty, tq, 0.4).numpy(),
        (e / e.sum(1, keepdims=True)) @ y,
        rtol=1e-10,
    )
    fit, val = np.arange(10, 50), np.arange(10)
    p = x[val] @ x[fit].T @ y[fit] / 40
    assert tang_scaling.best_scale(tx, ty, fit, val) == pytest.approx(
        float((p * y[val]).sum() / (p * p).sum()), rel=1e-12
    )


# ----------------------------------------------------------------------------- conventions
def test_convention_weights_and_forward_against_numpy():
    rng = np.random.default_rng(8)
    x, y, xq = rng.normal(size=(30, 4)), rng.normal(size=(30, 1)), rng.normal(size=(5, 4))
    m = rng.normal(size=(4, 4))
    got_n = conventions.effective_weights(torch.tensor(m), torch.tensor(x), torch.tensor(y), 30)
    got_d = conventions.effective_weights(torch.tensor(m), torch.tensor(x), torch.tensor(y), 4)
    # M Xᵀ Y / c sums 4 · 30 products that cancel: a norm-wise bound u (d + N) ‖M‖ ‖X‖ ‖Y‖ / c
    # (per-element relative tolerances held only for the seed chosen)
    scale = 4 * U * (4 + 30) * np.linalg.norm(m) * np.linalg.norm(x) * np.linalg.norm(y)
    assert np.abs(got_n.numpy() - m @ x.T @ y / 30).max() <= scale / 30
    assert np.abs(got_d.numpy() - m @ x.T @ y / 4).max() <= scale / 4
    model = AttentionRegression(4, "regression", False, "separate", False, seed=1)
    metric = model.qk_product.numpy()
    with torch.no_grad():
        for name, factor in (("attnreg", 1 / 30), ("everything-is-matter", 1 / 2)):
            out = conventions.convention_forward(
                model, name, torch.tensor(xq), torch.tensor(x), torch.tensor(y)
            )
            want = xq @ metric @ x.T @ y * factor
            # |terms| ≤ Π max entries, 4·4·30 of them, each summed through ≤ 4 + 4 + 30 roundings
            bound = _bound(xq, metric, x, y, ops=(4 + 4 + 30) * 4 * 4 * 30) * factor
            np.testing.assert_allclose(out.numpy(), want, rtol=0, atol=bound)


def test_conventions_rows_against_numpy_and_scikit_learn():
    """Each row's numbers recomputed from the trained layer's weights in numpy: reported weights
    ``M XᵀY / N`` (attnreg) or ``/ d`` (the blog), the layer's own ``M XᵀY · c``
    (``c = 1/N`` or ``1/√d_k``), its test predictions, against scikit-learn's ridge at the
    convention's λ. The training is deterministic, so training again gives the row's weights."""
    cfg = CompareConfig(n_train=60, n_test=20, d=4, steps=30)
    data = load_mode(cfg, "synthetic", 0)
    rows = conventions.measure_mode(data, cfg)
    x, y, xt, yt = data.x_train, data.y_train, data.x_test, data.y_test
    n, d = x.shape
    assert [r["convention"] for r in rows] == ["attnreg", "everything-is-matter"]
    for row, lam, divisor, factor in (
        (rows[0], cfg.ridge, n, 1 / n),
        (rows[1], 1e-3, d, 1 / math.sqrt(d)),
    ):
        model, _ = conventions.train_convention(data, row["convention"], cfg, cfg.seed)
        m = (model.w_q @ model.w_k.mT).detach().numpy()
        sk = SkRidge(alpha=lam, fit_intercept=False, solver="svd").fit(x, y)
        beta, ridge_test = sk.coef_.reshape(y.shape[1], d).T, sk.predict(xt).reshape(yt.shape)
        reported, layer = m @ x.T @ y / divisor, m @ x.T @ y * factor
        pred = xt @ layer

        def cos(a, b):
            return float((a * b).sum() / np.linalg.norm(a) / np.linalg.norm(b))

        want = {
            "ridge_lambda": lam,
            "test_mse": float(np.mean((pred - yt) ** 2)),
            "ridge_test_mse": float(np.mean((ridge_test - yt) ** 2)),
            "cos_to_ridge": cos(pred, ridge_test),
            "weights_cos_to_ridge": cos(reported, beta),
            "weights_norm_vs_ridge": float(np.linalg.norm(reported) / np.linalg.norm(beta)),
            "layer_weights_norm_vs_ridge": float(np.linalg.norm(layer) / np.linalg.norm(beta)),
            "qk_norm": float(np.linalg.norm(m)),
        }
        # the ridge solution carries κ(XᵀX + λI) of relative error; the rest is short sums
        rel = 64 * EPS * np.linalg.cond(x.T @ x + lam * np.eye(d))
        for key, value in want.items():
            assert row[key] == pytest.approx(value, rel=rel, abs=0), key


# ----------------------------------------------------------------------------- the summaries
def _assert_mentions(text: str, numbers: list[str]) -> None:
    """Every number (formatted as the summary prints it) stands in the text as a whole token."""
    assert numbers
    for number in numbers:
        assert re.search(rf"(?<![\d.]){re.escape(number)}(?![\d])", text), (number, text)


def _one(rows, **match):
    (row,) = [r for r in rows if all(r[k] == v for k, v in match.items())]
    return row


def _conventions_numbers(rows) -> list[str]:
    """Each mode's two rows as printed, and the largest relative test-MSE gap over the modes."""
    out, gaps = [], []
    for mode in sorted({r["data"] for r in rows}):
        a = _one(rows, data=mode, convention="attnreg")
        b = _one(rows, data=mode, convention="everything-is-matter")
        gaps.append(abs(b["test_mse"] / a["test_mse"] - 1))
        out += [f"{a['test_mse']:.4f}", f"{b['test_mse']:.4f}", f"{a['cos_to_ridge']:.4f}"]
        out += [f"{b['cos_to_ridge']:.4f}", f"×{b['qk_norm'] / a['qk_norm']:.3g}"]
        out += [f"{a['weights_norm_vs_ridge']:.3f}", f"{b['weights_norm_vs_ridge']:.3f}"]
        out += [f"{b['layer_weights_norm_vs_ridge']:.3f}"]
    return [*out, f"{100 * max(gaps):.1f} %"]


def _density_numbers(rows, path) -> list[str]:
    """Per separation: recall MSE, test MSE, ridge's, self weight and their ratio as the table
    prints them; per mode the lowest recall MSE over separations and the β path."""
    out = []
    for mode in sorted({r["data"] for r in rows}):
        sel = [r for r in rows if r["data"] == mode]
        for r in sel:
            assert r["test_over_recall"] == pytest.approx(r["test_mse"] / r["recall_mse"])
            cells = [r["recall_mse"], r["test_mse"], r["ridge_test_mse"], r["self_weight"]]
            cells.append(r["test_mse"] / r["recall_mse"])
            out.append(" · ".join(f"{v:.3g}" for v in cells))
        floor = min(r["recall_mse"] for r in [*sel, *(p for p in path if p["data"] == mode)])
        out.append(f"{mode} {floor:.3f}")
    return out


def _memories_numbers(rows) -> list[str]:
    out = []
    for mode, scenario in {(r["data"], r["scenario"]) for r in rows}:
        cells = [
            _one(rows, data=mode, scenario=scenario, slow=slow, fast=fast)["rel_mse_to_ols_b"]
            for slow, fast in (("A", "B"), ("B", "A"), ("A", "A"))
        ]
        out.append(f"{mode} · {scenario} · " + " · ".join(f"{v:.3g}" for v in cells))
    return out


def _tang_retrieval_numbers(rows, cfg) -> list[str]:
    """Per pattern count and separation: the clean-query accuracies of the plain and the
    whitened dot at the smallest and largest ρ (a loop over the rows)."""
    out = []
    for n in cfg.tang_patterns:
        for sep in ("identity", "softmax"):
            cells = []
            for sim in ("dot", "whitened dot"):
                sel = sorted(
                    (
                        r
                        for r in rows
                        if r["part"] == "retrieval"
                        and r["queries"] == "clean"
                        and (r["n_patterns"], r["similarity"], r["separation"]) == (n, sim, sep)
                    ),
                    key=lambda r: r["rho"],
                )
                cells += [sel[0]["accuracy"], sel[-1]["accuracy"]]
            out.append(f"{n} · {sep} · " + " · ".join(f"{v:.3g}" for v in cells))
    return out


def _tang_scaling_numbers(rows) -> list[str]:
    """Per d_k: each temperature rule's test MSE, mean ± SE over the seeds, as printed."""
    sel = [r for r in rows if r["part"] == "scaling: scale"]
    out = []
    for dk in sorted({r["d_k"] for r in sel}):
        for rule in ("1/sqrt(d_k)", "beta = 1", "best beta"):
            v = np.array([r["test_mse"] for r in sel if (r["d_k"], r["scale_rule"]) == (dk, rule)])
            out.append(f"{v.mean():.4g} ± {v.std(ddof=1) / math.sqrt(v.size):.2g}")
    return out


def _locality_numbers(rows) -> list[str]:
    return [
        f"{r['operator']} · {100 * r['pr_median'] / r['n_context']:.0f} % · "
        f"{r['rel_distance_median']:.3g}"
        for r in rows
    ]


# ----------------------------------------------------------------------------- the study
def test_tiny_compare_run_has_every_section():
    cfg = CompareConfig(**TINY)
    result = run(cfg)
    main = [r for r in result.rows if "section" not in r]
    extra = [r for r in result.rows if "section" in r]
    assert main and all(tuple(r) == ROW_KEYS for r in main)
    assert {r["section"] for r in extra} == SECTION_NAMES
    for name in ("density", "memories", "locality", "conventions"):
        assert {r["data"] for r in extra if r["section"] == name} == {"synthetic", "sine"}
    by_section = {name: [r for r in extra if r["section"] == name] for name in SECTION_NAMES}
    path = result.tables["compare_density_beta_path"]
    for question, numbers in (
        (conventions.QUESTION, _conventions_numbers(by_section["conventions"])),
        (density.QUESTION, _density_numbers(by_section["density"], path)),
        (memories.QUESTION, _memories_numbers(by_section["memories"])),
        (tang_retrieval.QUESTION, _tang_retrieval_numbers(by_section["tang"], cfg)),
        (tang_scaling.QUESTION, _tang_scaling_numbers(by_section["tang"])),
        (locality.QUESTION, _locality_numbers(by_section["locality"])),
    ):
        _assert_mentions(answer_text(result.summary[question]), numbers)
    stems = {f.name for f in result.figures}
    assert {
        "compare_conventions",
        "compare_density",
        "compare_memories",
        "compare_tang_retrieval",
        "compare_tang_scaling",
        "compare_locality",
    } <= stems
    assert "compare_density_beta_path" in result.tables
    for figure in result.figures:
        figure.close()


def test_sections_are_deterministic_and_switch_off():
    cfg = CompareConfig(**TINY)
    datasets = {m: load_mode(cfg, m, cfg.seed) for m in cfg.data_modes}
    for label, fn in SECTIONS:
        first, again = fn(cfg, datasets), fn(cfg, datasets)
        assert first.rows == again.rows, label
        assert first.summary == again.summary, label
        for f in (*first.figures, *again.figures):
            f.close()
    off = CompareConfig(**TINY, **{name: False for name in SECTION_NAMES})
    for _, fn in SECTIONS:
        empty = fn(off, datasets)
        assert not empty.rows and not empty.summary and not empty.figures


def test_section_config_is_validated():
    with pytest.raises(ValueError, match="density_powers"):
        CompareConfig(density_powers=[1])
    with pytest.raises(ValueError, match="tang_rhos"):
        CompareConfig(tang_rhos=[0.5, 1.0])
    with pytest.raises(ValueError, match="tang_seeds"):
        CompareConfig(tang_seeds=1)
    with pytest.raises(ValueError, match="tang_scale_rhos"):
        CompareConfig(tang_scale_rhos=[0.5])
    with pytest.raises(ValueError, match="icl_condition"):
        CompareConfig(icl_condition=0.5)
    with pytest.raises(ValueError, match="beta_multipliers"):
        CompareConfig(beta_multipliers=[])
    with pytest.raises(ValueError, match="tang_memories"):
        CompareConfig(tang_memories=0)
