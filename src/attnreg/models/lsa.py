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
* ``"factored"``: four free matrices ``W_Q, W_K, W_V, P`` per head (the paper's model);
* ``"diag"``: Vladymyrov et al.'s (2024) diagonal attention, parametrised as the paper
  re-parametrises it, by four scalars per layer ``ω = (ω_xx, ω_xy, ω_yx, ω_yy)``:
  ``x_j ← x_j + ω_xx (1/N) Σ_i x_i x_iᵀ x_j + ω_xy (1/N) Σ_i x_i y_iᵀ y_j`` and
  ``y_j ← y_j + ω_yx (1/N) Σ_i y_i x_iᵀ x_j + ω_yy (1/N) Σ_i y_i y_iᵀ y_j`` — two heads,
  ``KQ₁ = diag(I, 0)``, ``PV₁ = diag(ω_xx I, ω_yx I)``, ``KQ₂ = diag(0, I)``,
  ``PV₂ = diag(ω_xy I, ω_yy I)`` (any diagonal ``P_h``, ``Q_h`` with scalar blocks sum to these).

``layers`` layers deep, each with its own weights, or ``recurrent`` (one set of weights applied
``layers`` times). :class:`TrainableLSA` can drop the residual stream (``residual=False``: a
layer's output is its update alone) or add a pre-attention LayerNorm (``layernorm=True``:
``e ← e + update(LN(e))``, the update computed from the normalised tokens).

:meth:`~attnreg.models.token.TokenModel.states` keeps the hidden state (every token) before
the first layer and after each layer of one forward pass;
:meth:`~attnreg.models.token.TokenModel.depth_predictions` reads the prediction from each of them
(the depth of a stack, counted in one pass).
"""

from __future__ import annotations

from typing import Any, Self

import torch
from torch import nn

from attnreg.core.validation import check_choice, check_flag, check_nonnegative, check_seed
from attnreg.models.diag_moments import moments_predict
from attnreg.models.token import LayoutModel, TokenModel, init_parameter

__all__ = ["VARIANTS", "LayoutModel", "TokenModel", "TrainableLSA", "gd_products"]

VARIANTS = ("full", "gdpp", "factored", "diag")


VALUE_SIDE = ("pv", "proj", "omega")
"""The parameters a layer's update is linear in (full products' ``P V``, the factored form's
output projection, DIAG's four scalars): zero, the layer is the identity."""


class TrainableLSA(LayoutModel):
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
        if variant == "diag":
            if heads != 2:
                raise ValueError(
                    "heads: the diag variant is two heads (its four scalars ω per layer), "
                    f"got {heads}"
                )
            self.omega = init_parameter((self.n_weight_sets, 4), init_scale, gen, dtype)
        elif variant == "factored":
            self.w_q = init_parameter(shape, init_scale, gen, dtype)
            self.w_k = init_parameter(shape, init_scale, gen, dtype)
            self.w_v = init_parameter(shape, init_scale, gen, dtype)
            self.proj = init_parameter(shape, init_scale, gen, dtype)
        else:
            self.kq = init_parameter(shape, init_scale, gen, dtype)
            self.pv = init_parameter(shape, init_scale, gen, dtype)
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
        if self.variant == "diag":
            return self._diag_blocks(torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=self.omega.dtype))
        if self.variant == "factored":
            kq = self.w_k[layer].mT @ self.w_q[layer]
        else:
            kq = self.kq[layer]
        return kq * self.kq_mask

    def value_projection(self, layer: int = 0) -> torch.Tensor:
        """``PV_h = P W_V`` of every head of weight set ``layer``: ``(H, D, D)``."""
        if self.variant == "diag":  # head 1: (ω_xx, ω_yx), head 2: (ω_xy, ω_yy)
            return self._diag_blocks(self.omega[layer].view(2, 2).T)
        if self.variant == "factored":
            pv = self.proj[layer] @ self.w_v[layer]
        else:
            pv = self.pv[layer]
        return pv * self.pv_mask

    def grow_from(self, shallower: TrainableLSA) -> None:
        """Start this stack at ``shallower``'s function, in place: its first layers take
        ``shallower``'s weights; in its other layers the value side (:data:`VALUE_SIDE`) is
        zero — the layer adds nothing to the residual stream, the identity — and the key-query
        side keeps its initialisation (were both factors of a product zero, neither would get
        a gradient: a saddle); per-layer modules the shallower stack does not have (a new
        layer's LayerNorm) keep theirs. Both stacks must be of one variant and width, this one
        no shallower."""
        if (shallower.variant, shallower.width) != (self.variant, self.width):
            raise ValueError("shallower: must be a stack of the same variant and width")
        if shallower.n_weight_sets > self.n_weight_sets:
            raise ValueError(
                f"shallower: has {shallower.n_weight_sets} layers, more than this stack's "
                f"{self.n_weight_sets}"
            )
        given = dict(shallower.named_parameters())
        with torch.no_grad():
            for name, weights in self.named_parameters():
                if name not in given:
                    continue
                if name.startswith("norms."):
                    weights.copy_(given[name])
                    continue
                if name in VALUE_SIDE:
                    weights.zero_()
                weights[: given[name].shape[0]] = given[name]

    def moments_predict(
        self, x_ctx: torch.Tensor, y_ctx: torch.Tensor, x_query: torch.Tensor
    ) -> torch.Tensor:
        """The ``"diag"`` variant's :meth:`forward_predict` from the context moments
        (:func:`attnreg.models.diag_moments.moments_predict`: the same numbers up to rounding,
        without the two heads' ``(T, N)`` score matrices; a training loop's fast path, in which
        no hook fires). Only for ``variant="diag"`` with the residual stream and no LayerNorm or
        ``W0``."""
        if self.variant != "diag" or self.layernorm or not self.residual or self.w0 is not None:
            raise ValueError(
                "variant: moments_predict is the diag variant's (residual, no LayerNorm, no W0)"
            )
        omega = self.omega if not self.recurrent else self.omega[:1].expand(self.n_layers, 4)
        return moments_predict(omega, x_ctx, y_ctx, x_query)

    def _diag_blocks(self, blocks: torch.Tensor) -> torch.Tensor:
        """``(2, D, D)``: head ``h`` is ``diag(blocks[h, 0] I_d, blocks[h, 1] I_dy)``."""
        d, dy = self.d, self.dy
        scale = torch.cat([blocks[:, :1].expand(2, d), blocks[:, 1:].expand(2, dy)], dim=1)
        return torch.diag_embed(scale)

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
