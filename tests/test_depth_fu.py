"""Fu et al.'s metric and claims in the ``depth`` study, and the growth (slope) claims: the
cosine / best-match metric against numpy, exact GD iterates as the null, an exact Newton stack
as a trend that beats it, and every verdict function fed measurements on both sides of its
threshold and of its regime gate."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from attnreg.data.tasks import Tasks
from attnreg.studies.depth.claims import fu_claims, fu_regime, slope_claims
from attnreg.studies.depth.iterates import (
    GD_GRID,
    NEWTON_STEPS,
    best_steps,
    error_cosines,
    fu_trend,
    gd_grid_iterates,
    loglog_slope,
    middle_layers,
    newton_iterates,
)
from attnreg.studies.depth.trained import CellSampler, converged
from attnreg.studies.ledger import FAILS, HOLDS, REDUCED, UNTESTABLE

# ---------------------------------------------------------------------------------------------
# the metric against numpy


def test_error_cosines_and_best_steps_are_numpy():
    rng = np.random.default_rng(0)
    layers, its, target = (rng.normal(size=s) for s in ((3, 5, 4, 1), (6, 5, 4, 1), (5, 4, 1)))
    got = error_cosines(torch.from_numpy(layers), torch.from_numpy(its), torch.from_numpy(target))
    want = np.empty((3, 6, 5))
    for ell in range(3):
        for k in range(6):
            for b in range(5):
                e, f = (layers[ell, b] - target[b]).ravel(), (its[k, b] - target[b]).ravel()
                want[ell, k, b] = e @ f / (np.linalg.norm(e) * np.linalg.norm(f))
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-12)
    steps = [0, 1, 2, 4, 8, 16]
    assert best_steps(got, steps) == [steps[k] for k in want.mean(-1).argmax(1)]


def small_tasks(seed: int, b: int = 200, n: int = 12, d: int = 6) -> Tasks:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(b, n + n, d)) * np.linspace(1.0, 0.2, d)
    w = rng.normal(size=(b, 1, d))
    y = x @ w.transpose(0, 2, 1)
    t = [torch.from_numpy(a) for a in (x[:, :n], y[:, :n], x[:, n:], y[:, n:], w)]
    return Tasks(*t)


def test_gd_grid_iterates_are_the_numpy_loop():
    tasks = small_tasks(1, b=3)
    steps = (0, 1, 2, 5, 11)
    got = gd_grid_iterates(tasks, steps)
    for b in range(3):
        x, y, q = (t[b].numpy() for t in (tasks.x_ctx, tasks.y_ctx, tasks.x_query))
        s, c = x.T @ x / len(x), y.T @ x / len(x)
        eta = 1 / np.linalg.eigvalsh(s)[-1]
        w, out = np.zeros_like(c), {}
        for k in range(12):
            out[k] = q @ w.T
            w = w + eta * (c - w @ s)
        want = np.stack([out[k] for k in steps])
        np.testing.assert_allclose(got[:, b].numpy(), want, rtol=0, atol=1e-12)


@pytest.fixture(scope="module")
def matched():
    """Exact GD iterates 1…8 (the null) and an exact Newton stack (layer ℓ = Newton step 2ℓ)
    matched by Fu et al.'s metric on 200 small tasks."""
    tasks = small_tasks(2)
    newton = newton_iterates(tasks, NEWTON_STEPS)
    gd = gd_grid_iterates(tasks)
    exact_gd = gd[1:9]
    stack = newton[2:17:2]
    y = tasks.y_query

    def trend(layers: torch.Tensor) -> dict:
        return fu_trend(
            error_cosines(layers, newton, y),
            error_cosines(layers, gd, y),
            error_cosines(exact_gd, newton, y),
            error_cosines(exact_gd, gd, y),
            20,
            0,
        )

    return trend(exact_gd), trend(stack)


