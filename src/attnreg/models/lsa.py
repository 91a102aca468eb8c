"""Linear self-attention on in-context regression tokens (von Oswald et al. 2023).

This is attnreg's one LSA module: the trainable models and the gradient-descent constructions
(:class:`attnreg.constructions.LSAStack`, a weight factory for it) are the same class, run through
the attention core (:class:`attnreg.core.attention.Attention`).

Token layout (von Oswald et al. 2023, "Transformers learn in-context by gradient descent"):
context tokens ``e_i = (x_i, y_i) ∈ R^{D}``, ``D = d + dy``, query tokens ``(x_q, −W0 x_q)``
(``W0 = 0`` unless a construction sets it); the prediction is **minus** the query's y-entry
after the last layer. One layer, head h:

``e_j ← e_j + Σ_h PV_h · (1/N) Σ_{i≤N} e_i e_iᵀ · KQ_h · e_j``

with ``KQ_h = W_{K,h}ᵀ W_{Q,h}`` and ``PV_h = P_h W_{V,h}`` — the only identifiable products:
``(s·PV, KQ/s)`` is the same layer. **The convention, once:** the context sum is a mean (divided by
``N``), so the weights hold ``η`` and one model runs at every context size (Garg et al. 2022). One
GD step on ``L(W) = (1/2N) Σ ‖W x_i − y_i‖²`` from ``W0`` is ``KQ = [[I, 0], [0, 0]]``,
``PV = [[0, 0], [η W0, −η I]]`` (the paper's ``P W_V`` holds ``η/N`` and sums; the same layer).

In the core's terms a layer is ``Attention(q = E, k = v = E_ctx, metric = KQ_hᵀ, W_O = PV_hᵀ,
mean=True)`` (a context mean) with identity separation, summed over heads; the hook points are
``layers.{l}.hook_scores`` ``(B, H, T, N)``, ``layers.{l}.hook_weights`` and
``layers.{l}.hook_output``.

Parametrisations (``variant``):

* ``"full"``: ``KQ_h`` and ``PV_h`` are free ``D × D`` matrices (the products themselves:
  fastest to train, no saddle from the factorisation);
* ``"gdpp"``: the GD++ sparsity pattern, ``KQ = [[A, 0], [0, 0]]``,
  ``PV = [[B, 0], [0, c]]`` (x-tokens move by ``B Σ x xᵀ A``, y by ``c Σ y xᵀ A``);
* ``"factored"``: four free matrices ``W_Q, W_K, W_V, P`` per head (the paper's model).

``layers`` layers deep, each with its own weights, or ``recurrent`` (one set of weights applied
``layers`` times). :class:`TrainableLSA` can drop the residual stream (``residual=False``: a
layer's output is its update alone) or add a pre-attention LayerNorm (``layernorm=True``:
``e ← e + update(LN(e))``, the update computed from the normalised tokens).

:meth:`TokenModel.states` keeps the hidden state (every token) before the first layer and after
each layer of one forward pass; :meth:`TokenModel.depth_predictions` reads the prediction from
each of them (the depth of a stack, counted in one pass).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Self

import torch
import torch.nn.functional as F
from torch import nn

from attnreg.core.attention import Attention
from attnreg.core.hooks import Hooked
from attnreg.core.validation import (
    ArrayLike,
    as_tensor,
    check_choice,
    check_finite_result,
    check_flag,
    check_nonnegative,
    check_positive_int,
    check_seed,
    check_tasks,
    check_underflow,
)

VARIANTS = ("full", "gdpp", "factored")


class TokenModel(Hooked, ABC):
    """Shared token layout, read-out, ``predict`` and checkpoint spec of the token models: each
    layer is one attention core (``separation``) over the context tokens."""

    kind = "token-model"
    w0: torch.Tensor | None
    residual = True
    """Each layer adds its update to the tokens (the residual stream); ``False``: the update
    replaces them."""
    norms: nn.ModuleList | None

    def __init__(
        self, d: int, dy: int, layers: int, heads: int, recurrent: bool, separation: str
    ) -> None:
        super().__init__()
        self.d = check_positive_int("d", d)
        self.dy = check_positive_int("dy", dy)
        self.n_layers = check_positive_int("layers", layers)
        self.heads = check_positive_int("heads", heads)
        self.recurrent = bool(recurrent)
        self.layers = nn.ModuleList(Attention("dot", separation) for _ in range(self.n_layers))
        self.register_buffer("w0", None)
        # a pre-attention LayerNorm per weight set (None: none): a layer attends over LN(T)
        self.norms = None

    @property
    def width(self) -> int:
        """Token width ``D = d + dy``."""
        return self.d + self.dy

    @property
    def n_weight_sets(self) -> int:
        return 1 if self.recurrent else self.n_layers

    def set_w0(self, w0: ArrayLike | None) -> None:
        """The initial weights ``W0`` (``(dy, d)``) of the query tokens ``(x_q, −W0 x_q)``."""
        if w0 is None:
            self.w0 = None
            return
        w = as_tensor("w0", w0, ndim=(2,))
        if w.shape != (self.dy, self.d):
            raise ValueError(f"w0: expected shape ({self.dy}, {self.d}), got {tuple(w.shape)}")
        self.w0 = w

    def tokens(
        self, x_ctx: torch.Tensor, y_ctx: torch.Tensor, x_query: torch.Tensor
    ) -> torch.Tensor:
        """``[(x_i, y_i)]_{i≤N} ++ [(x_q, −W0 x_q)]`` as ``(B, N + M, D)``."""
        if self.w0 is None:
            yq = x_query.new_zeros(*x_query.shape[:-1], self.dy)
        else:
            yq = -(x_query @ self.w0.to(x_query.dtype).mT)
        return torch.cat([torch.cat([x_ctx, y_ctx], -1), torch.cat([x_query, yq], -1)], dim=1)

    @abstractmethod
    def key_query(self, layer: int = 0) -> torch.Tensor:
        """``KQ_h`` of every head of weight set ``layer``: ``(H, D, D)``."""

    @abstractmethod
    def value_projection(self, layer: int = 0) -> torch.Tensor:
        """``PV_h`` of every head of weight set ``layer``: ``(H, D, D)``."""

    context_mean = True  # linear attention averages over the context; softmax normalises

    def attend(
        self, i: int, queries: torch.Tensor, ctx: torch.Tensor, readout: bool = False
    ) -> torch.Tensor:
        """Layer ``i``'s attention update of ``queries`` ``(B, T, D)`` from the context tokens
        ``(B, N, D)``: ``Σ_h sep(β · E KQ_hᵀ E_ctxᵀ) E_ctx PV_hᵀ`` through core ``layers[i]``.
        With ``readout`` only the y-columns of the update are computed."""
        w = 0 if self.recurrent else i
        dtype = queries.dtype
        kq = self.key_query(w).to(dtype)
        w_o = self.value_projection(w).to(dtype).mT
        if readout:
            w_o = w_o[..., self.d :]
        b, h = queries.shape[0], self.heads
        q = queries.unsqueeze(1).expand(b, h, *queries.shape[1:])
        k = ctx.unsqueeze(1).expand(b, h, *ctx.shape[1:])
        core = self.layers[i]
        return core(q, k, k, metric=kq.mT, w_o=w_o, mean=self.context_mean)

    def forward(
        self,
        tokens: torch.Tensor,
        n_ctx: int,
        queries_only: bool = False,
        keep: list[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Run the layers on ``tokens (B, T, D)`` (keys/values: the first ``n_ctx``). With
        ``queries_only`` the last layer updates (and returns) only the tokens after the keys.
        ``keep``: a list that receives the input and the hidden state after every layer."""
        if keep is not None:
            keep.append(tokens)
        for i in range(self.n_layers):
            last = queries_only and i == self.n_layers - 1
            tokens = self._layer(i, tokens, n_ctx, last)
            if keep is not None:
                keep.append(tokens)
        return tokens

    def _normed(self, i: int, tokens: torch.Tensor) -> torch.Tensor:
        """Layer ``i``'s LayerNorm of ``tokens`` in their dtype (the tokens unless
        :attr:`norms`)."""
        if self.norms is None:
            return tokens
        norm = self.norms[0 if self.recurrent else i]
        assert isinstance(norm, nn.LayerNorm)
        dtype = tokens.dtype
        return F.layer_norm(
            tokens, norm.normalized_shape, norm.weight.to(dtype), norm.bias.to(dtype), norm.eps
        )

    def _layer(self, i: int, tokens: torch.Tensor, n_ctx: int, last: bool) -> torch.Tensor:
        """Layer ``i``: ``T + attend(LN(T))`` with the residual stream, ``attend(LN(T))``
        without (``LN`` the identity unless :attr:`norms`); ``last``: only the tokens after the
        first ``n_ctx`` are updated and returned."""
        normed = self._normed(i, tokens)
        queries = normed[:, n_ctx:] if last else normed
        update = self.attend(i, queries, normed[:, :n_ctx])
        if not self.residual:
            return update
        return (tokens[:, n_ctx:] if last else tokens) + update

    def key_count(self, n_ctx: int) -> int:
        """How many leading tokens are the keys, for ``n_ctx`` context examples (here: the
        context tokens themselves)."""
        return n_ctx

    def readout(self, state: torch.Tensor, n_query: int) -> torch.Tensor:
        """The prediction ``(B, M, dy)`` held by a hidden state ``(B, T, D)``: minus the last
        ``n_query`` tokens' y-entries (the layout of the module docstring)."""
        return -state[:, state.shape[1] - n_query :, self.d : self.d + self.dy]

    def states(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> list[torch.Tensor]:
        """The hidden state ``(B, T, D)`` of the embedded tokens and after every layer
        (``layers + 1`` tensors), kept during one forward pass in which every layer updates
        every token; inputs as in :meth:`predict`."""
        return self._states(*self._checked(x_ctx, y_ctx, x_query)[:3])

    def depth_predictions(
        self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike
    ) -> torch.Tensor:
        """The prediction at every depth, ``(layers + 1, B, M, dy)``: :meth:`readout` of each
        of :meth:`states` (entry ``l`` after ``l`` layers; entry 0 is the embedding's)."""
        xc, yc, xq, _ = self._checked(x_ctx, y_ctx, x_query)
        m = xq.shape[1]
        return torch.stack([self.readout(s, m) for s in self._states(xc, yc, xq)])

    def _states(self, xc: torch.Tensor, yc: torch.Tensor, xq: torch.Tensor) -> list[torch.Tensor]:
        kept: list[torch.Tensor] = []
        with torch.no_grad():
            self.forward(self.tokens(xc, yc, xq), self.key_count(xc.shape[1]), keep=kept)
        return kept

    def forward_predict(
        self, x_ctx: torch.Tensor, y_ctx: torch.Tensor, x_query: torch.Tensor
    ) -> torch.Tensor:
        """Differentiable prediction on already-checked batched tensors: ``(B, M, dy)``; the last
        layer computes only the queries' y-entries."""
        n = x_ctx.shape[1]
        tokens = self.tokens(x_ctx, y_ctx, x_query)
        for i in range(self.n_layers - 1):
            tokens = self._layer(i, tokens, n, False)
        last = self.n_layers - 1
        normed = self._normed(last, tokens)
        update = self.attend(last, normed[:, n:], normed[:, :n], readout=True)
        if not self.residual:
            return -update
        return -(tokens[:, n:, self.d :] + update)

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """The one signature: ``(B, N, d), (B, N, dy), (B, M, d) -> (B, M, dy)`` (minus the
        query tokens' y-entries after the last layer). Computed in the inputs' dtype."""
        xc, yc, xq, shape = self._checked(x_ctx, y_ctx, x_query)
        with torch.no_grad():
            out = check_finite_result(self.forward_predict(xc, yc, xq))
        return check_underflow(out, self.forward_predict, xc, yc, xq).reshape(shape)

    def _checked(
        self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple[int, ...]]:
        """:func:`check_tasks`, the model's ``d`` and ``dy`` checked, moved to its device."""
        xc, yc, xq, shape = check_tasks(x_ctx, y_ctx, x_query)
        if xc.shape[2] != self.d or yc.shape[2] != self.dy:
            raise ValueError(
                f"x_ctx/y_ctx shapes {tuple(xc.shape)}/{tuple(yc.shape)} do not fit this model "
                f"(d = {self.d}, dy = {self.dy})"
            )
        device = next(self.parameters()).device
        return xc.to(device), yc.to(device), xq.to(device), shape

    @abstractmethod
    def spec(self) -> dict[str, Any]:
        """Constructor arguments (JSON-like), stored in checkpoints."""


def _init(
    shape: tuple[int, ...], scale: float, gen: torch.Generator, dtype: torch.dtype
) -> nn.Parameter:
    return nn.Parameter(torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype) * scale)


