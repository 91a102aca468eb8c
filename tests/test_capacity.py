"""The capacity search, the theory formulas, and a small run of the study and its CLI."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from attnreg.cli import app
from attnreg.core.threads import torch_threads
from attnreg.memory import dam_capacity_theory
from attnreg.studies.answers import answer_text
from attnreg.studies.capacity import families as fam
from attnreg.studies.capacity.config import CapacityConfig
from attnreg.studies.capacity.run import JSON_KEYS, json_rows, run
from attnreg.studies.capacity.sweeps import search_capacity

TINY = {
    "seeds": 2,
    "queries": 100,
    "pinv_d": [4, 8],
    "hebbian_d": [60],
    "hebbian_epsilons": [0.1],
    "dam2_d": [16, 32],
    "dam3_d": [12, 16],
    "dam4_d": [12],
    "softmax_d": [8, 10, 12],
    "sphere_d": [6, 8],
    "grid_random_d": 10,
    "digits_n": [30],
    "energy_quadratic_d": [8, 16],
    "energy_power3_d": [8, 12],
    "energy_power4_d": [8],
    "energy_softmax_d": [8, 10],
    "energy_check_n": [4, 16],
    "energy_check_d": 8,
    "energy_check_queries": 8,
    "ols_energy_cases": [[32, 4]],
    "cost_queries": 16,
    "cost_repeats": 2,
}


@settings(max_examples=60, deadline=None)
@given(threshold=st.integers(0, 5000), limit=st.integers(1, 8192))
def test_search_finds_the_step_of_a_step_function(threshold, limit):
    calls = []

    def success(n):
        calls.append(n)
        return 1.0 if n <= threshold else 0.0

    n_max, evaluations = search_capacity(success, 0.01, 0.0, limit)
    assert n_max == min(threshold, limit)
    assert evaluations == len(calls)
    assert all(1 <= n <= limit for n in calls)
    # doubling then bisection: logarithmically many evaluations
    assert evaluations <= 2 * math.log2(limit) + 3


@settings(max_examples=40, deadline=None)
@given(threshold=st.integers(1, 10**6), rtol=st.floats(0.001, 0.2))
def test_search_with_relative_tolerance_brackets_the_step(threshold, rtol):
    n_max, _ = search_capacity(lambda n: float(n <= threshold), 0.01, rtol, 2**22)
    assert n_max <= threshold
    assert threshold - n_max <= max(1, math.floor(rtol * n_max))


def test_search_uses_the_success_threshold():
    rates = {n: 1.0 - 0.001 * n for n in range(1, 200)}
    n_max, _ = search_capacity(lambda n: rates.get(n, 0.0), 0.05, 0.0, 199)
    assert n_max == max(n for n, r in rates.items() if r >= 0.95)


def test_theory_formulas():
    d = 64
    assert dam_capacity_theory(d, 2) == pytest.approx(d / (2 * math.log(d)))
    assert dam_capacity_theory(d, 3) == pytest.approx(d**2 / (2 * 3 * math.log(d)))
    assert dam_capacity_theory(d, 4) == pytest.approx(d**3 / (2 * 15 * math.log(d)))
    # nearest-pattern bound: the largest N with (1 - V/2^d)^(N-1) >= 1 - eps, by direct search
    for d, k, eps in ((10, 1, 0.01), (16, 2, 0.05), (20, 1, 0.01)):
        v = sum(math.comb(d, h) for h in range(k + 1))
        p_clear = 1 - v / 2**d
        n = 1
        while p_clear**n >= 1 - eps:
            n += 1
        assert math.floor(fam.nearest_pattern_bound(d, k, eps)) == n


def test_pinv_family_capacity_is_exactly_d():
    success = fam.pinv_success("cpu")
    for d in (5, 12):
        gen = lambda n, d=d: fam.cell_generator(0, "pinv", d, n)  # noqa: E731
        n_max, _ = search_capacity(lambda n, d=d, gen=gen: success(d, n, gen(n)), 0.01)
        assert n_max == d


def test_hebbian_capacity_at_ten_percent_flips_is_near_0138_d():
    success = fam.hebbian_success(200, 0.1, 0.05, "synchronous", "cpu")
    d = 200
    with torch_threads(1):
        n_max, _ = search_capacity(lambda n: success(d, n, fam.cell_generator(0, "h", d, n)), 0.1)
    assert 0.10 * d <= n_max <= 0.17 * d


def test_small_study_is_deterministic_and_meets_the_cheap_claims(tmp_path):
    # in this process, then in two worker processes: the same numbers
    first = run(CapacityConfig(**TINY, workers=1))
    first.write(tmp_path)
    second = run(CapacityConfig(**TINY, workers=2))

    def strip(rows):  # timings differ; NaN (no theory curve) compares equal to NaN
        timing = ("seconds", "seconds_per_retrieval", "store_seconds")
        return [{k: None if v != v else v for k, v in r.items() if k not in timing} for r in rows]

    assert strip(first.rows) == strip(second.rows)
    checks = [r for r in first.rows if r["kind"] == "pinv_check"]
    assert [r["d"] for r in checks] == [4, 8]
    assert all(r["exact_all_n_le_d"] and r["inexact_all_n_gt_d"] for r in checks)
    pinv = [r for r in first.rows if r.get("family") == "pinv"]
    assert [r["n_max"] for r in pinv] == [4.0, 8.0]
    softmax = [r["n_max"] for r in first.rows if r.get("family") == "softmax"]
    assert softmax == sorted(softmax) and softmax[-1] > softmax[0]
    for row in json_rows(first):
        assert tuple(row) == JSON_KEYS
    for stem in ("capacity_vs_d", "capacity_uhn_grid", "capacity_digits_panel"):
        assert (tmp_path / f"{stem}.png").stat().st_size > 0
        assert (tmp_path / f"{stem}.svg").stat().st_size > 0
    assert any("0.138" in answer_text(a) for a in first.summary.values())


def test_cli_json_and_out(tmp_path: Path):
    config = tmp_path / "tiny.json"
    # three softmax dimensions at one seed are too few for the R² of the full profile
    small = {
        **TINY,
        "seeds": 1,
        "hebbian_d": [40],
        "dam2_d": [16],
        "dam3_d": [12],
        "min_softmax_growth_r2": 0.5,
    }
    config.write_text(json.dumps(small))
    runner = CliRunner()
    result = runner.invoke(app, ["capacity", "--config", str(config), "--json", "--seed", "3"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert rows and all(set(r) == set(JSON_KEYS) for r in rows)
    assert {r["model"] for r in rows} >= {"pseudo-inverse", "hebbian", "dam(n=2)"}
    assert all(r["seeds"] == 1 for r in rows)
    out = tmp_path / "out"
    result = runner.invoke(
        app, ["capacity", "--config", str(config), "--out", str(out), "--no-progress"]
    )
    assert result.exit_code == 0, result.output
    assert (out / "capacity_rows.csv").exists() and (out / "capacity_vs_d.svg").exists()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"sedes": 3}))
    result = runner.invoke(app, ["capacity", "--config", str(bad), "--json"])
    assert result.exit_code != 0 and "sedes" in result.output


def test_digits_recall_max_separation_on_clean_halves_matches_brute_force():
    images = fam.load_digits_images("cpu")[:40]
    recall, q, out = fam.digits_recall(
        images,
        "euclidean",
        "max",
        "mask",
        beta=1.0,
        power=2,
        sigma=0.0,
        tolerance=1e-12,
        gen=torch.Generator(),
    )
    x = images.numpy()
    nearest = [int(np.argmin(np.linalg.norm(x - qa, axis=1))) for qa in q.numpy()]
    np.testing.assert_array_equal(out.numpy(), x[nearest])
    assert recall == pytest.approx(
        np.mean([np.array_equal(x[i], x[j]) for j, i in enumerate(nearest)])
    )


def test_power_degree_rows_are_the_recall_of_the_weights_written_out():
    """The degree sweep's recall against the normalised weights (c − ‖q − k‖)ⁿ computed here
    in log space (degree 60: the binomial expansion it replaced was wrong there), and the
    summary table and claim built from those rows."""
    from attnreg.studies.capacity.claims import digits_claims
    from attnreg.studies.capacity.digits import _power_degrees
    from attnreg.studies.capacity.summary import summarize_power_degrees

    cfg = CapacityConfig(digits_n=[40], digits_power_degrees=[2, 60])
    images = fam.load_digits_images("cpu")
    rows: list[dict] = []
    _power_degrees(cfg, images, rows, lambda label: None)
    assert len(rows) == 2 * 4 * 2
    for r in (r for r in rows if r["similarity"] == "euclidean"):
        gen = fam.cell_generator(cfg.seed, f"digits:{r['query']}", 64, 40)
        stored = images[torch.randperm(images.shape[0], generator=gen)[:40]]
        q = fam.mask_half(stored) if r["query"] == "mask" else fam.add_noise(stored, 0.3, gen)
        x, qs = stored.numpy(), q.numpy()
        hits = []
        for i, qa in enumerate(qs):
            dist = np.linalg.norm(x - qa, axis=1)
            t = np.linalg.norm(qa) + np.linalg.norm(x, axis=1).max() - dist
            log_w = r["power"] * np.log(t)
            w = np.exp(log_w - log_w.max())
            out = w @ x / w.sum()
            hits.append(np.sum((out - x[i]) ** 2) / np.sum(x[i] ** 2) <= cfg.digits_tolerance)
        assert r["recall"] == np.mean(hits), r
    table = summarize_power_degrees(rows)["digits: the power separation against its degree"]
    assert [row[2:] for row in table["rows"]] == [
        [r["recall"] for r in rows if (r["query"], r["similarity"]) == (row[0], row[1])]
        for row in table["rows"]
    ]
    claim = next(c for c in digits_claims(rows) if "degree" in c.quote.text)
    grows = [
        next(r["recall"] for r in rows if (r["query"], r["similarity"], r["power"]) == (*key, 60))
        > next(r["recall"] for r in rows if (r["query"], r["similarity"], r["power"]) == (*key, 2))
        for key in {(r["query"], r["similarity"]) for r in rows}
    ]
    assert claim.values == {"": sum(grows) / len(grows)}
