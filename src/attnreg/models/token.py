"""The token models' shared base: attention stacks over in-context regression tokens.

:class:`TokenModel` holds what every stack shares: the token layout of
:mod:`attnreg.models.lsa` (context tokens ``(x_i, y_i)``, query tokens ``(x_q, −W0 x_q)``, the
prediction minus the queries' y-entries after the last layer), one attention core per layer, the
hidden states of one pass (:meth:`TokenModel.states`, :meth:`TokenModel.depth_predictions`),
``predict`` and the checkpoint spec. Constructions with other layouts
(:class:`attnreg.constructions.NewtonStack`, :class:`attnreg.constructions.KernelRichardsonStack`)
override the tokens, keys and read-out and keep the generic :meth:`TokenModel.forward_predict`.
A layer adds its update to the tokens (:attr:`TokenModel.residual`; a model may drop the
residual stream) and attends over the tokens themselves or, with :attr:`TokenModel.norms`, over
their LayerNorm (pre-LN);
:class:`LayoutModel` is the base of the trainable models in the default layout, with their fast
prediction.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from attnreg.core.attention import Attention
from attnreg.core.hooks import Hooked
from attnreg.core.results import check_finite_result
from attnreg.core.scaling import check_underflow
from attnreg.core.tasks import check_model_tasks
from attnreg.core.validation import ArrayLike, as_tensor, check_positive_int


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
        ``n_query`` tokens' y-entries (the layout of :mod:`attnreg.models.lsa`)."""
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
        """Differentiable prediction on already-checked batched tensors: ``(B, M, dy)``, the
        :meth:`readout` of the queries after the last layer (which updates only the queries).
        Models with a faster path to the same numbers override it."""
        keys = self.key_count(x_ctx.shape[1])
        out = self.forward(self.tokens(x_ctx, y_ctx, x_query), keys, queries_only=True)
        return self.readout(out, x_query.shape[1])

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
        """:func:`check_model_tasks`, moved to the model's device."""
        xc, yc, xq, shape = check_model_tasks(x_ctx, y_ctx, x_query, self.d, self.dy)
        device = next(self.parameters()).device
        return xc.to(device), yc.to(device), xq.to(device), shape

    @abstractmethod
    def spec(self) -> dict[str, Any]:
        """Constructor arguments (JSON-like), stored in checkpoints."""


class LayoutModel(TokenModel):
    """A token model in the layout of :mod:`attnreg.models.lsa` (tokens, keys and read-out as
    :class:`TokenModel` defines them), with its fast prediction: the last layer computes only
    the queries' y-entries, ``−(y_q + Σ_h [update]_y)`` (``−Σ_h [update]_y`` without the
    residual stream), not the whole token update."""

    def forward_predict(
        self, x_ctx: torch.Tensor, y_ctx: torch.Tensor, x_query: torch.Tensor
    ) -> torch.Tensor:
        """``(B, M, dy)`` on checked batched tensors: :meth:`TokenModel.forward_predict`'s
        numbers, the last layer's update restricted to the queries' y-columns."""
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


def init_parameter(
    shape: tuple[int, ...], scale: float, gen: torch.Generator, dtype: torch.dtype
) -> nn.Parameter:
    return nn.Parameter(torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype) * scale)
