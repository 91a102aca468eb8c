"""``verify`` — the equivalence certificate.

For every construction — the OLS-Transformer of Tan & Zhao (``W_Q = W_K = W_V = L`` with
``L Lᵀ = (XᵀX + λI)⁻¹``, ``W_P = Lᵀ XᵀY``), OLS as attention of Goulet Coulombe
(``(X* L)(X L)ᵀ Y``), linear self-attention layers as gradient-descent steps (von Oswald et al.
2023; GD++ and the preconditioned step of Ahn et al. 2023) and the mesa layer (causal ridge by
recursive least squares) — build the transformer module from task data, run its forward pass,
and compare with an independent numpy / scikit-learn reference
(:mod:`attnreg.studies.verify.references`) on the same (dtype-rounded) data. The sequence
layers of :mod:`attnreg.sequence` get a row each on every case too, each task read as one causal
sequence (:mod:`attnreg.studies.verify.sequence_rows`, which states their token mapping and
their rounding-error tolerances). The fixed-weight stacks (GD, GD++, preconditioned GD,
Newton–Schulz, kernel Richardson) get a row per depth on every case too, every hidden state
against the iteration in numpy (:mod:`attnreg.studies.verify.stack_rows`, which states their
error bounds).

Task shapes (:data:`CASES`): random designs with ``N > d``, ``N = d``, ``N < d`` (rank N), several
targets, a batch, an ill-conditioned design; and the degenerate designs users have — an all-zero
column, a constant column ``c ≠ 0`` (no intercept: a full-rank design with one flat column), a
collinear column (``x₆ = x₁ − 2x₂ + x₃``, exact in float32 and float64 because the data lie on a
``2⁻¹⁰`` grid), and two extreme scales: ``X``, ``Y`` and ``X*`` multiplied by ``a = b = 2^k`` with
``k = ±664`` in float64 (``a ≈ 1.5e±200``) and ``k = ±83`` in float32 (``a ≈ 9.7e±24``). Then
``XᵀX`` (entries about ``N a²``) overflows (``k > 0``: beyond ``2^1024`` resp. ``2^128``) or
underflows to zero (``k < 0``: below ``2^-1074`` resp. ``2^-149``) in that dtype, while ``X``, ``Y``
and the answer are ordinary numbers of it.

References. Rank-deficient designs: the minimum-norm least-squares answer
(``numpy.linalg.lstsq``, i.e. the pseudo-inverse) and scikit-learn ``Ridge`` for ridge rows.
Extreme scales use scale equivariance: ``ŷ(aX, bY, aX*) = b ŷ(X, Y, X*)`` and, with ridge,
``ŷ(aX, bY, aX*; λ) = b ŷ(X, Y, X*; λ/a²)``. The reference is ``b`` times the reference on the
unscaled data with ridge ``λ/a² = 2^(−2k) λ`` (:func:`~attnreg.studies.verify.references.
ridge_at_scale`). For ``k = +664`` that is 0 in float64 (ridge becomes least squares; in float32,
``2⁻¹⁶⁶ λ`` is kept). For ``k = −664`` it overflows: ridge then dominates, the answer is
``b a²/λ · X*XᵀY`` to first order, below ``2⁻¹⁰⁷⁴``, and the reference is its limit 0. On both tiny
shapes the ridge and mesa rows' exact answer is below the dtype's smallest normal number: the
contract there is a ``ValueError`` saying the result underflowed (never zeros, NaN or a
spurious value), so those rows pass when the construction raises it (error 0) and fail if it
returns anything.

The gradient-descent rows (LSA, GD++, preconditioned) are not scale-equivariant in ``X`` alone:
``GD(aX, bY; η/a², W₀ b/a) = (b/a) GD(X, Y; η, W₀)`` (each iterate scales by ``b/a``, the
prediction on ``aX*`` by ``b``). Their weights hold the step ``η`` and their attention scores
are ``x_iᵀx_j``: at ``a = 2^±664`` the step ``2^∓1328 η`` is not a float64 number and the scores
overflow or vanish whatever ``η`` is. So these rows fold the ``X`` scale into the step size, as
they already do on every shape: ``X`` enters divided by ``s = max_b ‖X_b‖₂/√N`` (then
``λ_max(XᵀX)/N ≤ 1`` and the steps are stable; ``X`` at scale ``a`` divided by ``a s`` is the same
data), ``X*`` unscaled, and ``Y`` and ``W₀`` are multiplied by ``b``; the reference is ``b`` times
the explicit loop. The tokens ``(x_i, y_i)`` are then extreme in their ``y`` part.

Error measures: ``max_abs_err = max |ŷ − y_ref|`` and
``rel_err = max_abs_err / max(max |y_ref|, t)`` with ``t`` the smallest normal number of the dtype
(an absolute error below it is gradual underflow, not a wrong answer). Tolerances on ``rel_err``:
1e-10 in float64, 1e-4 in float32. On the ill-conditioned case the data has ``κ(X) = 10⁶`` in
float64 (``κ(XᵀX) = 10¹²``) and ``κ(X) = 300`` in float32 (``κ(XᵀX) ≈ 10⁵``; float32 cannot
hold ``XᵀX`` much beyond that). The constructions that invert ``XᵀX + λI`` compute ``X L``
literally, with ``‖L‖ ∝ κ(X)``, so they are as accurate as the normal equations and get the
condition-scaled tolerance ``tol = max(base, u · κ(XᵀX + λI))`` (``u`` the unit roundoff; the
first-order forward-error bound of the normal equations, Higham 2002, §20.4), where ``κ`` is
taken over the kept spectrum: singular values above ``max(N, d) · eps · σ_max`` (numpy's
``lstsq`` default), of the unscaled data with the reference's ``λ/a²``
(:func:`inverted_condition`). Rows that invert nothing keep the base tolerance.

One row computes the normal equations literally: Tan & Zhao's layer as written forms
``S = XᵀX``, eigendecomposes it (``L = V Λ^{-1/2}``, so ``L Lᵀ = M = (S + E)⁻¹`` with ``E`` the
backward error of forming ``S`` and of the eigensolver) and its attention re-forms
``(XL)ᵀ(XL) = Lᵀ S L``: the output is ``X* M S M XᵀY``, whose first-order error is
``2 X* S⁻¹ E β̂`` — twice that of applying ``M`` once. Its tolerance (``Check.forms_gram``) is
``max(base, 2 √max(N, d) · u · κ(XᵀX))``: the factor 2 from the two applications of ``M``, and
``√max(N, d) · u`` the typical ``‖E‖/‖S‖`` of sums of ``N`` products and of a ``d × d``
eigensolver (probabilistic rounding-error analysis, Higham & Mary 2019).

A construction that raises (``ValueError``, or a ``RuntimeError`` from a linear-algebra kernel)
or returns inf/NaN on a shape gets a failed row with infinite error and a ``RuntimeWarning``
naming the exception or the non-finite output.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnreg.constructions import (
    LSAStack,
    MesaLayer,
    OLSAttention,
    OLSTransformer,
    VonOswaldSummaryLayer,
)
from attnreg.core.threads import torch_threads
from attnreg.core.whitening import ConditioningWarning, RankWarning
from attnreg.studies.verify import references as ref
from attnreg.studies.verify.config import DTYPES, VerifyConfig
from attnreg.studies.verify.sequence_rows import sequence_rows
from attnreg.studies.verify.stack_rows import gd_scale, stack_rows

NP_DTYPES: dict[str, type[np.floating[Any]]] = {"float64": np.float64, "float32": np.float32}
SCALE_EXPONENT = {"float64": 664, "float32": 83}
"""``k`` of the extreme-scale shapes: ``(2^k)²`` overflows the dtype and ``(2^-k)²`` underflows it
(float64: ``2^1328 > 2^1024``, ``2^-1328 < 2^-1074``; float32: ``2^166 > 2^128``,
``2^-166 < 2^-149``)."""
GRID = 2.0**-10
"""Spacing of the collinear shape's data: sums of a few such numbers are exact in float32."""


