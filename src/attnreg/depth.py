"""The depth atlas: how many attention layers each fixed-weight stack needs against conditioning.

For one in-context regression task per cell — ``x ~ N(0, Σ)`` with ``κ(Σ) = kappa``
(:func:`attnreg.data.tasks.random_covariance`), ``w ~ N(0, I)``, ``y = wᵀx + noise·ε``, ``N =
n_ctx`` context examples below, at and above ``d`` — each stack runs **once**, ``cap`` layers
deep, and the prediction is read from its hidden state after every layer
(:meth:`attnreg.models.token.TokenModel.depth_predictions`). ``layers_needed`` is the first depth
``L`` whose relative error ``‖Ŷ_L − Ŷ*‖_F / ‖Ŷ*‖_F`` (over the queries and outputs) is ``≤ ε``;
``None`` when the stack's depth is reached first (``best_error`` then says how close it got —
a rounding floor of order ``u·κ̂`` is not a cap).

The reference ``Ŷ*`` is the minimum-norm least-squares prediction ``X* X⁺ Y``
(:class:`attnreg.estimators.OLS`; ridge λ = 0 — with ``N < d`` the sample covariance is
singular and every method but ``preconditioned`` converges to this interpolant from zero). The
stacks, each at the task's own best constant (fixed weights chosen for the task, as a
construction may):

* ``gd`` — :meth:`attnreg.constructions.LSAStack.gd`, ``η = 2/(λ_min + λ_max)`` of
  ``S = XᵀX/N`` (nonzero spectrum). Contraction ``c = (κ̂ − 1)/(κ̂ + 1)`` per layer, so theory
  ``⌈ln(1/ε) / ln(1/c)⌉`` layers (≈ ``κ̂/2 · ln(1/ε)``).
* ``gd++`` — :meth:`attnreg.constructions.LSAStack.gd_plus_plus` (von Oswald et al. 2023, §4):
  layer ℓ also maps ``x ← (I − γ_ℓ S_ℓ) x``, eigenvalues ``λ ↦ λ(1 − γ_ℓλ)²``. With
  ``γ_ℓ = 1/(3 λ_max,ℓ)`` (the largest γ that keeps the map monotone on the spectrum) the
  extremes evolve as ``hi ← 4hi/9``, ``lo ← lo(1 − lo/(3hi))²``, so ``κ_ℓ`` falls by about
  ``4/9`` per layer; the transform stops once ``κ_ℓ ≤`` :data:`GDPP_STOP`. ``η_ℓ = 2/(lo_ℓ +
  hi_ℓ)``; theory: the first ``L`` with ``Π_{ℓ<L} (κ_ℓ − 1)/(κ_ℓ + 1) ≤ ε``.
* ``preconditioned`` — :meth:`attnreg.constructions.LSAStack.preconditioned` with
  ``Γ = Σ⁻¹`` (the population covariance: the task generator's, not estimated) and
  ``η = 2/(λ_min + λ_max)`` of ``ΓS``; theory as ``gd`` with ``κ̂ = κ(ΓS)``. Its fixed point is
  the minimum-``Γ⁻¹``-norm interpolant, which differs from ``X⁺Y`` when ``N < d``: its reference
  is ``(Lᵀx*)ᵀ (XL)⁺ Y`` with ``Γ = LLᵀ`` (the same as OLS when ``N ≥ d``).
* ``newton`` — :class:`attnreg.constructions.NewtonStack` (λ = 0, ``S = XᵀX``), Fu et al.'s
  start ``α = 2/‖SSᵀ‖_F``, ``ρ = ‖I − S M_0‖`` on the range of ``S``; ``‖I − S M_k‖ =
  ρ^{2^k}`` gives ``k = ⌈log₂(ln ε / ln ρ)⌉`` steps, read after layer ``2k + 1`` (``M_0``'s
  prediction after layer 2), so theory ``max(2k + 1, 2)`` layers. Since ``ρ ≈ 1 − 2/κ̂²·(…)``
  (``M_0 = αS`` squares the condition number), ``k ≈ 2 log₂ κ̂ + log₂ ln(1/ε)``. Its stack is at
  most :data:`NEWTON_MAX_STEPS` steps deep: with ``N < d`` rounding in the null space of ``S``
  doubles every step (Söderström & Stewart 1974), so a much deeper stack would overflow.

``κ̂`` (``kappa_sample``) is the condition number of the matrix each method iterates on, on its
range: ``S`` (``gd``, ``gd++``, ``newton``) or ``ΓS`` (``preconditioned``). GD's theory is
linear in κ̂, Newton's logarithmic: :func:`fit_slopes`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from attnreg.constructions.lsa import LSAStack
from attnreg.constructions.newton import NewtonStack, newton_alpha
from attnreg.core.threads import torch_threads
from attnreg.core.validation import check_nonnegative, check_positive_int, check_seed
from attnreg.core.whitening import RankWarning, default_rtol
from attnreg.data.tasks import Tasks, TaskSampler, random_covariance
from attnreg.estimators import OLS
from attnreg.models.token import TokenModel

METHODS = ("gd", "gd++", "preconditioned", "newton")
GDPP_STOP = 1.01  # gd++ stops transforming the inputs once κ_ℓ ≤ this
NEWTON_MAX_STEPS = 64  # the newton stack's depth is at most 1 + 2·64 layers


@dataclass(frozen=True)
class AtlasGrid:
    """The cells of an atlas: ``d``, the population condition numbers, context sizes,
    tolerances, the layer cap, queries per task, label noise and the seed."""

    d: int = 8
    kappas: tuple[float, ...] = (1.0, 10.0, 1e2, 1e3, 1e4)
    n_ctx: tuple[int, ...] = (4, 8, 32)
    eps: tuple[float, ...] = (1e-2, 1e-6, 1e-12)
    cap: int = 300
    n_query: int = 16
    noise: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        check_positive_int("d", self.d)
        check_positive_int("cap", self.cap)
        check_positive_int("n_query", self.n_query)
        check_nonnegative("noise", self.noise)
        check_seed("seed", self.seed)
        for n in self.n_ctx:
            check_positive_int("n_ctx", n)
        for k in self.kappas:
            if not (math.isfinite(k) and k >= 1):
                raise ValueError(f"kappas: each must be a finite number >= 1, got {k}")
        for e in self.eps:
            if not (0 < e < 1):
                raise ValueError(f"eps: each must lie in (0, 1), got {e}")


QUICK = AtlasGrid()  # N ∈ {4, 8, 32}, cap 300: seconds on one core; most GD cells hit the cap
FULL = AtlasGrid(d=8, n_ctx=(4, 8, 16, 64), cap=5000)  # minutes on one core


def atlas_task(d: int, kappa: float, n_ctx: int, n_query: int, noise: float, seed: int) -> Tasks:
    """One float64 task: ``x ~ N(0, Σ)``, ``κ(Σ) = kappa`` (``Σ`` from ``seed``), ``w ~ N(0,
    I)``, labels with Gaussian noise of std ``noise``."""
    sigma = random_covariance(d, kappa, seed=seed)
    sampler = TaskSampler(
        d=d, n_ctx=n_ctx, n_query=n_query, inputs="gaussian", covariance=sigma, noise_std=noise
    )
    return sampler.sample(1, torch.Generator().manual_seed(seed), dtype=torch.float64)


def range_spectrum(x: torch.Tensor) -> torch.Tensor:
    """The eigenvalues of ``S = XᵀX/N`` on its range, ascending: the squared singular values of
    ``X/√N`` above numpy's rank tolerance ``σ_max · max(N, d) · eps``."""
    n, d = x.shape
    sv = torch.linalg.svdvals(x / math.sqrt(n))
    sv = sv[sv > sv[0] * default_rtol(n, d, x.dtype)]
    return sv.flip(0) ** 2


