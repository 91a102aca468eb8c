"""The iterates a trained layer is matched against, batched over tasks, and the matching
protocol (Fu et al. 2024, "Transformers learn to achieve second-order convergence rates for
in-context linear regression": each layer's prediction against every iterate of each method).

Methods, each at its own per-task constants (float64):

* ``gd`` — ``W_{k+1} = W_k + η (C − W_k S)``, ``S = XᵀX/N``, ``C = YᵀX/N``, ``W_0 = 0``,
  ``η = 2/(λ_min + λ_max)`` of ``S`` on its range (the optimal constant step);
* ``preconditioned`` — the same with ``(C − W_k S) Γ``, ``Γ = Σ⁻¹`` (the population
  covariance), ``η = 2/(μ_min + μ_max)`` of ``ΓS``;
* ``newton`` — Newton–Schulz ``M_{k+1} = 2M_k − M_k S M_k`` on ``S = XᵀX`` from Fu et al.'s
  ``M_0 = αS``, ``α = 2/‖SSᵀ‖_F``; prediction ``Yᵀ X M_k x_q`` (the iterate of
  :class:`attnreg.constructions.NewtonStack` after layer ``2k + 1``; here ``k`` counts steps).

Iterate 0 is the prediction before any step (zero for ``gd`` and ``preconditioned``, ``M_0``'s
for ``newton``).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from attnreg.core.whitening import default_rtol
from attnreg.data.tasks import Tasks

METHODS = ("gd", "preconditioned", "newton")


def optimal_steps(s: torch.Tensor, n: int) -> torch.Tensor:
    """``2/(λ_min + λ_max)`` per task of the symmetric ``s`` ``(B, d, d)``, ``λ_min`` the
    smallest eigenvalue above numpy's rank tolerance ``λ_max · max(N, d) · eps`` (the range)."""
    lam = torch.linalg.eigvalsh((s + s.mT) / 2)
    hi = lam[:, -1]
    floor = hi * default_rtol(n, s.shape[-1], s.dtype)
    lo = torch.where(lam > floor.unsqueeze(-1), lam, torch.inf).min(-1).values
    return 2.0 / (lo + hi)


def gd_iterates(
    tasks: Tasks, eta: float | torch.Tensor, k_max: int, gamma: torch.Tensor | None = None
) -> torch.Tensor:
    """Predictions ``(k_max + 1, B, M, dy)`` of (preconditioned) GD from ``W_0 = 0``:
    ``W_{k+1} = W_k + η (C − W_k S) Γ`` (``Γ = I`` unless ``gamma``); ``eta`` one number or
    one per task ``(B,)``."""
    x, y, q = tasks.x_ctx, tasks.y_ctx, tasks.x_query
    n = x.shape[1]
    s, c = x.mT @ x / n, y.mT @ x / n
    step = torch.as_tensor(eta, dtype=x.dtype).reshape(-1, 1, 1)
    w = torch.zeros_like(c)
    out = [q @ w.mT]
    for _ in range(k_max):
        g = c - w @ s
        w = w + step * (g if gamma is None else g @ gamma)
        out.append(q @ w.mT)
    return torch.stack(out)


def newton_iterates(tasks: Tasks, k_max: int) -> torch.Tensor:
    """Predictions ``(k_max + 1, B, M, dy)`` ``Yᵀ X M_k x_q`` of Newton–Schulz from
    ``M_0 = αS``, ``α = 2/‖SSᵀ‖_F`` per task, ``S = XᵀX``."""
    x, y, q = tasks.x_ctx, tasks.y_ctx, tasks.x_query
    s, c = x.mT @ x, y.mT @ x
    alpha = 2.0 / torch.linalg.matrix_norm(s @ s.mT)
    m = alpha.reshape(-1, 1, 1) * s
    out = [q @ (c @ m).mT]
    for _ in range(k_max):
        m = 2 * m - m @ s @ m
        out.append(q @ (c @ m).mT)
    return torch.stack(out)


def method_iterates(tasks: Tasks, sigma: torch.Tensor, k_max: int) -> dict[str, torch.Tensor]:
    """Every method's predictions ``(k_max + 1, B, M, dy)`` on ``tasks`` (float64), the
    preconditioner ``Γ = sigma⁻¹`` (module docstring)."""
    t = tasks.to(dtype=torch.float64)
    x = t.x_ctx
    n = x.shape[1]
    s = x.mT @ x / n
    gamma = torch.linalg.inv(sigma.to(torch.float64))
    chol = torch.linalg.cholesky((gamma + gamma.mT) / 2)
    return {
        "gd": gd_iterates(t, optimal_steps(s, n), k_max),
        "preconditioned": gd_iterates(t, optimal_steps(chol.mT @ s @ chol, n), k_max, gamma),
        "newton": newton_iterates(t, k_max),
    }


