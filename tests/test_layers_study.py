"""The ``layers`` study: the online estimators against loops written here, explain naming the
estimator a constructed (not trained) layer computes, the memory read-outs against numpy, and a
tiny profile end to end (rows, figures, a summary whose numbers are the rows')."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.special import softmax

from attnreg.estimators import LMS, LocalLinear
from attnreg.explaining import explain
from attnreg.studies.layers.claims import NULL_RATIO, PAIRED_SES, memory_claims, trained_claims
from attnreg.studies.layers.config import LayersConfig
from attnreg.studies.layers.memory import (
    CONVERGED,
    capacity,
    correlated_pairs,
    delta_passes,
    memories,
    memory_rows,
    recall,
)
from attnreg.studies.layers.model import InContextLayer, as_predictor
from attnreg.studies.layers.run import run
from attnreg.studies.paired import in_standard_errors as gain_z
from attnreg.studies.paired import paired_difference as paired_gain
from attnreg.studies.registry import STUDIES

U64 = 2.0**-53


def _tasks(seed: int, b: int = 400, n: int = 12, d: int = 4, m: int = 1):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-0.5, 0.5, size=(b, n, d))
    q = rng.uniform(-0.5, 0.5, size=(b, m, d))
    w = rng.normal(size=(b, d, 1))
    return torch.tensor(x), torch.tensor(x @ w), torch.tensor(q)


def _lms_loop(x: np.ndarray, y: np.ndarray, q: np.ndarray, beta: float) -> np.ndarray:
    w = np.zeros((y.shape[1], x.shape[1]))
    for xi, yi in zip(x, y, strict=True):
        w = w + beta * np.outer(yi - w @ xi, xi)
    return q @ w.T


def test_lms_is_one_widrow_hoff_pass_in_order():
    x, y, q = _tasks(0, b=3, n=30, d=5, m=4)
    got = LMS(1.5).predict(x, y, q).numpy()
    for b in range(3):
        want = _lms_loop(x[b].numpy(), y[b].numpy(), q[b].numpy(), 1.5)
        # 30 steps of 2d + 2 operations on values of order 1: well within 1e3·u
        np.testing.assert_allclose(got[b], want, rtol=0, atol=1e3 * U64 * np.abs(want).max())
    reversed_ = LMS(1.5).predict(x.flip(1), y.flip(1), q).numpy()
    assert np.abs(reversed_ - got).max() > 1e-3  # online: the order of the pairs matters
    long = _tasks(1, b=2, n=100, d=3, m=2)  # beyond the recurrent threshold: the chunked form
    want = np.stack([_lms_loop(*(t[b].numpy() for t in long), 0.8) for b in range(2)])
    # 100 steps of 2d + 2 operations plus the chunked form's triangular solves: 1e4·u
    tol = 1e4 * U64 * np.abs(want).max()
    np.testing.assert_allclose(LMS(0.8).predict(*long).numpy(), want, rtol=0, atol=tol)
    with pytest.raises(ValueError, match="beta"):
        LMS(0.0)


def test_local_linear_is_the_weighted_local_fit_and_softmax_is_its_constant_limit():
    x, y, q = _tasks(2, b=2, n=15, d=3, m=3)
    got = LocalLinear(2.0, 0.05).predict(x, y, q).numpy()
    for b in range(2):
        xb, yb = x[b].numpy(), y[b].numpy()
        for j, xq in enumerate(q[b].numpy()):
            w = softmax(2.0 * xb @ xq)
            # weighted least squares with intercept, centred at the query, ridge on the slope
            design = np.hstack([np.ones((len(xb), 1)), xb - xq])
            penalty = np.diag([0.0, 0.05, 0.05, 0.05])
            coef = np.linalg.solve(
                design.T @ (w[:, None] * design) + penalty, design.T @ (w * yb[:, 0])
            )
            assert abs(got[b, j, 0] - coef[0]) <= 1e4 * U64 * max(1.0, abs(coef[0]))
    huge_ridge = LocalLinear(2.0, 1e12).predict(x, y, q).numpy()
    smoother = np.stack(
        [softmax(2.0 * q[b].numpy() @ x[b].numpy().T, axis=1) @ y[b].numpy() for b in range(2)]
    )
    np.testing.assert_allclose(huge_ridge, smoother, rtol=0, atol=1e-9)


def _layer(kind: str, d: int, scalar: float | None = None, wq: float = 1.0) -> InContextLayer:
    layer = InContextLayer(kind, d, 0.0, seed=0)  # W_Q = W_K = I exactly
    with torch.no_grad():
        layer.w_q.mul_(wq)
        if scalar is not None:
            assert layer.raw is not None
            layer.raw.fill_(math.log(math.expm1(scalar)))
    return layer


def test_explain_names_lms_for_deltanet_with_identity_projections():
    layer = _layer("delta", 4, scalar=0.7)
    beta = layer.scalar()
    ex = explain(as_predictor(layer), _tasks(3))
    assert ex.best == "LMS"
    fit = ex.fit("LMS")
    assert fit.r2 > 1 - 1e-8
    assert abs(fit.params["beta"] - beta) / beta < 0.02


@pytest.mark.parametrize(
    ("kind", "scalar", "family", "params"),
    [
        ("momentum", 0.3, "momentum LMS", {"beta": 0.3, "momentum": 0.5}),
        ("minibatch", 0.4, "mini-batch LMS", {"eta": 0.4, "batch_size": 4}),
        ("multistep", 2.0, "multi-step LMS", {"beta": 2.0, "steps": 2}),
    ],
)
def test_explain_names_the_lms_variant_of_each_2025_layer(kind, scalar, family, params):
    """With identity projections the momentum delta rule (μ at its start, 0.5), TTT-Linear in
    batches of 4 and DeltaProduct on two copies of each pair are named momentum, mini-batch and
    multi-step LMS, with the layer's own scalars."""
    layer = _layer(kind, 4, scalar=scalar)
    assert layer.momentum() == (0.5 if kind == "momentum" else None)
    ex = explain(as_predictor(layer), _tasks(6))
    assert ex.best == family
    fit = ex.fit(family)
    assert fit.r2 > 1 - 1e-8
    for name, value in params.items():
        assert fit.params[name] == pytest.approx(value, rel=0.02)