def contraction_layers(kappa: float, eps: float) -> int:
    """GD at the optimal step: ``⌈ln(1/ε) / ln((κ + 1)/(κ − 1))⌉`` layers (1 when κ = 1)."""
    c = (kappa - 1) / (kappa + 1)
    return 1 if c <= 0 else max(1, math.ceil(math.log(eps) / math.log(c)))


def newton_layers(rho: float, eps: float) -> int | None:
    """``‖I − S M_k‖ = ρ^{2^k} ≤ ε`` after ``k = ⌈log₂(ln ε / ln ρ)⌉`` steps; the stack shows
    ``M_k``'s prediction after layer ``2k + 1`` (``M_0``'s after layer 2). ``None`` when ``ρ``
    rounds to 1 (``α λ_min² < u``: ``κ̂² ≳ 1/u``, no count the float64 start can promise)."""
    if rho <= eps:
        return 2
    if rho >= 1:
        return None
    k = max(0, math.ceil(math.log2(math.log(eps) / math.log(rho))))
    return max(2 * k + 1, 2)


def gdpp_schedule(
    lo: float, hi: float, layers: int
) -> tuple[list[float], list[float], list[float]]:
    """``(η_ℓ, γ_ℓ, κ_ℓ)`` for ``layers`` GD++ layers from the extreme eigenvalues ``lo, hi`` of
    ``S = XᵀX/N`` on its range (module docstring); ``γ_ℓ`` multiplies ``S_ℓ`` (the mean)."""
    etas, gammas, kappas = [], [], []
    for _ in range(layers):
        kappas.append(hi / lo)
        etas.append(2.0 / (lo + hi))
        gamma = 1.0 / (3.0 * hi) if hi / lo > GDPP_STOP else 0.0
        gammas.append(gamma)
        lo, hi = lo * (1 - gamma * lo) ** 2, hi * (1 - gamma * hi) ** 2
    return etas, gammas, kappas


