"""The ``depth`` study: a tiny profile end to end (rows, slopes and summary numbers against the
rows and numpy), the best-match protocol on a constructed GD stack, the iterates against numpy
loops, and the noise curves against Monte-Carlo numpy computations written here."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from tiny_depth import TINY_DEPTH

from attnreg.constructions import LSAStack
from attnreg.data.tasks import Tasks, TaskSampler
from attnreg.studies.answers import paragraphs
from attnreg.studies.depth import SPEC, DepthConfig
from attnreg.studies.depth.iterates import best_matches, gd_iterates, method_iterates
from attnreg.studies.depth.noise import bayes_ridge_curve, min_norm_error

U64 = 2.0**-53
TINY = {**TINY_DEPTH, "max_depth_loss_ratio": 100.0, "max_curve_z": 100.0}
ATLAS_KEYS = {"method", "kappa", "n_ctx", "eps", "layers_needed", "theory_layers"}
TRAINED_KEYS = {"layer", "method", "best_match", "match_error", "residual_cosine"}


@pytest.fixture(scope="module")
def tiny():
    return SPEC.run(DepthConfig(**TINY))


def g4(v):
    return "cap" if v is None else f"{v:.4g}"


def test_tiny_profile_rows_carry_the_keys(tiny):
    view = SPEC.json_rows(tiny)
    atlas = [r for r in view if r["kind"] == "atlas"]
    trained = [r for r in view if r["kind"] == "trained"]
    assert len(atlas) == 4 * 3 * 2 * 2 and len(trained) == 3 * (1 + 2)
    assert all(ATLAS_KEYS <= set(r) for r in atlas)
    assert {r["method"] for r in atlas} == {"gd", "gd++", "preconditioned", "newton"}
    for r in atlas:
        assert r["layers_needed"] is None or 0 <= r["layers_needed"] <= r["cap"]
        assert (r["layers_needed"] is not None) == (r["best_error"] <= r["eps"])
    assert all(TRAINED_KEYS <= set(r) for r in trained)
    assert {r["method"] for r in trained} == {"gd", "preconditioned", "newton"}
    assert all(0 <= r["best_match"] <= TINY["max_iterates"] for r in trained)
    assert [f.name for f in tiny.figures] == ["depth_atlas", "depth_trained", "depth_noise"]


def test_slopes_are_numpy_polyfit_of_the_rows(tiny):
    atlas = [r for r in tiny.rows if r["kind"] == "atlas"]
    slopes = [r for r in tiny.rows if r["kind"] == "slope"]
    assert len(slopes) == 4 * 2 * 2
    fitted = 0
    for s in slopes:
        cells = [
            r
            for r in atlas
            if (r["method"], r["n_ctx"], r["eps"]) == (s["method"], s["n_ctx"], s["eps"])
            and r["layers_needed"] is not None
        ]
        log = s["method"] in ("newton", "gd++")
        xs = [math.log10(r["kappa_sample"]) if log else r["kappa_sample"] for r in cells]
        if len(cells) < 2 or np.ptp(xs) <= 1e-9 * max(abs(v) for v in xs):
            assert s["slope"] is None, s
            continue
        want = np.polyfit(xs, [r["layers_needed"] for r in cells], 1)[0]
        assert math.isclose(s["slope"], want, rel_tol=1e-9, abs_tol=1e-9), s
        fitted += 1
    assert fitted >= 4


def _table(summary, key):
    table = summary[key]
    return [dict(zip(table["columns"], row, strict=True)) for row in table["rows"]]


def test_summary_tables_are_the_rows(tiny):
    atlas = [r for r in tiny.rows if r["kind"] == "atlas"]
    eps = 1e-2  # the summary shows sorted(eps)[len(eps) // 2]: the larger of two
    table = _table(tiny.summary, "atlas: layers to reach OLS")
    assert len(table) == 2 * 4
    for row in table:
        mine = [
            r
            for r in atlas
            if (r["method"], r["n_ctx"], r["eps"]) == (row["method"], row["N"], eps)
        ]
        want = [f"{g4(r['layers_needed'])} ({g4(r['theory_layers'])})" for r in mine]
        assert [row[f"κ = {k:.4g}"] for k in TINY["kappas"]] == want
    slopes = {
        (r["method"], r["n_ctx"]): r for r in tiny.rows if r["kind"] == "slope" and r["eps"] == eps
    }
    for row in _table(tiny.summary, "atlas: fitted slopes against the theory"):
        slope = slopes[(row["method"], row["N"])]["slope"]
        assert row["fitted slope"] == (g4(slope) if slope is not None else "none")
    trained = {
        (r["layer"], r["method"]): r
        for r in tiny.rows
        if r["kind"] == "trained" and r["layers"] == 2
    }
    for row in _table(tiny.summary, "trained layers: the nearest iterate of each method"):
        for method in ("gd", "preconditioned", "newton"):
            r = trained[(row["ℓ"], method)]
            assert row[f"{method}: k (distance)"] == f"{r['best_match']} ({g4(r['match_error'])})"


def test_the_answer_opens_with_the_contradictions(tiny):
    """The summary's answer says first whether any claim is contradicted, from the verdicts."""
    against = any(c.contradicted() for c in tiny.claims)
    opening = "Contradicted, in full or in part" if against else "No measurement contradicts"
    assert tiny.summary["answer"].startswith(opening)