def test_explain_names_ridge_for_mesa_and_the_kernel_smoother_for_softmax():
    mesa = _layer("mesa", 4, scalar=0.5)
    ex = explain(as_predictor(mesa), _tasks(4))
    assert ex.best == "ridge"
    lam = mesa.scalar()
    assert abs(ex.fit("ridge").params["lam"] - lam) / lam < 0.02
    soft = _layer("softmax", 4, wq=3.0)  # softmax(3 x*ᵀ x_i): the smoother with β = 3
    ex = explain(as_predictor(soft), _tasks(5))
    assert ex.best == "kernel smoother"
    assert abs(ex.fit("kernel smoother").params["beta"] - 3.0) / 3.0 < 0.02


def _lms_passes(kk, vv, tol, cap, stall):
    """The delta rule (β = 1) pass after pass until the largest relative residual over the
    trials is ≤ tol, no new lowest in ``stall`` passes, or ``cap`` passes — a numpy loop."""
    t, _, d = kk.shape
    s = np.zeros((t, d, d))
    lowest, since, passes, stop, res = np.inf, 0, 0, "cap", np.inf
    while passes < cap:
        passes += 1
        for j in range(t):
            for ki, vi in zip(kk[j], vv[j], strict=True):
                s[j] = s[j] + np.outer(vi - s[j] @ ki, ki)
        res = max(
            np.linalg.norm(s[j] @ ki - vi) / np.linalg.norm(vi)
            for j in range(t)
            for ki, vi in zip(kk[j], vv[j], strict=True)
        )
        if res <= tol:
            stop = "tolerance"
            break
        if res < lowest:
            lowest, since = res, 0
        else:
            since += 1
            if since >= stall:
                stop = "stalled"
                break
    return s, passes, stop, res


