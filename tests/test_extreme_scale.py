"""Inputs at extreme magnitude: the answer of the given problem, or a clear ValueError.

Never silent zeros, Inf or NaN. The ridge family (``Ridge``, ``Mesa``, ``MesaLayer``, the
OLS constructions with ridge, ``PseudoInverseMemory``) answers ridge with the **given** λ at
any magnitude, checked against the same problem solved in 40-digit arithmetic (mpmath: no
float range); where that answer is outside the dtype's normal range the predictor must raise.
The softmax memories are checked against the softmax of exact (mpmath) scores.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import mpmath as mp
import numpy as np
import pytest
import torch

mp.mp.dps = 40
C = 64  # the constant of the contract's tolerances C·u·T (tests/test_contract.py)
N, D = 12, 3


def _ridge_family(lam: float) -> dict[str, Callable[[Any, Any, Any], torch.Tensor]]:
    import attnreg
    from attnreg.memory import PseudoInverseMemory

    return {
        "Ridge": lambda x, y, q: attnreg.Ridge(lam).predict(x, y, q),
        "Mesa": lambda x, y, q: attnreg.Mesa(lam).predict(x, y, q),
        "MesaLayer": lambda x, y, q: attnreg.MesaLayer(lam).predict(x, y, q),
        "OLSTransformer": lambda x, y, q: attnreg.OLSTransformer(ridge=lam).predict(x, y, q),
        "OLSAttention": lambda x, y, q: attnreg.OLSAttention(ridge=lam).predict(x, y, q),
        "OLSAttention-cholesky": lambda x, y, q: attnreg.OLSAttention(
            ridge=lam, method="cholesky"
        ).predict(x, y, q),
        "PseudoInverseMemory": lambda x, y, q: (
            PseudoInverseMemory(ridge=lam).store(x, y).retrieve(q)
        ),
    }


RIDGE_FAMILY = list(_ridge_family(1.0))
F64 = [1e-300, 1e-200, 1e-150, 1e150, 1e200, 1e300]
MIXED = [  # (x, y, x*) scales: queries and context at opposite extremes, tiny X with normal Y
    (1e-300, 1.0, 1.0),
    (1e-150, 1e150, 1e150),
    (1e300, 1e300, 1e-300),
    (1e-300, 1e-300, 1e300),
    (1e200, 1e-200, 1e200),
]
F32 = [1e-30, 1e-20, 1e-15, 1e15, 1e20, 1e30]


def _data(dtype: np.dtype, scales: tuple[float, float, float]) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(3)
    x, y, q = rng.normal(size=(N, D)), rng.normal(size=(N, 1)), rng.normal(size=(2, D))
    return tuple((a * s).astype(dtype) for a, s in zip((x, y, q), scales, strict=True))


def _mp_ridge(x: np.ndarray, y: np.ndarray, q: np.ndarray, lam: float) -> list[mp.mpf]:
    """``x* (XᵀX + λI)⁻¹ XᵀY`` on the given numbers (each float is exactly an mpf)."""
    xm, ym, qm = (mp.matrix(a.astype(np.float64).tolist()) for a in (x, y, q))
    coef = mp.lu_solve(xm.T * xm + mp.mpf(lam) * mp.eye(D), xm.T * ym)
    out = qm * coef
    return [out[i, 0] for i in range(out.rows)]


def _check(name: str, lam: float, x: np.ndarray, y: np.ndarray, q: np.ndarray) -> None:
    info = np.finfo(x.dtype)
    exact = _mp_ridge(x, y, q, lam)
    top = max(abs(v) for v in exact)
    representable = mp.mpf(float(info.tiny)) <= top < mp.mpf(float(info.max))
    predict = _ridge_family(lam)[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rank / conditioning warnings are not the point here
        if not representable:
            with pytest.raises(ValueError, match=r"underflowed|overflowed"):
                predict(torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(q))
            return
        got = predict(torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(q))
    got = got.detach().numpy().astype(np.float64).ravel()
    assert np.all(np.isfinite(got)), got
    err = max(abs(mp.mpf(float(g)) - e) for g, e in zip(got, exact, strict=True)) / top
    unit = float(info.eps) / 2
    assert float(err) <= C * unit * _magnitude(name, x, lam, unit), (name, float(err), float(top))


def _magnitude(name: str, x: np.ndarray, lam: float, unit: float) -> float:
    """``T`` of the relative error bound ``C·u·T``: the normal equations' ``κ(X)²`` (the tied
    layers add ``κ(X)``), with the condition number of the unscaled design (ridge only lowers
    it); the mesa layer's recursion adds ``‖X‖²/λ`` (scale-free), below ``1/√u`` where it runs
    (past that the layer solves each prefix directly)."""
    kappa = float(np.linalg.cond(x.astype(np.float64) / np.abs(x).max()))
    magnitude = kappa**2 + kappa
    if name == "MesaLayer":
        recursion = float(mp.fsum(mp.mpf(float(v)) ** 2 for v in x.ravel()) / lam)
        magnitude += recursion if recursion * unit**0.5 <= 1 else 0.0
    return magnitude


@pytest.mark.parametrize("name", RIDGE_FAMILY)
@pytest.mark.parametrize("lam", [1e-3, 0.5, 1e200])
@pytest.mark.parametrize("scale", F64, ids=[f"{s:g}" for s in F64])
def test_ridge_family_at_extreme_scale_float64(name: str, lam: float, scale: float) -> None:
    _check(name, lam, *_data(np.float64, (scale, scale, scale)))


@pytest.mark.parametrize("name", RIDGE_FAMILY)
@pytest.mark.parametrize("lam", [1e-3, 1e200])
def test_ridge_family_with_ordinary_data(name: str, lam: float) -> None:
    # λ = 1e200 on ordinary data: ŷ ≈ x* XᵀY / λ ≈ 1e-200, computed, not zero
    _check(name, lam, *_data(np.float64, (1.0, 1.0, 1.0)))


@pytest.mark.parametrize("name", RIDGE_FAMILY)
@pytest.mark.parametrize("scale", [1e150, 1e300], ids=["1e150", "1e300"])
def test_ridge_family_on_a_collinear_design_at_huge_scale(name: str, scale: float) -> None:
    # λ/s² ≈ 1e-300 or 1e-600 next to XᵀX: the ridge answer is the minimum-norm least-squares
    # one (numpy's pseudo-inverse) to that precision; a plain solve of XᵀX + λ/s² I would fail
    x, y, q = _data(np.float64, (1.0, 1.0, 1.0))
    x = np.c_[x, x[:, 0] - 2 * x[:, 1]]  # rank 3 of 4 columns
    q = np.c_[q, q[:, 0]]
    expected = q @ np.linalg.pinv(x) @ y
    args = (torch.from_numpy(x * scale), torch.from_numpy(y * scale), torch.from_numpy(q * scale))
    if name.endswith("cholesky"):  # documented: Cholesky refuses a rank-deficient design
        with pytest.raises(ValueError, match="numerically singular for the Cholesky"):
            _ridge_family(0.5)[name](*args)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = _ridge_family(0.5)[name](*args)
    kappa = np.linalg.cond(x[:, :3])  # of the kept spectrum
    bound = C * 2.0**-53 * (kappa**2 + kappa) * np.abs(expected).max()
    np.testing.assert_allclose(got.numpy() / scale, expected, rtol=0, atol=bound)


@pytest.mark.parametrize("name", RIDGE_FAMILY)
@pytest.mark.parametrize("scales", MIXED, ids=[",".join(f"{s:g}" for s in m) for m in MIXED])
def test_ridge_family_at_mixed_extreme_scales(name: str, scales: tuple[float, ...]) -> None:
    _check(name, 0.1, *_data(np.float64, scales))


@pytest.mark.parametrize("name", RIDGE_FAMILY)
@pytest.mark.parametrize("scale", F32, ids=[f"{s:g}" for s in F32])
def test_ridge_family_at_extreme_scale_float32(name: str, scale: float) -> None:
    _check(name, 0.1, *_data(np.float32, (scale, scale, scale)))


def test_the_ridge_underflow_names_the_cause() -> None:
    import attnreg

    x, y, q = _data(np.float64, (1e-300, 1e-300, 1e-300))
    with pytest.raises(ValueError, match=r"predict: the result underflowed .* ridge .* λ"):
        attnreg.Ridge(1e-3).predict(x, y, q)


def test_a_zero_answer_stays_zero_at_extreme_scale() -> None:
    # Y = 0: the answer is exactly zero at any scale, which is not an underflow
    import attnreg

    x, _, q = _data(np.float64, (1e-300, 1.0, 1e-300))
    out = attnreg.Ridge(1e-3).predict(x, np.zeros((N, 1)), q)
    assert np.all(out.numpy() == 0)


# ------------------------------------------------------------------------ softmax memories
SIMILARITIES = ("dot", "euclidean", "manhattan", "whitened_dot")
K_N, K_D = 6, 3


def _mp_scores(sim: str, q: list, k: list, beta: float) -> list[list[mp.mpf]]:
    """``β · sim(q, k)`` in 40 digits (``q``, ``k`` lists of rows of mpf)."""
    if sim == "whitened_dot":
        km = mp.matrix(k)
        metric = mp.inverse(km.T * km)
    out = []
    for qi in q:
        if sim == "dot":
            s = [mp.fsum(a * b for a, b in zip(qi, kj, strict=True)) for kj in k]
        elif sim == "euclidean":
            s = [-mp.sqrt(mp.fsum((a - b) ** 2 for a, b in zip(qi, kj, strict=True))) for kj in k]
        elif sim == "manhattan":
            s = [-mp.fsum(abs(a - b) for a, b in zip(qi, kj, strict=True)) for kj in k]
        else:
            qm = mp.matrix([qi]) * metric
            s = [mp.fsum(qm[0, t] * kj[t] for t in range(K_D)) for kj in k]
        out.append([beta * x for x in s])
    return out


def _score_errors(sim: str, q: list, k: list, scores: list, beta: float) -> list[list[mp.mpf]]:
    """``a_ij`` with ``|computed score − exact score| ≤ u·a_ij`` to first order: ``β·d·Σ|q||k|``
    for the dot product (sums of d products), ``d·|score|`` for the rest."""
    if sim != "dot":
        return [[abs(x) * K_D for x in row] for row in scores]
    return [
        [beta * K_D * mp.fsum(abs(x) * abs(y) for x, y in zip(qi, kj, strict=True)) for kj in k]
        for qi in q
    ]


def _softmax_reference(
    scores: list[mp.mpf], errors: list[mp.mpf], values: list
) -> tuple[list[mp.mpf], mp.mpf]:
    """The exact ``Σ_j softmax(s)_j v_j`` and the magnitude ``T`` of its first-order error
    bound ``u·T``: score errors ``u·a_j`` move the weights by ``Σ_{i≠j} w_i w_j (a_i + a_j)``
    (``δw_i = w_i (δs_i − Σ_j w_j δs_j)``), and the weighted sum of N values adds ``N``, all
    times ``max |v|``."""
    m = max(scores)
    w = [mp.exp(x - m) for x in scores]
    total = mp.fsum(w)
    w = [x / total for x in w]
    n, width = len(values), len(values[0])
    exact = [mp.fsum(w[j] * values[j][t] for j in range(n)) for t in range(width)]
    spread = mp.fsum(
        w[i] * w[j] * (errors[i] + errors[j]) for i in range(n) for j in range(n) if i != j
    )
    vmax = max(abs(x) for row in values for x in row)
    return exact, (n + spread) * vmax


def _softmax_case(
    sim: str, separation: str, scales: tuple[float, float], dtype: type, beta: float = 1.0
) -> None:
    from attnreg.memory import UniversalHopfieldMemory

    rng = np.random.default_rng(8)
    keys = (rng.normal(size=(K_N, K_D)) * scales[0]).astype(dtype)
    queries = (rng.normal(size=(2, K_D)) * scales[1]).astype(dtype)
    info = np.finfo(dtype)
    k = [[mp.mpf(float(a)) for a in row] for row in keys]
    q = [[mp.mpf(float(a)) for a in row] for row in queries]
    scores = _mp_scores(sim, q, k, beta)
    top_score = max(abs(x) for row in scores for x in row)
    memory = UniversalHopfieldMemory(sim, separation, beta=beta).store(torch.from_numpy(keys))
    if separation == "softmax" and top_score >= mp.mpf(float(info.max)):
        # the scores are not floating-point numbers (the arg-max needs only their order)
        with pytest.raises(ValueError, match="overflow"):
            memory.retrieve(torch.from_numpy(queries))
        return
    got = memory.retrieve(torch.from_numpy(queries)).numpy().astype(np.float64)
    assert np.all(np.isfinite(got)), got
    errors = _score_errors(sim, q, k, scores, beta)
    for row, s, a in zip(got, scores, errors, strict=True):
        if separation == "max":  # the exactly nearest pattern, its values unchanged
            best = max(range(K_N), key=lambda i: s[i])
            np.testing.assert_array_equal(row, keys[best].astype(np.float64))
            continue
        exact, magnitude = _softmax_reference(s, a, k)
        err = max(abs(mp.mpf(float(g)) - e) for g, e in zip(row, exact, strict=True))
        assert err <= C * info.eps / 2 * magnitude, (sim, scales, float(err), float(magnitude))


EXTREME = [1e-300, 1e-200, 1e-150, 1e150, 1e200, 1e300]


@pytest.mark.parametrize("separation", ["softmax", "max"])
@pytest.mark.parametrize("sim", SIMILARITIES)
@pytest.mark.parametrize("scale", EXTREME, ids=[f"{s:g}" for s in EXTREME])
def test_softmax_memories_at_extreme_scale_float64(sim: str, separation: str, scale: float):
    _softmax_case(sim, separation, (scale, scale), np.float64)


@pytest.mark.parametrize("sim", SIMILARITIES)
@pytest.mark.parametrize(
    "scales", [(1e-300, 1.0), (1.0, 1e-300), (1e200, 1e-200), (1e-150, 1e150)], ids=str
)
def test_softmax_memories_with_keys_and_queries_at_opposite_extremes(sim, scales):
    _softmax_case(sim, "softmax", scales, np.float64)


@pytest.mark.parametrize("separation", ["softmax", "max"])
@pytest.mark.parametrize("sim", SIMILARITIES)
@pytest.mark.parametrize("scale", F32, ids=[f"{s:g}" for s in F32])
def test_softmax_memories_at_extreme_scale_float32(sim: str, separation: str, scale: float):
    _softmax_case(sim, separation, (scale, scale), np.float32)


@pytest.mark.parametrize("scale", EXTREME, ids=[f"{s:g}" for s in EXTREME])
def test_modern_hopfield_is_the_softmax_step_or_refuses(scale: float) -> None:
    # one step Xᵀ softmax(β X ξ), exact scores in mpmath; the scores of patterns at 1e200 are
    # about 1e400: no float64 softmax exists, so a ValueError naming queries and patterns
    from attnreg.memory import ModernHopfield

    rng = np.random.default_rng(9)
    x, q = rng.normal(size=(K_N, K_D)) * scale, rng.normal(size=(2, K_D)) * scale
    hopfield = ModernHopfield(beta=0.5).store(torch.from_numpy(x))
    scores = _mp_scores(
        "dot", [[mp.mpf(a) for a in r] for r in q], [[mp.mpf(a) for a in r] for r in x], 0.5
    )
    if max(abs(v) for row in scores for v in row) >= mp.mpf(float(np.finfo(np.float64).max)):
        with pytest.raises(ValueError, match="queries, patterns: the softmax scores"):
            hopfield.retrieve(torch.from_numpy(q))
        return
    got = hopfield.retrieve(torch.from_numpy(q)).numpy()
    xs = [[mp.mpf(a) for a in r] for r in x]
    errors = _score_errors("dot", [[mp.mpf(a) for a in r] for r in q], xs, scores, 0.5)
    for row, s, a in zip(got, scores, errors, strict=True):
        exact, magnitude = _softmax_reference(s, a, xs)
        err = max(abs(mp.mpf(float(g)) - e) for g, e in zip(row, exact, strict=True))
        assert err <= C * 2.0**-53 * magnitude, (scale, float(err), float(magnitude))


@pytest.mark.parametrize("sim", SIMILARITIES)
@pytest.mark.parametrize("separation", ["identity", "power"])
@pytest.mark.parametrize("scale", EXTREME, ids=[f"{s:g}" for s in EXTREME])
def test_every_grid_cell_answers_or_refuses_never_nan(sim, separation, scale):
    # the other cells: a finite answer that is not zero everywhere (the patterns are not
    # zero), or a ValueError; the normalised weights do not depend on the scale, so the
    # answer is the one at unit scale times the scale
    from attnreg.memory import UniversalHopfieldMemory

    rng = np.random.default_rng(10)
    keys, queries = rng.normal(size=(K_N, K_D)), rng.normal(size=(2, K_D))
    memory = UniversalHopfieldMemory(sim, separation)
    base = memory.store(torch.from_numpy(keys)).retrieve(torch.from_numpy(queries)).numpy()
    try:
        got = memory.store(torch.from_numpy(keys * scale)).retrieve(
            torch.from_numpy(queries * scale)
        )
    except ValueError as exc:
        assert "overflow" in str(exc) or "underflow" in str(exc), str(exc)
        return
    got = got.numpy()
    assert np.all(np.isfinite(got)) and np.abs(got).max() > 0, got
    np.testing.assert_allclose(got, base * scale, rtol=1e-9, atol=0)


@pytest.mark.parametrize("name", [n for n in RIDGE_FAMILY if n != "PseudoInverseMemory"])
def test_ridge_family_rescales_each_task_of_a_batch_on_its_own(name: str) -> None:
    # one batch: a task at 1e200 (collinear-free), one at 1e-100 with Y ordinary, one ordinary
    lam = 0.5
    scales = [(1e200, 1e200, 1e200), (1e-100, 1.0, 1e100), (1.0, 1.0, 1.0)]
    tasks = [_data(np.float64, sc) for sc in scales]
    x, y, q = (np.stack([t[i] for t in tasks]) for i in range(3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = _ridge_family(lam)[name](
            torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(q)
        )
    for b, (xb, yb, qb) in enumerate(tasks):
        exact = _mp_ridge(xb, yb, qb, lam)
        top = max(abs(v) for v in exact)
        err = max(abs(mp.mpf(float(g)) - e) for g, e in zip(got[b].ravel(), exact, strict=True))
        bound = C * 2.0**-53 * _magnitude(name, xb, lam, 2.0**-53)
        assert float(err / top) <= bound, (b, float(err / top))


@pytest.mark.parametrize("scale", [*F64, 1e-100, 1e100], ids=str)
def test_whitened_kernel_smoother_is_scale_free(scale: float) -> None:
    # softmax(β x* (XᵀX)⁻¹ Xᵀ) Y: the scores do not change when X and X* share a scale, so the
    # answer is the scale times the unit-scale one, computed here with numpy and scipy
    from scipy.special import softmax

    import attnreg

    rng = np.random.default_rng(11)
    x, y, q = rng.normal(size=(10, 3)), rng.normal(size=(10, 1)), rng.normal(size=(2, 3))
    scores = 0.5 * q @ np.linalg.inv(x.T @ x) @ x.T
    expected = softmax(scores, axis=1) @ y
    got = attnreg.KernelSmoother(0.5, similarity="whitened_dot").predict(
        x * scale, y * scale, q * scale
    )
    kappa = np.linalg.cond(x.T @ x)  # the scores carry the metric's error u·κ
    magnitude = (10 + kappa * np.abs(scores).max()) * np.abs(y).max()
    np.testing.assert_allclose(got.numpy() / scale, expected, rtol=0, atol=C * 2.0**-53 * magnitude)
