"""Whitening: a matrix ``L`` with ``L Lᵀ = (S + λI)⁻¹`` (pseudo-inverse when rank-deficient).

``S = XᵀX`` (``covariance="gram"``) or ``S = XᵀX / N`` (``covariance="mean"``; every score of a
whitened layer is then multiplied by ``1/N``). Eigen-form: ``S = V Λ Vᵀ``,
``L = V (Λ + λI)^{-1/2}``; whitened features ``F = X L`` satisfy ``FᵀF = I`` when ``λ = 0``.
Directions whose singular value is at or below ``rtol · σ_max`` are X's numerical null space:
they are dropped (their column of ``L`` is zero), with or without ridge. ``X`` has no component
there, so the ridge solution ``(XᵀX + λI)⁻¹XᵀY`` has none either and dropping them is exact;
without ridge it is the pseudo-inverse (minimum-norm solution), and a warning names the rank.

Three methods give the same layer (any ``L`` with ``L Lᵀ = S⁻¹`` does):

* ``"svd"`` (default): from the SVD ``X = U Σ Vᵀ`` of the data itself, so ``Λ = Σ²/c`` is never
  formed by squaring — the accurate path for ill-conditioned ``X`` (error ∝ κ(X), not κ(X)²).
* ``"eigh"``: the symmetric eigendecomposition of ``S``, literally as written in the papers.
* ``"cholesky"``: ``S + λI = C Cᵀ``, ``L = C⁻ᵀ`` — fastest; it cannot tell a tiny eigenvalue from
  zero, so it refuses a design whose condition bound ``tr(S + λI) · ‖L‖_F²`` (between
  ``κ`` and ``d² κ``) exceeds ``1/(max(N, d) · u)``: use ``"svd"`` for rank-deficient data.
  Like the other two it warns (:class:`ConditioningWarning`) when ``κ(S + λI) > 1/√u``, with
  ``κ`` estimated by power iteration (:func:`cholesky_condition`) only where the cheap bound
  reaches that threshold.

Sources: Goulet Coulombe, "OLS as an Attention Mechanism" (arXiv 2504.09663); Tan & Zhao,
"Ordinary Least Squares is a Special Case of Transformer" (arXiv 2604.13656).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch

from attnreg.core.validation import as_tensor, check_choice, check_nonnegative

COVARIANCES = ("gram", "mean")
METHODS = ("svd", "eigh", "cholesky")


class RankWarning(UserWarning):
    """Raised (as a warning) when a design matrix is rank-deficient and a pseudo-inverse is used."""


class ConditioningWarning(UserWarning):
    """Raised (as a warning) when ``κ(S) > 1/√u``: more than half the digits may be lost."""


@dataclass(frozen=True)
class Whitening:
    """A whitening of ``X``: ``matrix`` is ``L`` (``(B, d, d)``) with ``L Lᵀ = (S_c + λI)⁺``.

    ``eigenvalues`` are those of ``S_c`` in the basis of ``L``'s columns (``None`` for Cholesky),
    ``kept`` marks the columns outside X's numerical null space (``None`` for Cholesky: all),
    ``rank`` the numerical rank of each task's ``X``, ``scale`` the divisor ``c`` (1 or N),
    ``ridge`` the λ of each task (``(B,)``), ``condition`` the condition number of ``S_c + λI``
    over its kept eigenvalues (for Cholesky, the bound ``tr(S + λI) · ‖L‖_F²`` between ``κ`` and
    ``d² κ``; where that bound exceeds ``1/√u``, the smaller of it and the power-iteration
    estimate, at most ``κ``, so the warning fires only when the estimate does).
    """

    matrix: torch.Tensor
    eigenvalues: torch.Tensor | None
    kept: torch.Tensor | None
    rank: torch.Tensor
    scale: float
    ridge: torch.Tensor
    condition: torch.Tensor


def covariance_scale(n: int, covariance: str) -> float:
    """The divisor ``c`` of ``S = XᵀX / c``: 1 for ``"gram"``, ``N`` for ``"mean"``."""
    check_choice("covariance", covariance, COVARIANCES)
    return 1.0 if covariance == "gram" else float(n)


def default_rtol(n: int, d: int, dtype: torch.dtype) -> float:
    """Rank tolerance relative to the largest singular value: ``max(N, d) · eps`` (as numpy)."""
    return max(n, d) * torch.finfo(dtype).eps


def whitening_matrix(
    x: torch.Tensor,
    *,
    ridge: float | torch.Tensor = 0.0,
    covariance: str = "gram",
    method: str = "svd",
    rtol: float | None = None,
    warn: bool = True,
    checked: bool = False,
) -> Whitening:
    """Whitening of ``x`` (``(N, d)`` or ``(B, N, d)``): ``L = V (Λ + λI)^{-1/2}``.

    ``rtol`` is relative to the largest singular value of ``X`` (default ``max(N, d)·eps``);
    directions below it are dropped (module docstring) and, without ridge, a
    :class:`RankWarning` names the rank found. ``ridge`` is λ ≥ 0, one number or one per task
    (``(B,)``). ``checked=True`` says ``x`` is a floating tensor already validated by the caller
    (e.g. by ``check_tasks``): the NaN/Inf scan is skipped.
    """
    if not (checked and isinstance(x, torch.Tensor) and x.is_floating_point()):
        x = as_tensor("x", x, ndim=(2, 3))
    check_choice("method", method, METHODS)
    if x.ndim == 2:
        x = x.unsqueeze(0)
    lam = _ridge(ridge, x)
    n, d = x.shape[-2], x.shape[-1]
    c = covariance_scale(n, covariance)
    tol = default_rtol(n, d, x.dtype) if rtol is None else check_nonnegative("rtol", rtol)
    if method == "cholesky":
        white = _cholesky(x, lam, c)
        if warn:
            warn_conditioning(white.condition, x.dtype)
        return white
    if method == "svd":
        sigma, vecs = right_singular(x)
        k = sigma.shape[-1]
        keep = sigma > tol * sigma[..., :1]
        eig = torch.zeros(x.shape[0], d, dtype=x.dtype, device=x.device)
        eig[:, :k] = sigma**2 / c
        kept = torch.zeros_like(eig, dtype=torch.bool)
        kept[:, :k] = keep
    else:
        s = x.mT @ x / c
        eig_raw, vecs = torch.linalg.eigh(s)
        eig, vecs = eig_raw.flip(-1), vecs.flip(-1)
        top = eig[..., :1].clamp_min(0)
        # eigh resolves eigenvalues of S only to about eps·max, so the tolerance applies to
        # them directly: singular values below √rtol·σ_max are dropped on this path.
        kept = eig > tol * top
        eig = eig.clamp_min(0)
    rank = kept.sum(-1)
    shifted = eig + lam.unsqueeze(-1)
    inv_sqrt = torch.where(kept, shifted.clamp_min(torch.finfo(x.dtype).tiny).rsqrt(), 0.0)
    if warn and bool(((rank < d) & (lam == 0)).any()):
        warnings.warn(
            f"x: rank-deficient design (rank {int(rank.min())} < d = {d}); using the "
            "pseudo-inverse (minimum-norm solution). Pass ridge > 0 to regularise instead.",
            RankWarning,
            stacklevel=2,
        )
    matrix = vecs * inv_sqrt.unsqueeze(-2)
    big = shifted[..., 0]
    small = torch.where(kept, shifted, torch.full_like(eig, float("inf"))).amin(-1)
    condition = big / small
    if warn:
        warn_conditioning(condition, x.dtype)
    return Whitening(matrix, eig, kept, rank, c, lam, condition)


def _ridge(ridge: float | torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """λ per task as a ``(B,)`` tensor in ``x``'s dtype; every entry finite and ``>= 0``."""
    if isinstance(ridge, torch.Tensor):
        lam = ridge.detach().to(x.dtype).reshape(-1)
        if lam.numel() not in (1, x.shape[0]) or not bool((torch.isfinite(lam) & (lam >= 0)).all()):
            raise ValueError(
                f"ridge: must be finite numbers >= 0, one or one per task ({x.shape[0]}); "
                f"got shape {tuple(ridge.shape)}"
            )
        return lam.expand(x.shape[0])
    value = check_nonnegative("ridge", ridge)
    return torch.full((x.shape[0],), value, dtype=x.dtype, device=x.device)


