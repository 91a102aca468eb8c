"""Trainable linear self-attention on in-context regression tokens (von Oswald et al. 2023).

Token layout (von Oswald et al. 2023, "Transformers learn in-context by gradient descent"):
context tokens ``e_i = (x_i, y_i) ∈ R^{D}``, ``D = d + dy``, query tokens ``(x_q, 0)``; the
prediction is **minus** the query's y-entry after the last layer. One layer, head h:

``e_j ← e_j + Σ_h PV_h · (1/N) Σ_{i≤N} e_i e_iᵀ · KQ_h · e_j``

with ``KQ_h = W_{K,h}ᵀ W_{Q,h}`` and ``PV_h = P_h W_{V,h}`` — the only identifiable products
(``math.md``). Unlike the construction in :mod:`attnreg.constructions.lsa` the context sum is
divided by ``N`` here, so the weights hold ``η`` rather than ``η/N`` and one model can be
evaluated at every context size (Garg et al. 2022): the GD step is
``KQ = [[I, 0], [0, 0]]``, ``PV = [[0, 0], [0, −η I]]`` = ``N ×`` the constructed ``P W_V``.

Parametrisations (``variant``):

* ``"full"``: ``KQ_h`` and ``PV_h`` are free ``D × D`` matrices (the products themselves:
  fastest to train, no saddle from the factorisation);
* ``"gdpp"``: the GD++ sparsity pattern, ``KQ = [[A, 0], [0, 0]]``,
  ``PV = [[B, 0], [0, c]]`` (x-tokens move by ``B Σ x xᵀ A``, y by ``c Σ y xᵀ A``);
* ``"factored"``: four free matrices ``W_Q, W_K, W_V, P`` per head (the paper's model).

``layers`` layers deep, each with its own weights, or ``recurrent`` (one set of weights applied
``layers`` times). Attention scores and weights are recorded by name
(``"layers.{l}.heads.{h}.scores"`` / ``".weights"``) when ``record`` is on.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from attnreg.constructions._cache import RecordsAttention
from attnreg.core.validation import (
    ArrayLike,
    check_choice,
    check_nonnegative,
    check_positive_int,
    check_tasks,
)

VARIANTS = ("full", "gdpp", "factored")


class TokenModel(RecordsAttention):
    """Shared token layout, read-out, ``predict`` and checkpoint spec of the trainable models."""

    kind = "token-model"

    def __init__(self, d: int, dy: int, layers: int, heads: int, recurrent: bool) -> None:
        super().__init__()
        self.d = check_positive_int("d", d)
        self.dy = check_positive_int("dy", dy)
        self.n_layers = check_positive_int("layers", layers)
        self.heads = check_positive_int("heads", heads)
        self.recurrent = bool(recurrent)

    @property
    def width(self) -> int:
        """Token width ``D = d + dy``."""
        return self.d + self.dy

    @property
    def n_weight_sets(self) -> int:
        return 1 if self.recurrent else self.n_layers

    def tokens(
        self, x_ctx: torch.Tensor, y_ctx: torch.Tensor, x_query: torch.Tensor
    ) -> torch.Tensor:
        """``[(x_i, y_i)]_{i≤N} ++ [(x_q, 0)]`` as ``(B, N + M, D)``."""
        zeros = x_query.new_zeros(*x_query.shape[:-1], self.dy)
        return torch.cat([torch.cat([x_ctx, y_ctx], -1), torch.cat([x_query, zeros], -1)], dim=1)

    def layer(self, tokens: torch.Tensor, n_ctx: int, index: int, last: bool) -> torch.Tensor:
        raise NotImplementedError  # pragma: no cover

    def forward(self, tokens: torch.Tensor, n_ctx: int, queries_only: bool = False) -> torch.Tensor:
        """Run the layers on ``tokens (B, T, D)`` (keys/values: the first ``n_ctx``). With
        ``queries_only`` the last layer updates (and returns) only the query tokens."""
        for i in range(self.n_layers):
            last = queries_only and i == self.n_layers - 1
            tokens = self.layer(tokens, n_ctx, 0 if self.recurrent else i, last)
            if self.record:
                for key in list(self.cache):
                    if key.startswith("_"):
                        self.cache[f"layers.{i}.{key[1:]}"] = self.cache.pop(key)
        return tokens

    def query_targets(self, tokens: torch.Tensor, n_ctx: int, index: int) -> torch.Tensor:
        """The y-entries ``(B, M, dy)`` of the query tokens after one more layer (the read-out
        layer; subclasses may compute only these entries)."""
        return self.layer(tokens, n_ctx, index, True)[..., self.d :]

    def forward_predict(
        self, x_ctx: torch.Tensor, y_ctx: torch.Tensor, x_query: torch.Tensor
    ) -> torch.Tensor:
        """Differentiable prediction on already-checked batched tensors: ``(B, M, dy)``."""
        n = x_ctx.shape[1]
        tokens = self.tokens(x_ctx, y_ctx, x_query)
        if self.record:
            return -self(tokens, n, queries_only=True)[..., self.d :]
        for i in range(self.n_layers - 1):
            tokens = self.layer(tokens, n, 0 if self.recurrent else i, False)
        return -self.query_targets(tokens, n, 0 if self.recurrent else self.n_layers - 1)

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """The one signature: ``(B, N, d), (B, N, dy), (B, M, d) -> (B, M, dy)`` (minus the
        query tokens' y-entries after the last layer). Computed in the inputs' dtype."""
        xc, yc, xq, shape = check_tasks(x_ctx, y_ctx, x_query)
        if xc.shape[2] != self.d or yc.shape[2] != self.dy:
            raise ValueError(
                f"x_ctx/y_ctx shapes {tuple(xc.shape)}/{tuple(yc.shape)} do not fit this model "
                f"(d = {self.d}, dy = {self.dy})"
            )
        device = next(self.parameters()).device
        with torch.no_grad():
            out = self.forward_predict(xc.to(device), yc.to(device), xq.to(device))
        return out.reshape(shape)

    def spec(self) -> dict[str, Any]:
        """Constructor arguments (JSON-like), stored in checkpoints."""
        raise NotImplementedError  # pragma: no cover


def _init(
    shape: tuple[int, ...], scale: float, gen: torch.Generator, dtype: torch.dtype
) -> nn.Parameter:
    return nn.Parameter(torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype) * scale)


class TrainableLSA(TokenModel):
    """Linear self-attention with ``heads`` heads and ``layers`` layers (deep or recurrent), in
    the von Oswald token layout with a ``1/N``-normalised context sum (module docstring).

    ``init_scale``: standard deviation of the initial weights (small: von Oswald et al. use a
    small Gaussian initialisation). ``seed`` makes the initialisation reproducible.
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
    ) -> None:
        super().__init__(d, dy, layers, heads, recurrent)
        self.variant = check_choice("variant", variant, VARIANTS)
        self.init_scale = check_nonnegative("init_scale", init_scale)
        self.seed = int(seed)
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
    ) -> TrainableLSA:
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

    def layer(self, tokens: torch.Tensor, n_ctx: int, index: int, last: bool) -> torch.Tensor:
        """``E ← E + Σ_h E KQ_hᵀ C PV_hᵀ`` with ``C = E_ctxᵀ E_ctx / N`` (no ``T × N`` matrix)."""
        dtype = tokens.dtype
        kq = self.key_query(index).to(dtype)  # (H, D, D)
        pv = self.value_projection(index).to(dtype)
        ctx = tokens[:, :n_ctx]
        cov = ctx.mT @ ctx / n_ctx  # (B, D, D)
        mix = (kq.mT.unsqueeze(0) @ cov.unsqueeze(1) @ pv.mT.unsqueeze(0)).sum(1)  # (B, D, D)
        if self.record:
            scores = torch.einsum("btd,hed,bne->bhtn", tokens, kq, ctx) / n_ctx
            for h in range(self.heads):
                self.cache[f"_heads.{h}.scores"] = scores[:, h].detach()
                self.cache[f"_heads.{h}.weights"] = scores[:, h].detach()  # identity separation
        if last:
            queries = tokens[:, n_ctx:]
            return queries + queries @ mix
        return tokens + tokens @ mix

    def query_targets(self, tokens: torch.Tensor, n_ctx: int, index: int) -> torch.Tensor:
        """Only the queries' y-entries: ``y_q + Σ_h (1/N) Σ_i (e_qᵀ KQ_hᵀ e_i)(PV_h[y] e_i)``,
        computed with two shared-weight GEMMs and one batched contraction (no ``D × D`` per
        task)."""
        d, dy, h_n, width = self.d, self.dy, self.heads, self.width
        dtype = tokens.dtype
        kq = self.key_query(index).to(dtype)  # (H, D, D)
        pv_y = self.value_projection(index).to(dtype)[:, d:, :]  # (H, dy, D)
        queries, ctx = tokens[:, n_ctx:], tokens[:, :n_ctx]
        b, m = queries.shape[:2]
        q = (queries @ kq.permute(2, 0, 1).reshape(width, h_n * width)).view(b, m, h_n, width)
        u = (ctx @ pv_y.permute(2, 0, 1).reshape(width, h_n * dy)).view(b, n_ctx, h_n * dy)
        z = (ctx.mT @ u).view(b, width, h_n, dy)  # Σ_i e_i (PV_h[y] e_i)ᵀ
        return queries[..., d:] + torch.einsum("bmhe,behk->bmk", q, z) / n_ctx

    def learned_eta(self) -> float:
        """The GD learning rate read from the scale-normalised weights of a one-layer model:
        ``η = −Σ_h mean diag(PV_h[y, y]) · mean diag(KQ_h[x, x])`` (invariant under
        ``(s·PV, KQ/s)``); for the GD construction this is exactly η."""
        d = self.d
        kq, pv = self.key_query(0).detach(), self.value_projection(0).detach()
        kq_xx = torch.diagonal(kq[:, :d, :d], dim1=-2, dim2=-1).mean(-1)
        pv_yy = torch.diagonal(pv[:, d:, d:], dim1=-2, dim2=-1).mean(-1)
        return float(-(pv_yy * kq_xx).sum())

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
        }


def gd_products(
    d: int, dy: int, eta: float, dtype: torch.dtype = torch.float64
) -> tuple[torch.Tensor, torch.Tensor]:
    """The GD step in this module's ``1/N`` convention: ``KQ = [[I, 0], [0, 0]]``,
    ``PV = [[0, 0], [0, −η I]]`` (von Oswald et al. 2023, Prop. 1, with ``η/N`` → ``η``)."""
    width = d + dy
    kq = torch.zeros(width, width, dtype=dtype)
    kq[:d, :d] = torch.eye(d, dtype=dtype)
    pv = torch.zeros(width, width, dtype=dtype)
    pv[d:, d:] = -eta * torch.eye(dy, dtype=dtype)
    return kq, pv
