"""``verify`` — the equivalence certificate.

For every construction of ``math.md``: build the transformer module from random task data, run
its forward pass, and compare with an independent numpy / scikit-learn reference
(:mod:`attnreg.studies.verify_references`) on the same (dtype-rounded) data.

Error measures: ``max_abs_err = max |ŷ − y_ref|`` and ``rel_err = max_abs_err / max |y_ref|``.
Tolerances on ``rel_err``: 1e-10 in float64, 1e-4 in float32. On the ill-conditioned case the
data has ``κ(X) = 10⁶`` in float64 (``κ(XᵀX) = 10¹²``, the case of ``quality.md``) and
``κ(X) = 300`` in float32 (``κ(XᵀX) ≈ 10⁵``; float32 cannot hold ``XᵀX`` much beyond that).
The constructions that invert ``XᵀX + λI`` compute ``X L`` literally, with ``‖L‖ ∝ κ(X)``, so
they are as accurate as the normal equations and get the condition-scaled tolerance
``tol = max(base, u · κ(XᵀX + λI))`` (``u`` the unit roundoff; the first-order forward-error
bound of the normal equations, Higham 2002, §20.4). Rows that invert nothing keep the base
tolerance.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from attnreg.constructions import LSAStack, MesaLayer, OLSAttention, OLSTransformer
from attnreg.core.validation import check_choice, check_positive
from attnreg.core.whitening import ConditioningWarning, RankWarning
from attnreg.studies import verify_references as ref
from attnreg.studies.common import FigureRecord, StudyResult

BASE_TOL = {"float64": 1e-10, "float32": 1e-4}
DTYPES = {"float64": torch.float64, "float32": torch.float32}


@dataclass
class VerifyConfig:
    """``attnreg verify`` settings: seed, dtypes, ridge λ and mesa λ, and a tolerance scale."""

    seed: int = 0
    dtypes: list[str] = field(default_factory=lambda: ["float64", "float32"])
    ridge: float = 0.5
    mesa_lambda: float = 1.0
    queries: int = 10
    tol_scale: float = 1.0


@dataclass(frozen=True)
class Case:
    """One task shape: ``B`` tasks of ``N`` context rows, ``d`` features, ``dy`` targets."""

    label: str
    b: int
    n: int
    d: int
    dy: int
    ill: bool = False

    def describe(self) -> str:
        return f"{self.label} (B={self.b}, N={self.n}, d={self.d}, dy={self.dy})"


CASES = (
    Case("N>d", 1, 32, 6, 1),
    Case("N=d", 1, 8, 8, 1),
    Case("N<d", 1, 5, 12, 1),
    Case("dy>1", 1, 24, 6, 3),
    Case("batch", 8, 24, 6, 2),
    Case("ill-conditioned", 1, 40, 8, 1, ill=True),
)


def condition_of_x(case: Case, dtype: str) -> float:
    """``κ(X)`` of a case's data: at most 10 if well-conditioned, 10⁶ (float64) / 300 (float32)
    if ill-conditioned."""
    if not case.ill:
        return 10.0
    return 1e6 if dtype == "float64" else 3e2


def make_task(case: Case, dtype: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random tasks ``X = U diag(s) Vᵀ·√N`` with singular values spread over ``[1/κ, 1]``,
    ``Y = X w + 0.1 ε``, Gaussian queries; rounded to ``dtype`` and returned as float64."""
    kappa = condition_of_x(case, dtype)
    r = min(case.n, case.d)
    xs, ys, qs = [], [], []
    for _ in range(case.b):
        u, _ = np.linalg.qr(rng.normal(size=(case.n, r)))
        v, _ = np.linalg.qr(rng.normal(size=(case.d, r)))
        s = np.logspace(0, -np.log10(kappa), r) if case.ill else rng.uniform(1 / kappa, 1, r)
        x = (u * s) @ v.T * np.sqrt(case.n)
        w = rng.normal(size=(case.d, case.dy))
        xs.append(x)
        ys.append(x @ w + 0.1 * rng.normal(size=(case.n, case.dy)))
        qs.append(rng.normal(size=(10, case.d)))
    np_dtype = np.float64 if dtype == "float64" else np.float32
    return {
        k: np.stack(v).astype(np_dtype).astype(np.float64)
        for k, v in (("x", xs), ("y", ys), ("q", qs))
    }


Check = tuple[str, str, float | None, Callable[..., Any], Callable[..., np.ndarray]]