def test_exact_gd_iterates_give_the_null(matched):
    """GD's best-matching Newton step grows sub-linearly (logarithmically) with the step; GD
    matched against its own grid finds every step; so the GD stack never beats its null."""
    gd, _ = matched
    steps = gd["best_newton"]
    assert steps == sorted(steps) and steps[-1] > steps[0]
    assert loglog_slope(list(range(1, 9)), [max(v, 1) for v in steps]) < 1
    assert steps[-1] - steps[-3] < steps[2] - steps[0] + 1  # increments do not grow
    assert gd["best_gd"] == list(range(1, 9)) and gd["gd_loglog"] == pytest.approx(1.0)
    assert gd["trend_beaten"] == 1.0 and gd["gd_beaten"] == 1.0


def test_an_exact_newton_stack_beats_the_null(matched):
    _, newton = matched
    assert newton["best_newton"] == list(range(2, 17, 2))
    assert newton["newton_slope"] == pytest.approx(2.0) and newton["newton_r2"] == 1.0
    assert newton["null_r2"] < 1.0 and newton["trend_beaten"] == 0.0
    assert newton["gd_loglog"] > 1 and newton["gd_beaten"] == 0.0
    assert newton["middle_layers"] == [3, 4, 5, 6, 7, 8] == middle_layers(8)


def test_the_trend_is_deterministic(matched):
    again = fu_trend(*_cosines(), 20, 0)
    assert again == fu_trend(*_cosines(), 20, 0)


def _cosines():
    tasks = small_tasks(3, b=50)
    newton, gd = newton_iterates(tasks, NEWTON_STEPS), gd_grid_iterates(tasks)
    y = tasks.y_query
    return (
        error_cosines(newton[1:6], newton, y),
        error_cosines(newton[1:6], gd, y),
        error_cosines(gd[1:6], newton, y),
        error_cosines(gd[1:6], gd, y),
    )


# ---------------------------------------------------------------------------------------------
# the regime: data and convergence


def test_a_rotated_cell_gives_each_task_its_own_covariance():
    cell = CellSampler(4, 8, 100.0, seed=0, rotate=True, n_query=3)
    tasks, sigma = cell.sample_with_covariance(5, torch.Generator().manual_seed(1), torch.float64)
    assert sigma.shape == (5, 4, 4) and not torch.allclose(sigma[0], sigma[1])
    spectrum = torch.linalg.eigvalsh(sigma)
    assert torch.allclose(spectrum, spectrum[0].expand_as(spectrum), atol=1e-12)
    assert float(spectrum[0, -1] / spectrum[0, 0]) == pytest.approx(100.0)
    assert tasks.x_query.shape == (5, 3, 4)
    torch.testing.assert_close(tasks.y_ctx, tasks.x_ctx @ tasks.w.mT)
    again, _ = cell.sample_with_covariance(5, torch.Generator().manual_seed(1), torch.float64)
    assert torch.equal(again.x_ctx, tasks.x_ctx)


def test_converged_is_a_flat_last_window():
    assert converged([1.0] * 4000) == (True, 0.0)
    falling = [1.0 / (1 + k / 100) for k in range(4000)]
    assert converged(falling)[0] is False
    rising = [1.0] * 3800 + [1.5] * 200
    assert converged(rising)[0] is False
    assert converged([1.0] * 399)[0] is False  # fewer than two plateau windows


# ---------------------------------------------------------------------------------------------
# the verdict functions on both sides


def trend_row(**changes):
    row = {
        "kind": "fu_trend",
        "kappa": 1.0,
        "n_ctx": 20,
        "layers": 8,
        "d": 10,
        "steps": 10000,
        "rotation": True,
        "converged": True,
        "loss_fall": 0.001,
        "loss": 0.1,
        "gd_loss": 0.4,
        "middle_layers": [3, 4, 5, 6, 7, 8],
        "replicates": 200,
        "trend_beaten": 0.0,
        "gd_beaten": 0.0,
    }
    return row | changes


@pytest.mark.parametrize(
    "change",
    [
        {"layers": 4},
        {"d": 8},
        {"n_ctx": 10},
        {"rotation": False},
        {"converged": False},
        {"loss": 0.5},
    ],
)
def test_below_the_regime_no_verdict(change):
    assert fu_regime([trend_row()]).met
    regime = fu_regime([trend_row(), trend_row(**change)])
    assert not regime.met and regime.needed
    assert {c.verdict() for c in fu_claims([trend_row(), trend_row(**change)])} == {REDUCED}


