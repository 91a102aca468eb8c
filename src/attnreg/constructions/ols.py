"""Regression as one linear attention layer: the OLS-Transformer and OLS-as-attention.

Both are weight factories for the attention core (:class:`attnreg.core.attention.Attention`,
identity separation): ``fit`` computes the whitening ``L`` (``L Lᵀ = (S_c + λI)⁺``,
:func:`attnreg.core.whitening.whitening_matrix`) and the output projection from the context;
the forward pass is the core's, with its hook points ``attn.hook_q`` … ``attn.hook_output``.

``OLSTransformer(convention="tan-zhao")`` is Tan & Zhao's layer as their paper writes it: ``L``
from the eigendecomposition ``S = V Λ Vᵀ`` (``method="eigh"``) and an identity feed-forward
block (:class:`FeedForward`) applied between the attention and ``W_P``.

Exact on the data users have: X's numerical null space (zero, constant-with-intercept or
collinear columns, ``N < d``) is dropped, which is the pseudo-inverse without ridge and exact
ridge with it; each task's data is rescaled by a power of two when its magnitude would make
``XᵀX`` overflow or underflow (:mod:`attnreg.core.scaling`), and the answer scaled back.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Self

import torch

from attnreg.core.attention import Attention
from attnreg.core.hooks import Hooked, HookPoint
from attnreg.core.linear import key_value_state, project, task_blocks
from attnreg.core.results import check_finite_result
from attnreg.core.scaling import Rescaling, rescale_tasks
from attnreg.core.tasks import check_tasks
from attnreg.core.validation import ArrayLike, as_tensor, check_choice, check_nonnegative
from attnreg.core.whitening import COVARIANCES, METHODS, Whitening, whitening_matrix

CONVENTIONS = ("package", "tan-zhao")
"""``OLSTransformer`` conventions: the package's (``L`` by SVD, no feed-forward block) and Tan &
Zhao's as written (``L`` by ``eigh`` of ``S``, an identity feed-forward block applied)."""


