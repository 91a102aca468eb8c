"""The whitened patterns ``K̃ = G^{+1/2} K`` of the energy family (:mod:`attnreg.memory.energy`):
the polar factor of the patterns, from the package's whitening."""

from __future__ import annotations

from typing import Any

import torch

from attnreg.core.scaling import power_of_two_scale
from attnreg.core.validation import as_tensor
from attnreg.core.whitening import whitening_matrix


def _root_pinv(x: torch.Tensor, rtol: float | None) -> torch.Tensor:
    """``(XᵀX)^{+1/2}`` (``(B, d, d)``) from the package's whitening ``L = V Λ^{-1/2}`` of ``x``
    (``(B, N, d)``): ``V Λ^{-1/2} Vᵀ = L Λ^{1/2} Lᵀ`` over the kept directions."""
    white = whitening_matrix(x, rtol=rtol, warn=False, checked=True)
    eig = white.eigenvalues
    assert eig is not None  # the SVD path reports the eigenvalues
    lmat = white.matrix
    return (lmat * eig.clamp_min(0).sqrt().unsqueeze(-2)) @ lmat.mT


def whitened_patterns(patterns: Any, *, rtol: float | None = None) -> torch.Tensor:
    """The whitened patterns ``K̃ = G^{+1/2} K = K S^{+1/2}`` of ``patterns`` ``K``: ``(N, d)``,
    or ``(B, N, d)`` for ``B`` memories at once.

    For ``N ≤ d``, the Gram whitening ``G^{+1/2} K`` with ``G = K Kᵀ``: the whitening of ``Kᵀ``,
    whose covariance is ``G``. For ``N > d``, the package's covariance whitening
    ``K S^{+1/2}``. Both are the polar factor ``U Vᵀ`` of the thin SVD ``K = U Σ Vᵀ``. Directions
    with singular value at or below ``rtol · σ_max`` (default ``max(N, d) · eps``) are dropped,
    which gives the pseudo-inverse. The rows are orthonormal for ``N ≤ d`` at full rank, and
    ``K̃ᵀK̃`` is the projection onto the pattern span. Patterns at extreme magnitudes are first
    divided by a power of two (:mod:`attnreg.memory.energy`: extreme magnitudes), so ``K̃`` is
    the same at any scale.
    """
    k = as_tensor("patterns", patterns, ndim=(2, 3))
    if k.shape[-2] == 0 or k.shape[-1] == 0:
        raise ValueError(f"patterns: need N >= 1 patterns of d >= 1 features, got {tuple(k.shape)}")
    if not k.is_floating_point():
        k = k.double()
    single = k.ndim == 2
    kb = k.unsqueeze(0) if single else k
    scale = power_of_two_scale(kb)  # K̃ is invariant to the patterns' scale
    if bool((scale != 1).any()):
        kb = kb / scale
    n, d = kb.shape[-2], kb.shape[-1]
    if n <= d:
        out = _root_pinv(kb.mT, rtol) @ kb  # G^{+1/2} K, G = K Kᵀ
    else:
        out = kb @ _root_pinv(kb, rtol)  # K S^{+1/2}, S = KᵀK
    return out[0] if single else out