@dataclass(frozen=True)
class Case:
    """One task shape: ``B`` tasks of ``N`` context rows, ``d`` features, ``dy`` targets.

    ``design``: ``"random"``, ``"zero column"`` (one all-zero column per task, at a random
    position), ``"constant column"`` (one column equal to a constant ``c ≠ 0``) or
    ``"collinear"`` (the last column ``x₁ − 2x₂ + x₃``). ``scale``: ``+1`` / ``−1`` multiplies
    ``X``, ``Y`` and ``X*`` by ``2^±k`` (:data:`SCALE_EXPONENT`), ``0`` leaves them."""

    label: str
    b: int
    n: int
    d: int
    dy: int
    ill: bool = False
    design: str = "random"
    scale: int = 0

    def describe(self) -> str:
        return f"{self.label} (B={self.b}, N={self.n}, d={self.d}, dy={self.dy})"


CASES = (
    Case("N>d", 1, 32, 6, 1),
    Case("N=d", 1, 8, 8, 1),
    Case("N<d", 1, 5, 12, 1),
    Case("dy>1", 1, 24, 6, 3),
    Case("batch", 8, 24, 6, 2),
    Case("ill-conditioned", 1, 40, 8, 1, ill=True),
    Case("zero column", 2, 24, 6, 1, design="zero column"),
    Case("constant column", 1, 24, 6, 1, design="constant column"),
    Case("collinear", 2, 24, 6, 2, design="collinear"),
    Case("huge scale ×2^664 (f64) / 2^83 (f32)", 1, 32, 6, 1, scale=1),
    Case("tiny scale ×2^-664 (f64) / 2^-83 (f32)", 1, 32, 6, 1, scale=-1),
)


