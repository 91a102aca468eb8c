"""Linear self-attention layers whose weights make them gradient-descent steps.

von Oswald et al. (2023), "Transformers learn in-context by gradient descent" (ICML), with the
GD++ and preconditioned variants (Ahn et al. 2023). Tokens ``e_i = (x_i, y_i) ∈ R^{d+dy}``;
a query token is ``(x_q, −W0 x_q)``. One layer updates every token, with keys and values from
the N context tokens only:

``e_j ← e_j + P W_V Σ_{i≤N} e_i (e_iᵀ W_Kᵀ W_Q e_j)``

With ``W_Kᵀ W_Q = [[I, 0], [0, 0]]`` and ``P W_V = (η/N) [[0, 0], [W0, −I]]`` the query's
y-entry becomes ``−W1 x_q`` with ``W1 = W0 − η ∇L(W0)``, ``L(W) = (1/2N) Σ ‖W x_i − y_i‖²``; the
prediction is read out **negated**. K such layers (the same ``W0`` term in each) = K GD steps.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from attnreg.constructions._cache import RecordsAttention
from attnreg.core.validation import (
    ArrayLike,
    as_tensor,
    check_nonnegative,
    check_positive,
    check_positive_int,
    check_tasks,
    per_step,
)


def _block(
    top_left: torch.Tensor,
    bottom_left: torch.Tensor,
    bottom_right: torch.Tensor,
    top_right: torch.Tensor | None = None,
) -> torch.Tensor:
    d, dy = top_left.shape[0], bottom_right.shape[0]
    top = torch.cat(
        [
            top_left,
            top_right if top_right is not None else torch.zeros(d, dy, dtype=top_left.dtype),
        ],
        dim=1,
    )
    return torch.cat([top, torch.cat([bottom_left, bottom_right], dim=1)], dim=0)


class LinearSelfAttention(RecordsAttention):
    """One linear self-attention layer on tokens, keys and values from the first ``n_ctx`` tokens.

    ``E ← E + ((E W_Qᵀ)(E_ctx W_Kᵀ)ᵀ)(E_ctx W_Vᵀ) Pᵀ``; all four weights are ``(D, D)`` with
    ``D = d + dy``. Attention scores and weights are recorded under ``"scores"``/``"weights"``.
    """

    def __init__(
        self,
        w_q: torch.Tensor,
        w_k: torch.Tensor,
        w_v: torch.Tensor,
        proj: torch.Tensor,
        trainable: bool = False,
    ) -> None:
        super().__init__()
        self.w_q = nn.Parameter(w_q, requires_grad=trainable)
        self.w_k = nn.Parameter(w_k, requires_grad=trainable)
        self.w_v = nn.Parameter(w_v, requires_grad=trainable)
        self.proj = nn.Parameter(proj, requires_grad=trainable)

    def forward(self, tokens: torch.Tensor, n_ctx: int) -> torch.Tensor:
        """Update every token of ``tokens`` ``(B, T, D)`` by attending to the first ``n_ctx``."""
        ctx = tokens[:, :n_ctx]
        q = tokens @ self.w_q.to(tokens.dtype).mT
        k = ctx @ self.w_k.to(tokens.dtype).mT
        v = ctx @ self.w_v.to(tokens.dtype).mT
        return tokens + self._linear_attention(q, k, v, 1.0) @ self.proj.to(tokens.dtype).mT

    @property
    def key_query(self) -> torch.Tensor:
        """``W_Kᵀ W_Q`` — only this product (and ``P W_V``) is identifiable."""
        return self.w_k.mT @ self.w_q

    @property
    def value_projection(self) -> torch.Tensor:
        """``P W_V``."""
        return self.proj @ self.w_v


def gd_layer(
    d: int,
    dy: int,
    n_ctx: int,
    eta: float,
    w0: ArrayLike | None = None,
    gamma: float = 0.0,
    preconditioner: ArrayLike | None = None,
    dtype: torch.dtype = torch.float64,
) -> LinearSelfAttention:
    """The von Oswald weights for one GD step (``gamma = 0``), a GD++ step (``gamma > 0``:
    ``P W_V = [[−γI, 0], [(η/N) W0, −(η/N) I]]``) or a preconditioned step
    (``W_Kᵀ W_Q = [[Γ, 0], [0, 0]]``, Ahn et al. 2023).
    """
    check_positive_int("d", d)
    check_positive_int("dy", dy)
    check_positive_int("n_ctx", n_ctx)
    check_positive("eta", eta)
    check_nonnegative("gamma", gamma)
    eye_d, eye_y = torch.eye(d, dtype=dtype), torch.eye(dy, dtype=dtype)
    zero_yd, zero_yy = torch.zeros(dy, d, dtype=dtype), torch.zeros(dy, dy, dtype=dtype)
    w0m = zero_yd if w0 is None else as_tensor("w0", w0, ndim=(2,)).to(dtype)
    if w0m.shape != (dy, d):
        raise ValueError(f"w0: expected shape ({dy}, {d}), got {tuple(w0m.shape)}")
    g = (
        eye_d
        if preconditioner is None
        else as_tensor("preconditioner", preconditioner, ndim=(2,)).to(dtype)
    )
    if g.shape != (d, d):
        raise ValueError(f"preconditioner: expected shape ({d}, {d}), got {tuple(g.shape)}")
    w_q = _block(g, zero_yd, zero_yy)
    w_k = _block(eye_d, zero_yd, zero_yy)
    scale = eta / n_ctx
    w_v = _block(-gamma * eye_d, scale * w0m, -scale * eye_y)
    return LinearSelfAttention(w_q, w_k, w_v, torch.eye(d + dy, dtype=dtype))


class LSAStack(RecordsAttention):
    """K linear self-attention layers in sequence; the read-out is minus the query's y-entry.

    Build it with :meth:`gd`, :meth:`gd_plus_plus` or :meth:`preconditioned`. ``n_ctx`` is
    the context size the weights were built for (they hold ``η/N``).
    """

    w0: torch.Tensor
    layers: nn.ModuleList

    def __init__(
        self,
        layers: Sequence[LinearSelfAttention],
        d: int,
        dy: int,
        n_ctx: int,
        w0: torch.Tensor | None = None,
    ) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.d, self.dy, self.n_ctx = d, dy, n_ctx
        self.register_buffer("w0", torch.zeros(dy, d) if w0 is None else w0)

    @classmethod
    def gd(
        cls,
        d: int,
        dy: int,
        n_ctx: int,
        eta: float | Sequence[float] = 1.0,
        steps: int = 1,
        w0: ArrayLike | None = None,
        dtype: torch.dtype = torch.float64,
    ) -> LSAStack:
        """K = ``steps`` layers = K GD steps from ``W0`` (von Oswald et al. 2023, Prop. 1)."""
        etas = per_step("eta", eta, steps)
        w = None if w0 is None else as_tensor("w0", w0, ndim=(2,)).to(dtype)
        layers = [gd_layer(d, dy, n_ctx, e, w, dtype=dtype) for e in etas]
        return cls(layers, d, dy, n_ctx, w)

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
        """K GD++ layers (von Oswald et al. 2023, §4); one ``(η, γ)`` each, or shared."""
        pairs = zip(per_step("eta", eta, steps), per_step("gamma", gamma, steps), strict=True)
        return cls(
            [gd_layer(d, dy, n_ctx, e, gamma=g, dtype=dtype) for e, g in pairs], d, dy, n_ctx
        )

    @classmethod
    def preconditioned(
        cls,
        preconditioner: ArrayLike,
        dy: int,
        n_ctx: int,
        eta: float | Sequence[float] = 1.0,
        steps: int = 1,
        w0: ArrayLike | None = None,
        dtype: torch.dtype = torch.float64,
    ) -> LSAStack:
        """K preconditioned GD layers: ``W_Kᵀ W_Q = [[Γ, 0], [0, 0]]`` (Ahn et al. 2023)."""
        g = as_tensor("preconditioner", preconditioner, ndim=(2,)).to(dtype)
        d = g.shape[0]
        w = None if w0 is None else as_tensor("w0", w0, ndim=(2,)).to(dtype)
        layers = [
            gd_layer(d, dy, n_ctx, e, w, preconditioner=g, dtype=dtype)
            for e in per_step("eta", eta, steps)
        ]
        return cls(layers, d, dy, n_ctx, w)

    def tokens(
        self, x_ctx: torch.Tensor, y_ctx: torch.Tensor, x_query: torch.Tensor
    ) -> torch.Tensor:
        """The von Oswald layout: ``[(x_i, y_i)]_{i≤N} ++ [(x_q, −W0 x_q)]`` as ``(B, N+M, D)``."""
        yq = -(x_query @ self.w0.to(x_query.dtype).mT)
        return torch.cat([torch.cat([x_ctx, y_ctx], -1), torch.cat([x_query, yq], -1)], dim=1)

    def forward(self, tokens: torch.Tensor, n_ctx: int | None = None) -> torch.Tensor:
        """Run every layer on the tokens; scores are recorded as ``"layers.{i}.scores"``."""
        n = self.n_ctx if n_ctx is None else n_ctx
        for i, layer in enumerate(self.layers):
            tokens = layer(tokens, n)
            if self.record:
                assert isinstance(layer, RecordsAttention)
                for key, value in layer.cache.items():
                    self.cache[f"layers.{i}.{key}"] = value
        return tokens

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """Minus the y-entry of each query token after the stack."""
        xc, yc, xq, shape = check_tasks(x_ctx, y_ctx, x_query)
        if xc.shape[1] != self.n_ctx or xc.shape[2] != self.d or yc.shape[2] != self.dy:
            raise ValueError(
                f"x_ctx/y_ctx shapes {tuple(xc.shape)}/{tuple(yc.shape)} do not fit this stack "
                f"(built for N = {self.n_ctx}, d = {self.d}, dy = {self.dy})"
            )
        out = self(self.tokens(xc, yc, xq))
        return (-out[:, self.n_ctx :, self.d :]).reshape(shape)