def test_memory_read_outs_equal_numpy():
    cfg = LayersConfig(memory_passes=400, memory_lam=1e-9, memory_tol=1e-8)
    gen = torch.Generator().manual_seed(0)
    keys, values = correlated_pairs(gen, 2, 5, 8, 0.5)
    k, v = keys.numpy(), values.numpy()
    assert np.allclose(np.linalg.norm(k, axis=-1), 1)
    s_np, passes, stop, res = _lms_passes(k, v, cfg.memory_tol, cfg.memory_passes, 20)
    state, run_ = delta_passes(keys, values, cfg.memory_tol, cfg.memory_passes, 20)
    assert (run_["passes"], run_["stop"]) == (passes, stop) and stop == "tolerance"
    assert run_["residual"] == pytest.approx(res, rel=1e-9) and res <= 1e-8
    np.testing.assert_allclose(state.numpy(), s_np, rtol=0, atol=1e-10)
    one, _, _, _ = _lms_passes(k, v, 0.0, 1, 20)
    for t in range(2):
        kk, vv = k[t], v[t]
        hebb = kk @ kk.T @ vv
        ridge = kk @ np.linalg.solve(kk.T @ kk + 1e-9 * np.eye(8), kk.T @ vv)
        for memory, want in (
            ("linear attention", hebb),
            ("Mesa", ridge),
            ("DeltaNet", kk @ one[t].T),  # one pass: the causal layer's delta rule
            (CONVERGED, kk @ s_np[t].T),
        ):
            got = recall(memory, keys, values, cfg)[t].numpy()
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-9, err_msg=memory)
        np.testing.assert_allclose(kk @ s_np[t].T, vv, atol=1e-7)  # N ≤ d: interpolated
    assert memories(cfg) == ["linear attention", "DeltaNet", CONVERGED, "Mesa"]
    # N > d has no interpolant: the passes stall before the cap
    keys, values = correlated_pairs(gen, 2, 12, 4, 0.5)
    _, run_ = delta_passes(keys, values, 1e-6, 500, 20)
    assert run_["stop"] == "stalled" and run_["passes"] < 500


def test_graded_recall_error_is_a_numpy_loop_paired_over_the_same_draws():
    cfg = LayersConfig(memory_d=4, memory_ratios=[0.5, 1.5], memory_rhos=[0.5], memory_trials=4)
    rows = memory_rows(cfg)
    for j, ratio in enumerate(cfg.memory_ratios):
        n = round(ratio * 4)
        gen = torch.Generator().manual_seed(cfg.seed * 10**6 + j)
        keys, values = correlated_pairs(gen, 4, n, 4, 0.5)
        k, v = keys.numpy(), values.numpy()
        for m in memories(cfg):
            row = next(r for r in rows if (r["memory"], r["n"]) == (m, n))
            got = recall(m, keys, values, cfg).numpy()
            want = [
                np.mean(
                    [np.sum((got[t, i] - v[t, i]) ** 2) / np.sum(v[t, i] ** 2) for i in range(n)]
                )
                for t in range(4)
            ]
            np.testing.assert_allclose(row["trial_errors"], want, rtol=1e-12, err_msg=m)
            assert row["mean_error"] == pytest.approx(np.mean(want), rel=1e-12)
        lin = next(r for r in rows if (r["memory"], r["n"]) == ("linear attention", n))
        mesa = next(r for r in rows if (r["memory"], r["n"]) == ("Mesa", n))
        diff = np.array(lin["trial_errors"]) - np.array(mesa["trial_errors"])
        mean, se = paired_gain(lin["trial_errors"], mesa["trial_errors"])
        assert mean == pytest.approx(diff.mean()) and se == pytest.approx(diff.std(ddof=1) / 2.0)
    assert k.shape == (4, n, 4)


def _memory_row(memory, rho, n, errors, recall_fraction=1.0):
    return {
        "kind": "memory",
        "memory": memory,
        "rho": rho,
        "n": n,
        "recall": recall_fraction,
        "trial_errors": errors,
    }


