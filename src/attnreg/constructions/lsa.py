"""Linear self-attention stacks whose weights make them gradient-descent steps.

Weight factories for attnreg's one LSA module (:class:`attnreg.models.lsa.TrainableLSA`, whose
module docstring states the token layout and the convention: the context sum is a mean, the
weights hold η). von Oswald et al. (2023), "Transformers learn in-context by gradient descent"
(ICML), with the GD++ and preconditioned variants (Ahn et al. 2023). One layer per step:

* GD from ``W0``: ``KQ = [[I, 0], [0, 0]]``, ``PV = [[0, 0], [η W0, −η I]]``; the query token
  ``(x_q, −W0 x_q)`` leaves the layer as ``(x_q, −W1 x_q)`` with ``W1 = W0 − η ∇L(W0)``,
  ``L(W) = (1/2N) Σ ‖W x_i − y_i‖²``; the prediction is read out **negated**. K layers (context
  tokens are updated too: their y-entries become residuals) = K GD steps.
* GD++: also ``x_j ← (I − γ Σ_i x_i x_iᵀ) x_j`` in the same layer (γ multiplies the context
  *sum*, as in the paper; the layer averages, so it holds ``γ·N`` and is built for context
  size N).
* Preconditioned GD: ``KQ = [[Γ, 0], [0, 0]]``.

The same step in the layout a published summary writes (targets first, ``e_i = (y_i, x_i)``, an
un-normalised context sum) is :class:`attnreg.constructions.literal.VonOswaldSummaryLayer`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from attnreg.core.validation import (
    ArrayLike,
    as_tensor,
    check_nonnegative,
    check_positive,
    check_positive_int,
    per_step,
)
from attnreg.models.lsa import TrainableLSA, gd_products


class LSAStack(TrainableLSA):
    """K constructed LSA layers (one head each); build it with :meth:`gd`, :meth:`gd_plus_plus`
    or :meth:`preconditioned`. Its weights do not train (``requires_grad=False``)."""

    @classmethod
    def from_steps(
        cls,
        steps: Sequence[tuple[torch.Tensor, torch.Tensor]],
        dy: int,
        w0: torch.Tensor | None = None,
    ) -> LSAStack:
        """A stack from the ``(KQ, PV)`` products of each layer (each ``(D, D)``)."""
        kq = torch.stack([k for k, _ in steps]).unsqueeze(1)
        pv = torch.stack([p for _, p in steps]).unsqueeze(1)
        model = cls.from_products(kq, pv, dy=dy)
        model.set_w0(w0)
        model.requires_grad_(False)
        return model

    @classmethod
    def gd(
        cls,
        d: int,
        dy: int,
        eta: float | Sequence[float] = 1.0,
        steps: int = 1,
        w0: ArrayLike | None = None,
        dtype: torch.dtype = torch.float64,
    ) -> LSAStack:
        """K = ``steps`` layers = K GD steps from ``W0`` (von Oswald et al. 2023, Prop. 1);
        ``eta`` one learning rate, or one per step."""
        d = check_positive_int("d", d)
        dy = check_positive_int("dy", dy)
        w = _w0(w0, d, dy, dtype)
        products = [gd_products(d, dy, e, dtype, w0=w) for e in _etas(eta, steps)]
        return cls.from_steps(products, dy, w)

    @classmethod
    def gd_plus_plus(
        cls,
        d: int,
        dy: int,
        n_ctx: int,
        eta: float | Sequence[float] = 1.0,
        gamma: float | Sequence[float] = 0.0,
        steps: int = 1,
        dtype: torch.dtype = torch.float64,
    ) -> LSAStack:
        """K GD++ layers (von Oswald et al. 2023, §4) for contexts of ``n_ctx`` tokens; one
        ``(η, γ)`` each, or shared. γ multiplies the context sum ``Σ_i x_i x_iᵀ``."""
        d = check_positive_int("d", d)
        dy = check_positive_int("dy", dy)
        n = check_positive_int("n_ctx", n_ctx)
        gammas = [check_nonnegative("gamma", g) for g in per_step("gamma", gamma, steps)]
        products = [
            gd_products(d, dy, e, dtype, gamma=g * n)
            for e, g in zip(_etas(eta, steps), gammas, strict=True)
        ]
        return cls.from_steps(products, dy)

    @classmethod
    def preconditioned(
        cls,
        preconditioner: ArrayLike,
        dy: int,
        eta: float | Sequence[float] = 1.0,
        steps: int = 1,
        w0: ArrayLike | None = None,
        dtype: torch.dtype = torch.float64,
    ) -> LSAStack:
        """K preconditioned GD layers: ``KQ = [[Γ, 0], [0, 0]]`` (Ahn et al. 2023)."""
        g = as_tensor("preconditioner", preconditioner, ndim=(2,)).to(dtype)
        d = g.shape[0]
        if g.shape != (d, d):
            raise ValueError(f"preconditioner: expected a square matrix, got {tuple(g.shape)}")
        dy = check_positive_int("dy", dy)
        w = _w0(w0, d, dy, dtype)
        products = [gd_products(d, dy, e, dtype, w0=w, preconditioner=g) for e in _etas(eta, steps)]
        return cls.from_steps(products, dy, w)


def _etas(eta: float | Sequence[float], steps: int) -> list[float]:
    return [check_positive("eta", e) for e in per_step("eta", eta, steps)]


def _w0(w0: ArrayLike | None, d: int, dy: int, dtype: torch.dtype) -> torch.Tensor | None:
    if w0 is None:
        return None
    w = as_tensor("w0", w0, ndim=(2,)).to(dtype)
    if w.shape != (dy, d):
        raise ValueError(f"w0: expected shape ({dy}, {d}), got {tuple(w.shape)}")
    return w