def _checks(case: Case, cfg: VerifyConfig, rng: np.random.Generator) -> list[Check]:
    """(construction, reference, λ of the inverted ``XᵀX + λI`` or ``None`` if nothing is
    inverted, construction fn(x, y, q, dtype), reference fn)."""
    d, dy, n, lam = case.d, case.dy, case.n, cfg.ridge
    w0 = rng.normal(size=(dy, d))
    precond = rng.normal(size=(d, d))
    precond = precond @ precond.T / d + np.eye(d)

    def stack_gd(eta: list[float], w: np.ndarray | None) -> Callable[..., Any]:
        return lambda x, y, q, dt: LSAStack.gd(d, dy, n, eta, len(eta), w, dt).predict(x, y, q)

    def layer(module: Callable[[], Any]) -> Callable[..., Any]:
        return lambda x, y, q, dt: module().predict(x, y, q)

    checks: list[Check] = [
        (
            "OLS-Transformer (Tan & Zhao), queries",
            "numpy.linalg.lstsq",
            0.0,
            layer(OLSTransformer),
            ref.lstsq,
        ),
        (
            "OLS-Transformer (Tan & Zhao), own context = H Y",
            "numpy.linalg.lstsq",
            0.0,
            lambda x, y, q, dt: OLSTransformer().predict(x, y, x),
            lambda x, y, q: ref.lstsq(x, y, x),
        ),
        (
            "OLS-Transformer, ridge λ",
            "sklearn Ridge",
            lam,
            layer(lambda: OLSTransformer(ridge=lam)),
            lambda x, y, q: ref.sklearn_ridge(x, y, q, lam),
        ),
        (
            "OLS-attention (Goulet Coulombe), S = XᵀX",
            "numpy.linalg.lstsq",
            0.0,
            layer(OLSAttention),
            ref.lstsq,
        ),
        (
            "OLS-attention, S = XᵀX/N",
            "numpy.linalg.lstsq",
            0.0,
            layer(lambda: OLSAttention(covariance="mean")),
            ref.lstsq,
        ),
        (
            "OLS-attention, ridge λ, S = XᵀX",
            "sklearn Ridge",
            lam,
            layer(lambda: OLSAttention(ridge=lam)),
            lambda x, y, q: ref.sklearn_ridge(x, y, q, lam),
        ),
        (
            "OLS-attention, ridge λ, S = XᵀX/N",
            "sklearn Ridge (alpha = Nλ)",
            n * lam,
            layer(lambda: OLSAttention(ridge=lam, covariance="mean")),
            lambda x, y, q: ref.sklearn_ridge(x, y, q, n * lam),
        ),
        (
            "mesa layer (RLS), every prefix",
            "ridge solve per prefix",
            cfg.mesa_lambda,
            lambda x, y, q, dt: MesaLayer(cfg.mesa_lambda)(
                torch.as_tensor(x, dtype=dt),
                torch.as_tensor(y, dtype=dt),
                torch.as_tensor(x, dtype=dt),
            ),
            lambda x, y, q: ref.ridge_per_prefix(x, y, cfg.mesa_lambda),
        ),
    ]
    eta_gd = [0.5, 0.4, 0.3]
    checks += [
        (
            "LSA, 1 GD step (von Oswald), W0 ≠ 0",
            "explicit GD loop",
            None,
            stack_gd(eta_gd[:1], w0),
            lambda x, y, q: ref.gd_loop(x, y, q, eta_gd[:1], w0),
        ),
        (
            "LSA stack, 3 layers = 3 GD steps",
            "explicit GD loop",
            None,
            stack_gd(eta_gd, None),
            lambda x, y, q: ref.gd_loop(x, y, q, eta_gd, np.zeros((dy, d))),
        ),
        (
            "LSA stack, GD++ (2 layers)",
            "token loop",
            None,
            lambda x, y, q, dt: LSAStack.gd_plus_plus(
                d, dy, n, [0.5, 0.4], [0.02, 0.01], 2, dt
            ).predict(x, y, q),
            lambda x, y, q: ref.gd_plus_plus_loop(x, y, q, [0.5, 0.4], [0.02, 0.01]),
        ),
        (
            "LSA, preconditioned GD (Γ)",
            "explicit preconditioned GD loop",
            None,
            lambda x, y, q, dt: LSAStack.preconditioned(precond, dy, n, 0.3, 1, w0, dt).predict(
                x, y, q
            ),
            lambda x, y, q: ref.gd_loop(x, y, q, [0.3], w0, precond),
        ),
    ]
    return checks


def inverted_condition(x: np.ndarray, lam: float) -> float:
    """``κ(XᵀX + λI)`` over the kept (pseudo-inverse) spectrum, the worst task of the batch."""
    worst = 1.0
    for xb in x:
        s = np.linalg.svd(xb, compute_uv=False)
        s = s[s > max(xb.shape) * np.finfo(np.float64).eps * s[0]]
        worst = max(worst, float((s[0] ** 2 + lam) / (s[-1] ** 2 + lam)))
    return worst


def _scale_for_gd(x: np.ndarray) -> float:
    """Divide X by this so that ``λ_max(XᵀX)/N ≤ 1`` and the GD steps above stay stable."""
    return float(max(np.linalg.norm(xb, 2) / np.sqrt(xb.shape[0]) for xb in x))


