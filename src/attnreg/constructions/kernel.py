"""Gaussian kernel ridge regression by preconditioned Richardson iteration, run by softmax
attention: one step = one attention layer and one gated token-wise block.

**The problem** (kernel ridge regression; Saunders et al. 1998). With the Gaussian kernel
``k(x, x') = exp(−‖x − x'‖² / (2h²))`` (bandwidth ``h``), ``K_ij = k(x_i, x_j)`` over the N
context points and ridge ``λ > 0``, the coefficients are ``α* = (K + λI)⁻¹ Y`` and the
prediction at a query is ``f(x*) = Σ_i k(x*, x_i) α*_i`` — scikit-learn's
``KernelRidge(kernel="rbf", gamma=1/(2h²), alpha=λ)``.

**The iteration** (Yan, Li, Kulick & Tang 2026, "Transformers Can Implement Preconditioned
Richardson Iteration for In-Context Gaussian Kernel Regression", arXiv 2605.08475: softmax
attention supplies the row-normalised kernel, token-wise blocks the scalar arithmetic). With the
degrees ``D = diag(K 1)`` and the preconditioner ``P = (D + λI)⁻¹`` — this construction's choice:
the one a softmax with a sink of weight λ gives exactly (below) — from ``α_0 = 0``:

``α_{t+1} = α_t + ω P (Y − (K + λI) α_t)``.

``P(K + λI)`` has non-negative entries and unit row sums (row i: ``(D_i + λ)/(D_i + λ)``), so its
eigenvalues (real: it is similar to ``P^½ (K + λI) P^½``) lie in ``[μ_min, 1]`` with ``μ_max = 1``
exactly (eigenvector ``1``) and ``μ_min ≥ (λ_min(K) + λ)/(max_i D_i + λ) ≥ λ/(N + λ)``. The error
``e_t = α_t − α*`` obeys ``e_{t+1} = (I − ωP(K + λI)) e_t``; the iteration matrix is self-adjoint
in the inner product ``⟨u, v⟩ = uᵀ P⁻¹ v``, so ``‖e_t‖_{P⁻¹} ≤ ρ^t ‖e_0‖_{P⁻¹}`` with
``ρ = max(|1 − ω μ_min|, |1 − ω|)`` (and ``‖e_t‖₂ ≤ √κ(P) ρ^t ‖e_0‖₂``, ``κ(P) ≤ (N + λ)/(1 + λ)``).
Every ``ω ∈ (0, 2)`` converges. The weights are fixed, independent of the data and of N:
``ω = 1`` (the default; ``1/μ_max``) gives ``ρ = 1 − μ_min ≤ N/(N + λ)``; the best step
``ω = 2/(1 + μ_min)`` gives ``ρ = (1 − μ_min)/(1 + μ_min)`` (it needs ``μ_min`` of the task, or a
lower bound ``m ≤ μ_min`` — e.g. ``λ/(N + λ)`` — with ``ρ ≤ (1 − m)/(1 + m)``). The degree
preconditioner is what softmax normalisation gives for free; since the Gaussian kernel has a
unit diagonal, Jacobi's ``diag(K + λI)⁻¹`` would only rescale ω.

**The Gaussian kernel as softmax attention** (the standard expansion of the squared distance).
``−‖q − k‖²/(2h²) = (q·k − ‖k‖²/2)/h² − ‖q‖²/(2h²)``: the last term is the same for every key of
a query and cancels in the softmax, and the rest is bilinear in tokens that carry ``‖x‖²/2``
and a constant 1. So the core's ``dot`` similarity with metric ``M`` (``M[x, x] = I``,
``M[one, n] = −1``) and ``β = 1/h²`` gives weights ``k(q, x_j)/Σ_l k(q, x_l)``. One more key, a
**sink** token (its marker entry ``m = 1``, ``M[n, m] = 1``, ``M[one, m] = h² ln λ``), scores
``‖q‖²/(2h²) + ln λ``: kernel weight ``λ`` after the shift. Softmax over the N context keys and
the sink then gives, for a query token at ``x`` with degree ``D(x) = Σ_j k(x, x_j)``,

``weights k(x, x_j)/(D(x) + λ)`` on the context and ``s(x) = λ/(D(x) + λ)`` on the sink,

so values ``(α_j, 0)`` give ``[P K α]_i`` at context token i, and the sink's marker as value
gives ``s``.

**Token layout** (width ``d + 4dy + 5``), slots ``(x, y, one, n, f, m, s, a, u, p)``:

* context token i: ``(x_i, y_i, 1, ‖x_i‖²/2, 1, 0, s, α, u, p)``;
* the sink (after the context): ``(0, 0, 1, 0, 0, 1, s, 0, u, p)``;
* query token: ``(x*, 0, 1, ‖x*‖²/2, 0, 0, s, 0, u, p)``;

``s``, ``a``, ``u``, ``p`` start at zero. The keys and values are the context tokens and the
sink (``N + 1``); every token is a query. Layers, for ``t = 0 … K−1``:

* attention ``A_t`` (softmax, one head): value ``a`` into ``u`` — ``u ← P K α_t`` — and, in
  ``A_0`` only, value ``m`` into ``s`` — ``s ← λ/(D + λ)``;
* gated block ``E_t`` (:class:`attnreg.constructions.gated.GatedUnit`, identity gate), three
  products per output entry: ``a ← a + ω [(s/λ) ⊙ (y − λa) − f ⊙ u]``, ``u ← u − 1 ⊙ u``. At a
  context token this is ``α_{t+1} = α_t + ω P(Y − (K + λI)α_t)`` (``s/λ = 1/(D_i + λ)``); at the
  sink and the queries ``y = a = f = 0``, so their ``a`` stays zero (they stay valid keys);

then the read-out:

* attention ``R``: value ``a`` into ``p`` — ``p ← k(x, ·)ᵀ α_K/(D(x) + λ)``;
* gated block ``Q`` (reciprocal gate): ``p ← p ⊙ (1/(s/λ)) − p ⊙ (1/1) = (D(x) + λ) p =
  k(x, ·)ᵀ α_K`` — the prediction at a query, the fitted value ``(K α_K)_i`` at a context token.

``2K + 2`` layers run K steps; the state after layer ``2t`` holds ``α_t`` in the context
tokens' a-slots (:meth:`KernelRichardsonStack.iterate`), the last state the prediction in the
queries' p-slots (:meth:`KernelRichardsonStack.readout`; zero before the read-out). Where Yan
et al. approximate the token-wise arithmetic with ReLU MLPs (width ``O(√(N/ε))``), the gated
blocks here do it exactly, so the stack is the iteration to rounding.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from attnreg.constructions.gated import GatedUnit
from attnreg.core.attention import Attention
from attnreg.core.validation import check_positive, check_positive_int
from attnreg.models.token import TokenModel


class KernelRichardsonStack(TokenModel):
    """``steps`` preconditioned Richardson steps ``α ← α + ω (D + λI)⁻¹(Y − (K + λI)α)`` for
    Gaussian kernel ridge regression (bandwidth ``bandwidth`` = h, ``ridge`` = λ > 0,
    ``omega`` = ω ∈ (0, 2)) in ``2·steps + 2`` layers: softmax attention and gated token-wise
    blocks (the module docstring: layout, weights, rate, source). ``predict`` returns
    ``Σ_i k(x*, x_i) α_K,i``. The weights do not train."""

    kind = "kernel-richardson"

    def __init__(
        self,
        d: int,
        dy: int,
        steps: int,
        bandwidth: float,
        ridge: float,
        omega: float = 1.0,
        dtype: torch.dtype = torch.float64,
    ) -> None:
        n_steps = check_positive_int("steps", steps)
        super().__init__(d, dy, 2 * n_steps + 2, 1, False, "softmax")
        self.steps = n_steps
        self.bandwidth = check_positive("bandwidth", bandwidth)
        self.ridge = check_positive("ridge", ridge)
        self.omega = check_positive("omega", omega)
        if not self.omega < 2.0:
            raise ValueError(f"omega: the step must lie in (0, 2) to converge, got {omega}")
        slots = _Slots(self.d, self.dy)
        self.slots = slots
        metric, heads = kernel_attention_weights(slots, self.bandwidth, self.ridge)
        self.metric = nn.Parameter(metric.to(dtype), requires_grad=False)
        self.w_o = nn.Parameter(heads.to(dtype), requires_grad=False)
        beta = 1.0 / self.bandwidth**2
        blocks: list[nn.Module] = []
        step = richardson_block(slots, self.ridge, self.omega, dtype)
        for _ in range(n_steps):
            blocks += [Attention("dot", "softmax", beta=beta), step()]
        blocks += [Attention("dot", "softmax", beta=beta), readout_block(slots, self.ridge, dtype)]
        self.layers = nn.ModuleList(blocks)

    @property
    def width(self) -> int:
        """Token width ``d + 4dy + 5`` (slots x, y, one, n, f, m, s, a, u, p)."""
        return self.slots.width

    def key_query(self, layer: int = 0) -> torch.Tensor:
        """``KQ = Mᵀ`` of attention layer ``layer`` (``0 … steps``; all the same): ``(1, D, D)``."""
        return self.metric.mT.unsqueeze(0)

    def value_projection(self, layer: int = 0) -> torch.Tensor:
        """``PV = W_Oᵀ`` of attention layer ``layer`` (``A_0 … A_{K−1}``, then ``R``):
        ``(1, D, D)``."""
        return self.w_o[self._projection(layer)].mT.unsqueeze(0)

    def _projection(self, layer: int) -> int:
        """Which of the three output projections attention layer ``layer`` uses."""
        return 2 if layer >= self.steps else min(layer, 1)

    def key_count(self, n_ctx: int) -> int:
        """The keys: ``n_ctx`` context tokens and the sink."""
        return n_ctx + 1

    def tokens(
        self, x_ctx: torch.Tensor, y_ctx: torch.Tensor, x_query: torch.Tensor
    ) -> torch.Tensor:
        """Context, sink and query tokens ``(B, N + 1 + M, D)`` (the module docstring's
        layout; s, a, u, p zero)."""
        sl = self.slots
        b, n = x_ctx.shape[:2]
        out = x_ctx.new_zeros(b, n + 1 + x_query.shape[1], sl.width)
        out[:, :n, sl.x] = x_ctx
        out[:, n + 1 :, sl.x] = x_query
        out[:, :n, sl.y] = y_ctx
        out[..., sl.one] = 1.0
        out[:, :n, sl.n] = (x_ctx * x_ctx).sum(-1) / 2
        out[:, n + 1 :, sl.n] = (x_query * x_query).sum(-1) / 2
        out[:, :n, sl.f] = 1.0
        out[:, n, sl.m] = 1.0
        return out

    def forward(
        self,
        tokens: torch.Tensor,
        n_ctx: int,
        queries_only: bool = False,
        keep: list[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Run the ``2·steps + 2`` layers on ``tokens (B, T, D)`` (keys/values: the first
        ``n_ctx``, the context and the sink). With ``queries_only`` the last layer (the
        token-wise read-out) updates and returns only the tokens after the keys. ``keep``: a
        list that receives the input and the hidden state after every layer."""
        if keep is not None:
            keep.append(tokens)
        dtype = tokens.dtype
        metric = self.metric.to(dtype)
        attention = 0
        for i, layer in enumerate(self.layers):
            if isinstance(layer, Attention):
                w_o = self.w_o[self._projection(attention)].to(dtype)
                keys = tokens[:, :n_ctx]
                tokens = tokens + layer(tokens, keys, keys, metric=metric, w_o=w_o)
                attention += 1
            else:
                last = queries_only and i == len(self.layers) - 1
                tokens = layer(tokens[:, n_ctx:] if last else tokens)
            if keep is not None:
                keep.append(tokens)
        return tokens

    def readout(self, state: torch.Tensor, n_query: int) -> torch.Tensor:
        """The p-slots of the last ``n_query`` tokens: ``Σ_i k(x*, x_i) α_K,i`` after the last
        layer (zero before the read-out attention)."""
        return state[:, state.shape[1] - n_query :, self.slots.p]

    def iterate(self, state: torch.Tensor, n_ctx: int) -> torch.Tensor:
        """The iterate ``α`` ``(B, N, dy)`` held by a hidden state: the context tokens'
        a-slots (``α_t`` after layer ``2t``)."""
        return state[:, :n_ctx, self.slots.a]

    def spec(self) -> dict[str, Any]:
        return {
            "d": self.d,
            "dy": self.dy,
            "steps": self.steps,
            "bandwidth": self.bandwidth,
            "ridge": self.ridge,
            "omega": self.omega,
        }


