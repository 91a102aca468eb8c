"""Regression as one linear attention layer: the OLS-Transformer and OLS-as-attention."""

from __future__ import annotations

import torch
from torch import nn

from attnreg.constructions._cache import RecordsAttention
from attnreg.core.validation import (
    ArrayLike,
    as_tensor,
    check_choice,
    check_nonnegative,
    check_tasks,
)
from attnreg.core.whitening import COVARIANCES, METHODS, Whitening, whitening_matrix


def _whiten(
    x: torch.Tensor,
    ridge: float,
    covariance: str,
    method: str,
    rtol: float | None,
    checked: bool = False,
) -> Whitening:
    return whitening_matrix(
        x, ridge=ridge, covariance=covariance, method=method, rtol=rtol, checked=checked
    )


def _project(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``X W`` for batches of tokens ``(B, N, d)`` and weights ``(B, d, k)``.

    For many small tasks (``B > 1``, ``N ≤ 1024``) it is evaluated as ``(Wᵀ Xᵀ)ᵀ``: the same
    product, in the layout where PyTorch's CPU batched matmul runs about twice as fast
    (measured by ``attnreg bench`` P1); one long context keeps the plain layout, which is
    faster there (P3)."""
    if x.shape[0] > 1 and x.shape[-2] <= 1024:
        return (w.mT @ x.mT).mT
    return x @ w


def _shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` are the same matrix in memory (tied weights)."""
    return a is b or (
        a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride()
    )


class _FitsContext(RecordsAttention):
    """Shared settings and the ``fit`` / ``predict`` protocol of the regression layers."""

    context: torch.Tensor
    values: torch.Tensor

    def __init__(
        self,
        ridge: float = 0.0,
        covariance: str = "gram",
        method: str = "svd",
        rtol: float | None = None,
    ) -> None:
        super().__init__()
        self.ridge = check_nonnegative("ridge", ridge)
        self.covariance = check_choice("covariance", covariance, COVARIANCES)
        self.method = check_choice("method", method, METHODS)
        self.rtol = rtol
        self.whitening: Whitening | None = None

    def _query(self, x_query: ArrayLike, d: int, b: int, dtype: torch.dtype) -> torch.Tensor:
        xq = as_tensor("x_query", x_query, ndim=(2, 3)).to(dtype)
        xq = xq.unsqueeze(0) if xq.ndim == 2 else xq
        if xq.shape[-1] != d or xq.shape[0] not in (1, b):
            raise ValueError(
                f"x_query shape {tuple(xq.shape)} does not fit the fitted context "
                f"(batch {b}, d = {d})"
            )
        return xq

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """Build the layer from the context, then run its forward pass on the queries.

        The inputs are validated once (``check_tasks``); construction and forward pass then
        skip their own NaN/Inf scans.
        """
        xc, yc, xq, shape = check_tasks(x_ctx, y_ctx, x_query)
        keys = self._fit(xc, yc, checked=True)
        return self._attend(xq, keys).reshape(shape)

    def fit(self, x_ctx: torch.Tensor, y_ctx: torch.Tensor) -> _FitsContext:
        """Set the weights from a batched context ``(B, N, d)``, ``(B, N, dy)``."""
        self._fit(x_ctx, y_ctx, checked=False)
        return self

    def _fit(
        self, x_ctx: torch.Tensor, y_ctx: torch.Tensor, checked: bool
    ) -> torch.Tensor | None:  # pragma: no cover
        """Set the weights; return the context keys ``X W_K`` if they were computed."""
        raise NotImplementedError

    def _attend(
        self, xq: torch.Tensor, keys: torch.Tensor | None = None
    ) -> torch.Tensor:  # pragma: no cover
        """The forward pass on validated queries (``keys``: ``X W_K`` of the current weights)."""
        raise NotImplementedError


class OLSTransformer(_FitsContext):
    """Tan & Zhao (arXiv 2604.13656), "Ordinary Least Squares is a Special Case of Transformer".

    One linear attention layer, no softmax, with ``W_Q = W_K = W_V = L`` (the whitening,
    ``L Lᵀ = S⁻¹``), ``W_FFN = I`` and output projection ``W_P = P = Lᵀ XᵀY / c``. On queries
    ``X*`` cross-attending to the context ``X``:

    ``out = (X* L)(X L)ᵀ (X L) P / c = X* L P = X* β̂``   (c = 1 for ``"gram"``, N for ``"mean"``)

    and on its own context the attention ``(XL)(XL)ᵀ`` is the hat matrix ``H``, so ``out = H Y``.
    With a ridge ``λ > 0``, ``L Lᵀ = (S_c + λI)⁻¹`` and ``P = (Lᵀ S_c L)⁺ Lᵀ XᵀY / c`` keeps the
    tied weights and gives ridge predictions. Slow memory: ``L, P``; fast memory: the scores.
    """

    def fit(self, x_ctx: torch.Tensor, y_ctx: torch.Tensor) -> OLSTransformer:
        """Set ``W_Q = W_K = W_V = L`` and ``W_P = P`` from a batched context ``(B, N, d)``."""
        self._fit(x_ctx, y_ctx, checked=False)
        return self

    def _fit(self, x_ctx: torch.Tensor, y_ctx: torch.Tensor, checked: bool) -> torch.Tensor:
        white = _whiten(x_ctx, self.ridge, self.covariance, self.method, self.rtol, checked)
        lmat, c = white.matrix, white.scale
        keys = _project(x_ctx, lmat)  # X W_K, also X W_V (tied): returned for the forward
        rhs = keys.mT @ y_ctx
        if c != 1.0:
            rhs = rhs / c  # Lᵀ Xᵀ Y / c
        if self.ridge > 0:
            if white.eigenvalues is not None:
                e = white.eigenvalues
                gain = torch.where(
                    e > 0, (e + self.ridge) / e.clamp_min(torch.finfo(e.dtype).tiny), 0.0
                )
                proj = gain.unsqueeze(-1) * rhs
            else:
                g = lmat.mT @ (x_ctx.mT @ x_ctx / c) @ lmat
                proj = torch.linalg.solve(g, rhs)
        else:
            proj = rhs
        self.whitening = white
        self.w_q = nn.Parameter(lmat, requires_grad=False)
        self.w_k = nn.Parameter(lmat, requires_grad=False)
        self.w_v = nn.Parameter(lmat, requires_grad=False)
        self.w_p = nn.Parameter(proj, requires_grad=False)
        self.register_buffer("context", x_ctx, persistent=False)
        self.scale = c
        return keys

    def forward(self, x_query: ArrayLike) -> torch.Tensor:
        """``(X* W_Q)(X W_K)ᵀ (X W_V) W_P / c`` — cross-attention of the queries to the context."""
        if self.whitening is None:
            raise RuntimeError("OLSTransformer: call fit(x_ctx, y_ctx) before the forward pass")
        ctx: torch.Tensor = self.context
        return self._attend(self._query(x_query, ctx.shape[-1], ctx.shape[0], ctx.dtype))

    def _attend(self, xq: torch.Tensor, keys: torch.Tensor | None = None) -> torch.Tensor:
        """The forward pass on validated queries. Tied ``W_K = W_V`` project the context once
        (``keys``, when :meth:`predict` has just computed ``X W_K``, is not recomputed);
        unrecorded, the output projection is applied to the ``d × d`` state first:
        ``Q ((Kᵀ V) W_P) / c`` — the same product, without an ``M × d`` intermediate."""
        ctx: torch.Tensor = self.context
        q = _project(xq, self.w_q)
        k = _project(ctx, self.w_k) if keys is None else keys
        v = k if _shares_storage(self.w_k, self.w_v) else _project(ctx, self.w_v)
        if self.record:
            return self._linear_attention(q, k, v, self.scale) @ self.w_p
        state = (k.mT @ v) @ self.w_p
        if self.scale != 1.0:
            state = state / self.scale
        return _project(q, state)

    @property
    def coefficients(self) -> torch.Tensor:
        """``β̂ = W_Q (X W_K)ᵀ (X W_V) W_P / c`` of shape ``(B, d, dy)``: the linear map the layer
        applies to a query (``= L P`` when ``λ = 0``)."""
        ctx: torch.Tensor = self.context
        return self.w_q @ ((ctx @ self.w_k).mT @ (ctx @ self.w_v)) @ self.w_p / self.scale


class OLSAttention(_FitsContext):
    """Goulet Coulombe (arXiv 2504.09663), "OLS as an Attention Mechanism":
    ``Ŷ* = (X* L)(X L)ᵀ Y / c`` — queries are test rows, keys are training rows, values are the
    training targets ``Y``, separation is the identity. ``L`` from ``S_c + λI`` gives the ridge
    form ``X* (S_c + λI)⁻¹ XᵀY / c`` (``c = N`` for ``covariance="mean"``).
    """

    def fit(self, x_ctx: torch.Tensor, y_ctx: torch.Tensor) -> OLSAttention:
        """Set ``W_Q = W_K = L``; the values are ``Y`` itself (``W_V`` the identity on targets)."""
        self._fit(x_ctx, y_ctx, checked=False)
        return self

    def _fit(self, x_ctx: torch.Tensor, y_ctx: torch.Tensor, checked: bool) -> None:
        white = _whiten(x_ctx, self.ridge, self.covariance, self.method, self.rtol, checked)
        self.whitening = white
        self.w_q = nn.Parameter(white.matrix, requires_grad=False)
        self.w_k = nn.Parameter(white.matrix, requires_grad=False)
        self.register_buffer("context", x_ctx, persistent=False)
        self.register_buffer("values", y_ctx, persistent=False)
        self.scale = white.scale

    def forward(self, x_query: ArrayLike) -> torch.Tensor:
        """``(X* W_Q)(X W_K)ᵀ Y / c``."""
        if self.whitening is None:
            raise RuntimeError("OLSAttention: call fit(x_ctx, y_ctx) before the forward pass")
        ctx: torch.Tensor = self.context
        return self._attend(self._query(x_query, ctx.shape[-1], ctx.shape[0], ctx.dtype))

    def _attend(self, xq: torch.Tensor, keys: torch.Tensor | None = None) -> torch.Tensor:
        """``(X* W_Q)(X W_K)ᵀ Y / c``. Recorded, as written (scores and weights kept);
        otherwise as ``X* (W_Q (W_Kᵀ (Xᵀ Y))) / c`` — the same product, associated so that only
        ``d``-sized matrices and the output are formed: one pass over the context and one
        over the queries, linear in ``N`` and ``M`` (quality.md P3)."""
        ctx: torch.Tensor = self.context
        if self.record:
            q = _project(xq, self.w_q)
            k = _project(ctx, self.w_k) if keys is None else keys
            return self._linear_attention(q, k, self.values, self.scale)
        state = self.w_q @ (self.w_k.mT @ (ctx.mT @ self.values))
        if self.scale != 1.0:
            state = state / self.scale
        return xq @ state
