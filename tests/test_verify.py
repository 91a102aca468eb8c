"""`attnreg verify`: the certificate's rows, its JSON, its exit status."""

import json

import numpy as np
import pytest
from sklearn.linear_model import Ridge as SkRidge
from typer.testing import CliRunner

from attnreg.cli import app
from attnreg.studies.verify import references as ref
from attnreg.studies.verify.cases import CASES, SCALE_EXPONENT, Case, make_task, scale_exponent
from attnreg.studies.verify.certificate import certificate
from attnreg.studies.verify.checks import Check
from attnreg.studies.verify.config import VerifyConfig
from attnreg.studies.verify.construction_rows import _compare

runner = CliRunner()
KEYS = {"construction", "reference", "dtype", "shape", "max_abs_err", "rel_err", "tol", "passed"}
CONSTRUCTIONS = {
    "OLS-Transformer",
    "OLS-attention",
    "mesa layer",
    "LSA, 1 GD step",
    "LSA stack, 3 layers",
    "GD++",
    "preconditioned GD",
    "Tan & Zhao (eigh L, identity FFN)",
    "von Oswald summary (literal)",
}


def test_every_construction_passes_on_every_case_and_dtype():
    rows = certificate(VerifyConfig(seed=3))
    assert len({r["shape"] for r in rows}) == len(CASES)
    assert {r["dtype"] for r in rows} == {"float64", "float32"}
    for word in CONSTRUCTIONS:
        assert any(word in r["construction"] for r in rows), word
    failed = [
        (r["construction"], r["shape"], r["dtype"], r["rel_err"], r["tol"])
        for r in rows
        if not r["passed"]
    ]
    assert not failed, "\n".join(map(str, failed))
    for r in rows:
        base = 1e-10 if r["dtype"] == "float64" else 1e-4
        assert r["tol"] >= base
        if "ill" not in r["shape"] and "N<d" not in r["shape"]:
            assert r["tol"] <= 1e3 * base  # the condition-scaled tolerance is for ill cases


def test_references_are_themselves_right():
    """The numpy references of verify against closed forms written here."""
    rng = np.random.default_rng(0)
    x, y, q = rng.normal(size=(12, 3)), rng.normal(size=(12, 1)), rng.normal(size=(2, 3))
    beta = np.linalg.inv(x.T @ x) @ x.T @ y
    np.testing.assert_allclose(ref.lstsq(x, y, q), q @ beta, atol=1e-12)
    w1 = 0.3 * (y.T @ x) / 12  # one GD step from 0
    np.testing.assert_allclose(ref.gd_loop(x, y, q, [0.3], np.zeros((1, 3))), q @ w1.T, atol=1e-14)


