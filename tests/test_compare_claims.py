"""The compare study's claims: each verdict function fed measurements on both sides of its
threshold, and the redesigned measurements (Tang's √d_k remark, the whitened retrieval, the
in-context W_q W_kᵀ, locality on trained softmax, the slow-memory remark) against numpy written
here on tiny cases."""

import dataclasses
import math

import numpy as np
import pytest
import torch

from attnreg.studies.compare import in_context, locality, summary, tang_retrieval, tang_scaling
from attnreg.studies.compare.config import CompareConfig
from attnreg.studies.compare.ols_transformer import OLSTransformerResult
from attnreg.studies.ledger import FAILS, HOLDS, IDENTITY, OPEN, OPEN_QUESTION, REMARK
from attnreg.studies.paired import paired_z

EPS = np.finfo(np.float64).eps

TINY = CompareConfig(
    n_test=30,
    tang_scale_n_train=50,
    tang_dks=[2, 8],
    tang_scale_d=3,
    tang_scale_rhos=[0.0, 0.9],
    tang_seeds=2,
    beta_multipliers=[0.5, 1.0, 2.0],
    tang_d=4,
    tang_patterns=[3, 8],
    tang_rhos=[0.0, 0.9],
    tang_memories=6,
    icl_d=3,
    icl_context=10,
    icl_steps=30,
    icl_batch=16,
    icl_seeds=2,
    icl_null=20,
)


# ----------------------------------------------------------------------------- shared pieces
def test_paired_z_and_slope_against_numpy():
    a, b = np.array([1.0, 2.0, 4.0, 3.5]), np.array([0.5, 1.0, 3.0, 3.0])
    diff = a - b
    want = diff.mean() / (np.std(diff, ddof=1) / 2)
    for fn in (paired_z,):
        assert fn(a, b) == pytest.approx(want, rel=1e-12)
        assert fn(a, a) == 0.0
        assert fn(a + 1, a) == math.inf
    x, y = [0.0, 0.5, 0.9], [1.0, 2.0, 2.5]
    assert tang_scaling.slope(x, y) == pytest.approx(np.polyfit(x, y, 1)[0], rel=1e-12)


# ----------------------------------------------------------------------------- Tang's √d_k
def _scaling_rows(near: float, worse: float, grows: float, whitened: float) -> list[dict]:
    """Rows of both parts with chosen effects: 1/√d_k's excess over the best β (``near``), β =
    1's (``worse``), the no-preprocessing slope in ρ (``grows``) and the whitened change."""
    rows = []
    noise = [0.0, 0.01, -0.01]  # per seed: makes the standard errors non-zero
    for seed, e in enumerate(noise):
        for dk in (4, 64):
            for rule, v in (
                ("best beta", 1.0),
                ("1/sqrt(d_k)", 1.0 + near),
                ("beta = 1", 1 + worse),
            ):
                rows.append(tang_scaling._row("scale", dk, 0.0, seed, "none", rule, 0.1, v + e))
        for rho in (0.0, 0.5, 0.9):
            for kind, rule, _ in tang_scaling.RHO_CELLS:
                v = 1.0 + (whitened * rho if kind == "whitened" else grows * rho)
                v += e if kind == "whitened" else e * rho  # whitened: constant in ρ
                row = tang_scaling._row("correlation", 3, rho, seed, kind, rule, 0.1, v)
                rows.append(row | {"n_train": 50})
    return rows


def test_sqrt_dk_claims_both_sides():
    good = tang_scaling.claims(_scaling_rows(near=0.0, worse=1.0, grows=1.0, whitened=0.0))
    bad = tang_scaling.claims(_scaling_rows(near=1.0, worse=0.0, grows=0.0, whitened=0.1))
    assert [c.kind for c in good] == [REMARK, REMARK, REMARK, IDENTITY]
    assert [c.verdict() for c in good] == [HOLDS] * 4
    assert [c.verdict() for c in bad] == [FAILS] * 4
    for c in good:
        assert "no source number" not in c.threshold.origin
        assert c.threshold.origin


