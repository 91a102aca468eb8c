"""Which estimator does this attention layer compute? :func:`explain` (exported as
``attnreg.explain``) and the families it fits (the fitting itself:
:mod:`attnreg.family_fit`).

Given any predictor with the one signature ``predict(x_ctx, y_ctx, x_query)`` (a trained
model, a construction, an estimator), fit the nearest member of each estimator family to its
predictions on held-out tasks and report each family's best parameter, its agreement with the
predictor (``R² = 1 − Σ(f − p)² / Σ(p − p̄)²`` and the cosine ``⟨f, p⟩ / ‖f‖‖p‖`` over all
tasks and queries) and the family that explains it best.

Families (von Oswald et al. 2023; Ahn et al. 2023; Garg et al. 2022):

=================  ==================  =====================================================
family             parameters          fitted by
=================  ==================  =====================================================
OLS                —                   nothing to fit
GD                 η (K steps)         closed form for K = 1 (predictions are linear in η),
                                       bounded Brent search on log η otherwise
ridge              λ                   bounded Brent search on log λ
kernel smoother    β                   bounded Brent search on log β
LMS                β (step)            bounded Brent search on log β, up to the stable
                                       ``β ≤ 2 / max ‖x_i‖²``
GD++               (η, γ)              Nelder–Mead on (log η, γ ≥ 0), from the GD fit
local linear       (β, λ)              a 5 × 5 grid, then Nelder–Mead on (log β, log λ)
momentum LMS       (β, μ)              μ from a grid (0 to 0.9), β by Brent on log β
mini-batch LMS     (η, batch size b)   b from (2, 4, 8, 16), η by Brent on log η
multi-step LMS     (β, steps s)        s from (2, 3, 4), β by Brent on log β
preconditioned GD  Γ (d × d), η = 1    linear least squares for K = 1; L-BFGS otherwise
=================  ==================  =====================================================

The kernel smoother is the Nadaraya–Watson smoother ``softmax(β x*ᵀ X) Y`` (``1/β`` plays the
bandwidth); LMS (one online pass, the delta rule) and local linear regression are the online
and local estimators of the causal sequence layers (Wang, Shi & Fox 2025); momentum, mini-batch
and multi-step LMS (:mod:`attnreg.estimators.lms_variants`) those of the momentum delta rule
and Titans, TTT-Linear and DeltaProduct.

The same fitting serves the ``icl`` study, which fits each family to the *true* query targets
(the line-searched GD η, the fitted GD++ (η, γ), the fitted Γ).

Best family: among the families whose ``R²`` is within ``tol`` of the highest, the first in
the order above (fewest parameters first) — the simplest estimator that explains the layer.

No family explains the predictor (``best`` is ``None``) when

* its outputs on the held-out tasks have zero variance (a constant or zero predictor): ``R²``
  divides by ``Σ(p − p̄)² = 0`` and is undefined (``NaN``), whatever the family; or
* the highest ``R²`` is below ``min_r2`` (default 0.5: the best family accounts for less than
  half of the variance of the predictor's outputs on the held-out tasks).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from attnreg.core.tasks import check_tasks
from attnreg.core.validation import check_nonnegative
from attnreg.estimators import Predictor
from attnreg.family_fit import FAMILIES, FamilyFit, agreement, fit_family

__all__ = [
    "FAMILIES",
    "Explanation",
    "FamilyFit",
    "agreement",
    "explain",
    "fit_family",
]


@dataclass
class Explanation:
    """Every family's fit and the best family (see the module docstring for the rule):
    ``best`` is ``None`` when no family explains the predictor, and :meth:`verdict` says why."""

    fits: list[FamilyFit]
    best: str | None
    tol: float
    min_r2: float = 0.5

    def fit(self, family: str) -> FamilyFit:
        for f in self.fits:
            if f.family == family:
                return f
        raise KeyError(family)

    def rows(self) -> list[dict[str, Any]]:
        return [{**f.row(), "best": f.family == self.best} for f in self.fits]

    def verdict(self) -> str:
        """The best family's name, or ``"no family explains it"`` and the reason."""
        if self.best is not None:
            return self.best
        defined = [f.r2 for f in self.fits if not math.isnan(f.r2)]
        if not defined:
            return (
                "no family explains it (its outputs on the held-out tasks have zero variance: "
                "R² is undefined)"
            )
        return (
            f"no family explains it (highest held-out R² {max(defined):.4g} < min_r2 "
            f"{self.min_r2:g})"
        )