def test_json_has_the_documented_keys_and_exit_zero(tmp_path):
    result = runner.invoke(
        app, ["verify", "--json", "--dtype", "float64", "--seed", "1", "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert rows and all(set(r) == KEYS for r in rows)
    assert all(r["passed"] for r in rows)


def test_tightened_tolerance_exits_one(tmp_path):
    args = ["verify", "--json", "--dtype", "float64", "--tol-scale", "1e-9", "--out", str(tmp_path)]
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    rows = json.loads(result.stdout)
    assert any(not r["passed"] for r in rows)


def test_same_seed_same_numbers():
    a = certificate(VerifyConfig(seed=5, dtypes=["float32"]))
    b = certificate(VerifyConfig(seed=5, dtypes=["float32"]))
    # array equality: a NaN row (a construction that returned NaN) equals itself
    np.testing.assert_array_equal([r["max_abs_err"] for r in a], [r["max_abs_err"] for r in b])


def test_table_output_and_bad_dtype(tmp_path):
    result = runner.invoke(app, ["verify", "--dtype", "float32", "--out", str(tmp_path)])
    assert result.exit_code == 0
    assert "pass float32 rows within their tolerance" in result.stdout
    assert (tmp_path / "verify_rows.csv").is_file()
    bad = runner.invoke(app, ["verify", "--dtype", "float16", "--out", str(tmp_path)])
    assert bad.exit_code == 2
    assert "dtype" in bad.output and "Traceback" not in bad.output


def test_help_explains_options():
    result = runner.invoke(app, ["verify", "--help"])
    assert result.exit_code == 0
    for option in ("--seed", "--dtype", "--json", "--tol-scale", "--ridge"):
        assert option in result.stdout


# ---- degenerate and extreme-scale shapes ----------------------------------------------------

DEGENERATE = ("zero column", "constant column", "collinear", "huge scale", "tiny scale")


def _case(label: str) -> Case:
    return next(c for c in CASES if c.label.startswith(label))


def test_the_certificate_has_every_construction_on_every_degenerate_shape():
    rows = certificate(VerifyConfig(seed=2))
    names = {r["construction"] for r in rows}
    for label in DEGENERATE:
        case = _case(label)
        for dtype in ("float64", "float32"):
            mine = [r for r in rows if r["shape"] == case.describe() and r["dtype"] == dtype]
            assert {r["construction"] for r in mine} == names, (label, dtype)
    assert len(rows) == len(names) * len(CASES) * 2


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_degenerate_designs_are_what_they_claim(dtype):
    """Zero, constant and collinear columns hold exactly in the dtype; the designs are rank
    deficient (zero, collinear) or carry a constant c ≠ 0."""
    np_dtype = np.float64 if dtype == "float64" else np.float32
    rng = np.random.default_rng(0)
    for label in ("zero column", "constant column", "collinear"):
        case = _case(label)
        x = make_task(case, dtype, rng)["x"]
        np.testing.assert_array_equal(x.astype(np_dtype).astype(np.float64), x)
        for xb in x:
            if label == "zero column":
                assert np.sum(np.all(xb == 0, axis=0)) == 1
            elif label == "constant column":
                flat = np.all(xb == xb[0], axis=0)
                assert np.sum(flat) == 1 and xb[0, flat][0] != 0
            else:
                xd = xb.astype(np_dtype)
                np.testing.assert_array_equal(xd[:, -1], xd[:, 0] - 2 * xd[:, 1] + xd[:, 2])
            if label != "constant column":
                assert np.linalg.matrix_rank(xb) == case.d - 1


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_extreme_scales_overflow_and_underflow_the_gram_matrix(dtype):
    """X·2^±k is exact and finite in the dtype while XᵀX overflows (every diagonal entry is
    inf) or underflows (every entry is 0)."""
    np_dtype = np.float64 if dtype == "float64" else np.float32
    rng = np.random.default_rng(0)
    for label, sign in (("huge scale", 1), ("tiny scale", -1)):
        case = _case(label)
        k = scale_exponent(case, dtype)
        assert k == sign * SCALE_EXPONENT[dtype]
        x = make_task(case, dtype, rng)["x"][0]
        xs = np.ldexp(x, k).astype(np_dtype)
        np.testing.assert_array_equal(np.ldexp(xs.astype(np.float64), -k), x)  # exact
        assert np.all(np.isfinite(xs)) and np.all(np.abs(xs) >= np.finfo(np_dtype).tiny)
        with np.errstate(over="ignore", under="ignore"):
            gram = xs.T @ xs
        if sign > 0:
            assert np.all(np.isinf(np.diag(gram)))
        else:
            assert np.all(gram == 0)


def test_ridge_at_scale_and_the_limits_of_the_references():
    assert ref.ridge_at_scale(0.5, 664) == 0.0
    assert ref.ridge_at_scale(0.5, -664) == np.inf
    assert ref.ridge_at_scale(0.5, 83) == 0.5 * 2.0**-166
    assert ref.ridge_at_scale(0.5, -83) == 0.5 * 2.0**166
    assert ref.ridge_at_scale(0.0, -664) == 0.0
    rng = np.random.default_rng(1)
    x, y, q = rng.normal(size=(6, 9)), rng.normal(size=(6, 2)), rng.normal(size=(3, 9))
    # α = 0: the minimum-norm least-squares answer (N < d), α = ∞: 0
    np.testing.assert_allclose(ref.sklearn_ridge(x, y, q, 0.0), q @ np.linalg.pinv(x) @ y)
    assert np.all(ref.sklearn_ridge(x, y, q, np.inf) == 0)


def test_the_scaled_ridge_reference_is_scale_equivariant():
    """b · ridge(X, Y, X*; λ/a²) equals scikit-learn run on the scaled data directly, at a scale
    where that is still possible (a = b = 2^20)."""
    rng = np.random.default_rng(2)
    x, y, q = rng.normal(size=(20, 4)), rng.normal(size=(20, 1)), rng.normal(size=(5, 4))
    lam, k = 0.5, 20
    mine = np.ldexp(ref.sklearn_ridge(x, y, q, ref.ridge_at_scale(lam, k)), k)
    a = 2.0**k
    direct = SkRidge(alpha=lam, fit_intercept=False, solver="svd").fit(a * x, a * y)
    np.testing.assert_allclose(mine, direct.predict(a * q).reshape(5, 1), rtol=1e-12)


def test_ridge_per_prefix_against_a_solve_and_pinv_loop():
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(7, 4)), rng.normal(size=(7, 2))
    for lam in (0.0, 1e-9, 0.7):
        expected = []
        for t in range(len(x)):
            xt, yt = x[: t + 1], y[: t + 1]
            if lam == 0:
                beta = np.linalg.pinv(xt) @ yt
            else:
                beta = np.linalg.solve(xt.T @ xt + lam * np.eye(4), xt.T @ yt)
            expected.append(x[t] @ beta)
        np.testing.assert_allclose(ref.ridge_per_prefix(x, y, lam), expected, atol=1e-9)
    assert np.all(ref.ridge_per_prefix(x, y, np.inf) == 0)


def test_a_construction_that_raises_is_a_failed_row_not_a_crash():
    def refuse(x, y, q, dt):
        raise ValueError("refused")

    check = Check("refuser", "numpy.linalg.lstsq", 0.0, refuse, ref.lstsq)
    case = _case("zero column")
    data = make_task(case, "float64", np.random.default_rng(0))
    with pytest.warns(RuntimeWarning, match="refused"):
        row = _compare(check, data, 0, case, "float64", VerifyConfig())
    assert row["passed"] is False and row["rel_err"] == np.inf


def test_the_summary_states_what_the_literal_von_oswald_layer_returns():
    import re

    from attnreg.studies.verify.run import run as run_study

    text = run_study(VerifyConfig(dtypes=["float64"])).summary["von Oswald summary, as written"]
    plus = float(re.search(r"relative distance ([0-9.e+-]+),", text).group(1))
    minus = float(re.search(r"off by ([0-9.]+) ", text).group(1))
    assert plus < 1e-12  # −(W0 + ΔW0) x_q, to rounding
    assert minus == 2.0  # the summary's (W0 − ΔW0): off by exactly 2 ΔW0 x_q
    assert "y-entry is −(W0 + ΔW0) x_q" in text


def test_the_mesa_rows_tolerance_is_the_worst_prefix_condition():
    """The mesa layer solves one ridge problem per prefix, so its row's tolerance is
    ``u · max_n κ(X_{1:n}ᵀX_{1:n} + λI)`` (seed 9: a prefix near N = d at extreme scale, where
    the full design's κ would understate the error by 40×)."""
    import numpy as np

    from attnreg.studies.verify.checks import construction_checks

    cfg = VerifyConfig(seed=9, dtypes=["float32"])
    rows = certificate(cfg)
    mesa = [r for r in rows if r["construction"].startswith("mesa")]
    assert all(r["passed"] for r in mesa)
    huge = next(r for r in mesa if r["shape"].startswith("huge"))
    rng = np.random.default_rng(9)
    for case in CASES:  # replay the certificate's draws up to the huge-scale task
        data = make_task(case, "float32", rng)
        k = scale_exponent(case, "float32")
        construction_checks(case, cfg, rng, k)
        if case.describe() == huge["shape"]:
            break
    x = data["x"][0]
    lam = ref.ridge_at_scale(cfg.mesa_lambda, k)
    worst = 1.0
    for n in range(1, x.shape[0] + 1):  # κ of every prefix's kept spectrum, by numpy
        s = np.linalg.svd(x[:n], compute_uv=False)
        s = s[s > max(x[:n].shape) * np.finfo(np.float64).eps * s[0]]
        worst = max(worst, (s[0] ** 2 + lam) / (s[-1] ** 2 + lam))
    u = np.finfo(np.float32).eps / 2
    assert huge["tol"] == pytest.approx(max(1e-4, u * worst), rel=1e-12)
    assert huge["tol"] > 10 * 1e-4  # the full design alone would give the flat 1e-4


# ---- the sequence layers ----------------------------------------------------------------------

SEQUENCE_LAYERS = (
    "linear attention",
    "per-token decay (GLA)",
    "delta rule (DeltaNet)",
    "gated delta rule",
    "Longhorn",
    "Mesa",
    "softmax attention",
    "local linear attention",
)


def test_every_sequence_layer_has_a_passing_row_on_every_case_and_dtype():
    rows = [r for r in certificate(VerifyConfig(seed=4)) if r["construction"].startswith("seq")]
    for word in SEQUENCE_LAYERS:
        mine = [r for r in rows if word in r["construction"]]
        assert {(r["shape"], r["dtype"]) for r in mine} == {
            (c.describe(), d) for c in CASES for d in ("float64", "float32")
        }, word
        assert all(r["passed"] for r in mine), [(r["shape"], r["rel_err"], r["tol"]) for r in mine]


def test_sequence_tokens_put_the_context_first_and_the_queries_after_zero_keys():
    from attnreg.studies.verify.sequence_rows import sequence_tokens

    case = _case("N>d")
    data = make_task(case, "float32", np.random.default_rng(0))
    tokens = sequence_tokens(data, "float32")
    n, m = case.n, data["q"].shape[1]
    q, k, v = tokens["q"][0], tokens["k"][0], tokens["v"][0]
    assert q.shape == (n + m, case.d) and v.shape == (n + m, case.dy)
    np.testing.assert_array_equal(q.astype(np.float32).astype(np.float64), q)  # dtype numbers
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0, rtol=1e-6)  # unit rows
    np.testing.assert_array_equal(k[:n], q[:n])
    assert np.all(k[n:] == 0) and np.all(v[n:] == 0)
    np.testing.assert_array_equal(v[:n], data["y"][0])
    np.testing.assert_allclose(q[n:] * np.linalg.norm(data["q"][0], axis=1)[:, None], data["q"][0])