def best_matches(
    layer_preds: torch.Tensor, iterates: torch.Tensor, reference: torch.Tensor
) -> list[dict[str, Any]]:
    """For every layer ``ℓ ≥ 1`` of ``layer_preds`` ``(L + 1, B, M, dy)`` the iterate ``k`` of
    ``iterates`` ``(K + 1, B, M, dy)`` nearest to it: ``best_match = argmin_k ‖Ŷ_ℓ − Ŷ_k‖_F``
    (ties: the smallest k), ``match_error = ‖Ŷ_ℓ − Ŷ_k‖_F / ‖Ŷ*‖_F`` with ``Ŷ*`` the
    ``reference`` prediction (OLS), and ``residual_cosine``, the cosine of ``Ŷ_ℓ − Ŷ*`` with
    ``Ŷ_k − Ŷ*`` (1: the layer is where the iterate is, relative to the solution)."""
    ref = reference.to(torch.float64)
    preds = layer_preds.to(torch.float64)
    its = iterates.to(torch.float64)
    scale = float(ref.norm())
    rows = []
    for layer in range(1, preds.shape[0]):
        dist = (its - preds[layer].unsqueeze(0)).flatten(1).norm(dim=1)
        k = int(torch.argmin(dist))
        a = (preds[layer] - ref).flatten()
        b = (its[k] - ref).flatten()
        denom = float(a.norm() * b.norm())
        rows.append(
            {
                "layer": layer,
                "best_match": k,
                "match_error": float(dist[k]) / scale,
                "residual_cosine": float(a @ b) / denom if denom > 0 else 1.0,
            }
        )
    return rows


# ---------------------------------------------------------------------------------------------
# Fu et al.'s metric: cosine similarity of the error vectors, best match by argmax

NEWTON_STEPS = 23
"""Fu et al. match each layer against Newton's iterates 1–23 (here 0–23: ``M_0``'s too)."""
GD_GRID = (*range(17), *(round(16 * 2 ** (i / 2)) for i in range(1, 13)))
"""GD steps matched: every step to 16, then a log grid (ratio √2) to 1024 (Fu et al.: a log
grid of GD steps up to about 1,000)."""


def gd_grid_iterates(tasks: Tasks, steps: tuple[int, ...] = GD_GRID) -> torch.Tensor:
    """Predictions ``(len(steps), B, M, dy)`` of GD from ``W_0 = 0`` at ``η = 1/λ_max(S)`` per
    task (the largest step whose error keeps its sign in every eigen-direction: no oscillation
    for the cosine to see), recorded at ``steps`` (ascending; float64)."""
    t = tasks.to(dtype=torch.float64)
    x, y, q = t.x_ctx, t.y_ctx, t.x_query
    n = x.shape[1]
    s, c = x.mT @ x / n, y.mT @ x / n
    eta = (1.0 / torch.linalg.eigvalsh((s + s.mT) / 2)[:, -1]).reshape(-1, 1, 1)
    w = torch.zeros_like(c)
    out, done = [], 0
    for k in steps:
        for _ in range(k - done):
            w = w + eta * (c - w @ s)
        done = k
        out.append(q @ w.mT)
    return torch.stack(out)


def error_cosines(
    preds: torch.Tensor, iterates: torch.Tensor, target: torch.Tensor
) -> torch.Tensor:
    """Per-task cosine similarity ``(L, K, B)`` of the error vectors ``Ŷ − y`` over each task's
    queries (and outputs): ``preds`` ``(L, B, M, dy)`` against ``iterates`` ``(K, B, M, dy)``,
    ``target`` ``(B, M, dy)``. A zero error vector has cosine 0 with everything (float64)."""
    y = target.to(torch.float64)

    def unit(p: torch.Tensor) -> torch.Tensor:
        e = (p.to(torch.float64) - y).flatten(2)
        norm = e.norm(dim=2, keepdim=True)
        return torch.where(norm > 0, e / torch.where(norm > 0, norm, 1.0), 0.0)

    return torch.einsum("lbm,kbm->lkb", unit(preds), unit(iterates))


def best_steps(cosines: torch.Tensor, steps: list[int] | tuple[int, ...]) -> list[int]:
    """Fu et al.'s best match: for each row ``ℓ`` of ``cosines`` ``(L, K, B)`` the step
    ``steps[k]`` maximising the mean cosine over the tasks (ties: the smallest step)."""
    return [steps[int(k)] for k in cosines.mean(-1).argmax(1)]