def gdpp_layers(kappas: Sequence[float], eps: float) -> int | None:
    """The first ``L`` with ``Π_{ℓ<L} (κ_ℓ − 1)/(κ_ℓ + 1) ≤ ε``, or ``None`` within the schedule."""
    log_err = 0.0
    for i, k in enumerate(kappas):
        c = (k - 1) / (k + 1)
        if c <= 0:
            return i + 1
        log_err += math.log(c)
        if log_err <= math.log(eps):
            return i + 1
    return None


def relative_errors(predictions: torch.Tensor, reference: torch.Tensor) -> list[float]:
    """``‖Ŷ_L − Ŷ*‖_F / ‖Ŷ*‖_F`` for every depth of ``predictions`` ``(L + 1, B, M, dy)``."""
    diff = (predictions - reference.unsqueeze(0)).flatten(1).norm(dim=1)
    return [float(v) for v in diff / reference.norm()]


def first_depth(errors: Sequence[float], eps: float) -> int | None:
    """The first depth whose error is ``≤ eps`` (``None`` if none is)."""
    return next((i for i, e in enumerate(errors) if e <= eps), None)


def _reference(tasks: Tasks, transform: torch.Tensor | None = None) -> torch.Tensor:
    x, q = tasks.x_ctx, tasks.x_query
    if transform is not None:
        x, q = x @ transform, q @ transform
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RankWarning)
        return OLS().predict(x, tasks.y_ctx, q)


