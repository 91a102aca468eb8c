"""The capacity claims' tests can fail and can pass: exponential against power-law growth
(Ramsauer et al.), a large-d formula the measurement approaches or leaves (Krotov & Hopfield),
the search's resolution for N_max = d (Tang); each fed curves on both sides, against fits
written here with numpy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnreg.studies.capacity.claims import _krotov_claim, _pinv_claim, _ramsauer_claim
from attnreg.studies.capacity.growth import exponential_preference, trend_against


def _curve(family: str, ds, n_of_d, theory_of_d=None, jitter: float = 0.02, seeds: int = 3):
    rng = np.random.default_rng(0)
    rows = []
    for d in ds:
        values = [max(1, round(n_of_d(d) * math.exp(jitter * rng.normal()))) for _ in range(seeds)]
        rows.append(
            {
                "kind": "capacity",
                "family": family,
                "d": d,
                "n_max": float(np.mean(values)),
                "n_max_per_seed": ";".join(str(v) for v in values),
                "n_max_theory": theory_of_d(d) if theory_of_d else math.nan,
            }
        )
    return rows


DS = [8, 10, 12, 14, 16, 18, 20, 22, 24]


def _rss(x, y):
    fit = np.polyval(np.polyfit(x, y, 1), x)
    return float(((y - fit) ** 2).sum())


def test_an_exponential_curve_is_preferred_and_a_power_law_is_not():
    exp_curve = _curve("softmax", DS, lambda d: 2 ** (d / 2))
    power_curve = _curve("softmax", DS, lambda d: 0.01 * d**4)
    for curve, expected in ((exp_curve, 1.0), (power_curve, 0.0)):
        d = np.array([r["d"] for r in curve], dtype=float)
        y = np.log([r["n_max"] for r in curve])  # the mean of logs ≈ log of the mean here
        assert (_rss(d, y) < _rss(np.log(d), y)) == bool(expected)
        assert exponential_preference(curve) == pytest.approx(expected, abs=0.05)
    assert _ramsauer_claim(exp_curve).verdict() == "holds"
    assert _ramsauer_claim(power_curve).verdict() == "does not hold"


def _dam(n: int, scale_of_d):
    from attnreg.memory.classical import dam_capacity_theory

    ds = [16, 24, 32, 48, 64, 96, 128]
    return _curve(
        f"dam{n}",
        ds,
        lambda d: scale_of_d(d) * dam_capacity_theory(d, n),
        lambda d: dam_capacity_theory(d, n),
    )


def test_a_curve_that_follows_or_approaches_the_formula_passes_one_that_leaves_it_fails():
    follows = _dam(3, lambda d: 0.7)
    approaches = _dam(3, lambda d: 1 - 8 / d)
    leaves = _dam(3, lambda d: math.log(d) / 2)  # d^(n−1) without the ln d: drifts away
    slope, se = trend_against(follows, [r["n_max_theory"] for r in follows])
    assert slope / se <= 2
    slope, se = trend_against(approaches, [r["n_max_theory"] for r in approaches])
    assert slope < 0
    slope, se = trend_against(leaves, [r["n_max_theory"] for r in leaves])
    assert slope / se > 2
    assert _krotov_claim(follows).verdict() in ("holds", "conditional")
    assert _krotov_claim(leaves).verdict() == "does not hold"


def test_the_distance_slope_is_the_numpy_fit_of_the_mean_logs():
    curve = _dam(4, lambda d: 0.5 + d / 400)
    theory = [r["n_max_theory"] for r in curve]
    x = np.log([r["d"] for r in curve])
    y = np.abs(
        np.array(
            [np.mean(np.log([float(v) for v in r["n_max_per_seed"].split(";")])) for r in curve]
        )
        - np.log(theory)
    )
    slope, _ = trend_against(curve, theory)
    assert slope == pytest.approx(np.polyfit(x, y, 1)[0], abs=1e-12)


def test_n_max_equal_to_d_passes_one_step_off_passes_two_fail():
    rows = [{"d": 128, "n_max": 128.0}, {"d": 8, "n_max": 8.0}]
    assert _pinv_claim(rows).verdict() == "holds"
    assert _pinv_claim([{"d": 128, "n_max": 126.0}]).verdict() == "holds"  # one step of 2
    assert _pinv_claim([{"d": 128, "n_max": 123.0}]).verdict() == "does not hold"
    assert _pinv_claim([{"d": 8, "n_max": 6.0}]).verdict() == "does not hold"