def line_r2(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """The least-squares line of ``ys`` on ``xs``: ``(slope, R²)`` (R² = 0 when the ``ys`` are
    all equal: nothing to explain; ``(nan, nan)`` with fewer than two distinct ``xs``)."""
    if len(set(xs)) < 2:
        return float("nan"), float("nan")
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((a - mx) ** 2 for a in xs)
    syy = sum((b - my) ** 2 for b in ys)
    sxy = sum((a - mx) * (b - my) for a, b in zip(xs, ys, strict=True))
    return sxy / sxx, (sxy * sxy / (sxx * syy) if syy > 0 else 0.0)


def loglog_slope(layers: list[int], steps: list[int]) -> float:
    """The slope of ``ln(step)`` on ``ln(ℓ)`` (1: linear growth; above 1: super-linear); a step
    of 0 counts as ``1/2`` (GD's step 0 is the zero prediction: below one step)."""
    slope, _ = line_r2([math.log(v) for v in layers], [math.log(max(v, 0.5)) for v in steps])
    return slope


def middle_layers(depth: int) -> list[int]:
    """The layers a trend is fitted over: ``3 … depth`` (Fu et al. exclude layers 1–2) when that
    leaves at least three, else every layer."""
    return list(range(3, depth + 1)) if depth - 2 >= 3 else list(range(1, depth + 1))


def bootstrap_tasks(n_tasks: int, replicates: int, seed: int) -> torch.Tensor:
    """``(replicates, n_tasks)`` task indices drawn with replacement (seeded: the same seed, the
    same replicates)."""
    gen = torch.Generator().manual_seed(int(seed))
    return torch.randint(0, n_tasks, (replicates, n_tasks), generator=gen)


def fu_trend(
    newton_cos: torch.Tensor,
    gd_cos: torch.Tensor,
    null_cos: torch.Tensor,
    null_gd_cos: torch.Tensor,
    replicates: int,
    seed: int,
) -> dict[str, Any]:
    """Fu et al.'s trend for one stack against the null of exact GD iterates.

    ``newton_cos`` ``(L, 1 + NEWTON_STEPS, B)`` and ``gd_cos`` ``(L, len(GD_GRID), B)`` are the
    per-task cosines of the stack's layers 1…L; ``null_cos`` and ``null_gd_cos`` the same of
    GD's iterates 1…L (:func:`gd_grid_iterates`: a stack that *is* GD). Over
    :func:`middle_layers`:

    * the trend: the best Newton step of every layer; over the middle ones the line's
      ``newton_slope`` and ``newton_r2``, the null's ``null_slope`` and ``null_r2``;
      ``trend_beaten`` — the share of the paired bootstrap replicates over the tasks (and the
      full sample) in which the trend does *not* beat the null (its slope is not positive, or
      its R² is not above the null's);
    * GD's steps: the best GD step of every layer; over the middle ones its log-log slope
      ``gd_loglog`` (1 linear) and the null's ``null_gd_loglog`` (exact GD against itself: 1);
      ``gd_beaten`` — the share of replicates in which ``gd_loglog`` is not above the null's.
    """
    layers = middle_layers(newton_cos.shape[0])
    pick = [ell - 1 for ell in layers]
    xs = [float(v) for v in layers]
    newton_steps = list(range(newton_cos.shape[1]))

    def fits(index: torch.Tensor | None) -> dict[str, Any]:
        def best(c: torch.Tensor, steps: list[int] | tuple[int, ...]) -> list[int]:
            return best_steps(c if index is None else c[:, :, index], steps)

        def mid(v: list[int]) -> list[int]:
            return [v[i] for i in pick]

        newton, null = best(newton_cos, newton_steps), best(null_cos, newton_steps)
        gd, null_gd = best(gd_cos, GD_GRID), best(null_gd_cos, GD_GRID)
        slope, r2 = line_r2(xs, [float(v) for v in mid(newton)])
        null_slope, null_r2 = line_r2(xs, [float(v) for v in mid(null)])
        gd_loglog = loglog_slope(layers, mid(gd))
        null_gd_loglog = loglog_slope(layers, mid(null_gd))
        return {
            "best_newton": newton,
            "null_newton": null,
            "best_gd": gd,
            "null_gd": null_gd,
            "newton_slope": slope,
            "newton_r2": r2,
            "null_slope": null_slope,
            "null_r2": null_r2,
            "gd_loglog": gd_loglog,
            "null_gd_loglog": null_gd_loglog,
            "trend_wins": bool(slope > 0 and r2 > null_r2),
            "gd_wins": bool(gd_loglog > null_gd_loglog),
        }

    full = fits(None)
    boot = [fits(i) for i in bootstrap_tasks(newton_cos.shape[2], replicates, seed)]
    every = [full, *boot]

    def spread(key: str) -> float:
        vals = [b[key] for b in boot]
        mean = sum(vals) / len(vals)
        return math.sqrt(sum((v - mean) ** 2 for v in vals) / max(len(vals) - 1, 1))

    return {
        "middle_layers": layers,
        **{k: v for k, v in full.items() if k not in ("trend_wins", "gd_wins")},
        "newton_r2_se": spread("newton_r2"),
        "newton_slope_se": spread("newton_slope"),
        "gd_loglog_se": spread("gd_loglog"),
        "replicates": replicates,
        "trend_beaten": sum(not b["trend_wins"] for b in every) / len(every),
        "gd_beaten": sum(not b["gd_wins"] for b in every) / len(every),
        "gd_capped": sum(v == GD_GRID[-1] for v in full["best_gd"]),  # every layer
    }