def test_slope_and_fu_claims_are_computed_from_the_rows(tiny):
    """The growth claims recomputed here from the atlas rows (R² on the claimed abscissa minus
    R² on the other, numpy's fits; GD's κ̂ as its rate has it), their verdicts from them; Fu
    et al.'s claims from the deepest stacks' trend rows, gated on the regime (a 2-layer
    stack: too shallow to fit)."""
    from attnreg.studies.ledger import HOLDS, UNTESTABLE

    def r2(xs, ys):
        fit = np.polyval(np.polyfit(xs, ys, 1), xs)
        return 1 - np.sum((ys - fit) ** 2) / np.sum((ys - np.mean(ys)) ** 2)

    atlas = [r for r in tiny.rows if r["kind"] == "atlas" and r["eps"] == 1e-2]
    for method, source in (("newton", "Giannou"), ("gd", "Fu")):
        claim = next(
            c
            for c in tiny.claims
            if c.source.short().startswith(source) and c.measurement.startswith("R²")
        )
        want = {}
        for n in TINY["atlas_n_ctx"]:
            done = [
                r
                for r in atlas
                if (r["method"], r["n_ctx"]) == (method, n) and r["layers_needed"] is not None
            ]
            k = np.array([r["kappa_sample"] for r in done])
            if len(done) < 3 or k.max() < 10 * k.min():  # three cells over a decade of κ̂
                continue
            ys = np.array([float(r["layers_needed"]) for r in done], dtype=float)
            rate = np.where(k > 1, 1 / np.log((k + 1) / np.maximum(k - 1, 1e-300)), 0.0)
            a, b = (np.log10(k), k) if method == "newton" else (rate, np.log10(k))
            want[f"N = {n}"] = r2(a, ys) - r2(b, ys)
        assert claim.values == pytest.approx(want, abs=1e-9)
        if want:
            ok = [v >= 0 for v in want.values()]
            assert claim.verdict() == (
                HOLDS if all(ok) else "does not hold" if not any(ok) else "partial"
            )
        else:
            assert claim.verdict() == UNTESTABLE
    trends = [r for r in tiny.rows if r["kind"] == "fu_trend"]
    assert len(trends) == 1 and trends[0]["layers"] == 2
    fu = [c for c in tiny.claims if c.regime is not None and c.source.short().startswith("Fu")]
    assert len(fu) == 2 and all(c.verdict() == UNTESTABLE for c in fu)
    assert all(not c.regime.met for c in fu)
    assert fu[0].values == {"κ = 10, N = 6": trends[0]["trend_beaten"]}


