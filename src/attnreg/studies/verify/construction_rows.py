"""The certificate's rows for the constructions: the OLS-Transformer of Tan & Zhao
(``W_Q = W_K = W_V = L`` with ``L Lᵀ = (XᵀX + λI)⁻¹``, ``W_P = Lᵀ XᵀY``), OLS as attention of
Goulet Coulombe (``(X* L)(X L)ᵀ Y``), linear self-attention layers as gradient-descent steps
(von Oswald et al. 2023; GD++ and the preconditioned step of Ahn et al. 2023) and the mesa
layer (causal ridge by recursive least squares). Each is built from the task data, run forward,
and compared with an independent numpy / scikit-learn reference
(:mod:`attnreg.studies.verify.references`) on the same (dtype-rounded) data.

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
they already do on every shape: ``X`` enters divided by ``s = max_b ‖X_b‖₂/√N``
(:func:`~attnreg.studies.verify.cases.gd_scale`), ``X*`` unscaled, and ``Y`` and ``W₀`` are
multiplied by ``b``; the reference is ``b`` times the explicit loop. The tokens ``(x_i, y_i)``
are then extreme in their ``y`` part.

Tolerances (on top of :mod:`~attnreg.studies.verify.measure`'s base). The constructions that
invert ``XᵀX + λI`` compute ``X L`` literally, with ``‖L‖ ∝ κ(X)``, so they are as accurate as
the normal equations and get the condition-scaled tolerance ``tol = max(base, u · κ(XᵀX + λI))``
(``u`` the unit roundoff; the first-order forward-error bound of the normal equations, Higham
2002, §20.4), where ``κ`` is taken over the kept spectrum: singular values above
``max(N, d) · eps · σ_max`` (numpy's ``lstsq`` default), of the unscaled data with the
reference's ``λ/a²`` (:func:`inverted_condition`). Rows that invert nothing keep the base
tolerance.

One row computes the normal equations literally: Tan & Zhao's layer as written forms
``S = XᵀX``, eigendecomposes it (``L = V Λ^{-1/2}``, so ``L Lᵀ = M = (S + E)⁻¹`` with ``E`` the
backward error of forming ``S`` and of the eigensolver) and its attention re-forms
``(XL)ᵀ(XL) = Lᵀ S L``: the output is ``X* M S M XᵀY``, whose first-order error is
``2 X* S⁻¹ E β̂`` — twice that of applying ``M`` once. Its tolerance (``Check.forms_gram``) is
``max(base, 2 √max(N, d) · u · κ(XᵀX))``: the factor 2 from the two applications of ``M``, and
``√max(N, d) · u`` the typical ``‖E‖/‖S‖`` of sums of ``N`` products and of a ``d × d``
eigensolver (probabilistic rounding-error analysis, Higham & Mary 2019).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from attnreg.studies.verify.cases import Case, gd_scale
from attnreg.studies.verify.checks import Check, construction_checks
from attnreg.studies.verify.config import DTYPES, VerifyConfig, smallest_normal, unit_roundoff
from attnreg.studies.verify.measure import measure


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


def construction_rows(
    data: dict[str, np.ndarray],
    k: int,
    case: Case,
    dtype: str,
    cfg: VerifyConfig,
    rng: np.random.Generator,
) -> list[dict[str, Any]]:
    """Every construction's row on one case's tasks scaled by ``2^k`` (the parameters drawn
    from ``rng``)."""
    return [
        _compare(check, data, k, case, dtype, cfg)
        for check in construction_checks(case, cfg, rng, k)
    ]


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
    xt, yt, qt = (torch.as_tensor(a, dtype=dt) for a in (x_in, np.ldexp(y, k), q_in))
    expected = np.ldexp(np.stack([check.refer(x[b], y[b], q[b]) for b in range(case.b)]), k)
    # ridge with a fixed λ on a tiny design: the answer (≈ b a²/λ · x* XᵀY, its reference the
    # limit 0 where λ/a² overflows) is below the dtype's range, and the contract is a
    # ValueError saying so, never zeros
    below_range = bool(check.lam and np.all(np.abs(expected) < smallest_normal(dtype)))
    bound = 0.0
    if check.lam is not None:
        factor = 2.0 * np.sqrt(max(x.shape[-2:])) if check.forms_gram else 1.0
        prefixes = range(1, x.shape[-2] + 1) if check.per_prefix else [x.shape[-2]]
        kappa = max(inverted_condition(x[:, :n], check.lam) for n in prefixes)
        bound = factor * unit_roundoff(dtype) * kappa
    spec = (check.construction, check.reference, bound)
    return measure(
        spec,
        lambda: check.build(xt, yt, qt, dt),
        expected,
        case.describe(),
        dtype,
        cfg,
        below_range,
    )