def run(cfg: VerifyConfig | None = None) -> list[dict[str, Any]]:
    """Run every construction on every case and dtype; one row per (construction, case, dtype)."""
    cfg = cfg or VerifyConfig()
    check_positive("tol_scale", cfg.tol_scale)
    rows: list[dict[str, Any]] = []
    for dtype in cfg.dtypes:
        check_choice("dtype", dtype, DTYPES)
        rng = np.random.default_rng(cfg.seed)
        for case in CASES:
            data = make_task(case, dtype, rng)
            for name, reference, lam, build, refer in _checks(case, cfg, rng):
                x, y, q = data["x"], data["y"], data["q"]
                if lam is None:
                    x = x / _scale_for_gd(x)
                rows.append(_compare(name, reference, lam, build, refer, x, y, q, case, dtype, cfg))
    return rows


def _compare(
    name: str,
    reference: str,
    lam: float | None,
    build: Callable[..., Any],
    refer: Callable[..., np.ndarray],
    x: np.ndarray,
    y: np.ndarray,
    q: np.ndarray,
    case: Case,
    dtype: str,
    cfg: VerifyConfig,
) -> dict[str, Any]:
    dt = DTYPES[dtype]
    xt, yt, qt = (torch.as_tensor(a, dtype=dt) for a in (x, y, q))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RankWarning)
        warnings.simplefilter("ignore", ConditioningWarning)
        got = build(xt, yt, qt, dt)
        got = got.detach().to(torch.float64).numpy() if isinstance(got, torch.Tensor) else got
    expected = np.stack([refer(x[b], y[b], q[b]) for b in range(case.b)])
    got = got.reshape(expected.shape)
    max_abs = float(np.max(np.abs(got - expected)))
    rel = max_abs / max(float(np.max(np.abs(expected))), np.finfo(np.float64).tiny)
    unit = float(np.finfo(np.float64 if dtype == "float64" else np.float32).eps) / 2
    tol = BASE_TOL[dtype]
    if lam is not None:
        tol = max(tol, unit * inverted_condition(x, lam))
    tol *= cfg.tol_scale
    return {
        "construction": name,
        "reference": reference,
        "dtype": dtype,
        "shape": case.describe(),
        "max_abs_err": max_abs,
        "rel_err": rel,
        "tol": tol,
        "passed": bool(rel <= tol),
    }


def config_dict(cfg: VerifyConfig) -> dict[str, Any]:
    """The config as a plain dict (for stored results and captions)."""
    return asdict(cfg)


def run_study(cfg: VerifyConfig | None = None, out_dir: str | None = None) -> StudyResult:
    """The verify study in the common form: the certificate rows and a one-line summary per
    dtype (``out_dir`` is unused: the certificate is a table, not a figure)."""
    cfg = cfg or VerifyConfig()
    rows = run(cfg)
    summary = {}
    for dtype in cfg.dtypes:
        mine = [r for r in rows if r["dtype"] == dtype]
        worst = max(mine, key=lambda r: r["rel_err"] / r["tol"])
        summary[f"{dtype} certificate"] = (
            f"{sum(r['passed'] for r in mine)} of {len(mine)} checks pass; largest relative "
            f"error {max(r['rel_err'] for r in mine):.1e}; closest to its tolerance: "
            f"{worst['construction']} on {worst['shape']} ({worst['rel_err']:.1e} vs "
            f"{worst['tol']:.1e})."
        )
    figures = [] if out_dir is None else [certificate_figure(rows, out_dir, cfg)]
    return StudyResult("verify", config_dict(cfg), rows, figures, summary)


def certificate_figure(rows: list[dict[str, Any]], out_dir: str, cfg: VerifyConfig) -> FigureRecord:
    """Relative error of every check against its tolerance (log scale), one panel per dtype."""
    import matplotlib.pyplot as plt

    from attnreg.output import save_figure

    names = sorted({r["construction"] for r in rows}, key=[r["construction"] for r in rows].index)
    fig, axes = plt.subplots(
        1,
        len(cfg.dtypes),
        figsize=(6 * len(cfg.dtypes), 0.35 * len(names) + 1.5),
        sharey=True,
        squeeze=False,
    )
    for ax, dtype in zip(axes[0], cfg.dtypes, strict=True):
        for i, name in enumerate(names):
            mine = [r for r in rows if r["construction"] == name and r["dtype"] == dtype]
            errs = [max(r["rel_err"], 1e-18) for r in mine]
            ax.scatter(errs, [i] * len(errs), s=14, color="tab:blue", zorder=3)
            ax.scatter(
                [r["tol"] for r in mine],
                [i] * len(mine),
                marker="|",
                s=120,
                color="tab:red",
                zorder=2,
            )
        ax.set_xscale("log")
        ax.set_title(f"{dtype}: relative error (dots) vs tolerance (red bars)")
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].set_yticks(range(len(names)), names, fontsize=8)
    axes[0][0].invert_yaxis()
    paths = save_figure(fig, out_dir, "verify_certificate")
    return FigureRecord(
        paths[0],
        "Every construction's forward pass against its independent "
        f"reference over {len(CASES)} task shapes (seed {cfg.seed}); each dot is "
        "one shape, each red bar its tolerance (the far bars: the condition-scaled tolerance "
        "of the ill-conditioned shape).",
    )
