"""The constructions the certificate checks, one :class:`Check` each: how to build the
construction from a task and which independent reference it is compared with
(:mod:`attnreg.studies.verify.references`). :func:`construction_checks` lists them for one case;
:mod:`~attnreg.studies.verify.construction_rows` runs them and states their tolerances."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnreg.constructions import (
    LSAStack,
    MesaLayer,
    OLSAttention,
    OLSTransformer,
    VonOswaldSummaryLayer,
)
from attnreg.studies.verify import references as ref
from attnreg.studies.verify.cases import Case
from attnreg.studies.verify.config import VerifyConfig


@dataclass(frozen=True)
class Check:
    """One row: a construction ``build(x, y, q, torch_dtype)`` run on the (scaled) data, its
    reference ``refer(x, y, q)`` on one unscaled task, and ``lam``: the λ of the inverted
    ``XᵀX + λI`` as the reference sees it (``λ/a²`` on an extreme-scale shape), ``None`` for
    the gradient-descent rows, which invert nothing. ``forms_gram``: the construction forms
    ``S = XᵀX`` and eigendecomposes it, and applies ``(S + E)⁻¹`` twice (the tolerance
    ``2 √max(N, d) · u · κ``, :mod:`~attnreg.studies.verify.construction_rows`).
    ``per_prefix``: the construction solves one ridge problem per prefix ``X_{1:n}`` (the mesa
    layer), so ``κ`` is the worst prefix's."""

    construction: str
    reference: str
    lam: float | None
    build: Callable[..., Any]
    refer: Callable[..., np.ndarray]
    forms_gram: bool = False
    per_prefix: bool = False


# One small builder per LSA construction, so that a change of LSAStack's signature touches
# one line each.
def _lsa_gd(d: int, dy: int, etas: list[float], w0: np.ndarray | None, dt: torch.dtype) -> LSAStack:
    return LSAStack.gd(d, dy, etas, len(etas), w0, dt)


def _lsa_gd_plus_plus(
    d: int, dy: int, n: int, etas: list[float], gammas: list[float], dt: torch.dtype
) -> LSAStack:
    return LSAStack.gd_plus_plus(d, dy, n, etas, gammas, len(etas), dt)


def _lsa_preconditioned(
    precond: np.ndarray, dy: int, eta: float, w0: np.ndarray, dt: torch.dtype
) -> LSAStack:
    return LSAStack.preconditioned(precond, dy, eta, 1, w0, dt)


def _von_oswald_summary(
    d: int, dy: int, eta: float, w0: np.ndarray, dt: torch.dtype
) -> VonOswaldSummaryLayer:
    return VonOswaldSummaryLayer(d, dy, eta, 1, w0, dt)


