"""Fuzz over random degenerate designs: the regression layers against numpy and scikit-learn.

320 seeded designs (64 for each of five shapes, ``N < d`` and ``N = d`` among them) mix an
all-zero column, a constant column, a collinear column (one rounding from an exact linear
combination: its distance to exact collinearity is at most ``u‖x_j‖``, under numpy's rank
threshold), duplicated rows, ill-conditioning (``κ(X)`` log-uniform up to 10⁶) and column scales
log-uniform in ``[1e-3, 1e3]``. Queries have generic entries in every column, so predictions
also test that the answer is the minimum-norm one.

Designs are built so that no singular value lies near numpy's rank threshold (where numpy and
the layer could decide the rank differently on different machines): zero columns are exact, a
constant ``c = ±m·2^e`` (``m`` odd, ``< 16``) centres to exactly zero, a collinear column is
``a₁x_i + a₂x_j`` with ``a`` in ``{±1/2, ±1, ±2}`` (one rounding, the sum: at most ``u σ₁``,
against a threshold of at least ``20 u σ₁``), and the other singular values are at least
``10⁻⁷ σ₁``.

Every design is solved by ``OLSTransformer`` and ``OLSAttention`` (``covariance="gram"`` and
``"mean"``; batched, one call per shape) and by ``OLSTransformerRegressor`` (``fit_intercept``
True and False), with ``λ = 0`` against numpy ``lstsq`` (minimum norm) and ``λ ∈ {1e-3, 0.1,
10}`` against scikit-learn ``Ridge(alpha, fit_intercept, solver="svd")`` (``alpha = Nλ`` for
``"mean"``).

Tolerance per design: ``rel ≤ max(1e-10, C · u · κ)`` with ``rel = max|ŷ − ŷ_ref| / max|ŷ_ref|``,
``u = 2⁻⁵³`` and ``κ = (σ₁² + α)/(σ_r² + α)`` the condition number of ``XᵀX + αI`` (``α`` the
gram-equivalent ridge) over the kept spectrum: the singular values above
``max(N, d) · eps · σ₁`` (numpy's ``lstsq`` default), of the centred ``X`` when an intercept is
fitted. The first-order forward-error bound of the normal equations is ``u · κ`` (Higham 2002,
§20.4); ``C = 32`` covers its constant for these sizes and the error of the reference itself.

With ridge (``α > 0``) ``κ`` is taken over all ``d`` eigenvalues of ``XᵀX + αI`` (a dropped
direction counts as ``σ = 0``: ``κ = (σ₁² + α)/α``), since ``XᵀX + αI`` is nonsingular and
nothing needs dropping. A direction one rounding from exact degeneracy has ``σ ≈ u σ₁``; the
exact ridge answer keeps it with weight ``σ/(σ² + α)``, about ``u σ₁/α``, and scikit-learn keeps
every ``σ > 10⁻¹⁵``, while a layer that drops X's numerical null space does not: the two differ
by up to ``u σ₁²/α ≈ u κ`` relative, however accurate each is.

The OLS-Transformer's ridge form (Tan & Zhao: tied ``W_Q = W_K = W_V = L``,
``W_P = (Lᵀ S L)⁺ Lᵀ XᵀY``) adds a term ``u κ(X)``, ``κ(X) = σ₁/σ_r`` over the kept spectrum: in a
direction with ``σ_i² ≪ α``, ``W_P`` holds ``√α (u_iᵀY)/σ_i`` and the forward pass multiplies it
by the computed ``(XL)ᵀ(XL)``, whose entries carry absolute rounding errors ``u σ₁ σ_j/α``; the
product's error is ``u σ₁/σ_i`` relative to the answer, whatever the implementation (any ``W_P``
of that norm leaves a residual ``u ‖W_P‖``). So its rows, and the regressor's, use
``κ(XᵀX + αI) + κ(X)`` — still a ``u · κ``-based bound. OLS-attention has no such term.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest
import sklearn
from sklearn.linear_model import Ridge as SkRidge

import attnreg
from attnreg.core.threads import torch_threads
from attnreg.core.whitening import ConditioningWarning, RankWarning
from attnreg.sklearn import OLSTransformerRegressor

SEED = 20251124
SHAPES = ((40, 6, 1), (24, 8, 2), (16, 16, 1), (6, 10, 1), (60, 5, 3))  # (N, d, dy)
PER_SHAPE = 64
QUERIES = 7
LAMBDAS = (0.0, 1e-3, 0.1, 10.0)
UNIT = np.finfo(np.float64).eps / 2
C = 32.0
FLOOR = 1e-10
MAX_KAPPA_X = 1e7


@dataclass(repr=False)
class Design:
    x: np.ndarray
    y: np.ndarray
    q: np.ndarray
    kinds: tuple[str, ...]
    refs: dict[tuple[float, bool], np.ndarray] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"Design(N, d = {self.x.shape}, {'+'.join(self.kinds)})"

    def reference(self, alpha: float, intercept: bool) -> np.ndarray:
        """:func:`_reference` on this design, computed once per (α, intercept)."""
        key = (alpha, intercept)
        if key not in self.refs:
            self.refs[key] = _reference(self.x, self.y, self.q, alpha, intercept)
        return self.refs[key]


def _base(rng: np.random.Generator, n: int, d: int) -> tuple[np.ndarray, np.ndarray, str]:
    """Gaussian, ill-conditioned (κ(X) log-uniform in [1, 1e6]) or column-scaled X; the column
    scales (also used for the queries)."""
    kind = str(rng.choice(["gaussian", "ill", "scaled"]))
    scales = np.ones(d)
    if kind == "ill":
        r = min(n, d)
        u, _ = np.linalg.qr(rng.normal(size=(n, r)))
        v, _ = np.linalg.qr(rng.normal(size=(d, r)))
        s = np.logspace(0, -rng.uniform(0, 6), r)
        return (u * s) @ v.T * np.sqrt(n), scales, kind
    if kind == "scaled":
        scales = 10.0 ** rng.uniform(-3, 3, d)
    return rng.normal(size=(n, d)) * scales, scales, kind


def _kept(x: np.ndarray) -> np.ndarray:
    """Singular values above numpy's lstsq threshold ``max(N, d) · eps · σ₁``."""
    s = np.linalg.svd(x, compute_uv=False)
    return s[s > max(x.shape) * np.finfo(np.float64).eps * s[0]]


