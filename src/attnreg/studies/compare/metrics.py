"""Metrics of the compare study: attention regressors measured against ridge regression.

All inputs are torch tensors (any float dtype); every function returns a Python float.
Sources: Goulet Coulombe (arXiv 2504.09663) for the hat-matrix reading of attention; the
"Everything is matter" blog pipeline for the metric set.
"""

from __future__ import annotations

import torch


def mse(prediction: torch.Tensor, target: torch.Tensor) -> float:
    """Mean squared error ``mean((ŷ − y)²)`` over every entry."""
    if prediction.shape != target.shape:
        raise ValueError(
            f"prediction and target shapes differ: prediction {tuple(prediction.shape)}, "
            f"target {tuple(target.shape)}"
        )
    return float(((prediction.detach() - target.detach()) ** 2).mean())


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """Cosine similarity of the flattened tensors, ``⟨a, b⟩ / (‖a‖ ‖b‖)`` (NaN if one is 0).

    Applied to two matrices it is their uncentred correlation: ``cos² = 1 − min_s ‖a − s b‖² /
    ‖a‖²``, i.e. how well ``a`` is a multiple of ``b`` after the best scale ``s``.
    """
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {tuple(a.shape)} and {tuple(b.shape)}")
    x, y = a.detach().reshape(-1).double(), b.detach().reshape(-1).double()
    den = float(x.norm() * y.norm())
    return float(x @ y) / den if den > 0 else float("nan")


def relative_frobenius(a: torch.Tensor, reference: torch.Tensor) -> float:
    """``‖A − R‖_F / ‖R‖_F`` (e.g. an attention matrix against the hat matrix)."""
    if a.shape != reference.shape:
        raise ValueError(f"shapes differ: {tuple(a.shape)} and {tuple(reference.shape)}")
    return float((a.detach() - reference.detach()).norm() / reference.detach().norm())


def hat_matrix(x: torch.Tensor, lam: float, x_query: torch.Tensor | None = None) -> torch.Tensor:
    """The ridge hat matrix ``H = X* (XᵀX + λI)⁻¹ Xᵀ`` (``X* = X`` by default), ``(…, M, N)``."""
    xq = x if x_query is None else x_query
    eye = torch.eye(x.shape[-1], dtype=x.dtype, device=x.device)
    return xq @ torch.linalg.solve(x.mT @ x + lam * eye, x.mT)


def inverse_covariance(x: torch.Tensor) -> torch.Tensor:
    """``S⁻¹`` with ``S = XᵀX / N`` (pseudo-inverse if singular)."""
    return torch.linalg.pinv(x.mT @ x / x.shape[-2], hermitian=True)


def best_scale_distance(
    learned: torch.Tensor, constructed: torch.Tensor
) -> tuple[float, torch.Tensor]:
    """Relative distance after the best scale: ``s* = ⟨A, A_c⟩ / ‖A‖²`` and
    ``‖s* A − A_c‖_F / ‖A_c‖_F``; returns ``(distance, s*)``. This removes the one symmetry
    ``(s·W_Q W_Kᵀ, W_V W_P / s)`` of a linear attention layer, whose output
    ``X* (W_Q W_Kᵀ) Xᵀ · Y (W_V W_P)`` depends on the two products only."""
    a, c = learned.detach().double(), constructed.detach().double()
    s = (a * c).sum() / (a * a).sum().clamp_min(torch.finfo(a.dtype).tiny)
    return float((s * a - c).norm() / c.norm()), s