def condition_of_x(case: Case, dtype: str) -> float:
    """``κ(X)`` of a case's data: at most 10 if well-conditioned, 10⁶ (float64) / 300 (float32)
    if ill-conditioned (before a degenerate column is put in)."""
    if not case.ill:
        return 10.0
    return 1e6 if dtype == "float64" else 3e2


def scale_exponent(case: Case, dtype: str) -> int:
    """``k`` with ``X``, ``Y``, ``X*`` multiplied by ``2^k`` on this case (0: not scaled)."""
    return case.scale * SCALE_EXPONENT[dtype]


def _degenerate(x: np.ndarray, case: Case, dtype: str, rng: np.random.Generator) -> np.ndarray:
    """Put the case's degenerate column into one task's ``X`` (float64 values that the dtype
    holds exactly)."""
    x = x.copy()
    if case.design == "zero column":
        x[:, rng.integers(case.d)] = 0.0
    elif case.design == "constant column":
        x[:, rng.integers(case.d)] = np.round(rng.uniform(0.5, 2.0) / GRID) * GRID
    elif case.design == "collinear":
        xd = (np.round(x / GRID) * GRID).astype(NP_DTYPES[dtype])  # exact: a 2⁻¹⁰ grid
        xd[:, -1] = xd[:, 0] - 2 * xd[:, 1] + xd[:, 2]  # in the dtype, exact on the grid
        x = xd.astype(np.float64)
    elif case.design != "random":
        raise ValueError(f"unknown design {case.design!r}")
    return x