def _tasks_of(tasks: Any) -> tuple[Any, Any, Any]:
    """``(x_ctx, y_ctx, x_query)`` of a tasks object or a 3-tuple."""
    if isinstance(tasks, tuple | list):
        if len(tasks) != 3:
            raise ValueError(f"tasks: expected (x_ctx, y_ctx, x_query), got {len(tasks)} items")
        return tasks[0], tasks[1], tasks[2]
    return tasks.x_ctx, tasks.y_ctx, tasks.x_query


def _predictions(
    predictor: Predictor | Callable[..., torch.Tensor],
    xc: torch.Tensor,
    yc: torch.Tensor,
    xq: torch.Tensor,
) -> torch.Tensor:
    """``predictor``'s outputs on the tasks as float64 ``(B, M, dy)``; a ``ValueError`` naming
    ``predictor`` for another shape or a NaN/Inf."""
    predict = predictor.predict if hasattr(predictor, "predict") else predictor
    with torch.no_grad():
        out = torch.as_tensor(predict(xc, yc, xq)).to(torch.float64)
    expected = (xq.shape[0], xq.shape[1], yc.shape[-1])
    if tuple(out.shape) != expected:
        raise ValueError(
            f"predictor: returned shape {tuple(out.shape)}; expected (B, M, dy) = {expected} "
            f"for x_ctx {tuple(xc.shape)}, y_ctx {tuple(yc.shape)}, x_query {tuple(xq.shape)}"
        )
    if not bool(torch.isfinite(out).all()):
        raise ValueError(
            "predictor: its predictions on the tasks contain NaN or Inf; nothing to explain"
        )
    return out


def explain(
    predictor: Predictor | Callable[..., torch.Tensor],
    tasks: Any,
    steps: int = 1,
    families: tuple[str, ...] = FAMILIES,
    tol: float = 1e-3,
    min_r2: float = 0.5,
) -> Explanation:
    """Which estimator does ``predictor`` compute? Fit every family in ``families`` to its
    predictions on half of ``tasks`` (an object with ``x_ctx, y_ctx, x_query`` — e.g.
    :class:`attnreg.data.tasks.Tasks` — or a tuple ``(x_ctx, y_ctx, x_query)``; at least 2
    tasks), with ``steps`` steps for the iterative families, and score each fit by its ``R²``
    on the other half. The best family is the simplest whose ``R²`` is within ``tol`` of the
    highest; none (``best=None``) if the predictor's held-out outputs have zero variance (``R²``
    undefined) or the highest ``R²`` is below ``min_r2``.

    ``predictor`` is an object with ``predict(x_ctx, y_ctx, x_query)`` or such a callable; on
    the batched tasks it must return ``(B, M, dy)`` finite values (else a ``ValueError`` naming
    ``predictor``)."""
    check_nonnegative("tol", tol)
    if not isinstance(min_r2, int | float) or math.isnan(min_r2) or min_r2 > 1:
        raise ValueError(f"min_r2: must be a number <= 1 (R² never exceeds 1), got {min_r2!r}")
    xc, yc, xq, _ = check_tasks(*_tasks_of(tasks), dtype=torch.float64)
    if xc.shape[0] < 2:
        raise ValueError(
            f"tasks: need at least 2 tasks (half to fit, half to score), got {xc.shape[0]}"
        )
    out = _predictions(predictor, xc, yc, xq)
    for family in families:
        if family not in FAMILIES:
            raise ValueError(
                f"families: unknown value {family!r}; valid names are {', '.join(FAMILIES)}"
            )
    half = xc.shape[0] // 2
    held_out = (xc[half:], yc[half:], xq[half:], out[half:])
    fits = [
        fit_family(family, xc[:half], yc[:half], xq[:half], out[:half], steps, score=held_out)
        for family in sorted(families, key=FAMILIES.index)
    ]
    defined = [f for f in fits if not math.isnan(f.r2)]
    top = max((f.r2 for f in defined), default=math.nan)
    best = None
    if defined and top >= min_r2:
        best = next(f.family for f in defined if f.r2 >= top - tol)
    return Explanation(fits, best, tol, min_r2)