class _Slots:
    """Column ranges of the token layout ``(x, y, one, n, f, m, s, a, u, p)``."""

    def __init__(self, d: int, dy: int) -> None:
        self.x, self.y = slice(0, d), slice(d, d + dy)
        self.one, self.n, self.f, self.m, self.s = (d + dy + i for i in range(5))
        base = d + dy + 5
        self.a = slice(base, base + dy)
        self.u = slice(base + dy, base + 2 * dy)
        self.p = slice(base + 2 * dy, base + 3 * dy)
        self.dy = dy
        self.width = base + 3 * dy


def kernel_attention_weights(
    slots: _Slots, bandwidth: float, ridge: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The metric ``M`` ``(D, D)`` of every attention layer (scores ``β t_q M t_kᵀ`` with
    ``β = 1/h²``: the Gaussian kernel and the sink of weight λ) and the output projections
    ``(3, D, D)``: ``A_0`` (a → u, m → s), ``A_t`` for ``t ≥ 1`` (a → u), ``R`` (a → p)."""
    sl, width = slots, slots.width
    eye = torch.eye(sl.dy, dtype=torch.float64)
    metric = torch.zeros(width, width, dtype=torch.float64)
    metric[sl.x, sl.x] = torch.eye(sl.x.stop, dtype=torch.float64)
    metric[sl.one, sl.n] = -1.0
    metric[sl.n, sl.m] = 1.0
    metric[sl.one, sl.m] = bandwidth**2 * math.log(ridge)
    w_o = torch.zeros(3, width, width, dtype=torch.float64)
    w_o[0, sl.a, sl.u] = eye
    w_o[0, sl.m, sl.s] = 1.0
    w_o[1, sl.a, sl.u] = eye
    w_o[2, sl.a, sl.p] = eye
    return metric, w_o


def richardson_block(
    slots: _Slots, ridge: float, omega: float, dtype: torch.dtype
) -> Callable[[], GatedUnit]:
    """A factory of the step block ``E`` (identity gate, hidden width ``3dy``):
    ``a ← a + ω[(s/λ) ⊙ (y − λa) − f ⊙ u]``, ``u ← u − 1 ⊙ u``."""
    sl, dy, width = slots, slots.dy, slots.width
    eye = torch.eye(dy, dtype=torch.float64)
    a = torch.zeros(width, 3 * dy, dtype=torch.float64)
    b = torch.zeros(width, 3 * dy, dtype=torch.float64)
    c = torch.zeros(3 * dy, width, dtype=torch.float64)
    first, second, third = slice(0, dy), slice(dy, 2 * dy), slice(2 * dy, 3 * dy)
    a[sl.s, first] = 1.0 / ridge
    b[sl.y, first], b[sl.a, first] = eye, -ridge * eye
    a[sl.f, second] = 1.0
    b[sl.u, second] = -eye
    a[sl.one, third] = 1.0
    b[sl.u, third] = -eye
    c[first, sl.a] = omega * eye
    c[second, sl.a] = omega * eye
    c[third, sl.u] = eye

    def make() -> GatedUnit:
        return GatedUnit(a.to(dtype), b.to(dtype), c.to(dtype))

    return make


def readout_block(slots: _Slots, ridge: float, dtype: torch.dtype) -> GatedUnit:
    """The read-out block ``Q`` (reciprocal gate, hidden width ``2dy``):
    ``p ← p + p ⊙ 1/(s/λ) − p ⊙ 1/1``."""
    sl, dy, width = slots, slots.dy, slots.width
    eye = torch.eye(dy, dtype=torch.float64)
    a = torch.zeros(width, 2 * dy, dtype=torch.float64)
    b = torch.zeros(width, 2 * dy, dtype=torch.float64)
    c = torch.zeros(2 * dy, width, dtype=torch.float64)
    first, second = slice(0, dy), slice(dy, 2 * dy)
    a[sl.p, first], a[sl.p, second] = eye, -eye
    b[sl.s, first] = 1.0 / ridge
    b[sl.one, second] = 1.0
    c[first, sl.p] = eye
    c[second, sl.p] = eye
    return GatedUnit(a.to(dtype), b.to(dtype), c.to(dtype), gate="reciprocal")