def construction_checks(
    case: Case, cfg: VerifyConfig, rng: np.random.Generator, k: int = 0
) -> list[Check]:
    """Every construction row of one case whose data are scaled by ``2^k`` (``W₀`` and ``Γ``
    drawn from ``rng``)."""
    d, dy, n, lam = case.d, case.dy, case.n, cfg.ridge
    w0 = rng.normal(size=(dy, d))
    precond = rng.normal(size=(d, d))
    precond = precond @ precond.T / d + np.eye(d)
    w0_in = np.ldexp(w0, k)  # the GD rows' W₀ scales with Y (construction_rows)
    lam_ref = ref.ridge_at_scale(lam, k)
    lam_mean_ref = ref.ridge_at_scale(n * lam, k)
    mesa_ref = ref.ridge_at_scale(cfg.mesa_lambda, k)
    eta_gd = [0.5, 0.4, 0.3]
    eta_sum = 0.5 / n  # the summary's η multiplies the context sum: the same step as η = 0.5

    def layer(module: Callable[[], Any]) -> Callable[..., Any]:
        return lambda x, y, q, dt: module().predict(x, y, q)

    return [
        Check(
            "OLS-Transformer (Tan & Zhao), queries",
            "numpy.linalg.lstsq",
            0.0,
            layer(OLSTransformer),
            ref.lstsq,
        ),
        Check(
            "OLS-Transformer (Tan & Zhao), own context = H Y",
            "numpy.linalg.lstsq",
            0.0,
            lambda x, y, q, dt: OLSTransformer().predict(x, y, x),
            lambda x, y, q: ref.lstsq(x, y, x),
        ),
        Check(
            "OLS-Transformer, ridge λ",
            "sklearn Ridge",
            lam_ref,
            layer(lambda: OLSTransformer(ridge=lam)),
            lambda x, y, q: ref.sklearn_ridge(x, y, q, lam_ref),
        ),
        Check(
            "OLS-Transformer, Tan & Zhao (eigh L, identity FFN)",
            "numpy.linalg.lstsq",
            0.0,
            layer(lambda: OLSTransformer(convention="tan-zhao")),
            ref.lstsq,
            forms_gram=True,
        ),
        Check(
            "OLS-attention (Goulet Coulombe), S = XᵀX",
            "numpy.linalg.lstsq",
            0.0,
            layer(OLSAttention),
            ref.lstsq,
        ),
        Check(
            "OLS-attention, S = XᵀX/N",
            "numpy.linalg.lstsq",
            0.0,
            layer(lambda: OLSAttention(covariance="mean")),
            ref.lstsq,
        ),
        Check(
            "OLS-attention, ridge λ, S = XᵀX",
            "sklearn Ridge",
            lam_ref,
            layer(lambda: OLSAttention(ridge=lam)),
            lambda x, y, q: ref.sklearn_ridge(x, y, q, lam_ref),
        ),
        Check(
            "OLS-attention, ridge λ, S = XᵀX/N",
            "sklearn Ridge (alpha = Nλ)",
            lam_mean_ref,
            layer(lambda: OLSAttention(ridge=lam, covariance="mean")),
            lambda x, y, q: ref.sklearn_ridge(x, y, q, lam_mean_ref),
        ),
        Check(
            "mesa layer (RLS), every prefix",
            "ridge solve per prefix",
            mesa_ref,
            lambda x, y, q, dt: MesaLayer(cfg.mesa_lambda)(x, y, x),
            lambda x, y, q: ref.ridge_per_prefix(x, y, mesa_ref),
            per_prefix=True,
        ),
        Check(
            "LSA, 1 GD step (von Oswald), W0 ≠ 0",
            "explicit GD loop",
            None,
            lambda x, y, q, dt: _lsa_gd(d, dy, eta_gd[:1], w0_in, dt).predict(x, y, q),
            lambda x, y, q: ref.gd_loop(x, y, q, eta_gd[:1], w0),
        ),
        Check(
            "LSA, von Oswald summary (literal), W0 ≠ 0",
            "explicit GD loop on ½Σ‖Wx − y‖²",
            None,
            lambda x, y, q, dt: _von_oswald_summary(d, dy, eta_sum, w0_in, dt).predict(x, y, q),
            lambda x, y, q: ref.gd_sum_loop(x, y, q, [eta_sum], w0),
        ),
        Check(
            "LSA stack, 3 layers = 3 GD steps",
            "explicit GD loop",
            None,
            lambda x, y, q, dt: _lsa_gd(d, dy, eta_gd, None, dt).predict(x, y, q),
            lambda x, y, q: ref.gd_loop(x, y, q, eta_gd, np.zeros((dy, d))),
        ),
        Check(
            "LSA stack, GD++ (2 layers)",
            "token loop",
            None,
            lambda x, y, q, dt: _lsa_gd_plus_plus(d, dy, n, [0.5, 0.4], [0.02, 0.01], dt).predict(
                x, y, q
            ),
            lambda x, y, q: ref.gd_plus_plus_loop(x, y, q, [0.5, 0.4], [0.02, 0.01]),
        ),
        Check(
            "LSA, preconditioned GD (Γ)",
            "explicit preconditioned GD loop",
            None,
            lambda x, y, q, dt: _lsa_preconditioned(precond, dy, 0.3, w0_in, dt).predict(x, y, q),
            lambda x, y, q: ref.gd_loop(x, y, q, [0.3], w0, precond),
        ),
    ]