def test_sqrt_dk_cells_against_numpy():
    rows = tang_scaling.scaling_rows(TINY)
    n = TINY.tang_scale_n_train
    for seed in range(TINY.tang_seeds):
        for dk in TINY.tang_dks:
            z, eps, u = tang_scaling._draws(TINY, 1, seed, dk)
            y = z @ u / math.sqrt(dk) + TINY.noise * eps
            for rule, beta in (("1/sqrt(d_k)", 1 / math.sqrt(dk)), ("beta = 1", 1.0)):
                s = beta * z[n:] @ z[:n].T
                w = np.exp(s - s.max(1, keepdims=True))
                pred = (w / w.sum(1, keepdims=True)) @ y[:n]
                want = float(np.mean((pred - y[n:]) ** 2))
                (got,) = [
                    r["test_mse"]
                    for r in rows
                    if (r["part"], r["seed"], r["d_k"], r["scale_rule"])
                    == ("scaling: scale", seed, dk, rule)
                ]
                # a softmax-weighted mean of y: each prediction is within ~N·eps·max|y| of
                # numpy's; the MSE moves by at most 2·max|err|·that
                bound = 2 * (np.abs(y).max() * 2) * (n * 10 * EPS * np.abs(y).max())
                assert abs(got - want) <= bound + 10 * EPS * want
    # whitening makes every ρ the same task: the change is within the rounding bound
    assert tang_scaling.whitened_change(rows) <= tang_scaling.whitening_bound(rows)


def test_sqrt_dk_section_is_deterministic():
    a, b = tang_scaling.section(TINY, {}), tang_scaling.section(TINY, {})
    assert a.rows == b.rows
    assert [c.row() for c in a.claims] == [c.row() for c in b.claims]
    for f in (*a.figures, *b.figures):
        f.close()


# ----------------------------------------------------------------------------- retrieval
def test_whitened_identity_retrieval_of_stored_patterns_is_exact():
    rng = np.random.default_rng(3)
    for n in (3, 12):  # N < d and N > d
        x = tang_retrieval.correlated_patterns(rng, 5, n, 6, 0.95)
        hits = tang_retrieval.retrieval_hits(x, x, "whitened dot", "identity", 1.0)
        assert bool((hits == 1).all())
        # numpy: r = Xᵀ X (XᵀX)⁺ x_μ = x_μ
        xs = x[0].numpy()
        r = xs.T @ (xs @ np.linalg.pinv(xs.T @ xs) @ xs.T)
        assert np.abs(r.T - xs).max() <= 1e3 * EPS * np.linalg.cond(xs) ** 2 * np.abs(xs).max()


def test_retrieval_claim_both_sides():
    m = 30
    rng = np.random.default_rng(4)
    per_good, per_bad = {}, {}
    for sep in tang_retrieval.SEPARATIONS:
        for rho, dot in ((0.0, 1.0), (0.9, 0.3)):
            noise = rng.uniform(-0.05, 0.05, m)
            per_good[(8, rho, "dot", sep)] = dot + noise * (rho > 0)
            per_good[(8, rho, "whitened dot", sep)] = np.ones(m)
            per_bad[(8, rho, "dot", sep)] = np.ones(m)
            per_bad[(8, rho, "whitened dot", sep)] = np.ones(m) + noise * (rho > 0)
    cfg = dataclasses.replace(TINY, tang_patterns=[8])
    (good,) = tang_retrieval.claims(per_good, cfg)
    (bad,) = tang_retrieval.claims(per_bad, cfg)
    assert good.verdict() == HOLDS
    assert bad.verdict() == FAILS
    assert "no source number" not in good.threshold.origin


def test_retrieval_section_clean_and_noisy_rows():
    rows, per = tang_retrieval.retrieval_rows(TINY)
    clean = [r for r in rows if r["queries"] == "clean"]
    assert len(clean) == len(TINY.tang_patterns) * len(TINY.tang_rhos) * 4
    for r in clean:
        acc = per[(r["n_patterns"], r["rho"], r["similarity"], r["separation"])]
        assert r["accuracy"] == pytest.approx(float(acc.mean()), rel=1e-15)
    assert {
        r["beta"] for r in rows if r["queries"] == "noisy" and r["separation"] == "softmax"
    } == {TINY.tang_beta * f for f in (0.25, 1.0, 4.0)}


# ----------------------------------------------------------------------------- locality
def test_locality_claim_on_trained_softmax_both_sides():
    rng = np.random.default_rng(5)
    hat = rng.uniform(20, 30, 40)
    local = {"m": {"ridge hat": {"pr": hat}, "softmax, trained": {"pr": hat / 3}}}
    broad = {"m": {"ridge hat": {"pr": hat}, "softmax, trained": {"pr": hat * 1.5}}}
    (good,) = locality.claims(local)
    (bad,) = locality.claims(broad)
    assert good.verdict() == HOLDS and bad.verdict() == FAILS
    assert locality.claims({"m": {"ridge hat": {"pr": hat}}}) == []  # untrained: no verdict
    # the gap against numpy
    soft = hat * rng.uniform(0.5, 1.5, 40)
    d = np.log(soft) - np.log(hat)
    want = d.mean() / (d.std(ddof=1) / math.sqrt(40))
    got = locality.log_pr_gap({"ridge hat": {"pr": hat}, "softmax, trained": {"pr": soft}})
    assert got == pytest.approx(want, rel=1e-12)


