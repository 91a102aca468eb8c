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