class TrainableLSA(TokenModel):
    """Linear self-attention with ``heads`` heads and ``layers`` layers (deep or recurrent), in
    the von Oswald token layout with a ``1/N``-normalised context sum (module docstring).

    ``init_scale``: standard deviation of the initial weights (small: von Oswald et al. use a
    small Gaussian initialisation). ``seed`` makes the initialisation reproducible.
    ``residual=False`` drops the residual stream (each layer's output is its attention update
    alone); ``layernorm=True`` puts a LayerNorm over the token (learned scale and shift, from 1
    and 0) before each layer's attention, pre-LN: ``T ← T + attend(LN(T))``. The defaults are
    von Oswald et al.'s architecture (residual stream, no LayerNorm).
    """

    kind = "lsa"
    kq_mask: torch.Tensor
    pv_mask: torch.Tensor

    def __init__(
        self,
        d: int,
        dy: int = 1,
        layers: int = 1,
        heads: int = 1,
        recurrent: bool = False,
        variant: str = "full",
        init_scale: float = 0.05,
        seed: int = 0,
        dtype: torch.dtype = torch.float32,
        residual: bool = True,
        layernorm: bool = False,
    ) -> None:
        super().__init__(d, dy, layers, heads, recurrent, "identity")
        self.variant = check_choice("variant", variant, VARIANTS)
        self.init_scale = check_nonnegative("init_scale", init_scale)
        self.seed = check_seed("seed", seed)
        self.residual = check_flag("residual", residual)
        self.layernorm = check_flag("layernorm", layernorm)
        if self.layernorm:
            self.norms = nn.ModuleList(
                nn.LayerNorm(self.width, dtype=dtype) for _ in range(self.n_weight_sets)
            )
        gen = torch.Generator().manual_seed(self.seed)
        shape = (self.n_weight_sets, heads, self.width, self.width)
        if variant == "factored":
            self.w_q = _init(shape, init_scale, gen, dtype)
            self.w_k = _init(shape, init_scale, gen, dtype)
            self.w_v = _init(shape, init_scale, gen, dtype)
            self.proj = _init(shape, init_scale, gen, dtype)
        else:
            self.kq = _init(shape, init_scale, gen, dtype)
            self.pv = _init(shape, init_scale, gen, dtype)
        kq_mask = torch.ones(self.width, self.width, dtype=dtype)
        pv_mask = torch.ones(self.width, self.width, dtype=dtype)
        if variant == "gdpp":
            kq_mask[self.d :] = 0
            kq_mask[:, self.d :] = 0
            pv_mask[self.d :, : self.d] = 0
            pv_mask[: self.d, self.d :] = 0
        self.register_buffer("kq_mask", kq_mask)
        self.register_buffer("pv_mask", pv_mask)

    @classmethod
    def from_products(
        cls, key_query: torch.Tensor, value_projection: torch.Tensor, dy: int = 1, **kwargs: Any
    ) -> Self:
        """A ``"full"`` model with the given products, shaped ``(L, H, D, D)``, ``(H, D, D)`` or
        ``(D, D)`` (e.g. the GD construction ``KQ = [[I,0],[0,0]]``, ``PV = [[0,0],[0,−ηI]]``)."""
        kq = key_query.detach()
        pv = value_projection.detach()
        while kq.ndim < 4:
            kq, pv = kq.unsqueeze(0), pv.unsqueeze(0)
        if kq.shape != pv.shape or kq.shape[-1] != kq.shape[-2]:
            raise ValueError(
                f"key_query and value_projection must both be (L, H, D, D): "
                f"{tuple(kq.shape)} vs {tuple(pv.shape)}"
            )
        width = kq.shape[-1]
        if width <= dy:
            raise ValueError(f"dy: {dy} leaves no input features in tokens of width {width}")
        layers = kwargs.pop("layers", kq.shape[0])
        recurrent = kwargs.pop("recurrent", False)
        model = cls(
            width - dy, dy, layers, kq.shape[1], recurrent, "full", 0.0, dtype=kq.dtype, **kwargs
        )
        with torch.no_grad():
            model.kq.copy_(kq)
            model.pv.copy_(pv)
        return model

    def key_query(self, layer: int = 0) -> torch.Tensor:
        """``KQ_h = W_Kᵀ W_Q`` of every head of weight set ``layer``: ``(H, D, D)``."""
        if self.variant == "factored":
            kq = self.w_k[layer].mT @ self.w_q[layer]
        else:
            kq = self.kq[layer]
        return kq * self.kq_mask

    def value_projection(self, layer: int = 0) -> torch.Tensor:
        """``PV_h = P W_V`` of every head of weight set ``layer``: ``(H, D, D)``."""
        if self.variant == "factored":
            pv = self.proj[layer] @ self.w_v[layer]
        else:
            pv = self.pv[layer]
        return pv * self.pv_mask

    def step_matrix(self) -> torch.Tensor:
        """``Γ`` (``(d, d)``) of a one-layer model with ``W0 = 0``: the part of the prediction
        linear in the context targets, ``ŷ_q ⊃ (1/N) Σ_i y_i x_iᵀ Γ x_q`` (one GD step is
        ``Γ = η I``; preconditioned GD ``η Γ``), summed over the heads.

        The query token ``(x_q, 0)`` reads ``−Σ_h PV_h[y, :] · mean_i e_i (e_iᵀ KQ_h[:, x] x_q)``;
        with ``e_i = (x_i, y_i)`` the terms bilinear in ``(y_i, x_i)`` give
        ``Γ = −Σ_h (mean diag(PV_h[y, y]) KQ_h[x, x] + PV_h[y, x]ᵀ KQ_h[y, x] / dy)``: the y→y
        value path through the x→x key-query block, plus the x→y value path through the y→x
        key-query block (for ``dy > 1`` the projection onto ``δ_ab Γ``). Invariant under the
        per-head scale ``(s·PV_h, KQ_h/s)``.
        """
        d = self.d
        kq = self.key_query(0).detach().double()
        pv = self.value_projection(0).detach().double()
        pv_yy = torch.diagonal(pv[:, d:, d:], dim1=-2, dim2=-1).mean(-1).view(-1, 1, 1)
        cross = pv[:, d:, :d].mT @ kq[:, d:, :d] / self.dy
        return -(pv_yy * kq[:, :d, :d] + cross).sum(0)

    def learned_eta(self) -> float:
        """The GD learning rate of a one-layer model: ``η = tr Γ / d`` with ``Γ`` the summed
        heads' :meth:`step_matrix` (the ``η`` of the GD step ``η I`` nearest to ``Γ`` in the
        Frobenius norm; invariant under ``(s·PV_h, KQ_h/s)``). For the GD construction, and for
        heads that split one GD step in any way, this is exactly η."""
        return float(torch.diagonal(self.step_matrix()).mean())

    def normalised_products(self, layer: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """``(KQ/s, s·PV)`` per head with ``s = mean diag(KQ[x, x])`` (sign kept), so that the
        x-block of the key-query product has unit mean diagonal, as in the GD construction."""
        kq, pv = self.key_query(layer).detach(), self.value_projection(layer).detach()
        s = torch.diagonal(kq[:, : self.d, : self.d], dim1=-2, dim2=-1).mean(-1)
        s = torch.where(s.abs() > 1e-12, s, torch.ones_like(s)).view(-1, 1, 1)
        return kq / s, pv * s

    def spec(self) -> dict[str, Any]:
        return {
            "d": self.d,
            "dy": self.dy,
            "layers": self.n_layers,
            "heads": self.heads,
            "recurrent": self.recurrent,
            "variant": self.variant,
            "init_scale": self.init_scale,
            "seed": self.seed,
            "residual": self.residual,
            "layernorm": self.layernorm,
        }


def gd_products(
    d: int,
    dy: int,
    eta: float,
    dtype: torch.dtype = torch.float64,
    w0: torch.Tensor | None = None,
    gamma: float = 0.0,
    preconditioner: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One (GD++ / preconditioned) GD step in this module's mean convention (von Oswald et al.
    2023, Prop. 1; Ahn et al. 2023): ``KQ = [[Γ, 0], [0, 0]]`` (``Γ = I`` by default),
    ``PV = [[−γ I, 0], [η W0, −η I]]`` (``γ`` multiplies the context *mean* here)."""
    width = d + dy
    kq = torch.zeros(width, width, dtype=dtype)
    kq[:d, :d] = torch.eye(d, dtype=dtype) if preconditioner is None else preconditioner
    pv = torch.zeros(width, width, dtype=dtype)
    pv[:d, :d] = -gamma * torch.eye(d, dtype=dtype)
    if w0 is not None:
        pv[d:, :d] = eta * w0
    pv[d:, d:] = -eta * torch.eye(dy, dtype=dtype)
    return kq, pv