def test_at_the_query_positions_mesa_reads_out_the_ridge_fit_to_the_context():
    """With β = 1, no decay and one λ, the zero-key query positions of the Mesa reference give
    scikit-learn's ridge fitted to the (unit-row) context, read at the queries."""
    rng = np.random.default_rng(5)
    n, m, d = 20, 4, 5
    x, y, xq = rng.normal(size=(n, d)), rng.normal(size=(n, 2)), rng.normal(size=(m, d))
    x, xq = x / np.linalg.norm(x, axis=1)[:, None], xq / np.linalg.norm(xq, axis=1)[:, None]
    q, k = np.vstack([x, xq]), np.vstack([x, np.zeros((m, d))])
    v = np.vstack([y, np.zeros((m, 2))])
    out, _ = ref.weighted_ridge_per_prefix(q, k, v, np.ones(n + m), np.ones(n + m), np.full(d, 0.3))
    direct = SkRidge(alpha=0.3, fit_intercept=False).fit(x, y).predict(xq)
    np.testing.assert_allclose(out[n:], direct, atol=1e-12)


def test_the_sequence_references_against_closed_forms():
    """The decayed sum against its formula; the implicit step against the LMS loop with the
    step β/(1 + β‖k‖²) (Sherman–Morrison); the local-linear fit against its normal equations."""
    rng = np.random.default_rng(6)
    t_len, d = 9, 3
    q, k, v = (rng.normal(size=(t_len, w)) for w in (d, d, 2))
    alpha, beta = rng.uniform(0.5, 1, t_len), rng.uniform(0, 2, t_len)
    out, _ = ref.decayed_sum(q, k, v, alpha)
    t = 6
    want = sum(np.prod(alpha[i + 1 : t + 1]) * (q[t] @ k[i]) * v[i] for i in range(t + 1))
    np.testing.assert_allclose(out[t], want, atol=1e-13)
    eps = beta / (1 + beta * (k * k).sum(1))
    implicit, _ = ref.implicit_step_loop(q, k, v, beta)
    lms, _ = ref.lms_loop(q, k, v, eps, np.ones(t_len))
    np.testing.assert_allclose(implicit, lms, atol=1e-12)
    lam, scale = 0.4, 0.7
    fit, _ = ref.local_linear_fit(q, k, v, lam, scale)
    s = scale * (k[: t + 1] @ q[t])
    w = np.exp(s) / np.exp(s).sum()
    z = np.hstack([np.ones((t + 1, 1)), k[: t + 1] - q[t]])
    penalty = np.diag([0.0] + [lam] * d)
    coef = np.linalg.solve(z.T @ (w[:, None] * z) + penalty, z.T @ (w[:, None] * v[: t + 1]))
    np.testing.assert_allclose(fit[t], coef[0], atol=1e-12)