def _design(rng: np.random.Generator, n: int, d: int, dy: int) -> Design:
    while True:
        x, scales, base = _base(rng, n, d)
        kinds = [base]
        columns = list(rng.permutation(d))
        for kind in rng.choice(
            ["zero", "constant", "collinear", "duplicate rows"], size=rng.integers(1, 3)
        ):
            if kind == "zero" and columns:
                x[:, columns.pop()] = 0.0
            elif kind == "constant" and columns:
                j = columns.pop()
                # c = ±m·2^e (m odd, < 16): N copies sum and average exactly, so with an
                # intercept the centred column is exactly zero on every machine
                e = int(np.round(np.log2(scales[j]) + rng.uniform(-3, 3)))
                x[:, j] = rng.choice([-1, 1]) * np.ldexp(rng.choice([1, 3, 5, 7, 9, 15]), e)
            elif kind == "collinear" and len(columns) >= 3:
                j, i1, i2 = columns.pop(), columns[0], columns[1]
                a1, a2 = rng.choice([-2.0, -1.0, -0.5, 0.5, 1.0, 2.0], 2)  # exact products
                x[:, j] = a1 * x[:, i1] + a2 * x[:, i2]  # one rounding: the sum
                scales[j] = max(scales[i1], scales[i2])
            elif kind == "duplicate rows":
                dup = rng.choice(n, size=max(1, n // 4), replace=False)
                x[dup] = x[rng.choice(n, size=len(dup))]
            kinds.append(str(kind))
        if _kept(x)[0] / _kept(x)[-1] <= MAX_KAPPA_X:
            break
    w = rng.normal(size=(d, dy)) / scales[:, None]
    y = x @ w + 0.1 * rng.normal(size=(n, dy))
    q = rng.normal(size=(QUERIES, d)) * scales
    return Design(x, y, q, tuple(kinds))


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Thousands of tiny fits: intra-op threads only add synchronisation (and contention), and
    scikit-learn's input checks on these finite arrays cost more than the fits."""
    with torch_threads(1), sklearn.config_context(assume_finite=True):
        yield


@pytest.fixture(scope="module")
def designs() -> list[list[Design]]:
    """``PER_SHAPE`` designs for each shape (one list per shape, batched together)."""
    rng = np.random.default_rng(SEED)
    return [[_design(rng, n, d, dy) for _ in range(PER_SHAPE)] for n, d, dy in SHAPES]


def _kappa(x: np.ndarray, alpha: float) -> float:
    """``κ(XᵀX + αI)``: over the kept spectrum for ``α = 0`` (the pseudo-inverse), over all
    ``d`` eigenvalues for ``α > 0`` (module docstring)."""
    if alpha == 0:
        s = _kept(x)
        return float(s[0] ** 2 / s[-1] ** 2)
    s = np.linalg.svd(x, compute_uv=False)
    low = s[-1] if len(s) == x.shape[1] else 0.0
    return float((s[0] ** 2 + alpha) / (low**2 + alpha))


def _tolerance(x: np.ndarray, alpha: float, tied: bool = False) -> float:
    """``max(1e-10, C u κ)``; ``tied``: the OLS-Transformer's ridge form, ``κ + κ(X)`` (module
    docstring)."""
    kappa = _kappa(x, alpha)
    if tied and alpha > 0:
        s = _kept(x)
        kappa += float(s[0] / s[-1])
    return max(FLOOR, C * UNIT * kappa)


def _rel(got: np.ndarray, expected: np.ndarray) -> float:
    return float(np.max(np.abs(got - expected)) / np.max(np.abs(expected)))


def _reference(x: np.ndarray, y: np.ndarray, q: np.ndarray, alpha: float, intercept: bool):
    """numpy lstsq (minimum norm; centred for an intercept) at α = 0, else sklearn Ridge."""
    if alpha > 0:
        model = SkRidge(alpha=alpha, fit_intercept=intercept, solver="svd").fit(x, y)
        return model.predict(q).reshape(len(q), -1)
    if not intercept:
        return q @ np.linalg.lstsq(x, y, rcond=None)[0]
    xm, ym = x.mean(axis=0), y.mean(axis=0)
    beta = np.linalg.lstsq(x - xm, y - ym, rcond=None)[0]
    return (q - xm) @ beta + ym


def _quiet(fn: Callable[[], np.ndarray]) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RankWarning)
        warnings.simplefilter("ignore", ConditioningWarning)
        return fn()


def _report(failures: list[str], total: int) -> str:
    return f"{len(failures)} of {total} designs outside the bound:\n" + "\n".join(failures[:12])


LAYERS = {
    "OLSTransformer gram": (attnreg.OLSTransformer, "gram"),
    "OLSTransformer mean": (attnreg.OLSTransformer, "mean"),
    "OLSAttention gram": (attnreg.OLSAttention, "gram"),
    "OLSAttention mean": (attnreg.OLSAttention, "mean"),
}


@pytest.mark.parametrize("lam", LAMBDAS)
@pytest.mark.parametrize("layer", list(LAYERS))
def test_layers_on_degenerate_designs(designs, layer, lam):
    cls, covariance = LAYERS[layer]
    failures, total = [], 0
    for group in designs:
        x = np.stack([g.x for g in group])
        y = np.stack([g.y for g in group])
        q = np.stack([g.q for g in group])
        n = x.shape[1]
        model = cls(ridge=lam, covariance=covariance)
        got = _quiet(lambda m=model, x=x, y=y, q=q: m.predict(x, y, q).numpy())
        alpha = lam * (n if covariance == "mean" else 1)
        for i, g in enumerate(group):
            total += 1
            expected = g.reference(alpha, intercept=False)
            tied = cls is attnreg.OLSTransformer
            rel, tol = _rel(got[i], expected), _tolerance(g.x, alpha, tied)
            if not rel <= tol:
                failures.append(f"  N,d={g.x.shape} {'+'.join(g.kinds)}: rel {rel:.1e} > {tol:.1e}")
    assert total >= 300
    assert not failures, _report(failures, total)


@pytest.mark.parametrize("lam", LAMBDAS)
@pytest.mark.parametrize("intercept", [True, False])
def test_regressor_on_degenerate_designs(designs, intercept, lam):
    failures, total = [], 0
    for g in (g for group in designs for g in group):
        total += 1
        y = g.y[:, 0] if g.y.shape[1] == 1 else g.y
        model = OLSTransformerRegressor(ridge=lam, fit_intercept=intercept)
        got = _quiet(lambda m=model, g=g, y=y: m.fit(g.x, y).predict(g.q)).reshape(len(g.q), -1)
        expected = g.reference(lam, intercept)
        xc = g.x - g.x.mean(axis=0) if intercept else g.x
        rel, tol = _rel(got, expected), _tolerance(xc, lam, tied=True)
        if not rel <= tol:
            failures.append(f"  N,d={g.x.shape} {'+'.join(g.kinds)}: rel {rel:.1e} > {tol:.1e}")
    assert total >= 300
    assert not failures, _report(failures, total)


def test_the_fuzz_covers_every_degeneracy(designs):
    """The seeded designs contain each kind, rank-deficient ones, and κ(X) close to 10⁶."""
    flat = [g for group in designs for g in group]
    kinds = {k for g in flat for k in g.kinds}
    assert kinds == {"gaussian", "ill", "scaled", "zero", "constant", "collinear", "duplicate rows"}
    deficient = sum(len(_kept(g.x)) < min(g.x.shape) for g in flat)
    assert deficient >= 100
    assert max(_kappa(g.x, 0.0) for g in flat) >= 1e10  # κ(XᵀX) = κ(X)²
    assert any(g.x.shape[0] < g.x.shape[1] for g in flat)


def test_degenerate_columns_are_below_the_rank_threshold(designs):
    """Zero and collinear columns (the latter one rounding away from exact) lie below numpy's
    rank threshold with a margin, so every solver drops the same directions."""
    for g in (g for group in designs for g in group):
        n, d = g.x.shape
        if n >= d:
            s = np.linalg.svd(g.x, compute_uv=False)
            threshold = max(n, d) * np.finfo(np.float64).eps * s[0]
            lost = sum(k in ("zero", "collinear") for k in g.kinds)
            assert np.sum(s <= threshold / 2) >= lost, g.kinds


# ---- targeted cases -------------------------------------------------------------------------


def _zero_column_tasks(seed: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(6, 24, 5))
    for b in range(6):
        x[b, :, b % 5] = 0.0
    y = x @ rng.normal(size=(6, 5, 1)) + 0.1 * rng.normal(size=(6, 24, 1))
    return x, y, rng.normal(size=(6, 4, 5))


@pytest.mark.parametrize("covariance", ["gram", "mean"])
@pytest.mark.parametrize("cls", [attnreg.OLSTransformer, attnreg.OLSAttention])
def test_zero_column_with_ridge(cls, covariance):
    x, y, q = _zero_column_tasks()
    lam = 0.1
    alpha = lam * (x.shape[1] if covariance == "mean" else 1)
    got = cls(ridge=lam, covariance=covariance).predict(x, y, q).numpy()
    for b in range(len(x)):
        expected = _reference(x[b], y[b], q[b], alpha, intercept=False)
        tied = cls is attnreg.OLSTransformer
        assert _rel(got[b], expected) <= _tolerance(x[b], alpha, tied), b


@pytest.mark.parametrize("intercept", [True, False])
def test_regressor_zero_and_constant_column_with_ridge(intercept):
    """With an intercept the constant column centres to (nearly) zero: the same null space."""
    x, y, q = _zero_column_tasks(2)
    x[0, :, 3] = 2.7
    model = OLSTransformerRegressor(ridge=0.1, fit_intercept=intercept).fit(x[0], y[0, :, 0])
    expected = _reference(x[0], y[0], q[0], 0.1, intercept)[:, 0]
    xc = x[0] - x[0].mean(axis=0) if intercept else x[0]
    assert _rel(model.predict(q[0]), expected) <= _tolerance(xc, 0.1, tied=True)


@pytest.mark.parametrize("size", [1e-13, 1e-6])
@pytest.mark.parametrize("lam", [0.1, 10.0])
@pytest.mark.parametrize("cls", [attnreg.OLSTransformer, attnreg.OLSAttention])
def test_ridge_with_a_tiny_but_kept_column(cls, lam, size):
    """A column ``size · σ₁`` small (above the rank threshold ``24 eps σ₁ ≈ 5e-15 σ₁``, so it is
    kept) changes the ridge answer by about ``size`` relative; ``κ(XᵀX + λI) ≤ (σ₁² + λ)/λ`` is
    small. OLS-attention must be that accurate; the OLS-Transformer's tied ridge form within
    ``u (κ + κ(X))`` (module docstring)."""
    rng = np.random.default_rng(6)
    x = rng.normal(size=(24, 5))
    x[:, 3] = size * np.linalg.norm(x, 2) * rng.normal(size=24) / np.sqrt(24)
    y = x @ rng.normal(size=(5, 1)) + 0.1 * rng.normal(size=(24, 1))
    q = rng.normal(size=(6, 5))
    got = _quiet(lambda: cls(ridge=lam).predict(x, y, q).numpy())
    expected = _reference(x, y, q, lam, intercept=False)
    assert _rel(got, expected) <= _tolerance(x, lam, tied=cls is attnreg.OLSTransformer)


# Powers of two near 1e±300: scaling by them is exact, so the scaled answer is known exactly.
HUGE, TINY = 2.0**997, 2.0**-997


def _ridge_at_scale(x, y, q, lam, a, b):
    """``ŷ(aX, bY, aX*; λ) = b ŷ(X, Y, X*; λ/a²)``, from the unscaled data: least squares when
    ``λ/a²`` is negligible (``a`` huge), the ridge-dominated limit ``(b a²/λ) X*XᵀY`` when
    ``λ/a²`` overflows (``a`` tiny; the next term is smaller by ``a²σ₁²/λ``)."""
    if lam == 0 or a > 1:
        return b * _reference(x, y, q, 0.0, intercept=False)
    return (q @ (x.T @ y)) * (b * a) * (a / lam)


SCALED = {
    "OLSTransformer": lambda lam: attnreg.OLSTransformer(ridge=lam).predict,
    "OLSTransformer mean": lambda lam: (
        attnreg.OLSTransformer(ridge=lam / 24, covariance="mean").predict
    ),
    "OLSAttention": lambda lam: attnreg.OLSAttention(ridge=lam).predict,
    "OLSAttention mean": lambda lam: (
        attnreg.OLSAttention(ridge=lam / 24, covariance="mean").predict
    ),
    "Ridge": lambda lam: attnreg.Ridge(lam).predict,
    "Mesa": lambda lam: attnreg.Mesa(lam).predict,
    "MesaLayer": lambda lam: attnreg.MesaLayer(lam).predict,
}


SCALES = {
    "ols-1e300": (0.0, HUGE, HUGE),
    "ols-1e-300": (0.0, TINY, TINY),
    "ridge-1e300": (0.1, HUGE, HUGE),
    "ridge-x1e-300-y1e300": (0.1, TINY, HUGE),
}
NEEDS_RIDGE = ("Ridge", "Mesa", "MesaLayer")


@pytest.mark.parametrize(
    ("name", "scale"),
    [(n, s) for n in SCALED for s in SCALES if not (n in NEEDS_RIDGE and SCALES[s][0] == 0)],
)
def test_extreme_scale_is_equivariant_or_refused(name, scale):
    """X, X* at 2^±997 and Y at 2^±997 (about 1e±300): ``XᵀX`` overflows or underflows. The
    answer is the scale-equivariant one or a ``ValueError`` — never zeros, inf or NaN."""
    lam, a, b = SCALES[scale]
    rng = np.random.default_rng(3)
    x, q = rng.normal(size=(24, 5)), rng.normal(size=(4, 5))
    y = x @ rng.normal(size=(5, 1)) + 0.1 * rng.normal(size=(24, 1))
    expected = _ridge_at_scale(x, y, q, lam, a, b)
    assert np.all(np.isfinite(expected)) and np.min(np.abs(expected)) > 0
    try:
        got = _quiet(lambda: SCALED[name](lam)(x * a, y * b, q * a).numpy())
    except ValueError as exc:
        assert str(exc)
        return
    assert np.all(np.isfinite(got)), got
    tied = name.startswith("OLSTransformer")
    assert _rel(got, expected) <= _tolerance(x, lam, tied), (got, expected)


@pytest.mark.parametrize("intercept", [True, False])
@pytest.mark.parametrize(
    ("lam", "a"),
    [(0.0, HUGE), (0.0, TINY), (0.1, HUGE)],
    ids=["ols-1e300", "ols-1e-300", "ridge-1e300"],
)
def test_regressor_extreme_scale_is_equivariant_or_refused(intercept, lam, a):
    """X, X*, y at 2^±997: the answer scales by the same factor, or a ``ValueError``."""
    rng = np.random.default_rng(4)
    x, q = rng.normal(size=(30, 4)), rng.normal(size=(5, 4))
    y = x @ rng.normal(size=4) + 0.1 * rng.normal(size=30) + 1.5
    expected = a * _reference(x, y[:, None], q, 0.0, intercept)[:, 0]
    try:
        got = OLSTransformerRegressor(ridge=lam, fit_intercept=intercept).fit(x * a, y * a)
    except ValueError as exc:
        assert str(exc)
        return
    pred = got.predict(q * a)
    assert np.all(np.isfinite(pred))
    xc = x - x.mean(axis=0) if intercept else x
    assert _rel(pred, expected) <= _tolerance(xc, 0.0)


def _collinear(seed: int = 5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = np.round(rng.normal(size=(20, 5)) * 1024) / 1024  # on a grid: the sum below is exact
    x[:, 4] = x[:, 0] + 2 * x[:, 1]
    y = x @ rng.normal(size=(5, 1)) + 0.1 * rng.normal(size=(20, 1))
    return x, y, rng.normal(size=(3, 5))


@pytest.mark.parametrize("lam", [0.0, 0.1])
@pytest.mark.parametrize("design", ["collinear", "zero column"])
@pytest.mark.parametrize("cls", [attnreg.OLSTransformer, attnreg.OLSAttention])
def test_cholesky_on_rank_deficient_x_refuses_or_is_right(cls, design, lam):
    """Cholesky cannot see a null space: a ``ValueError`` naming the rank deficiency, or the
    right answer (minimum norm without ridge, ridge with it) — never another one."""
    x, y, q = _collinear()
    if design == "zero column":
        x[:, 2] = 0.0
    try:
        got = _quiet(lambda: cls(ridge=lam, method="cholesky").predict(x, y, q).numpy())
    except ValueError as exc:
        assert "rank" in str(exc).lower(), str(exc)
        return
    expected = _reference(x, y, q, lam, intercept=False)
    assert _rel(got, expected) <= _tolerance(x, lam, tied=cls is attnreg.OLSTransformer)