class _RegressionLayer(Hooked, ABC):
    """Shared settings, scaling and the ``fit`` / ``forward`` / ``predict`` protocol."""

    context: torch.Tensor
    keys: torch.Tensor | None
    rescaling: Rescaling

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
        self.rtol = None if rtol is None else check_nonnegative("rtol", rtol)
        self.attn = Attention("dot", "identity")
        self.whitening: Whitening | None = None
        self.scale = 1.0

    def fit(self, x_ctx: ArrayLike, y_ctx: ArrayLike) -> Self:
        """Set the weights from a context ``(B, N, d), (B, N, dy)`` (or unbatched)."""
        xc, yc, _, _ = check_tasks(x_ctx, y_ctx, x_ctx)
        self._fit(xc, yc)
        return self

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """Build the layer from the context, then run its forward pass on the queries:
        ``(B, N, d), (B, N, dy), (B, M, d) -> (B, M, dy)``."""
        xc, yc, xq, shape = check_tasks(x_ctx, y_ctx, x_query)
        return check_finite_result(self._fit_attend(xc, yc, xq)).reshape(shape)

    def _fit_attend(self, x: torch.Tensor, y: torch.Tensor, xq: torch.Tensor) -> torch.Tensor:
        """``fit`` then the forward pass on validated batched tensors."""
        self._fit(x, y)
        return self._attend(xq)

    def forward(self, x_query: ArrayLike) -> torch.Tensor:
        """The forward pass of the fitted layer on queries ``(B or 1, M, d)`` or ``(M, d)``."""
        if self.whitening is None:
            raise RuntimeError(f"{type(self).__name__}: call fit(x_ctx, y_ctx) first")
        ctx = self.context
        xq = as_tensor("x_query", x_query, ndim=(2, 3)).to(ctx.dtype)
        xq = xq.unsqueeze(0) if xq.ndim == 2 else xq
        if xq.shape[-1] != ctx.shape[-1] or xq.shape[0] not in (1, ctx.shape[0]):
            raise ValueError(
                f"x_query shape {tuple(xq.shape)} does not fit the fitted context "
                f"(batch {ctx.shape[0]}, d = {ctx.shape[-1]})"
            )
        return check_finite_result(self._attend(xq.expand(ctx.shape[0], *xq.shape[1:])))

    def _fit(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Whiten the (rescaled) context and set the weights; returns the rescaled ``(X, Y)``."""
        x, y = self._whiten(x, y)
        self._set_weights(self._white(), x, y)
        return x, y

    def _white(self) -> Whitening:
        if self.whitening is None:
            raise RuntimeError(f"{type(self).__name__}: call fit(x_ctx, y_ctx) first")
        return self.whitening

    def _whiten(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, y, rescaling = rescale_tasks(x, y, self.ridge)
        white = whitening_matrix(
            x,
            ridge=rescaling.ridge,
            covariance=self.covariance,
            method=self.method,
            rtol=self.rtol,
            checked=True,
        )
        self.whitening, self.scale, self.rescaling = white, white.scale, rescaling
        self.register_buffer("context", x, persistent=False)
        return x, y

    def _attend(self, xq: torch.Tensor) -> torch.Tensor:
        return self.rescaling.answer(xq, self._forward)

    @abstractmethod
    def _set_weights(self, white: Whitening, x: torch.Tensor, y: torch.Tensor) -> None:
        """Set the layer's weights from the whitening and the (rescaled) context."""

    @abstractmethod
    def _forward(self, xq: torch.Tensor) -> torch.Tensor:
        """The forward pass on (rescaled) queries."""


class FeedForward(torch.nn.Module):
    """The feed-forward block of Tan & Zhao's layer, ``h ↦ h W_FFN`` with ``W_FFN = I`` (``d × d``).

    It is applied (a real matrix product, exact: every entry is multiplied by 1 and the others
    by 0) so the layer has the paper's blocks; its weight is set by :meth:`build` at ``fit``, and
    its output flows through the hook point ``hook_output``."""

    weight: torch.Tensor | None

    def __init__(self) -> None:
        super().__init__()
        self.register_parameter("weight", None)
        self.hook_output = HookPoint()

    def build(self, d: int, dtype: torch.dtype, device: torch.device) -> None:
        """Set ``W_FFN = I_d``."""
        eye = torch.eye(d, dtype=dtype, device=device)
        self.weight = torch.nn.Parameter(eye, requires_grad=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """``h W_FFN`` for ``h`` ``(B, M, d)``."""
        if self.weight is None:
            raise RuntimeError("FeedForward: call build(d, dtype, device) first")
        return self.hook_output(h @ self.weight)


class OLSTransformer(_RegressionLayer):
    """Tan & Zhao (arXiv 2604.13656), "Ordinary Least Squares is a Special Case of Transformer".

    One linear attention layer, no softmax, with ``W_Q = W_K = W_V = L`` (the whitening,
    ``L Lᵀ = S⁻¹``), ``W_FFN = I`` and output projection ``W_P = P = Lᵀ XᵀY / c``. On queries
    ``X*`` cross-attending to the context ``X``:

    ``out = (X* L)(X L)ᵀ (X L) P / c = X* L P = X* β̂``   (c = 1 for ``"gram"``, N for ``"mean"``)

    and on its own context the attention ``(XL)(XL)ᵀ`` is the hat matrix ``H``, so ``out = H Y``.
    With a ridge ``λ > 0``, ``L Lᵀ = (S_c + λI)⁻¹`` and ``P = G⁺ Lᵀ XᵀY / c`` with
    ``G = Lᵀ S_c L = (XL)ᵀ(XL)/c`` (the factor the attention itself applies) keeps the tied weights
    and gives ridge predictions. Slow memory: ``L, P``; fast memory: the keys ``X L`` and the
    scores ``X* S⁻¹ Xᵀ`` (hook ``attn.hook_scores``).

    ``convention="tan-zhao"``: the layer as the paper writes it. ``L = V Λ^{-1/2}`` from the
    symmetric eigendecomposition ``S = V Λ Vᵀ`` (``method="eigh"``, the only method it takes;
    eigenvalues at or below ``max(N, d)·eps·λ_max`` are X's numerical null space and get a zero
    column, as in the package's whitening, so it stays exact on rank-deficient data), and the
    identity feed-forward block ``W_FFN = I`` (:class:`FeedForward`, module ``ffn``, hook
    ``ffn.hook_output``) applied between the attention and ``W_P``:

    ``out = ((X* L)(X L)ᵀ (X L) / c) W_FFN P``,   ``P = Lᵀ XᵀY / c``.

    With ``covariance="gram"`` (the default) ``S = XᵀX`` and ``P = Lᵀ XᵀY``, ``L P = β̂`` exactly as
    written; ``covariance="mean"`` is the empirical covariance ``XᵀX / N`` with the ``1/N`` on the
    scores and on ``P``. Its accuracy is the normal equations' (``u · κ(S)``), as for ``"eigh"``.
    The default ``convention="package"`` computes the same layer from the SVD of ``X``, without
    the feed-forward block.
    """

    def __init__(
        self,
        ridge: float = 0.0,
        covariance: str = "gram",
        method: str | None = None,
        rtol: float | None = None,
        convention: str = "package",
    ) -> None:
        convention = check_choice("convention", convention, CONVENTIONS)
        literal = convention == "tan-zhao"
        if method is None:
            method = "eigh" if literal else "svd"
        elif literal and method != "eigh":
            raise ValueError(
                f"method: convention='tan-zhao' computes L by the eigendecomposition of S "
                f"(method='eigh'); got method={method!r}"
            )
        super().__init__(ridge, covariance, method, rtol)
        self.convention = convention
        self.ffn: FeedForward | None = FeedForward() if literal else None

    def _set_weights(self, white: Whitening, x: torch.Tensor, y: torch.Tensor) -> None:
        keys, proj = self._keys_projection(white, x, y, slice(None))
        self._store(white.matrix, keys, proj)

    def _keys_projection(
        self, white: Whitening, x: torch.Tensor, y: torch.Tensor, block: slice
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys ``X W_K`` (= ``X W_V``, tied) and ``W_P`` of the tasks ``block``."""
        keys = project(x[block], white.matrix[block])
        rhs = key_value_state(keys, y[block])  # (X L)ᵀ Y = Lᵀ Xᵀ Y
        if white.scale != 1.0:
            rhs = rhs / white.scale
        proj = rhs if self.ridge == 0 else self._ridge_projection(white, keys, rhs, block)
        return keys, proj

    def _store(self, lmat: torch.Tensor, keys: torch.Tensor | None, proj: torch.Tensor) -> None:
        """Set the weights; ``keys`` (``X W_K``, the fast memory) or ``None`` (recomputed on the
        first forward pass)."""
        self.w_q = torch.nn.Parameter(lmat, requires_grad=False)
        self.w_k = torch.nn.Parameter(lmat, requires_grad=False)
        self.w_v = torch.nn.Parameter(lmat, requires_grad=False)
        self.w_p = torch.nn.Parameter(proj, requires_grad=False)
        self.register_buffer("keys", keys, persistent=False)
        if self.ffn is not None:
            self.ffn.build(lmat.shape[-1], lmat.dtype, lmat.device)

    def _fit_attend(self, x: torch.Tensor, y: torch.Tensor, xq: torch.Tensor) -> torch.Tensor:
        """Whiten, then build and run the layer one block of about 1 MiB of tasks at a time
        (:func:`attnreg.core.linear.task_blocks`): a block's keys serve ``W_P`` and the
        forward pass while they are still in cache. The projections are folded where they cost
        least: ``W_Q = L`` reaches the core as the metric of its bilinear similarity,
        ``(X* L) kᵀ = X* L kᵀ``, and ``W_P`` goes into the values, ``V W_P = K P``, so the
        core's linear path forms the ``d × dy`` state ``L (Kᵀ (K P))`` — neither the ``d × d``
        state ``KᵀK`` nor the ``M × d`` queries ``X* L``. With a hook registered, the whole
        batch at once through the layer's own forward (so every hook sees every task), which
        hands the core the same tensors (:meth:`_forward`): the same floating-point operations
        per task, so a read-only hook leaves the prediction bit for bit as it is. With the
        feed-forward block, always the layer's forward."""
        hooked = any(m.active for m in self.attn.modules() if isinstance(m, HookPoint))
        if hooked or self.ffn is not None:
            return super()._fit_attend(x, y, xq)
        x, y = self._whiten(x, y)
        white = self._white()
        proj = x.new_empty(x.shape[0], x.shape[-1], y.shape[-1])

        def run(xq: torch.Tensor) -> torch.Tensor:
            out = x.new_empty(x.shape[0], xq.shape[-2], y.shape[-1])
            per_task = max(t[0].numel() * t.element_size() for t in (x, xq))
            for block in task_blocks(x.shape[0], per_task):
                keys, proj[block] = self._keys_projection(white, x, y, block)
                values = project(keys, proj[block])  # X W_V W_P, (tasks, N, dy)
                out[block] = self.attn(
                    xq[block], keys, values, metric=white.matrix[block], beta=1.0 / white.scale
                )
            return out

        out = self.rescaling.answer(xq, run)
        self._store(white.matrix, None, proj)
        return out

    def _ridge_projection(
        self, white: Whitening, keys: torch.Tensor, rhs: torch.Tensor, block: slice
    ) -> torch.Tensor:
        """``P = G⁺ Lᵀ XᵀY / c``. From the eigen-whitening ``G = diag(e / (e + λ))`` on the kept
        directions (``0`` on X's null space); for Cholesky, ``G = (XL)ᵀ(XL)/c`` and its
        pseudo-inverse (symmetric eigendecomposition, relative tolerance ``max(N, d)·eps``)."""
        if white.eigenvalues is not None and white.kept is not None:
            e, kept = white.eigenvalues[block], white.kept[block]
            lam = white.ridge[block].unsqueeze(-1)
            safe = torch.where(kept, e, torch.ones_like(e))
            gain = torch.where(kept, (e + lam) / safe, torch.zeros_like(e))
            return gain.unsqueeze(-1) * rhs
        g = key_value_state(keys, keys) / white.scale
        n, d = keys.shape[-2], keys.shape[-1]
        rtol = max(n, d) * torch.finfo(keys.dtype).eps
        return torch.linalg.pinv(g, rtol=rtol, hermitian=True) @ rhs

    def _forward(self, xq: torch.Tensor) -> torch.Tensor:
        """``(X* W_Q)(X W_K)ᵀ (X W_V) W_P / c`` through the core; the tied ``W_K = W_V`` project
        the context once. Without the feed-forward block, as the unhooked ``predict`` computes
        it (one arithmetic, hooked or not): ``W_Q`` is the core's bilinear metric and ``W_P``
        goes into the values, so ``attn.hook_q`` sees the raw queries ``X*`` (as in
        :class:`OLSAttention`), ``attn.hook_k`` the keys ``X W_K`` and ``attn.hook_v`` the
        projected values ``X W_V W_P``; the scores ``X* W_Q (X W_K)ᵀ`` are unchanged. With the
        block (``convention="tan-zhao"``) the core takes ``X* W_Q`` and ``X W_V``, returns the
        attention output ``(B, M, d)``, the block applies ``W_FFN``, then ``W_P``."""
        if self.keys is None:
            self.keys = project(self.context, self.w_k)
        tied = self.w_k.data_ptr() == self.w_v.data_ptr() and self.w_k.shape == self.w_v.shape
        values = self.keys if tied else project(self.context, self.w_v)
        if self.ffn is None:
            values = project(values, self.w_p)  # X W_V W_P, (B, N, dy)
            return self.attn(xq, self.keys, values, metric=self.w_q, beta=1.0 / self.scale)
        hidden = self.attn(project(xq, self.w_q), self.keys, values, beta=1.0 / self.scale)
        return project(self.ffn(hidden), self.w_p)

    @property
    def coefficients(self) -> torch.Tensor:
        """``β̂ = W_Q (X W_K)ᵀ (X W_V) [W_FFN] W_P / c`` of shape ``(B, d, dy)``: the linear map the
        layer applies to a query (``= L P`` when ``λ = 0``), in the caller's units."""
        ctx = self.context
        attended = self.w_q @ ((ctx @ self.w_k).mT @ (ctx @ self.w_v))
        if self.ffn is not None and self.ffn.weight is not None:
            attended = attended @ self.ffn.weight
        beta = attended @ self.w_p / self.scale
        eye = torch.eye(beta.shape[-2], dtype=beta.dtype, device=beta.device)
        # β̂ in the caller's units is the answer to the queries e_1 … e_d
        return self.rescaling.answer(eye.expand(beta.shape[0], -1, -1), lambda q: q @ beta)


class OLSAttention(_RegressionLayer):
    """Goulet Coulombe (arXiv 2504.09663), "OLS as an Attention Mechanism":
    ``Ŷ* = (X* L)(X L)ᵀ Y / c`` — queries are test rows, keys are training rows, values are the
    training targets ``Y``, separation is the identity. ``L`` from ``S_c + λI`` gives the ridge
    form ``X* (S_c + λI)⁻¹ XᵀY / c`` (``c = N`` for ``covariance="mean"``).
    """

    values: torch.Tensor

    def _set_weights(self, white: Whitening, x: torch.Tensor, y: torch.Tensor) -> None:
        self.w_q = torch.nn.Parameter(white.matrix, requires_grad=False)
        self.w_k = torch.nn.Parameter(white.matrix, requires_grad=False)
        self.register_buffer("values", y, persistent=False)

    def _forward(self, xq: torch.Tensor) -> torch.Tensor:
        """``(X* W_Q)(X W_K)ᵀ Y / c`` through the core as the whitened dot product
        ``X* M Xᵀ Y / c`` with ``M = W_Q W_Kᵀ = S⁻¹``: the queries and keys reach the core as
        the raw rows (hooks ``attn.hook_q``/``hook_k``), the scores are the same, and the
        linear path computes ``X* (M (Xᵀ Y)) / c`` — one pass over the context and one over the
        queries, with no ``N × d`` projection (P3)."""
        metric = self.w_q @ self.w_k.mT
        return self.attn(xq, self.context, self.values, metric=metric, beta=1.0 / self.scale)