def right_singular(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Singular values ``σ`` (descending) and the full ``d × d`` right factor ``V`` of
    ``X = U Σ Vᵀ`` (``(B, N, d)``), without forming ``U``.

    For ``N > d``: ``X = Q R`` (Householder, ``R`` is ``d × d``) and ``R = U_R Σ Vᵀ`` has the same
    ``σ`` and ``V`` (Golub & Van Loan 2013, §8.6.3, "R-SVD") — no ``N × N`` or ``N × d`` factor
    is held, and the cost is ``2Nd²`` flops. For ``N ≤ d`` the full SVD (``U`` is ``N × N``)
    supplies all ``d`` right vectors.
    """
    n, d = x.shape[-2], x.shape[-1]
    if n > d:
        _, sigma, vh = torch.linalg.svd(_triangular_factor(x))
    else:
        _, sigma, vh = torch.linalg.svd(x, full_matrices=True)
    return sigma, vh.mT


TSQR_BLOCK_BYTES = 2**20


def _triangular_factor(x: torch.Tensor) -> torch.Tensor:
    """``R`` (``(B, d, d)``) of ``X = Q R``, ``Q`` never formed.

    Tall ``X`` is reduced block by block — ``R ← qr([R; X_block]).R`` over row blocks of about
    ``TSQR_BLOCK_BYTES`` (a sequential TSQR, Demmel et al. 2012, "Communication-optimal
    parallel and sequential QR"): each Householder QR then runs in cache and only one small
    buffer is allocated, so the time stays linear in ``N`` where one QR of the whole ``N × d``
    matrix would stream it from memory once per column. Same backward stability as one QR.
    """
    b, n, d = x.shape
    rows = max(4 * d, TSQR_BLOCK_BYTES // max(1, b * d * x.element_size()))
    if n <= 4 * rows:
        return torch.linalg.qr(x, mode="r").R
    buf = torch.empty(b, rows + d, d, dtype=x.dtype, device=x.device)
    r = torch.linalg.qr(x[:, :rows], mode="r").R
    for start in range(rows, n, rows):
        block = x[:, start : start + rows]
        m = block.shape[1]
        buf[:, :d] = r
        buf[:, d : d + m] = block
        r = torch.linalg.qr(buf[:, : d + m], mode="r").R
    return r


def warn_conditioning(condition: torch.Tensor, dtype: torch.dtype) -> None:
    """Warn when ``κ(S + λI) > 1/√u``: the whitened layer computes ``X L`` with ``‖L‖ ∝ √κ``,
    so its relative accuracy is about ``u · κ`` (the normal equations' bound, Higham 2002 §20.4).
    """
    unit = torch.finfo(dtype).eps / 2
    worst = float(condition.detach().max())
    if worst * unit**0.5 > 1:
        warnings.warn(
            f"x: ill-conditioned design (condition number of S ≈ {worst:.1e}); results are "
            f"accurate to about u·κ ≈ {unit * worst:.0e} relative. Pass ridge > 0 or use float64.",
            ConditioningWarning,
            stacklevel=3,
        )


def _cholesky(x: torch.Tensor, lam: torch.Tensor, c: float) -> Whitening:
    n, d = x.shape[-2], x.shape[-1]
    s = x.mT @ x
    if c != 1.0:
        s = s / c
    if bool((lam > 0).any()):
        s = s + lam.view(-1, 1, 1) * torch.eye(d, dtype=x.dtype, device=x.device)
    chol, info = torch.linalg.cholesky_ex(s)
    unit = torch.finfo(x.dtype).eps / 2
    worst = math.inf  # info > 0: the leading minor of that order is not positive
    if not bool(info.any()):
        eye = torch.eye(d, dtype=x.dtype, device=x.device).expand_as(s)
        matrix = torch.linalg.solve_triangular(chol, eye, upper=False).mT
        # κ ≤ tr(S) · ‖S⁻¹‖_F-like estimate ≤ d² κ: tr(S) ∈ [λ_max, d λ_max], ‖L‖_F² = tr(S⁻¹)
        # (the norm reduces L in place: no B × d × d temporary)
        frobenius = torch.linalg.vector_norm(matrix, dim=(-2, -1))
        estimate = s.diagonal(dim1=-2, dim2=-1).mean(-1) * (d * frobenius.square())
        worst = float(estimate.detach().max())  # NaN propagates: refused below
    if not worst * unit * max(n, d) <= 1:
        raise ValueError(
            "x: XᵀX is numerically singular for the Cholesky whitening (rank-deficient or too "
            "ill-conditioned a design: collinear, constant or all-zero columns, or N < d); use "
            "method='svd' (pseudo-inverse, minimum-norm) or ridge > 0"
        )
    rank = torch.full((x.shape[0],), d, dtype=torch.long, device=x.device)
    if worst * unit**0.5 > 1:
        # the bound (≥ κ) reaches the warning threshold: refine it (≤ κ) before warning
        estimate = torch.minimum(estimate, cholesky_condition(s, matrix))
    return Whitening(matrix, None, None, rank, c, lam, estimate)


POWER_STEPS = 2


def cholesky_condition(s: torch.Tensor, matrix: torch.Tensor) -> torch.Tensor:
    """``κ(S) = λ_max(S) · λ_max(S⁻¹)`` per task (``(B,)``), estimated in ``O(d²)`` without an
    eigendecomposition (``matrix`` is ``L``, ``S⁻¹ = L Lᵀ``).

    Both factors are Rayleigh quotients of power iterations started at a coordinate vector
    ``e_j``: for ``S``, one step from every ``j`` (``max_j ‖S e_j‖² / S_jj``, a column-norm
    computation); for ``S⁻¹``, ``POWER_STEPS`` steps from the ``j`` of its largest diagonal
    entry. A Rayleigh quotient is a lower bound of the top eigenvalue that does not decrease
    along the iteration of a positive semi-definite matrix, so the estimate is at most ``κ``;
    on Gaussian designs and on graded spectra up to ``κ = 1e11`` (d = 5 to 60) it was at least
    ``0.42 κ`` (median ``0.6 κ`` to ``κ``, nearest ``κ`` for the ill-conditioned ones)."""
    diag = s.diagonal(dim1=-2, dim2=-1)
    big = (s.square().sum(-2) / diag.clamp_min(torch.finfo(s.dtype).tiny)).amax(-1)
    rows = matrix.square().sum(-1)  # the diagonal of S⁻¹ = L Lᵀ
    start = rows.argmax(-1).view(-1, 1, 1).expand(-1, 1, matrix.shape[-1])
    w = matrix.gather(-2, start).squeeze(-2)  # Lᵀ e_j; λ_max(L Lᵀ) = λ_max(Lᵀ L)
    for _ in range(POWER_STEPS):  # w ← Lᵀ L w / ‖·‖, as two elementwise products
        w = (matrix * (matrix * w.unsqueeze(-2)).sum(-1).unsqueeze(-1)).sum(-2)
        w = w / torch.linalg.vector_norm(w, dim=-1, keepdim=True).clamp_min(
            torch.finfo(s.dtype).tiny
        )
    return big * (matrix * w.unsqueeze(-2)).sum(-1).square().sum(-1)  # ‖L w‖², ‖w‖ = 1