def test_each_claim_can_pass_and_can_fail():
    cfg = LayersConfig(memory_d=2, memory_rhos=[0.0, 0.5], memory_trials=4)
    mems = memories(cfg)

    def rows(vs_target, gain, mesa_recall):
        out = [
            {"kind": "layer", "tasks": "clean", "layer": "delta", "vs_target": vs_target},
            {"kind": "layer", "tasks": "clean", "layer": "mesa", "vs_target": math.nan},
        ]
        lin = [1.0, 1.1, 0.9, 1.0]
        for rho in cfg.memory_rhos:
            for n in (1, 2):
                out.append(_memory_row("linear attention", rho, n, lin, 0.0))
                for m in mems[1:]:
                    other = [e - gain + 0.01 * i for i, e in enumerate(lin)]
                    out.append(_memory_row(m, rho, n, other, mesa_recall))
        return out

    def claims(*values):
        measured = rows(*values)
        return trained_claims(measured) + memory_claims(measured, cfg)

    # paired differences gain − 0.01 i: mean gain − 0.015, SE 0.0065
    good = claims(0.5, 0.1, 1.0)
    bad = claims(1.5, 0.02, 0.0)
    assert [c.kind for c in good] == ["remark", "identity", "remark", "remark", "remark"]
    assert [c.verdict() for c in good] == ["holds"] * 5
    assert [c.verdict() for c in bad] == ["does not hold"] * 5
    wang = good[0]
    assert list(wang.values) == ["clean · delta"]  # the NaN (estimator = target) is left out
    assert wang.threshold is not None and wang.threshold.limit == NULL_RATIO
    assert "null measured in the same run" in wang.threshold.origin
    gain = good[2]
    assert set(gain.values) == {"ρ = 0.5, N = 1", "ρ = 0.5, N = 2"}  # only correlated keys
    assert gain.threshold is not None and gain.threshold.limit == PAIRED_SES
    assert "paired" in gain.threshold.origin
    edge = claims(1.0, 0.015 + 2 * 0.00645497, 1.0)
    assert edge[0].verdict() == "holds"  # ratio 1 is the null itself: ≤ passes
    assert all(c.values[k] == pytest.approx(2.0, abs=1e-3) for c in edge[2:] for k in c.values)
    assert gain_z(0.0, 0.0) == 0.0 and gain_z(1.0, 0.0) == math.inf


TINY = {
    "d": 3,
    "n_ctx": 6,
    "batch": 32,
    "steps": 5,
    "eval_tasks": 64,
    "fit_tasks": 64,
    "explain_tasks": 16,
    "memory_d": 4,
    "memory_ratios": [0.5, 1.0, 2.0],
    "memory_trials": 3,
    "memory_passes": 30,
}


def _n_max(rows, memory, rho, eps):
    """The largest N up to which (every smaller N of the grid too) a fraction 1 − ε is
    recalled, written out here."""
    best = 0
    for n in sorted(r["n"] for r in rows if r["memory"] == memory and r["rho"] == rho):
        row = next(r for r in rows if (r["memory"], r["rho"], r["n"]) == (memory, rho, n))
        if row["recall"] < 1 - eps:
            return best
        best = n
    return best


def _claims_are_the_rows(res, cfg, mem, layer_rows):
    """The ledger's numbers recomputed from the rows, its verdicts from the numbers."""
    wang, mesa, *gains = res.claims
    assert wang.values == {
        f"{r['tasks']} · {r['layer']}": r["vs_target"]
        for r in layer_rows
        if math.isfinite(r["vs_target"])
    }
    assert wang.threshold is not None and wang.threshold.limit == NULL_RATIO
    want = {f"ρ = {rho:g}": _n_max(mem, "Mesa", rho, cfg.recall_eps) / 4 for rho in cfg.memory_rhos}
    assert mesa.values == want
    assert mesa.verdict() == "holds"  # Mesa with λ = 1e-10 recalls every N ≤ d = 4 exactly
    assert [g.measurement.split(":")[0] for g in gains] == memories(cfg)[1:]
    cell = {(r["memory"], r["rho"], r["n"]): r for r in mem}
    for g, m in zip(gains, memories(cfg)[1:], strict=True):
        for case, value in g.values.items():
            rho, n = case.removeprefix("ρ = ").split(", N = ")
            lin = np.array(cell[("linear attention", float(rho), int(n))]["trial_errors"])
            other = np.array(cell[(m, float(rho), int(n))]["trial_errors"])
            diff = lin - other
            assert value == pytest.approx(diff.mean() / (diff.std(ddof=1) / math.sqrt(3)))
        ok = [v >= 2 for v in g.values.values()]
        assert g.verdict() == (
            "holds" if all(ok) else "does not hold" if not any(ok) else "partial"
        )