def test_locality_measures_trained_weights_as_given():
    rng = np.random.default_rng(6)
    from attnreg.data.regression import RegressionData

    x, xq = rng.normal(size=(12, 2)), rng.normal(size=(5, 2))
    data = RegressionData(
        "toy", x, rng.normal(size=(12, 1)), xq, rng.normal(size=(5, 1)), ["a", "b"]
    )
    a = np.abs(rng.normal(size=(5, 12)))
    a /= a.sum(1, keepdims=True)
    rows, values = locality.measure_mode(
        data, TINY, {"softmax, trained": torch.tensor(a), "softmax, initial": torch.tensor(a)}
    )
    pr = a.sum(1) ** 2 / (a * a).sum(1)
    np.testing.assert_allclose(values["softmax, trained"]["pr"], pr, rtol=1e-13)
    assert {r["operator"] for r in rows} == set(locality.OPERATORS) | set(locality.TRAINED)


# ----------------------------------------------------------------------------- in context
def test_in_context_pieces_against_numpy():
    rng = np.random.default_rng(7)
    sigma = in_context.covariance(4, 10.0, rng).numpy()
    lam = np.linalg.eigvalsh(sigma)
    assert lam.max() / lam.min() == pytest.approx(10.0, rel=1e-10)
    assert np.trace(sigma) == pytest.approx(4.0, rel=1e-12)
    # E[S²] = (N+1)/N Σ² + tr(Σ)/N Σ for S = XᵀX/N, x ~ N(0, Σ): Monte Carlo, 6 standard errors
    n, draws = 5, 20000
    chol = np.linalg.cholesky(sigma)
    x = rng.standard_normal((draws, n, 4)) @ chol.T
    s = np.einsum("bni,bnj->bij", x, x) / n
    s2 = s @ s
    want = (n + 1) / n * sigma @ sigma + np.trace(sigma) / n * sigma
    se = s2.std(0, ddof=1) / math.sqrt(draws)
    assert np.all(np.abs(s2.mean(0) - want) <= 6 * se)
    m = in_context.optimal_metric(torch.tensor(sigma), n).numpy()
    np.testing.assert_allclose(
        m @ ((n + 1) / n * sigma + np.trace(sigma) / n * np.eye(4)), np.eye(4), atol=1e-12
    )


def test_in_context_answer_both_sides_and_claim_is_open():
    base = {"d": 3, "context": 10, "condition": 10.0, "identity": 0.8, "optimal": 0.99}
    above = base | {
        "trained": [0.97, 0.98],
        "trained_vs_optimal": [0.99, 0.99],
        "null": [0.1, -0.3, 0.2],
    }
    below = base | {
        "trained": [0.5, 0.6],
        "trained_vs_optimal": [0.6, 0.6],
        "null": [0.1, -0.3, 0.2],
    }
    assert " above the null" in in_context.answer(above)
    assert "not above the null" in in_context.answer(below)
    claims = summary.claims([], None, TINY, above)
    assert [(c.kind, c.verdict()) for c in claims] == [(OPEN, OPEN_QUESTION)]
    assert claims[0].answer == in_context.answer(above)


def test_in_context_training_is_deterministic_and_moves_towards_the_minimiser():
    a, b = in_context.measure(TINY), in_context.measure(TINY)
    assert a == b
    cfg = dataclasses.replace(TINY, icl_steps=300, icl_batch=64, icl_lr=0.05, icl_seeds=1)
    m = in_context.measure(cfg)
    assert m["trained_vs_optimal"][0] > max(np.quantile(np.abs(m["null"]), 0.95), m["identity"])


# ----------------------------------------------------------------------------- Tan & Zhao
def test_slow_memory_claim_both_sides():
    frozen = OLSTransformerResult(frozen_vs_refit={"synthetic mean m=4": 9.0, "toy scale m=4": 3.0})
    follows = OLSTransformerResult(
        frozen_vs_refit={"synthetic mean m=4": 0.5, "toy scale m=4": -1.0}
    )
    for result, verdict in ((frozen, HOLDS), (follows, FAILS)):
        result.final = {"toy": {"rel_mse_to_ols_test": 1e-4}}
        claim = summary.claims([], result, TINY)[-1]
        assert claim.verdict() == verdict
        assert "SENSITIVE" not in claim.threshold.origin
