"""The noise half of the ``depth`` study: the ridge baselines of Vladymyrov et al. (ConstRR,
AdaRR, TunedRR, the oracle) against scikit-learn ridge and numpy written here, the paired
statistics and the plateau test, the trained-against-least-squares and trained-against-Bayes
measurements on a tiny config, and each noise claim's verdict on both sides of its threshold
and of its regime gate."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from sklearn.linear_model import Ridge as SkRidge
from tiny_depth import TINY_DEPTH

from attnreg.data.tasks import TaskSampler
from attnreg.models import TrainableLSA
from attnreg.progress import Progress
from attnreg.studies.depth import DepthConfig
from attnreg.studies.depth.claims import (
    MATCH_Z,
    akyurek_claim,
    garg_claim,
    noise_claims,
    vladymyrov_claim,
)
from attnreg.studies.depth.config import full_config, quick_config
from attnreg.studies.depth.noise import (
    LAMBDA_GRID,
    RidgeBaselines,
    converged,
    curve_rows,
    mixed_rows,
    mixed_tasks,
    noise_estimate,
    noiseless_rows,
    paired,
)

D, N, TAU = 3, 8, 1.0


def _tasks(batch: int, seed: int, sigma_max: float = 1.0):
    sampler = TaskSampler(d=D, n_ctx=N, inputs="gaussian", teacher_scale=TAU)
    return mixed_tasks(
        sampler, batch, torch.Generator().manual_seed(seed), sigma_max, torch.float64
    )


def _sk(x: np.ndarray, y: np.ndarray, xq: np.ndarray, lam: float) -> np.ndarray:
    return SkRidge(alpha=lam, fit_intercept=False, solver="cholesky").fit(x, y).predict(xq)


def _err(pred: np.ndarray, yq: np.ndarray) -> float:
    return float(((pred - yq) ** 2).sum() / D)


# the ridge baselines against scikit-learn


@pytest.fixture(scope="module")
def baselines():
    fit, _ = _tasks(400, 1)
    test, sig = _tasks(60, 2)
    return fit, test, sig, RidgeBaselines(fit, D, TAU, bins=4)


def _numpy(tasks):
    x, y = tasks.x_ctx.numpy(), tasks.y_ctx.numpy()
    return x, y, tasks.x_query.numpy(), tasks.y_query.numpy()


def _sigma_hat(x: np.ndarray, y: np.ndarray) -> float:
    w, *_ = np.linalg.lstsq(x, y, rcond=None)
    return float(((y - x @ w) ** 2).sum() / (N - D))


def test_const_rr_is_the_grid_lambda_with_the_lowest_mean_error(baselines):
    fit, test, _, rr = baselines
    x, y, xq, yq = _numpy(fit)
    mean = [
        np.mean([_err(_sk(x[b], y[b], xq[b], lam), yq[b]) for b in range(len(x))])
        for lam in LAMBDA_GRID
    ]
    assert rr.const_lam == LAMBDA_GRID[int(np.argmin(mean))]
    x, y, xq, _ = _numpy(test)
    want = np.stack([_sk(x[b], y[b], xq[b], rr.const_lam) for b in range(len(x))])
    np.testing.assert_allclose(
        rr.const(test).numpy().reshape(want.shape), want, rtol=1e-9, atol=1e-12
    )


def test_ada_rr_is_ridge_with_the_context_noise_estimate(baselines):
    _, test, _, rr = baselines
    x, y, xq, _ = _numpy(test)
    s2 = np.array([_sigma_hat(x[b], y[b]) for b in range(len(x))])
    np.testing.assert_allclose(noise_estimate(test).numpy(), s2, rtol=1e-9)
    want = np.stack([_sk(x[b], y[b], xq[b], max(s2[b] / TAU**2, 1e-12)) for b in range(len(x))])
    np.testing.assert_allclose(
        rr.ada(test).numpy().reshape(want.shape), want, rtol=1e-8, atol=1e-10
    )


def test_tuned_rr_tunes_lambda_per_noise_estimate_bin(baselines):
    fit, test, _, rr = baselines
    x, y, xq, yq = _numpy(fit)
    s2 = np.array([_sigma_hat(x[b], y[b]) for b in range(len(x))])
    edges = np.quantile(s2, [0.25, 0.5, 0.75])
    which = np.searchsorted(edges, s2, side="left")
    lams = []
    for j in range(4):
        idx = np.flatnonzero(which == j)
        errs = [
            np.mean([_err(_sk(x[b], y[b], xq[b], lam), yq[b]) for b in idx]) for lam in LAMBDA_GRID
        ]
        lams.append(LAMBDA_GRID[int(np.argmin(errs))])
    np.testing.assert_allclose(rr.bin_lams.numpy(), lams)
    x, y, xq, _ = _numpy(test)
    t2 = np.array([_sigma_hat(x[b], y[b]) for b in range(len(x))])
    lam_b = np.array(lams)[np.searchsorted(edges, t2, side="left")]
    want = np.stack([_sk(x[b], y[b], xq[b], lam_b[b]) for b in range(len(x))])
    np.testing.assert_allclose(
        rr.tuned(test).numpy().reshape(want.shape), want, rtol=1e-8, atol=1e-10
    )


def test_the_oracle_is_ridge_with_each_tasks_true_noise(baselines):
    _, test, sig, rr = baselines
    x, y, xq, _ = _numpy(test)
    want = np.stack(
        [_sk(x[b], y[b], xq[b], max(float(sig[b]) ** 2 / TAU**2, 1e-12)) for b in range(len(x))]
    )
    np.testing.assert_allclose(
        rr.oracle(test, sig).numpy().reshape(want.shape), want, rtol=1e-7, atol=1e-9
    )


def test_noise_estimate_needs_more_points_than_features():
    sampler = TaskSampler(d=4, n_ctx=4, inputs="gaussian")
    with pytest.raises(ValueError, match="more context points"):
        noise_estimate(sampler.sample(3, torch.Generator().manual_seed(0), torch.float64))


# the paired statistics and the plateau test


def test_paired_is_the_numpy_paired_difference_and_delta_ratio():
    rng = np.random.default_rng(0)
    b = rng.exponential(1.0, 500)
    a = b * 1.1 + rng.normal(0, 0.05, 500)
    got = paired(torch.tensor(a), torch.tensor(b))
    d = a - b
    assert got["diff"] == pytest.approx(d.mean(), rel=1e-12)
    assert got["diff_se"] == pytest.approx(d.std(ddof=1) / math.sqrt(500), rel=1e-12)
    r = a.mean() / b.mean()
    assert got["ratio"] == pytest.approx(r, rel=1e-12)
    lin = (a - r * b) / b.mean()
    assert got["ratio_se"] == pytest.approx(lin.std(ddof=1) / math.sqrt(500), rel=1e-12)
    assert got["z"] == pytest.approx(got["diff"] / got["diff_se"], rel=1e-12)
    same = paired(torch.tensor(b), torch.tensor(b))
    assert (same["diff"], same["z"], same["ratio"]) == (0.0, 0.0, 1.0)


def test_converged_sees_a_plateau_and_a_falling_loss():
    rng = np.random.default_rng(1)
    flat = list(1.0 + 0.01 * rng.standard_normal(500))
    falling = list(np.linspace(2.0, 1.0, 500) + 0.01 * rng.standard_normal(500))
    learned = list(np.linspace(2.0, 1.0, 200)) + flat
    blown = list(np.exp(np.linspace(0, 30, 300))) + [float(x) for x in 1e13 * np.ones(200)]
    assert converged(learned)["converged"] is True
    assert converged(flat)["converged"] is False  # it never learned
    assert converged(falling)["converged"] is False
    assert converged(blown)["converged"] is False
    # a deep stack that spiked once and sits 1e24 above where it started to learn: a plateau of
    # means (the spike inflates the scatter), not a converged run
    spiked = [8.0, 6.8e28, 65.0, *(1e24 * (1 + 0.5 * rng.standard_normal(397)) ** 2)]
    assert converged(spiked)["converged"] is False
    # one spike inside a learned plateau does not undo it
    bumped = [*learned[:-50], 1e6, *learned[-49:]]
    assert converged(bumped)["converged"] is True


def test_config_refuses_too_few_points_to_estimate_the_noise():
    with pytest.raises(ValueError, match="mixed_n_ctx"):
        DepthConfig(noise_d=5, mixed_n_ctx=5)
    with pytest.raises(ValueError, match="sigma_maxes"):
        DepthConfig(sigma_maxes=[])


def test_profiles_put_k_equal_d_on_the_noise_grids():
    for cfg in (quick_config(), full_config()):
        assert cfg.noise_d in cfg.noise_n_ctx
        assert cfg.noiseless_d in cfg.noiseless_n_ctx
    full = full_config()
    assert (full.noise_d, full.mixed_n_ctx, full.mixed_seeds) == (10, 20, 3)
    assert set(full.sigma_maxes) == {1.0, 3.0, 5.0} and full.mixed_layers == [3, 5, 7]
    assert (full.noiseless_d, full.noiseless_layers) == (20, 12)


# the measurements on a tiny config


@pytest.fixture(scope="module")
def tiny_cfg():
    return DepthConfig(
        **{**TINY_DEPTH, "bayes_layers": [1, 2], "bayes_heads": [1, 2], "curve_tasks": 200}
    )


def test_noiseless_rows_pair_the_stack_with_least_squares(tiny_cfg):
    rows = noiseless_rows(tiny_cfg, Progress.quiet())
    assert [r["n_ctx"] for r in rows] == tiny_cfg.noiseless_n_ctx
    d = tiny_cfg.noiseless_d
    for r in rows:
        assert r["z"] == pytest.approx(r["diff"] / r["diff_se"])
        assert r["diff"] == pytest.approx(r["error"] - r["ols_error"], rel=1e-9, abs=1e-12)
        if r["n_ctx"] >= d:  # noiseless least squares interpolates: error 0 up to rounding
            assert r["ols_error"] < 1e-20 and r["theory"] == 0
        else:
            assert abs(r["ols_error"] - r["theory"]) <= 5 * r["ols_stderr"]
    assert rows == noiseless_rows(tiny_cfg, Progress.quiet())  # deterministic


def test_bayes_rows_are_the_ratio_to_the_bayes_ridge_per_depth(tiny_cfg):
    rows = [r for r in curve_rows(tiny_cfg, Progress.quiet()) if r["kind"] == "bayes"]
    shapes = sorted((n, h) for n in tiny_cfg.bayes_layers for h in tiny_cfg.bayes_heads)
    assert sorted((r["layers"], r["heads"]) for r in rows) == shapes
    for r in rows:
        assert r["ratio"] == pytest.approx(r["error"] / r["bayes_error"], rel=1e-9)
        assert r["z"] == pytest.approx(r["diff"] / r["diff_se"])
        assert r["error"] >= r["bayes_error"] - 4 * r["diff_se"]  # nothing beats the posterior
        assert min(r["spd_bayes_ridge"], r["spd_ols"], r["spd_gd"]) >= 0


def test_mixed_rows_adjust_by_the_oracle_and_compare_with_tuned_rr(tiny_cfg):
    rows = mixed_rows(tiny_cfg, Progress.quiet())
    match = [r for r in rows if r["kind"] == "mixed_match"]
    assert len(match) == len(tiny_cfg.sigma_maxes) * len(tiny_cfg.mixed_layers)
    cells = {r["estimator"]: r for r in rows if r["kind"] == "mixed_noise" and r["bin"] == "all"}
    assert cells["oracle"]["adjusted"] == 0
    for r in match:
        for name in ("trained", "const_rr", "ada_rr", "tuned_rr"):
            assert r[f"adjusted_{name}"] == pytest.approx(
                cells[name]["error"] - cells["oracle"]["error"], rel=1e-9, abs=1e-12
            )
        assert r["diff"] == pytest.approx(r["adjusted_trained"] - r["adjusted_tuned_rr"], abs=1e-12)


@pytest.mark.parametrize("grown", [False, True])
def test_the_diag_stacks_train_the_same_in_worker_processes(tiny_cfg, grown):
    """Vladymyrov et al.'s DIAG stacks in float64, trained in this process and in two spawned
    workers: the same rows, bit for bit (each stack is seeded by its indices alone; grown, each
    worker trains one σ_max and seed's chain of depths)."""
    cfg = DepthConfig(
        **{
            **dataclasses.asdict(tiny_cfg),
            "mixed_variant": "diag",
            "mixed_dtype": "float64",
            "mixed_init_scale": 0.0,
            "mixed_lr": 1e-3,
            "mixed_steps": 30,
            "mixed_layers": [1, 2],
            "mixed_grow": grown,
        }
    )
    here = mixed_rows(cfg, Progress.quiet())
    spread = mixed_rows(dataclasses.replace(cfg, mixed_workers=2), Progress.quiet())
    assert here == spread
    match = [r for r in here if r["kind"] == "mixed_match"]
    assert {(r["variant"], r["dtype"], r["grown"]) for r in match} == {("diag", "float64", grown)}
    with pytest.raises(ValueError, match=r"mixed_workers: .* more than the"):
        dataclasses.replace(cfg, mixed_workers=10**5)


def diag_loop(omega, xc, yc, xq):
    """Vladymyrov et al.'s DIAG layers written token by token in numpy: for every token j
    (context and queries), ``x_j += ω_xx (1/N) Σ_i x_i (x_iᵀ x_j) + ω_xy (1/N) Σ_i x_i (y_iᵀ
    y_j)``, ``y_j += ω_yx (1/N) Σ_i y_i (x_iᵀ x_j) + ω_yy (1/N) Σ_i y_i (y_iᵀ y_j)``, sums over
    the N context tokens of the layer's input; the prediction is ``−y`` of the queries."""
    n = len(xc)
    x = np.concatenate([xc, xq])
    y = np.concatenate([yc, np.zeros((len(xq), yc.shape[1]))])
    for w_xx, w_xy, w_yx, w_yy in omega:
        nx, ny = x.copy(), y.copy()
        for j in range(len(x)):
            for i in range(n):
                nx[j] += (w_xx * x[i] * (x[i] @ x[j]) + w_xy * x[i] * (y[i] @ y[j])) / n
                ny[j] += (w_yx * y[i] * (x[i] @ x[j]) + w_yy * y[i] * (y[i] @ y[j])) / n
        x, y = nx, ny
    return -y[n:]


def test_the_diag_variant_is_vladymyrovs_four_scalar_update():
    """Both of the diag variant's paths — the two-head attention (``forward_predict``) and the
    moments (``moments_predict``, the training loop's) — against the numpy loop; float64,
    ``dy = 2``, N < d and N > d."""
    rng = np.random.default_rng(0)
    for d, dy, n, layers in ((4, 1, 9, 3), (6, 2, 3, 2), (3, 1, 20, 4)):
        model = TrainableLSA(d, dy, layers, 2, variant="diag", init_scale=0.3, dtype=torch.float64)
        xc, yc, xq = rng.normal(size=(n, d)), rng.normal(size=(n, dy)), rng.normal(size=(4, d))
        want = diag_loop(model.omega.detach().numpy(), xc, yc, xq)
        args = [torch.as_tensor(a)[None] for a in (xc, yc, xq)]
        with torch.no_grad():
            for got in (model.moments_predict(*args), model.forward_predict(*args)):
                # layers of sums of n (d + dy)-term products, magnitudes up to the answer's
                bound = 64 * 2**-53 * layers * n * (d + dy) * (np.abs(want).max() + 1.0)
                assert np.abs(got[0].numpy() - want).max() <= bound
    with pytest.raises(ValueError, match="heads"):
        TrainableLSA(3, 1, 2, 1, variant="diag")
    with pytest.raises(ValueError, match="moments_predict"):
        TrainableLSA(3, 1, 2, 1).moments_predict(*args)


def test_a_grown_stack_starts_at_the_shallower_stacks_function():
    """``TrainableLSA.grow_from``: a 5-layer DIAG stack grown from a trained-looking 3-layer one
    predicts what the numpy loop gives for the 3-layer ω alone (the added zero layers are the
    identity), and grown full-product stacks, with and without LayerNorm, match their shallower
    stacks; a deeper stack cannot seed a shallower one."""
    rng = np.random.default_rng(1)
    xc, yc, xq = rng.normal(size=(12, 4)), rng.normal(size=(12, 1)), rng.normal(size=(3, 4))
    args = [torch.as_tensor(a)[None] for a in (xc, yc, xq)]
    shallow = TrainableLSA(4, 1, 3, 2, variant="diag", init_scale=0.3, dtype=torch.float64)
    deep = TrainableLSA(4, 1, 5, 2, variant="diag", init_scale=0.3, seed=9, dtype=torch.float64)
    deep.grow_from(shallow)
    want = diag_loop(shallow.omega.detach().numpy(), xc, yc, xq)
    with torch.no_grad():
        got = deep.moments_predict(*args)[0].numpy()
    bound = 64 * 2**-53 * 5 * 12 * 5 * (np.abs(want).max() + 1.0)
    assert np.abs(got - want).max() <= bound
    assert torch.equal(deep.omega[3:], torch.zeros(2, 4, dtype=torch.float64))
    full_shallow = TrainableLSA(4, 1, 2, 1, init_scale=0.2, dtype=torch.float64)
    full_deep = TrainableLSA(4, 1, 4, 1, init_scale=0.2, seed=3, dtype=torch.float64)
    full_deep.grow_from(full_shallow)
    with torch.no_grad():
        a, b = full_deep.forward_predict(*args), full_shallow.forward_predict(*args)
    # the same 2 layers (the core may order their sums differently at another depth)
    assert float((a - b).abs().max()) <= 64 * 2**-53 * 2 * 12 * 5 * (float(b.abs().max()) + 1.0)
    norm_shallow = TrainableLSA(4, 1, 2, 1, init_scale=0.2, layernorm=True, dtype=torch.float64)
    norm_deep = TrainableLSA(
        4, 1, 3, 1, init_scale=0.2, layernorm=True, seed=5, dtype=torch.float64
    )
    norm_deep.grow_from(norm_shallow)
    with torch.no_grad():
        a, b = norm_deep.forward_predict(*args), norm_shallow.forward_predict(*args)
    assert float((a - b).abs().max()) <= 64 * 2**-53 * 2 * 12 * 5 * (float(b.abs().max()) + 1.0)
    # the new layers' key-query products keep their initialisation, so their value products
    # get a gradient (both factors at zero would be a saddle)
    assert torch.equal(full_deep.pv[2:], torch.zeros_like(full_deep.pv[2:]))
    assert float(full_deep.kq[2:].abs().max()) > 0
    loss = full_deep.forward_predict(*args).square().sum()
    loss.backward()
    assert float(full_deep.pv.grad[2:].abs().max()) > 0
    with pytest.raises(ValueError, match="shallower"):
        norm_shallow.grow_from(norm_deep)


# each claim's verdict on both sides of its threshold and of its regime gate


def _noiseless(z: list[float], met: bool) -> list[dict]:
    d, layers = (20, 12) if met else (5, 3)
    return [
        {"kind": "noiseless_curve", "n_ctx": k, "d": d, "layers": layers, "steps": 100}
        | {"z": v, "error": 0.1, "averaging_error": 0.5, "converged": True}
        for k, v in enumerate(z, start=1)
    ]


def _bayes(z: list[float], met: bool) -> list[dict]:
    shapes = [(1, 1), (3, 1), (8, 1), (8, 2)] if met else [(1, 1), (3, 1)]
    deepest = max(s[0] for s in shapes)
    out = []
    for layers, heads in shapes:
        top = (
            [s for s in shapes if s[0] == deepest].index((layers, heads))
            if layers == deepest
            else 0
        )
        out.append(
            {"kind": "bayes", "layers": layers, "heads": heads, "d": 5, "sigma": 0.5}
            | {"steps": 100, "ratio": 1.01, "ratio_se": 0.01, "error": 0.2, "ols_error": 0.5}
            | {"z": z[top % len(z)] if layers == deepest else 50.0, "converged": True}
        )
    return out


def _mixed(z: list[float], met: bool) -> list[dict]:
    d, n, smaxes, seeds = (10, 20, [1.0, 3.0, 5.0], 3) if met else (5, 10, [1.0], 1)
    return [
        {"kind": "mixed_match", "sigma_max": s, "layers": layers, "d": d, "n_ctx": n}
        | {"seeds": seeds, "steps": 100, "converged": True, "beats_const": True}
        | {"z": z[(i + j) % len(z)] if layers >= 5 else 50.0}
        for i, s in enumerate(smaxes)
        for j, layers in enumerate([3, 5, 7])
    ]


@pytest.mark.parametrize(
    "make, build",
    [(garg_claim, _noiseless), (akyurek_claim, _bayes), (vladymyrov_claim, _mixed)],
)
def test_each_noise_claim_passes_fails_and_is_gated(make, build):
    below, above = MATCH_Z - 0.5, MATCH_Z + 0.5
    assert make(build([below], True)).verdict() == "holds"
    assert make(build([above], True)).verdict() == "does not hold"
    assert make(build([below, above], True)).verdict().startswith("partial")
    for z in (below, above):
        claim = make(build([z], False))
        assert claim.verdict() == "no verdict: reduced scale"
        assert claim.regime is not None and claim.regime.needed
    assert make([]) is None


def test_a_run_below_the_weakest_baseline_or_unconverged_is_gated():
    rows = _noiseless([0.0], True)
    rows[0]["error"] = 0.9  # above averaging
    assert garg_claim(rows).verdict() == "no verdict: reduced scale"
    rows = _mixed([0.0], True)
    for r in rows:
        r["converged"] = r["layers"] == 3  # only the shallow stacks, which are no case
    assert vladymyrov_claim(rows).verdict() == "no verdict: reduced scale"
    rows = _bayes([0.0], True)
    rows[-1]["error"] = 0.6  # the deepest above OLS
    assert akyurek_claim(rows).verdict() == "no verdict: reduced scale"


def test_vladymyrovs_cells_below_the_regime_get_no_verdict_and_the_others_are_judged():
    """At the paper's scale, a cell whose seeds did not all converge, or whose stack is not
    below ConstRR, is named and left out; the verdict comes from the other cells, on both sides
    of the threshold."""
    below, above = MATCH_Z - 0.5, MATCH_Z + 0.5
    for z, verdict in ((below, "holds"), (above, "does not hold")):
        rows = _mixed([z], True)
        rows[1]["converged"] = False  # σ_max = 1, L = 5
        rows[5]["beats_const"] = False  # σ_max = 3, L = 7
        claim = vladymyrov_claim(rows)
        assert claim.verdict() == verdict
        assert claim.unmet() == ["σ_max = 1, L = 5", "σ_max = 3, L = 7"]
        assert len(claim.judged()) == 4
        assert "No verdict on σ_max = 1, L = 5; σ_max = 3, L = 7: their runs" in claim.why()
        assert (
            "at depth ≥ 5, every seed converged in 5 and the stack is below ConstRR in 5"
            in claim.regime.run
        )


def test_noise_claims_quote_the_sources_with_a_sourced_threshold():
    rows = _noiseless([0.0], True) + _bayes([0.0], True) + _mixed([0.0], True)
    claims = noise_claims(rows)
    assert [c.source.short().split(",")[0] for c in claims] == ["Garg", "Akyürek", "Vladymyrov"]
    for c in claims:
        assert c.quote.verbatim and c.threshold is not None
        assert "paired standard errors" in c.threshold.origin


def test_an_overflowing_stack_gives_infinite_errors_not_a_crash():
    from attnreg.models import TrainableLSA
    from attnreg.studies.depth.noise import _quiet_predict, _safe_predict

    tasks = TaskSampler(d=3, n_ctx=1, inputs="gaussian").sample(
        50, torch.Generator().manual_seed(0), torch.float64
    )
    wild = TrainableLSA(3, 1, 8, init_scale=3.0, seed=0)  # cubic per layer: overflows
    with pytest.raises(ValueError, match="overflow"):
        _quiet_predict(wild, tasks)
    out = _safe_predict(wild, tasks)
    assert out.shape == tasks.y_query.shape and bool(torch.isinf(out).any())
    tame = TrainableLSA(3, 1, 2, init_scale=0.05, seed=0)
    assert torch.equal(_safe_predict(tame, tasks), _quiet_predict(tame, tasks))
    assert full_config().noise_layernorm and not quick_config().noise_layernorm