def test_noise_summary_and_claims_are_the_rows(tiny):
    """The noise tables and the three noise claims, recomputed from the rows: Garg et al.'s
    excess over least squares per k, Akyürek et al.'s at the largest depth, Vladymyrov et
    al.'s adjusted loss against TunedRR; each gated on its regime (the tiny run is below)."""
    match = next(r for r in tiny.rows if r["kind"] == "mixed_match")
    key = "noise: σ ~ U(0, σ_max) per task (Vladymyrov et al. 2024)"
    row = _table(tiny.summary, key)[0]
    assert row["trained"] == g4(match["adjusted_trained"])
    assert row["TunedRR"] == g4(match["adjusted_tuned_rr"])
    assert row["excess (SE)"] == f"{match['z']:.3g}"
    by = {c.source.short().split(",")[0]: c for c in tiny.claims}
    vlad, garg, aky = by["Vladymyrov"], by["Garg"], by["Akyürek"]
    assert vlad.values == {f"σ_max = 1, L = {match['layers']}": match["z"]}
    curve = [r for r in tiny.rows if r["kind"] == "noiseless_curve"]
    assert garg.values == {f"k = {r['n_ctx']}": r["z"] for r in curve}
    bayes = [r for r in tiny.rows if r["kind"] == "bayes"]
    deepest = max(r["layers"] for r in bayes)
    assert list(aky.values.values()) == [r["z"] for r in bayes if r["layers"] == deepest]
    for claim in (vlad, garg, aky):
        assert claim.verdict() == "no verdict: reduced scale"
        assert claim.quote.verbatim and "paired standard errors" in claim.threshold.origin
    noise = {k: v for k, v in tiny.summary.items() if k.startswith("noise")}
    for text in paragraphs(noise):
        assert len(text.split()) <= 60, text


def test_trained_stacks_switch_residual_and_layernorm():
    """The config's switches reach the trained models: without the residual stream and with a
    LayerNorm the stacks are other functions (other losses), the rows keep their keys; a
    non-flag is refused naming the key."""
    from attnreg.progress import Progress
    from attnreg.studies.depth.trained import trained_rows

    small = TINY | {"train_layers": [2], "max_iterates": 3}
    plain = trained_rows(DepthConfig(**small), Progress.quiet())
    for residual, layernorm in ((False, False), (True, True)):
        cfg = DepthConfig(**small, train_residual=residual, train_layernorm=layernorm)
        rows = trained_rows(cfg, Progress.quiet())
        trained = [r for r in rows if r["kind"] == "trained"]
        assert trained and all(TRAINED_KEYS <= set(r) for r in trained)
        before = [r["loss"] for r in plain if r["kind"] == "trained"]
        assert [r["loss"] for r in trained] != before
    for key in ("train_residual", "train_layernorm"):
        with pytest.raises(ValueError, match=key):
            DepthConfig(**{key: "no"})


def test_grown_stacks_start_from_the_shallower_and_keep_the_plain_rows_otherwise():
    """``train_grow``: the depths train in increasing order (given as [2, 1]), the deeper from
    the shallower (``TrainableLSA.grow_from``, tested in ``test_depth_noise.py``); every seed's
    Fu rows say their stack was grown; ``train_grow=False`` gives the default's rows."""
    from attnreg.progress import Progress
    from attnreg.studies.depth.trained import trained_rows

    small = TINY | {"train_layers": [2, 1], "max_iterates": 3, "fu_seeds": 2}
    plain = trained_rows(DepthConfig(**small), Progress.quiet())
    assert plain == trained_rows(DepthConfig(**small, train_grow=False), Progress.quiet())
    grown = trained_rows(DepthConfig(**small, train_grow=True), Progress.quiet())
    trends = [r for r in grown if r["kind"] == "fu_trend"]
    assert trends and all(r["grown"] for r in trends)
    assert {r["seed"] for r in trends} == {0, 1}
    assert next(r["layers"] for r in grown if r["kind"] == "trained") == 1
    with pytest.raises(ValueError, match="train_grow"):
        DepthConfig(train_grow="yes")