def test_fu_claims_on_both_sides_of_the_threshold():
    trend, gd = fu_claims([trend_row(), trend_row(kappa=100.0)])
    assert trend.verdict() == gd.verdict() == HOLDS
    assert trend.quote.verbatim and "3 iterations" in trend.quote.text
    assert "exponentially more slowly" in gd.quote.text
    trend, gd = fu_claims([trend_row(trend_beaten=0.3), trend_row(kappa=100.0, gd_beaten=1.0)])
    assert trend.verdict_text() == "partial 1 of 2" and gd.verdict_text() == "partial 1 of 2"
    trend, gd = fu_claims([trend_row(trend_beaten=1.0, gd_beaten=0.06)])
    assert trend.verdict() == gd.verdict() == FAILS
    shallow = fu_claims([trend_row(middle_layers=[1, 2])])
    assert {c.verdict() for c in shallow} == {UNTESTABLE}


def atlas_rows(method, layers_of, n_ctx=8, kappas=(1.0, 10.0, 100.0, 1e3, 1e4), cap=None):
    return [
        {
            "kind": "atlas",
            "method": method,
            "kappa_sample": k,
            "n_ctx": n_ctx,
            "eps": 1e-6,
            "layers_needed": (None if cap and layers_of(k) > cap else layers_of(k)),
        }
        for k in kappas
    ]


def test_slope_claims_on_both_sides():
    def log_growth(k):
        return 3 + round(4 * math.log10(k))

    def linear_growth(k):
        return 1 + round(k / 2)

    claims = slope_claims(
        atlas_rows("newton", log_growth) + atlas_rows("gd", linear_growth, cap=1000), 1e-6, 1000
    )
    newton, gd = claims
    assert newton.verdict() == HOLDS and gd.verdict() == HOLDS
    assert newton.values["N = 8"] > 0 and list(gd.values) == ["N = 8"]
    claims = slope_claims(
        atlas_rows("newton", linear_growth) + atlas_rows("gd", log_growth), 1e-6, 1000
    )
    assert [c.verdict() for c in claims] == [FAILS, FAILS]
    capped = slope_claims(atlas_rows("gd", linear_growth, cap=10), 1e-6, 10)
    assert capped[0].verdict() == UNTESTABLE and "10-layer cap" in capped[0].why()
    narrow = slope_claims(atlas_rows("gd", log_growth, kappas=(20.0, 25.0, 30.0)), 1e-6, 1000)
    assert narrow[0].verdict() == UNTESTABLE  # within a decade: no line tells κ from log κ


def test_gd_grid_reaches_a_thousand_steps():
    assert GD_GRID[:17] == tuple(range(17)) and GD_GRID[-1] == 1024
    ratios = [b / a for a, b in itertools.pairwise(GD_GRID[16:])]
    assert ratios == pytest.approx([2**0.5] * len(ratios), rel=0.05)


def test_seeds_are_cases_and_their_spread_is_in_the_run_regime():
    rows = [
        trend_row(seed=s, kappa=k, newton_slope=slope)
        for k, slopes in ((1.0, (2.0, 3.0, 4.0)), (100.0, (1.0, 1.0, 1.0)))
        for s, slope in enumerate(slopes)
    ]
    trend, _ = fu_claims(rows)
    assert list(trend.values) == [
        f"κ = {k:g}, N = 20, seed {s}" for k in (1.0, 100.0) for s in range(3)
    ]
    # mean 3, standard error sqrt(1 / 3) = 0.58 over the three seeds of κ = 1
    assert "3 seeds per cell" in trend.regime.run
    assert "3 ± 0.58 (κ = 1)" in trend.regime.run and "1 ± 0 (κ = 100)" in trend.regime.run
    assert "κ = 1, 100," in trend.regime.run
    one, _ = fu_claims([trend_row()])
    assert "seeds per cell" not in one.regime.run and list(one.values) == ["κ = 1, N = 20"]
