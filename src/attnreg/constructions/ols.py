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
    product, in the layout in which PyTorch's CPU batched matmul (MKL's strided batch GEMM)
    runs it faster: by 5–10 % for the ``d × d`` token projections of P1, about twice as fast
    for a single output column (``k = 1``, one matrix–vector product per task). One long
    context keeps the plain layout, which is faster there (P3)."""
    if x.shape[0] > 1 and x.shape[-2] <= 1024:
        return (w.mT @ x.mT).mT
    return x @ w


def _gram(k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``Kᵀ V`` summed over the tokens of each task (``(B, N, d)``, ``(B, N, dv)``). With one
    value column (``Kᵀ Y`` for a scalar target) it is evaluated as ``(Vᵀ K)ᵀ``: the same
    product, about three times faster in PyTorch's CPU batched matmul for many small tasks."""
    if v.shape[-1] == 1 and k.shape[0] > 1:
        return (v.mT @ k).mT
    return k.mT @ v


TASK_BLOCK_BYTES = 2**20


def _task_blocks(*tokens: torch.Tensor) -> list[slice]:
    """Slices of the task axis of batched token tensors ``(B, N, d)``, each covering about
    ``TASK_BLOCK_BYTES`` of the largest of them (at least one task per slice).

    The tasks of a batch are independent, so the layer is evaluated one block of tasks at a
    time. A block's keys ``X L`` and queries ``X* L`` are then about 1 MiB each (a whole P1
    batch: 4 MiB each), so they are still in cache when ``Kᵀ V``, ``Kᵀ Y`` and ``Q · state``
    read them back, and the allocator reuses their memory from block to block instead of
    mapping fresh pages for each whole-batch temporary (about 1,000 page faults per call while
    glibc's mmap threshold is still low). Measured on P1: 15–25 % less time in a fresh
    process, a few percent once a large allocation has raised that threshold (as in ``attnreg
    bench``). One long context (``B = 1``, P3) is a single block."""
    b = max(t.shape[0] for t in tokens)
    per_task = max(t[0].numel() * t.element_size() for t in tokens)
    step = max(1, TASK_BLOCK_BYTES // max(1, per_task))
    return [slice(start, min(start + step, b)) for start in range(0, b, step)]


def _rows(x: torch.Tensor, block: slice) -> torch.Tensor:
    """The tasks ``block`` of ``x``; a batch of one (shared by every task) is kept whole."""
    return x if x.shape[0] == 1 else x[block]


def _attend_block(
    xq: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    w_q: torch.Tensor,
    w_p: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """The unrecorded forward pass of one block of tasks: ``Q ((Kᵀ V) W_P) / c`` with
    ``Q = X* W_Q`` — the output projection is applied to the ``d × d`` state ``Kᵀ V`` (summed
    over the context tokens) first, so no ``M × d`` intermediate besides ``Q`` is formed."""
    state = _gram(k, v) @ w_p
    if scale != 1.0:
        state = state / scale
    return _project(_project(xq, w_q), state)


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
        return self._fit_predict(xc, yc, xq).reshape(shape)

    def fit(self, x_ctx: torch.Tensor, y_ctx: torch.Tensor) -> _FitsContext:
        """Set the weights from a batched context ``(B, N, d)``, ``(B, N, dy)``."""
        self._fit(x_ctx, y_ctx, checked=False)
        return self

    def _fit_predict(self, xc: torch.Tensor, yc: torch.Tensor, xq: torch.Tensor) -> torch.Tensor:
        """Set the weights from a validated context, then run the forward pass on ``xq``."""
        self._fit(xc, yc, checked=True)
        return self._attend(xq)

    def _fit(
        self, x_ctx: torch.Tensor, y_ctx: torch.Tensor, checked: bool
    ) -> None:  # pragma: no cover
        """Set the weights (``checked``: the context was validated by the caller)."""
        raise NotImplementedError

    def _attend(self, xq: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        """The forward pass on validated queries ``(B or 1, M, d)``."""
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

    def _fit(self, x_ctx: torch.Tensor, y_ctx: torch.Tensor, checked: bool) -> None:
        self._construct(x_ctx, y_ctx, None, checked)

    def _fit_predict(self, xc: torch.Tensor, yc: torch.Tensor, xq: torch.Tensor) -> torch.Tensor:
        if self.record:  # the recorded forward keeps whole (B, M, N) score tensors
            return super()._fit_predict(xc, yc, xq)
        out = self._construct(xc, yc, xq, checked=True)
        assert out is not None
        return out

    def _construct(
        self, x: torch.Tensor, y: torch.Tensor, xq: torch.Tensor | None, checked: bool
    ) -> torch.Tensor | None:
        """Set ``W_Q = W_K = W_V = L`` and ``W_P = Lᵀ XᵀY / c`` (ridge: see the class); with
        queries ``xq``, also run the forward pass on them and return it (``predict``).

        After the whitening, the rest runs one block of tasks at a time (:func:`_task_blocks`):
        a block's keys ``K = X W_K`` (also its values, ``W_V = W_K``) give the output projection
        ``Kᵀ Y = Lᵀ XᵀY`` and, for ``predict``, the forward pass ``Q ((Kᵀ V) W_P) / c`` of
        the same block, while ``K`` is still in cache."""
        white = _whiten(x, self.ridge, self.covariance, self.method, self.rtol, checked)
        lmat, c = white.matrix, white.scale
        proj = x.new_empty(x.shape[0], x.shape[-1], y.shape[-1])
        out = None if xq is None else x.new_empty(x.shape[0], xq.shape[-2], y.shape[-1])
        for block in _task_blocks(x) if xq is None else _task_blocks(x, xq):
            keys = _project(x[block], lmat[block])  # X W_K = X W_V (tied)
            proj[block] = self._output_projection(white, block, keys, y[block])
            if out is not None and xq is not None:
                out[block] = _attend_block(xq[block], keys, keys, lmat[block], proj[block], c)
        self.whitening = white
        self.w_q = nn.Parameter(lmat, requires_grad=False)
        self.w_k = nn.Parameter(lmat, requires_grad=False)
        self.w_v = nn.Parameter(lmat, requires_grad=False)
        self.w_p = nn.Parameter(proj, requires_grad=False)
        self.register_buffer("context", x, persistent=False)
        self.scale = c
        return out

    def _output_projection(
        self, white: Whitening, block: slice, keys: torch.Tensor, y: torch.Tensor
    ) -> torch.Tensor:
        """``W_P`` of the tasks ``block``: ``(X L)ᵀ Y / c = Lᵀ XᵀY / c``; with a ridge, the
        ``(Lᵀ S_c L)⁺`` correction of the class docstring (``Lᵀ S_c L = (XL)ᵀ(XL) / c``)."""
        c = white.scale
        rhs = _gram(keys, y)  # (X L)ᵀ Y = Lᵀ Xᵀ Y
        if c != 1.0:
            rhs = rhs / c
        if self.ridge == 0:
            return rhs
        if white.eigenvalues is not None:
            e = white.eigenvalues[block]
            gain = torch.where(
                e > 0, (e + self.ridge) / e.clamp_min(torch.finfo(e.dtype).tiny), 0.0
            )
            return gain.unsqueeze(-1) * rhs
        return torch.linalg.solve(_gram(keys, keys) / c, rhs)

    def forward(self, x_query: ArrayLike) -> torch.Tensor:
        """``(X* W_Q)(X W_K)ᵀ (X W_V) W_P / c`` — cross-attention of the queries to the context."""
        if self.whitening is None:
            raise RuntimeError("OLSTransformer: call fit(x_ctx, y_ctx) before the forward pass")
        ctx: torch.Tensor = self.context
        return self._attend(self._query(x_query, ctx.shape[-1], ctx.shape[0], ctx.dtype))

    def _attend(self, xq: torch.Tensor) -> torch.Tensor:
        """The forward pass on validated queries. Tied ``W_K = W_V`` project the context once.
        Recorded, as written (scores and weights kept); otherwise one block of tasks at a time,
        ``Q ((Kᵀ V) W_P) / c`` (:func:`_attend_block`)."""
        ctx: torch.Tensor = self.context
        tied = _shares_storage(self.w_k, self.w_v)
        if self.record:
            q = _project(xq, self.w_q)
            k = _project(ctx, self.w_k)
            v = k if tied else _project(ctx, self.w_v)
            return self._linear_attention(q, k, v, self.scale) @ self.w_p
        out = ctx.new_empty(ctx.shape[0], xq.shape[-2], self.w_p.shape[-1])
        for block in _task_blocks(ctx, xq):
            k = _project(ctx[block], self.w_k[block])
            v = k if tied else _project(ctx[block], self.w_v[block])
            w_q, w_p = self.w_q[block], self.w_p[block]
            out[block] = _attend_block(_rows(xq, block), k, v, w_q, w_p, self.scale)
        return out

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

    def _attend(self, xq: torch.Tensor) -> torch.Tensor:
        """``(X* W_Q)(X W_K)ᵀ Y / c``. Recorded, as written (scores and weights kept);
        otherwise as ``X* (W_Q (W_Kᵀ (Xᵀ Y))) / c`` — the same product, associated so that only
        ``d``-sized matrices and the output are formed: one pass over the context and one
        over the queries, linear in ``N`` and ``M`` (quality.md P3)."""
        ctx: torch.Tensor = self.context
        if self.record:
            q = _project(xq, self.w_q)
            k = _project(ctx, self.w_k)
            return self._linear_attention(q, k, self.values, self.scale)
        state = self.w_q @ (self.w_k.mT @ (ctx.mT @ self.values))
        if self.scale != 1.0:
            state = state / self.scale
        return xq @ state