def make_task(case: Case, dtype: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random tasks ``X = U diag(s) Vᵀ·√N`` with singular values spread over ``[1/κ, 1]``, the
    case's degenerate column, ``Y = X w + 0.1 ε``, Gaussian queries; rounded to ``dtype`` and
    returned as float64, unscaled (the extreme scale is applied by :func:`run`)."""
    kappa = condition_of_x(case, dtype)
    r = min(case.n, case.d)
    xs, ys, qs = [], [], []
    for _ in range(case.b):
        u, _ = np.linalg.qr(rng.normal(size=(case.n, r)))
        v, _ = np.linalg.qr(rng.normal(size=(case.d, r)))
        s = np.logspace(0, -np.log10(kappa), r) if case.ill else rng.uniform(1 / kappa, 1, r)
        x = _degenerate((u * s) @ v.T * np.sqrt(case.n), case, dtype, rng)
        w = rng.normal(size=(case.d, case.dy))
        xs.append(x)
        ys.append(x @ w + 0.1 * rng.normal(size=(case.n, case.dy)))
        qs.append(rng.normal(size=(10, case.d)))
    np_dtype = NP_DTYPES[dtype]
    return {
        k: np.stack(v).astype(np_dtype).astype(np.float64)
        for k, v in (("x", xs), ("y", ys), ("q", qs))
    }


@dataclass(frozen=True)
class Check:
    """One row: a construction ``build(x, y, q, torch_dtype)`` run on the (scaled) data, its
    reference ``refer(x, y, q)`` on one unscaled task, and ``lam``: the λ of the inverted
    ``XᵀX + λI`` as the reference sees it (``λ/a²`` on an extreme-scale shape), ``None`` for
    the gradient-descent rows, which invert nothing. ``forms_gram``: the construction forms
    ``S = XᵀX`` and eigendecomposes it, and applies ``(S + E)⁻¹`` twice (module docstring: the
    tolerance ``2 √max(N, d) · u · κ``). ``per_prefix``: the construction solves one ridge
    problem per prefix ``X_{1:n}`` (the mesa layer), so ``κ`` is the worst prefix's."""

    construction: str
    reference: str
    lam: float | None
    build: Callable[..., Any]
    refer: Callable[..., np.ndarray]
    forms_gram: bool = False
    per_prefix: bool = False


# One small builder per LSA construction, so that a change of LSAStack's signature touches
# one line each.
def _lsa_gd(d: int, dy: int, etas: list[float], w0: np.ndarray | None, dt: torch.dtype) -> LSAStack:
    return LSAStack.gd(d, dy, etas, len(etas), w0, dt)


def _lsa_gd_plus_plus(
    d: int, dy: int, n: int, etas: list[float], gammas: list[float], dt: torch.dtype
) -> LSAStack:
    return LSAStack.gd_plus_plus(d, dy, n, etas, gammas, len(etas), dt)


def _lsa_preconditioned(
    precond: np.ndarray, dy: int, eta: float, w0: np.ndarray, dt: torch.dtype
) -> LSAStack:
    return LSAStack.preconditioned(precond, dy, eta, 1, w0, dt)


def _von_oswald_summary(
    d: int, dy: int, eta: float, w0: np.ndarray, dt: torch.dtype
) -> VonOswaldSummaryLayer:
    return VonOswaldSummaryLayer(d, dy, eta, 1, w0, dt)


def _checks(case: Case, cfg: VerifyConfig, rng: np.random.Generator, k: int = 0) -> list[Check]:
    """Every construction row of one case whose data are scaled by ``2^k``."""
    d, dy, n, lam = case.d, case.dy, case.n, cfg.ridge
    w0 = rng.normal(size=(dy, d))
    precond = rng.normal(size=(d, d))
    precond = precond @ precond.T / d + np.eye(d)
    w0_in = np.ldexp(w0, k)  # the GD rows' W₀ scales with Y (module docstring)
    lam_ref = ref.ridge_at_scale(lam, k)
    lam_mean_ref = ref.ridge_at_scale(n * lam, k)
    mesa_ref = ref.ridge_at_scale(cfg.mesa_lambda, k)
    eta_gd = [0.5, 0.4, 0.3]
    eta_sum = 0.5 / n  # the summary's η multiplies the context sum: the same step as η = 0.5

    def layer(module: Callable[[], Any]) -> Callable[..., Any]:
        return lambda x, y, q, dt: module().predict(x, y, q)

    return [
        Check(
            "OLS-Transformer (Tan & Zhao), queries",
            "numpy.linalg.lstsq",
            0.0,
            layer(OLSTransformer),
            ref.lstsq,
        ),
        Check(
            "OLS-Transformer (Tan & Zhao), own context = H Y",
            "numpy.linalg.lstsq",
            0.0,
            lambda x, y, q, dt: OLSTransformer().predict(x, y, x),
            lambda x, y, q: ref.lstsq(x, y, x),
        ),
        Check(
            "OLS-Transformer, ridge λ",
            "sklearn Ridge",
            lam_ref,
            layer(lambda: OLSTransformer(ridge=lam)),
            lambda x, y, q: ref.sklearn_ridge(x, y, q, lam_ref),
        ),
        Check(
            "OLS-Transformer, Tan & Zhao (eigh L, identity FFN)",
            "numpy.linalg.lstsq",
            0.0,
            layer(lambda: OLSTransformer(convention="tan-zhao")),
            ref.lstsq,
            forms_gram=True,
        ),
        Check(
            "OLS-attention (Goulet Coulombe), S = XᵀX",
            "numpy.linalg.lstsq",
            0.0,
            layer(OLSAttention),
            ref.lstsq,
        ),
        Check(
            "OLS-attention, S = XᵀX/N",
            "numpy.linalg.lstsq",
            0.0,
            layer(lambda: OLSAttention(covariance="mean")),
            ref.lstsq,
        ),
        Check(
            "OLS-attention, ridge λ, S = XᵀX",
            "sklearn Ridge",
            lam_ref,
            layer(lambda: OLSAttention(ridge=lam)),
            lambda x, y, q: ref.sklearn_ridge(x, y, q, lam_ref),
        ),
        Check(
            "OLS-attention, ridge λ, S = XᵀX/N",
            "sklearn Ridge (alpha = Nλ)",
            lam_mean_ref,
            layer(lambda: OLSAttention(ridge=lam, covariance="mean")),
            lambda x, y, q: ref.sklearn_ridge(x, y, q, lam_mean_ref),
        ),
        Check(
            "mesa layer (RLS), every prefix",
            "ridge solve per prefix",
            mesa_ref,
            lambda x, y, q, dt: MesaLayer(cfg.mesa_lambda)(x, y, x),
            lambda x, y, q: ref.ridge_per_prefix(x, y, mesa_ref),
            per_prefix=True,
        ),
        Check(
            "LSA, 1 GD step (von Oswald), W0 ≠ 0",
            "explicit GD loop",
            None,
            lambda x, y, q, dt: _lsa_gd(d, dy, eta_gd[:1], w0_in, dt).predict(x, y, q),
            lambda x, y, q: ref.gd_loop(x, y, q, eta_gd[:1], w0),
        ),
        Check(
            "LSA, von Oswald summary (literal), W0 ≠ 0",
            "explicit GD loop on ½Σ‖Wx − y‖²",
            None,
            lambda x, y, q, dt: _von_oswald_summary(d, dy, eta_sum, w0_in, dt).predict(x, y, q),
            lambda x, y, q: ref.gd_sum_loop(x, y, q, [eta_sum], w0),
        ),
        Check(
            "LSA stack, 3 layers = 3 GD steps",
            "explicit GD loop",
            None,
            lambda x, y, q, dt: _lsa_gd(d, dy, eta_gd, None, dt).predict(x, y, q),
            lambda x, y, q: ref.gd_loop(x, y, q, eta_gd, np.zeros((dy, d))),
        ),
        Check(
            "LSA stack, GD++ (2 layers)",
            "token loop",
            None,
            lambda x, y, q, dt: _lsa_gd_plus_plus(d, dy, n, [0.5, 0.4], [0.02, 0.01], dt).predict(
                x, y, q
            ),
            lambda x, y, q: ref.gd_plus_plus_loop(x, y, q, [0.5, 0.4], [0.02, 0.01]),
        ),
        Check(
            "LSA, preconditioned GD (Γ)",
            "explicit preconditioned GD loop",
            None,
            lambda x, y, q, dt: _lsa_preconditioned(precond, dy, 0.3, w0_in, dt).predict(x, y, q),
            lambda x, y, q: ref.gd_loop(x, y, q, [0.3], w0, precond),
        ),
    ]


def inverted_condition(x: np.ndarray, lam: float) -> float:
    """``κ(XᵀX + λI)`` over the kept (pseudo-inverse) spectrum — singular values above
    ``max(N, d) · eps · σ_max`` — the worst task of the batch (1 when ``λ`` is infinite: the
    ridge-dominated limit of an underflowing design)."""
    if not np.isfinite(lam):
        return 1.0
    worst = 1.0
    for xb in x:
        s = np.linalg.svd(xb, compute_uv=False)
        if s[0] == 0:
            continue
        s = s[s > max(xb.shape) * np.finfo(np.float64).eps * s[0]]
        worst = max(worst, float((s[0] ** 2 + lam) / (s[-1] ** 2 + lam)))
    return worst


def certificate(cfg: VerifyConfig | None = None) -> list[dict[str, Any]]:
    """Run every construction and every sequence layer
    (:mod:`~attnreg.studies.verify.sequence_rows`) on every case and dtype; one row per
    (construction, case, dtype)."""
    cfg = cfg or VerifyConfig()
    rows: list[dict[str, Any]] = []
    with torch_threads(1):  # hundreds of tiny layers: intra-op threads only synchronise
        for dtype in cfg.dtypes:
            rng = np.random.default_rng(cfg.seed)
            for index, case in enumerate(CASES):
                data = make_task(case, dtype, rng)
                k = scale_exponent(case, dtype)
                for check in _checks(case, cfg, rng, k):
                    rows.append(_compare(check, data, k, case, dtype, cfg))
                own = np.random.default_rng([cfg.seed, index])  # leaves `rng`'s draws as they were
                for seq in sequence_rows(data, k, dtype, cfg, own):
                    row = (seq.construction, seq.reference, seq.bound)
                    rows.append(_measure(row, seq.run, seq.expected, case, dtype, cfg))
                stacks = np.random.default_rng([cfg.seed, index, 1])
                rows += stack_rows(data, k, case.describe(), dtype, cfg, stacks)
    return rows


def _compare(
    check: Check,
    data: dict[str, np.ndarray],
    k: int,
    case: Case,
    dtype: str,
    cfg: VerifyConfig,
) -> dict[str, Any]:
    """Run one row: the construction on the data scaled by ``2^k`` (the GD rows: ``X``
    normalised, only ``Y`` scaled; module docstring), the reference on the unscaled data times
    ``2^k``."""
    x, y, q = data["x"], data["y"], data["q"]
    if check.lam is None:
        x = x / gd_scale(x)
        x_in, q_in = x, q
    else:
        x_in, q_in = np.ldexp(x, k), np.ldexp(q, k)
    dt = DTYPES[dtype]
    floor = float(np.finfo(NP_DTYPES[dtype]).tiny)
    xt, yt, qt = (torch.as_tensor(a, dtype=dt) for a in (x_in, np.ldexp(y, k), q_in))
    expected = np.ldexp(np.stack([check.refer(x[b], y[b], q[b]) for b in range(case.b)]), k)
    # ridge with a fixed λ on a tiny design: the answer (≈ b a²/λ · x* XᵀY, its reference the
    # limit 0 where λ/a² overflows) is below the dtype's range, and the contract is a
    # ValueError saying so, never zeros
    below_range = bool(check.lam and np.all(np.abs(expected) < floor))
    bound = 0.0
    if check.lam is not None:
        unit = float(np.finfo(NP_DTYPES[dtype]).eps) / 2
        factor = 2.0 * np.sqrt(max(x.shape[-2:])) if check.forms_gram else 1.0
        prefixes = range(1, x.shape[-2] + 1) if check.per_prefix else [x.shape[-2]]
        kappa = max(inverted_condition(x[:, :n], check.lam) for n in prefixes)
        bound = factor * unit * kappa
    row = (check.construction, check.reference, bound)
    return _measure(
        row, lambda: check.build(xt, yt, qt, dt), expected, case, dtype, cfg, below_range
    )


def _measure(
    row: tuple[str, str, float],
    build: Callable[[], Any],
    expected: np.ndarray,
    case: Case,
    dtype: str,
    cfg: VerifyConfig,
    below_range: bool = False,
) -> dict[str, Any]:
    """One row's dict: ``build()`` against ``expected``; ``row`` is (construction, reference,
    the relative error bound), the tolerance ``max(base, bound) · tol_scale``. ``below_range``:
    the exact answer is below the dtype's range, and only a ``ValueError`` saying it
    underflowed passes."""
    construction, reference, bound = row
    floor = float(np.finfo(NP_DTYPES[dtype]).tiny)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RankWarning)
            warnings.simplefilter("ignore", ConditioningWarning)
            got = build()
        got = got.detach().to(torch.float64).numpy() if isinstance(got, torch.Tensor) else got
        got = np.asarray(got, dtype=np.float64).reshape(expected.shape)
        problem = None if np.all(np.isfinite(got)) else "returned inf/NaN"
        if below_range and problem is None:
            problem = "returned a value where the answer is below the float range"
        max_abs = float(np.max(np.abs(got - expected))) if problem is None else float("inf")
    except (ValueError, RuntimeError) as exc:  # a refusal or a LAPACK failure: a failed row
        problem = f"raised {type(exc).__name__}: {exc}"
        max_abs = float("inf")
        if below_range and isinstance(exc, ValueError) and "underflowed" in str(exc):
            problem, max_abs = None, 0.0  # the refusal the contract asks for
    if problem is not None:
        warnings.warn(
            f"verify: {construction} on {case.describe()} ({dtype}) {problem}",
            RuntimeWarning,
            stacklevel=3,
        )
    rel = max_abs / max(float(np.max(np.abs(expected))), floor)
    tol = max(cfg.tolerance[dtype], bound) * cfg.tol_scale
    return {
        "construction": construction,
        "reference": reference,
        "dtype": dtype,
        "shape": case.describe(),
        "max_abs_err": max_abs,
        "rel_err": rel,
        "tol": tol,
        "passed": bool(rel <= tol),
    }