def test_grown_stacks_train_at_their_own_rate_and_stacks_in_the_dtype_asked_for():
    """``train_grow_lr`` moves only the grown stacks' rows (the first depth trains at ``lr``);
    ``train_dtype`` is the stack's and its batches' dtype."""
    import torch

    from attnreg.progress import Progress
    from attnreg.studies.depth.trained import CellSampler, train_stack, trained_rows

    small = TINY | {"train_layers": [1, 2], "max_iterates": 3, "train_grow": True}
    rows = [
        trained_rows(DepthConfig(**small, train_grow_lr=rate), Progress.quiet())
        for rate in (1e-4, 1e-3)
    ]
    first = [[r["loss"] for r in x if r["kind"] == "trained" and r["layers"] == 1] for x in rows]
    grown = [[r["loss"] for r in x if r["kind"] == "trained" and r["layers"] == 2] for x in rows]
    assert first[0] == first[1] and grown[0] != grown[1]
    cfg = DepthConfig(**TINY, train_dtype="float64")
    cell = CellSampler(cfg.train_d, 8, 1.0, 0, False)
    model, _ = train_stack(cell, 1, 2, cfg, 0, Progress.quiet())
    assert {p.dtype for p in model.parameters()} == {torch.float64}
    with pytest.raises(ValueError, match="train_dtype"):
        DepthConfig(train_dtype="float16")
    with pytest.raises(ValueError, match="train_grow_lr"):
        DepthConfig(train_grow_lr=0.0)


