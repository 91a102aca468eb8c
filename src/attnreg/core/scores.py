"""Similarity and separation: the first two stages of ``sep(β · sim(Q, K)) · V``.

The forms of Millidge et al. (2022, "Universal Hopfield Networks", Table 1), plus the signed
power ``sign(s)·|s|ᵖ``, the derivative of the energy ``|s|ᵖ⁺¹/(p+1)`` (Krotov & Hopfield 2016
use the even powers of it).
"""

from __future__ import annotations

import math

import torch

from attnreg.core.validation import check_choice

SIMILARITIES = ("dot", "scaled_dot", "whitened_dot", "euclidean", "manhattan")
BILINEAR = ("dot", "scaled_dot", "whitened_dot")
UHN_SEPARATIONS = ("identity", "softmax", "power", "max")
"""The separations of Millidge et al. (2022), Table 1 (the capacity study's grid)."""
SEPARATIONS = (*UHN_SEPARATIONS, "signed_power")
MEAN_SEPARATIONS = ("identity", "power", "signed_power")
"""The separations whose weights have no fixed sum, so that a context mean (weights / N) and
``normalize`` (weights / their sum) mean something; softmax and max weights sum to one."""


def similarity_scores(
    queries: torch.Tensor,
    keys: torch.Tensor,
    similarity: str,
    metric: torch.Tensor | None = None,
) -> torch.Tensor:
    """``sim(Q, K)`` of shape ``(…, M, N)``.

    dot ``q M kᵀ`` (``M = I`` without a metric); scaled_dot ``q M kᵀ/√d``; whitened_dot ``q M kᵀ``
    with ``M`` required (e.g. ``S⁻¹``); euclidean ``−‖q − k‖₂``; manhattan ``−‖q − k‖₁``
    (Millidge et al. 2022, Table 1).
    """
    check_choice("similarity", similarity, SIMILARITIES)
    if similarity in BILINEAR:
        if similarity == "whitened_dot" and metric is None:
            raise ValueError("metric: whitened_dot needs the metric matrix M (e.g. S⁻¹)")
        q = queries if metric is None else queries @ metric
        scores = q @ keys.mT
        return scores / math.sqrt(queries.shape[-1]) if similarity == "scaled_dot" else scores
    if similarity == "euclidean":
        return -torch.cdist(queries, keys, p=2.0, compute_mode="donot_use_mm_for_euclid_dist")
    return -torch.cdist(queries, keys, p=1.0)


def separate(scores: torch.Tensor, separation: str, power: int = 2) -> torch.Tensor:
    """``sep(scores)`` along the last (key) axis: identity, softmax, ``sᵖ``, signed power
    ``sign(s)·|s|ᵖ`` (the derivative of the energy ``|s|ᵖ⁺¹/(p+1)``), or one-hot arg-max."""
    check_choice("separation", separation, SEPARATIONS)
    if separation == "identity":
        return scores
    if separation == "softmax":
        return torch.softmax(scores, dim=-1)
    if separation == "power":
        return scores.pow(power)
    if separation == "signed_power":
        return scores.sign() * scores.abs().pow(power)
    hot = torch.zeros_like(scores)
    return hot.scatter_(-1, scores.argmax(-1, keepdim=True), 1.0)


def weight_mass(weights: torch.Tensor, separation: str) -> torch.Tensor:
    """What ``normalize`` divides by, per query: ``Σ_j w_j`` (identity, power) or ``Σ_j |w_j|``
    (signed_power, whose weights carry both signs), kept as a ``(…, M, 1)`` axis."""
    return (weights.abs() if separation == "signed_power" else weights).sum(-1, keepdim=True)