def method_run(
    method: str, tasks: Tasks, sigma: torch.Tensor, cap: int
) -> tuple[TokenModel, torch.Tensor, float, Any]:
    """The stack of ``method`` for this task (``cap`` layers; ``newton`` at most
    ``1 + 2·NEWTON_MAX_STEPS``), its reference prediction, ``κ̂`` and the data its theory needs
    (``κ̂`` for gd / preconditioned, the ``κ_ℓ`` schedule for gd++, ``ρ`` for newton)."""
    x = tasks.x_ctx[0]
    n, d = x.shape
    dy = tasks.y_ctx.shape[-1]
    lam = range_spectrum(x)
    lo, hi = float(lam[0]), float(lam[-1])
    if method == "gd":
        model = LSAStack.gd(d, dy, 2.0 / (lo + hi), steps=cap)
        return model, _reference(tasks), hi / lo, hi / lo
    if method == "gd++":
        etas, gammas, kappas = gdpp_schedule(lo, hi, cap)
        model = LSAStack.gd_plus_plus(d, dy, n, etas, [g / n for g in gammas], steps=cap)
        return model, _reference(tasks), hi / lo, kappas
    if method == "preconditioned":
        gamma = torch.linalg.inv(sigma)
        chol = torch.linalg.cholesky((gamma + gamma.mT) / 2)
        mu = range_spectrum(x @ chol)
        k_hat = float(mu[-1] / mu[0])
        model = LSAStack.preconditioned(gamma, dy, 2.0 / float(mu[0] + mu[-1]), steps=cap)
        return model, _reference(tasks, chol), k_hat, k_hat
    if method == "newton":
        alpha = newton_alpha(x)
        sum_lam = lam * n
        rho = float((1 - alpha * sum_lam**2).abs().max())
        steps = max(1, min(NEWTON_MAX_STEPS, (cap - 1) // 2))
        return NewtonStack(d, dy, steps, alpha), _reference(tasks), hi / lo, rho
    raise ValueError(f"method: must be one of {', '.join(METHODS)}, got {method!r}")


def theory_layers(method: str, data: Any, eps: float) -> int | None:
    """The layers the convergence theory predicts (module docstring) from ``method_run``'s
    theory data."""
    if method in ("gd", "preconditioned"):
        return contraction_layers(float(data), eps)
    if method == "gd++":
        return gdpp_layers(data, eps)
    return newton_layers(float(data), eps)


def depth_atlas(
    grid: AtlasGrid = QUICK, methods: Sequence[str] = METHODS, n_threads: int | None = 1
) -> list[dict[str, Any]]:
    """One row per (method, κ, N, ε): ``method``, ``kappa`` (population), ``kappa_sample``
    (κ̂), ``n_ctx``, ``eps``, ``layers_needed`` (``None`` when the stack's depth ``cap`` is
    reached first), ``theory_layers``, ``cap`` and ``best_error`` (the smallest relative error
    at any depth). Each stack runs once per cell; every ε is read from that run. ``n_threads``:
    torch intra-op threads for the run (one: the matrices are tiny)."""
    with torch_threads(n_threads):
        return _atlas_rows(grid, methods)


def _atlas_rows(grid: AtlasGrid, methods: Sequence[str]) -> list[dict[str, Any]]:
    for method in methods:
        if method not in METHODS:
            raise ValueError(f"methods: each must be one of {', '.join(METHODS)}, got {method!r}")
    rows: list[dict[str, Any]] = []
    for kappa in grid.kappas:
        sigma = random_covariance(grid.d, kappa, seed=grid.seed)
        for n in grid.n_ctx:
            tasks = atlas_task(grid.d, kappa, n, grid.n_query, grid.noise, grid.seed)
            for method in methods:
                model, ref, k_hat, data = method_run(method, tasks, sigma, grid.cap)
                preds = model.depth_predictions(tasks.x_ctx, tasks.y_ctx, tasks.x_query)
                errors = relative_errors(preds, ref)
                for eps in grid.eps:
                    rows.append(
                        {
                            "method": method,
                            "kappa": float(kappa),
                            "kappa_sample": k_hat,
                            "n_ctx": n,
                            "eps": float(eps),
                            "layers_needed": first_depth(errors, eps),
                            "theory_layers": theory_layers(method, data, eps),
                            "cap": model.n_layers,
                            "best_error": min(errors),
                        }
                    )
    return rows


def fit_slopes(rows: Sequence[dict[str, Any]], x: str = "kappa_sample") -> list[dict[str, Any]]:
    """Least-squares lines through the atlas, per (method, ``n_ctx``, ``eps``), over the cells
    that reached ε: ``layers_needed`` (and ``theory_layers``) against ``κ`` for the GD methods
    (``gd``, ``preconditioned``: linear theory) and against ``log₁₀ κ`` for ``newton`` and
    ``gd++``. ``x`` names the κ column (``kappa_sample`` or ``kappa``). A group without two
    distinct abscissae gets ``slope = None`` (``preconditioned`` with ``Γ = Σ⁻¹`` sees the same
    κ̂ at every population κ)."""
    groups: dict[tuple[str, int, float], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["method"], row["n_ctx"], row["eps"]), []).append(row)
    out = []
    for (method, n, eps), group in groups.items():
        log = method in ("newton", "gd++")
        done = [r for r in group if r["layers_needed"] is not None]
        theory = [r for r in group if r["theory_layers"] is not None]

        def abscissa(r: dict[str, Any], log: bool = log) -> float:
            return math.log10(r[x]) if log else float(r[x])

        out.append(
            {
                "method": method,
                "n_ctx": n,
                "eps": eps,
                "against": f"log10({x})" if log else x,
                "points": len(done),
                "slope": _slope([abscissa(r) for r in done], [r["layers_needed"] for r in done]),
                "theory_slope": _slope(
                    [abscissa(r) for r in theory], [r["theory_layers"] for r in theory]
                ),
            }
        )
    return out


def _slope(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """The least-squares slope of ``ys`` on ``xs`` (``None`` unless the ``xs`` spread over more
    than ``1e-9`` of their magnitude: equal κ̂ up to rounding give no line)."""
    if not xs or max(xs) - min(xs) <= 1e-9 * max(abs(v) for v in xs):
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((a - mx) ** 2 for a in xs)
    return sum((a - mx) * (b - my) for a, b in zip(xs, ys, strict=True)) / sxx
