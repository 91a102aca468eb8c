"""Newton–Schulz for the ridge inverse, run by linear attention: one step = two layers.

The iteration (Schulz 1933; Ben-Israel & Cohen 1966; Pan & Schreiber 1991) for the inverse of
``S = XᵀX + λI`` (**the sum convention**: no ``1/N``; with ``λ = 0`` and ``N < d`` the limit is
the pseudo-inverse ``S⁺``):

``M_{k+1} = M_k (2I − S M_k) = 2 M_k − M_k S M_k``,  so  ``I − S M_{k+1} = (I − S M_k)²``

and ``‖I − S M_k‖ = ‖I − S M_0‖^{2^k}`` (``S`` and ``M_k`` commute; on the range of ``S`` when it
is singular). The start is Fu et al.'s (2024, "Transformers learn to achieve second-order
convergence rates for in-context linear regression", NeurIPS; arXiv 2310.17086): ``M_0 = α S``
with ``α = 2/‖SSᵀ‖_F`` (:func:`newton_alpha`; below Ben-Israel & Cohen's bound ``2/‖S‖₂²``,
so ``‖I − S M_0‖ < 1`` on the range of ``S``). The prediction at a query is the ridge form
``ŷ_k = Yᵀ X M_k x_q`` (``→ Yᵀ X (XᵀX + λI)⁻¹ x_q``: ridge with penalty λ on the sum of squares;
the min-norm least-squares prediction when ``λ = 0``).

**Token layout** (Giannou et al. 2025, "How well can transformers emulate in-context Newton's
method?", AISTATS, carry the iterate in the tokens). A token has six slots,
``(x, y, e, m, u, p) ∈ R^{d + dy + d + d + d + dy}``:

* context token i:  ``(x_i, y_i, 0, 0, 0, 0)``;
* basis token a (``a = 1..d``, after the context): ``(0, 0, e_a, M e_a, u_a, C M e_a)`` — the
  columns of the iterate ``M`` live in the m-slots, ``C = YᵀX``;
* query token:  ``(0, 0, x_q, M x_q, u_q, C M x_q)`` — a basis token at ``x_q``, so ``p`` is the
  prediction.

The keys and values of every layer are the context and basis tokens (``N + d`` of them), summed
(no mean); every token is a query. Write ``k = x + √λ e`` for a key's data part (``x_i`` for
context tokens, ``√λ e_a`` for basis tokens), so that ``Σ_keys k kᵀ = XᵀX + λI = S`` and
``Σ_keys y kᵀ = C``. With identity separation each layer is ``t ← t + Σ_h Σ_keys
(keyᵀ KQ_h t) PV_h key``:

* layer 0 (start): score ``kᵀ e``, value ``α k`` into m: ``m ← α S e`` (``M_0 = αS``);
* each step, layer A: score ``kᵀ m``, value ``k`` into u: ``u ← S m`` (and, in the first step
  only, value ``y`` into p: ``p ← C m``);
* each step, layer B, two heads over the basis keys (context keys have ``e = 0`` and drop out):
  head 1 score ``e_bᵀ (e − u)``, value ``(m_b, p_b)`` into ``(m, p)``: ``m ← m + M e − M u``,
  ``p ← p + C (M e − M u)``; head 2 score ``e_bᵀ e``, value ``−u_b`` into u: ``u ← u − U e``
  with ``U = S M`` (so ``u ← 0``).

Because ``Σ_b m_b e_bᵀ = M`` (the columns against the basis), a token at ``e`` with
``m = M e`` and ``u = S M e`` leaves layer B with ``m = 2 M e − M S M e = M_{k+1} e`` — for the
basis tokens (the new iterate) and the queries alike. ``1 + 2K`` layers run K steps; the state
after layer ``2k + 1`` holds ``M_k`` (:meth:`NewtonStack.iterate`) and, for ``k ≥ 1``, ``ŷ_k``
(its p-slots, :meth:`NewtonStack.readout`; ``ŷ_0`` is there after layer 2). Every layer is
the attention core, identity separation, dot similarity with the per-head metric ``KQ_hᵀ``,
two heads (the second is zero in layers 0 and A).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from attnreg.core.validation import (
    ArrayLike,
    as_tensor,
    check_nonnegative,
    check_positive,
    check_positive_int,
)
from attnreg.models.token import TokenModel


class NewtonStack(TokenModel):
    """``steps`` Newton–Schulz steps for ``(XᵀX + ridge·I)⁻¹`` from ``M_0 = alpha·S`` in
    ``1 + 2·steps`` linear-attention layers (the module docstring: layout, weights, sources);
    ``predict`` returns ``Yᵀ X M_K x_q``. The weights do not train."""

    kind = "newton"
    context_mean = False  # the sum convention: S = XᵀX + λI

    def __init__(
        self,
        d: int,
        dy: int,
        steps: int,
        alpha: float,
        ridge: float = 0.0,
        dtype: torch.dtype = torch.float64,
    ) -> None:
        n_steps = check_positive_int("steps", steps)
        super().__init__(d, dy, 1 + 2 * n_steps, 2, False, "identity")
        self.steps = n_steps
        self.alpha = check_positive("alpha", alpha)
        self.ridge = check_nonnegative("ridge", ridge)
        kq, pv = newton_products(d, dy, self.steps, self.alpha, self.ridge, dtype)
        self.kq = nn.Parameter(kq, requires_grad=False)
        self.pv = nn.Parameter(pv, requires_grad=False)

    @property
    def width(self) -> int:
        """Token width ``D = 4d + 2dy`` (slots x, y, e, m, u, p)."""
        return 4 * self.d + 2 * self.dy

    def key_query(self, layer: int = 0) -> torch.Tensor:
        """``KQ_h`` of both heads of layer ``layer``: ``(2, D, D)``."""
        return self.kq[layer]

    def value_projection(self, layer: int = 0) -> torch.Tensor:
        """``PV_h`` of both heads of layer ``layer``: ``(2, D, D)``."""
        return self.pv[layer]

    def key_count(self, n_ctx: int) -> int:
        """The keys: ``n_ctx`` context tokens and the ``d`` basis tokens."""
        return n_ctx + self.d

    def tokens(
        self, x_ctx: torch.Tensor, y_ctx: torch.Tensor, x_query: torch.Tensor
    ) -> torch.Tensor:
        """Context, basis and query tokens ``(B, N + d + M, D)`` with ``M = 0`` (m, u, p
        empty): ``(x_i, y_i, 0…)``, ``(0, 0, e_a, 0…)``, ``(0, 0, x_q, 0…)``."""
        b, n, d = x_ctx.shape
        out = x_ctx.new_zeros(b, n + d + x_query.shape[1], self.width)
        out[:, :n, :d] = x_ctx
        out[:, :n, d : d + self.dy] = y_ctx
        e = slice(d + self.dy, 2 * d + self.dy)
        out[:, n : n + d, e] = torch.eye(d, dtype=x_ctx.dtype, device=x_ctx.device)
        out[:, n + d :, e] = x_query
        return out

    def readout(self, state: torch.Tensor, n_query: int) -> torch.Tensor:
        """The p-slots of the last ``n_query`` tokens: ``Yᵀ X M_k x_q`` after layers ``2k + 1``
        and ``2k + 2`` (``k ≥ 1``; ``M_0``'s after layer 2, zero before)."""
        p = 4 * self.d + self.dy
        return state[:, state.shape[1] - n_query :, p : p + self.dy]

    def iterate(self, state: torch.Tensor, n_ctx: int) -> torch.Tensor:
        """The iterate ``M`` ``(B, d, d)`` held by a hidden state: the basis tokens' m-slots
        are its columns (``M_k`` after layer ``2k + 1``)."""
        m = 2 * self.d + self.dy
        return state[:, n_ctx : n_ctx + self.d, m : m + self.d].mT

    def spec(self) -> dict[str, Any]:
        return {
            "d": self.d,
            "dy": self.dy,
            "steps": self.steps,
            "alpha": self.alpha,
            "ridge": self.ridge,
        }


def newton_products(
    d: int, dy: int, steps: int, alpha: float, ridge: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``(KQ, PV)`` products of the ``1 + 2·steps`` layers, two heads each:
    ``(L, 2, D, D)`` both (the module docstring's layers 0, A and B)."""
    width = 4 * d + 2 * dy
    x, y = slice(0, d), slice(d, d + dy)
    e, m = slice(d + dy, 2 * d + dy), slice(2 * d + dy, 3 * d + dy)
    u, p = slice(3 * d + dy, 4 * d + dy), slice(4 * d + dy, width)
    eye = torch.eye(d, dtype=torch.float64)
    root = math.sqrt(ridge)
    layers = 1 + 2 * steps
    kq = torch.zeros(layers, 2, width, width, dtype=torch.float64)
    pv = torch.zeros(layers, 2, width, width, dtype=torch.float64)
    # layer 0: m ← α (XᵀX + λI) e   (score kᵀ e, value α k, k = x + √λ e)
    kq[0, 0, x, e], kq[0, 0, e, e] = eye, root * eye
    pv[0, 0, m, x], pv[0, 0, m, e] = alpha * eye, alpha * root * eye
    for j in range(steps):
        a, b = 1 + 2 * j, 2 + 2 * j
        # layer A: u ← u + S m (score kᵀ m, value k); the first also p ← p + C m
        kq[a, 0, x, m], kq[a, 0, e, m] = eye, root * eye
        pv[a, 0, u, x], pv[a, 0, u, e] = eye, root * eye
        if j == 0:
            pv[a, 0, p, y] = torch.eye(dy, dtype=torch.float64)
        # layer B, head 1: (m, p) ← (m, p) + Σ_b (m_b, p_b) e_bᵀ (e − u)
        kq[b, 0, e, e], kq[b, 0, e, u] = eye, -eye
        pv[b, 0, m, m] = eye
        pv[b, 0, p, p] = torch.eye(dy, dtype=torch.float64)
        # layer B, head 2: u ← u − Σ_b u_b e_bᵀ e
        kq[b, 1, e, e] = eye
        pv[b, 1, u, u] = -eye
    return kq.to(dtype), pv.to(dtype)


def newton_alpha(x_ctx: ArrayLike, ridge: float = 0.0) -> float:
    """Fu et al.'s (2024) start ``α = 2/‖SSᵀ‖_F`` for ``S = XᵀX + ridge·I`` — the smallest over
    a batch ``(B, N, d)`` (one α then starts every task inside ``‖I − αS²‖₂ < 1``)."""
    x = as_tensor("x_ctx", x_ctx, ndim=(2, 3)).to(torch.float64)
    check_nonnegative("ridge", ridge)
    x = x.unsqueeze(0) if x.ndim == 2 else x
    s = x.mT @ x + ridge * torch.eye(x.shape[-1], dtype=torch.float64)
    norm = torch.linalg.matrix_norm(s @ s.mT).max()
    if not bool(norm > 0):
        raise ValueError("x_ctx: XᵀX + ridge·I is zero; Newton's start α = 2/‖SSᵀ‖ is undefined")
    return float(2.0 / norm)