def test_the_command_writes_the_json_rows(tmp_path):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY | {"cap": 20, "kappas": [1.0, 10.0]}))
    args = ["depth", "--config", str(config), "--json", "--out", str(tmp_path / "out")]
    proc = subprocess.run(
        [sys.executable, "-m", "attnreg", *args, "--no-progress"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert {r["kind"] for r in rows} == {"atlas", "trained"}
    atlas = [r for r in rows if r["kind"] == "atlas"]
    assert all(ATLAS_KEYS <= set(r) for r in atlas)
    assert {r["method"] for r in atlas} == {"gd", "gd++", "preconditioned", "newton"}
    assert all(r["layers_needed"] is None or isinstance(r["layers_needed"], int) for r in atlas)
    assert any(r["layers_needed"] is None for r in atlas)  # JSON null: the cap came first
    assert all(isinstance(r["theory_layers"], int | None) for r in atlas)
    trained = [r for r in rows if r["kind"] == "trained"]
    assert all(TRAINED_KEYS <= set(r) for r in trained)
    assert all(isinstance(r["best_match"], int) and r["layer"] >= 1 for r in trained)
    assert json.loads((tmp_path / "out" / "depth_rows.json").read_text())
    for name in ("depth_atlas", "depth_trained", "depth_noise"):
        assert (tmp_path / "out" / f"{name}.png").is_file()


# ---------------------------------------------------------------------------------------------
# the best-match protocol and the iterates


def numpy_gd(x, y, q, eta, steps, gam=None):
    """W_{k+1} = W_k + η (C − W_k S) Γ, S = XᵀX/N, C = YᵀX/N; predictions q Wᵀ for k = 0..K."""
    n, d = x.shape
    s, c = x.T @ x / n, y.T @ x / n
    gam = np.eye(d) if gam is None else gam
    w = np.zeros((y.shape[1], d))
    out = [q @ w.T]
    for _ in range(steps):
        w = w + eta * (c - w @ s) @ gam
        out.append(q @ w.T)
    return np.stack(out)


def tasks_of(seed, b=6, n=12, d=4, m=3):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(b, n, d)) * np.array([1.0, 0.5, 2.0, 0.3])
    w = rng.normal(size=(b, 1, d))
    q = rng.normal(size=(b, m, d))
    y = x @ w.transpose(0, 2, 1) + 0.1 * rng.normal(size=(b, n, 1))
    t = [torch.from_numpy(a) for a in (x, y, q, q @ w.transpose(0, 2, 1), w)]
    return Tasks(*t), (x, y, q)


def test_a_constructed_gd_stack_matches_gd_iterate_l_at_layer_l():
    tasks, (x, y, q) = tasks_of(0)
    eta, layers = 0.15, 6
    stack = LSAStack.gd(4, 1, eta, steps=layers)
    preds = stack.depth_predictions(tasks.x_ctx, tasks.y_ctx, tasks.x_query)
    iterates = torch.from_numpy(
        np.stack([numpy_gd(x[b], y[b], q[b], eta, 10) for b in range(len(x))], axis=1)
    )
    ref = torch.from_numpy(
        np.stack([q[b] @ np.linalg.lstsq(x[b], y[b], rcond=None)[0] for b in range(len(x))])
    )
    matches = best_matches(preds, iterates, ref)
    assert [m["best_match"] for m in matches] == list(range(1, layers + 1))
    for m in matches:
        assert m["match_error"] <= 1e3 * U64 * m["layer"]
        assert m["residual_cosine"] == pytest.approx(1.0, abs=1e-9)


def test_method_iterates_are_the_numpy_loops():
    tasks, (x, y, q) = tasks_of(1)
    sigma = np.diag([1.0, 0.25, 4.0, 0.09])
    got = method_iterates(tasks, torch.from_numpy(sigma), 8)
    for b in range(len(x)):
        s = x[b].T @ x[b] / len(x[b])
        lam = np.linalg.eigvalsh(s)
        gd = numpy_gd(x[b], y[b], q[b], 2 / (lam[0] + lam[-1]), 8)
        gam = np.linalg.inv(sigma)
        mu = np.linalg.eigvals(gam @ s).real
        pre = numpy_gd(x[b], y[b], q[b], 2 / (mu.min() + mu.max()), 8, gam)
        full = x[b].T @ x[b]
        m = 2 / np.linalg.norm(full @ full.T) * full
        newton = []
        for _ in range(9):
            newton.append(q[b] @ (y[b].T @ x[b] @ m).T)
            m = 2 * m - m @ full @ m
        scale = np.abs(q[b]).sum() * np.abs(y[b]).max() * 1e3
        for name, want in (("gd", gd), ("preconditioned", pre), ("newton", np.stack(newton))):
            np.testing.assert_allclose(got[name][:, b].numpy(), want, rtol=0, atol=scale * U64)


def test_gd_iterates_take_one_step_per_task():
    tasks, (x, y, q) = tasks_of(2, b=3)
    etas = torch.tensor([0.1, 0.2, 0.05], dtype=torch.float64)
    got = gd_iterates(tasks, etas, 4)
    for b in range(3):
        want = numpy_gd(x[b], y[b], q[b], float(etas[b]), 4)
        np.testing.assert_allclose(got[:, b].numpy(), want, rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# the noise curves against Monte Carlo in numpy


def mc_errors(d, k, sigma, tau, draws, seed, estimator):
    """Monte Carlo in numpy: per task w ~ N(0, τ²I), X, x_q ~ N(0, I), y = Xw + σε; the error
    (ŷ_q − y_q)² / d of ridge (λ = σ²/τ²) or min-norm least squares."""
    rng = np.random.default_rng(seed)
    errs = np.empty(draws)
    for i in range(draws):
        x = rng.normal(size=(k, d))
        w = tau * rng.normal(size=d)
        y = x @ w + sigma * rng.normal(size=k)
        xq = rng.normal(size=d)
        yq = xq @ w + sigma * rng.normal()
        if estimator == "ridge":
            what = np.linalg.solve(x.T @ x + sigma**2 / tau**2 * np.eye(d), x.T @ y)
        else:
            what = np.linalg.pinv(x) @ y
        errs[i] = (xq @ what - yq) ** 2 / d
    return errs.mean(), errs.std() / math.sqrt(draws)


@pytest.mark.parametrize(("d", "k", "sigma", "tau"), [(4, 2, 0.5, 1.0), (5, 8, 0.3, 2.0)])
def test_bayes_ridge_curve_is_the_monte_carlo_ridge_error(d, k, sigma, tau):
    mean, se = bayes_ridge_curve(d, k, sigma, tau, 20000, seed=3)
    want, want_se = mc_errors(d, k, sigma, tau, 20000, 4, "ridge")
    assert abs(mean - want) <= 5 * math.hypot(se, want_se), (mean, want)


@pytest.mark.parametrize(
    ("d", "k", "sigma"), [(6, 2, 0.0), (6, 5, 0.0), (6, 9, 0.0), (8, 3, 0.5), (3, 14, 0.5)]
)
def test_min_norm_error_is_the_monte_carlo_error(d, k, sigma):
    if sigma == 0:
        assert min_norm_error(d, k, 0.0, 1.0) == max(d - k, 0) / d  # Garg et al.'s (d − k)/d
    want, se = mc_errors(d, k, sigma, 1.0, 20000, 5, "ols")
    got = min_norm_error(d, k, sigma, 1.0)
    assert abs(got - want) <= 5 * se + 1e-12, (got, want, se)


def test_min_norm_error_diverges_at_the_interpolation_peak():
    assert math.isinf(min_norm_error(5, 5, 0.1, 1.0))
    assert math.isinf(min_norm_error(5, 4, 0.1, 1.0)) and math.isinf(min_norm_error(5, 6, 0.1, 1.0))


def test_mixed_tasks_draw_one_noise_level_per_task():
    from attnreg.studies.depth.noise import mixed_tasks

    sampler = TaskSampler(d=3, n_ctx=400, inputs="gaussian")
    tasks, sig = mixed_tasks(sampler, 5, torch.Generator().manual_seed(0), 2.0, torch.float64)
    assert sig.shape == (5,) and bool(((sig >= 0) & (sig < 2.0)).all())
    resid = tasks.y_ctx - tasks.x_ctx @ tasks.w.mT
    std = resid.flatten(1).std(dim=1)
    assert torch.allclose(std, sig, rtol=0.2, atol=0.02)


def test_a_part_left_out_adds_nothing():
    """``parts``: only the named parts run; each left out adds no rows, claims, checks or
    figure, and an unknown part is refused by name."""
    result = SPEC.run(DepthConfig(**TINY, parts=["mixed"]))
    assert {r["kind"] for r in result.rows} == {"mixed_noise", "mixed_match"}
    assert [c.quote.source.short() for c in result.claims] == [
        "Vladymyrov, von Oswald, Sandler & Ge 2024"
    ]
    assert result.checks == []
    assert [f.name for f in result.figures] == ["depth_noise"]
    with pytest.raises(ValueError, match="parts: unknown value 'noises'"):
        DepthConfig(parts=["noises"])
    with pytest.raises(ValueError, match="parts: must list"):
        DepthConfig(parts=[])


def test_the_trained_figure_draws_stacks_of_any_depth():
    """The full profile's 8-layer stacks (and deeper) once gave matplotlib an alpha above 1."""
    from attnreg.studies.depth.figures import trained_figure

    rows = [
        {"kind": "iterate", "kappa": 1.0, "n_ctx": 20, "method": "gd", "iterate": k, "loss": 1.0}
        for k in range(13)
    ] + [
        {"kind": "trained", "kappa": 1.0, "n_ctx": 20, "method": "gd", "layers": depth}
        | {"layer": layer, "loss": 1.0 / (1 + layer)}
        for depth in (1, 8, 12)
        for layer in range(depth + 1)
    ]
    fig = trained_figure(rows)
    alphas = [line.get_alpha() for line in fig.axes[0].lines if line.get_alpha() is not None]
    assert len(alphas) == 3 and max(alphas) == 1.0 and alphas == sorted(alphas)