def test_a_tiny_profile_runs_end_to_end_and_its_summary_is_its_rows():
    cfg = LayersConfig(**TINY)
    res = run(cfg)
    assert [f.name for f in res.figures] == ["layers_positions", "layers_memory"]
    for f in res.figures:
        f.close()
    layer_rows = [r for r in res.rows if r["kind"] == "layer"]
    assert {(r["tasks"], r["layer"]) for r in layer_rows} == {
        (t, layer) for t in cfg.tasks for layer in cfg.layers
    }
    explained = res.summary["what each trained layer computes"]
    by_layer = {
        (row[0], row[1]): dict(zip(explained["columns"], row, strict=True))
        for row in explained["rows"]
    }
    for r in layer_rows:
        row = by_layer[(r["tasks"], r["layer"])]
        assert row["loss"] == f"{r['loss_last']:.4g}" and row["R²"] == f"{r['best_r2']:.4f}"
        positions = [
            p
            for p in res.rows
            if p["kind"] == "position" and p["model"] == r["layer"] and p["tasks"] == r["tasks"]
        ]
        assert [p["n"] for p in positions] == list(range(1, cfg.n_ctx + 1))
        assert positions[-1]["loss"] == r["loss_last"]
    mem = [r for r in res.rows if r["kind"] == "memory"]
    assert len(mem) == len(memories(cfg)) * len(cfg.memory_rhos) * len(cfg.memory_ratios)
    memory_table = res.summary["memory: pairs recalled against N/d"]
    for row in memory_table["rows"]:
        caps = [capacity(mem, row[0], rho, cfg.recall_eps) for rho in cfg.memory_rhos]
        assert row[1 : 1 + len(cfg.memory_rhos)] == caps
    table = {(t["memory"], t["rho"]): t["n_max"] for t in res.tables["layers_capacity"]}
    assert table == {
        (m, rho): capacity(mem, m, rho, cfg.recall_eps)
        for m in memories(cfg)
        for rho in cfg.memory_rhos
    }
    assert len(res.tables["layers_explained"]) == len(layer_rows)
    mesa_check = next(c for c in res.checks if c["check"].startswith("Mesa"))
    assert mesa_check["value"] == max(
        r["max_error"] for r in mem if r["memory"] == "Mesa" and r["n"] <= 4
    )
    assert mesa_check["passed"]  # Mesa stores N ≤ d pairs exactly (λ = 1e-10)
    assert res.summary["lead"]
    _claims_are_the_rows(res, cfg, mem, layer_rows)
    again = run(cfg)  # deterministic
    assert [r for r in again.rows if r["kind"] != "layer"] == [
        r for r in res.rows if r["kind"] != "layer"
    ]
    for f in again.figures:
        f.close()


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"layers": ["gru"]}, "layers: unknown value 'gru'"),
        ({"tasks": []}, "tasks"),
        ({"memory_rhos": [1.0]}, "memory_rhos"),
        ({"n_ctx": 1}, "n_ctx"),
        ({"recall_eps": 0.0}, "recall_eps"),
        ({"min_r2": 1.5}, "min_r2"),
    ],
)
def test_bad_values_are_refused_naming_the_key(changes, needle):
    with pytest.raises(ValueError, match=needle):
        LayersConfig(**changes)


def test_the_study_is_registered():
    assert STUDIES["layers"].config_class is LayersConfig
