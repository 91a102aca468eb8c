"""The von Oswald gradient-descent construction in the token layout a published summary writes.

attnreg's own LSA construction (:class:`attnreg.constructions.LSAStack`, on the module
:class:`attnreg.models.lsa.TrainableLSA`) puts the inputs first, ``e_i = (x_i, y_i)``, averages over
the context and holds ``η`` in its weights. The summary "Self-Attention Mimicking Gradient
Descent" (of von Oswald et al. 2023, "Uncovering mesa-optimization algorithms in Transformers",
arXiv 2309.05858, the construction of "Transformers learn in-context by gradient descent",
ICML 2023) writes the same step with the **targets first** and a plain, un-normalised sum over
the context. :class:`VonOswaldSummaryLayer` is that convention, runnable as written, on the same
attention core (:class:`attnreg.core.attention.Attention`).

The Tan & Zhao OLS-Transformer as its paper writes it (``L`` from the eigendecomposition of
``S``, an identity feed-forward block) is an option of the package's layer:
``OLSTransformer(convention="tan-zhao")`` (:mod:`attnreg.constructions.ols`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from attnreg.core.attention import Attention
from attnreg.core.hooks import Hooked
from attnreg.core.results import check_finite_result
from attnreg.core.scaling import check_underflow
from attnreg.core.tasks import check_model_tasks
from attnreg.core.validation import (
    ArrayLike,
    as_tensor,
    check_positive,
    check_positive_int,
    per_step,
)


class VonOswaldSummaryLayer(Hooked):
    """Linear self-attention = gradient descent, in the summary's convention (targets first,
    un-normalised context sum); ``steps`` layers = ``steps`` GD steps from ``W0``.

    Tokens ``e_i = (y_i, x_i) ∈ R^{dy + d}`` for the context, query tokens
    ``e_q = (−W0 x_q, x_q)``. Each layer, with the products the summary fixes,

    ``W_Kᵀ W_Q = [[0, 0], [0, I_x]]``,   ``P W_V = [[−η I_y, η W0], [0, 0]]``,

    updates every token by ``e_j ← e_j + Σ_{i≤N} P W_V e_i (e_iᵀ W_Kᵀ W_Q e_j)`` — keys and values
    from the context tokens, the sum **not** divided by ``N`` (``η`` is the step on the summed
    loss). With ``ΔW0 = η Σ_i (y_i − W0 x_i) x_iᵀ``, the query's y-entry after the layer is
    ``−(W0 + ΔW0) x_q`` (:meth:`query_tokens` returns the raw tokens), so the prediction, **minus**
    that entry (:meth:`predict`), is ``W1 x_q`` with ``W1 = W0 + ΔW0 = W0 − η ∇L(W0)``, one GD step
    on ``L(W) = ½ Σ_i ‖W x_i − y_i‖²``.

    **Sign note.** The summary's closing formula, ``(W0 − ΔW0) x``, has the sign of ``ΔW0``
    reversed: with ``ΔW0`` as it defines it, the layer computes (and GD gives) ``(W0 + ΔW0) x``.

    Stacking: the context tokens are updated too, their y-entries become ``y_j − (W_k − W0) x_j``,
    and the next layer — the same products with its own ``η`` — takes the next GD step from
    ``W_k``; ``steps`` layers are ``steps`` GD steps from ``W0``.

    ``eta``: one step size, or one per layer; ``w0``: ``(dy, d)``, zero when ``None``. The weights
    are held in ``dtype`` and run in the inputs' dtype. Each layer is one core in ``layers``
    (``Attention(q = E, k = v = E_ctx, metric = (W_Kᵀ W_Q)ᵀ, W_O = (P W_V)ᵀ)``, identity separation,
    ``β = 1``), with hook points ``layers.{l}.hook_scores`` ``(B, T, N)`` … ``hook_output``.
    Sources: von Oswald et al. (2023), both papers named in the module docstring.
    """

    kind = "lsa-von-oswald-summary"
    kq: torch.Tensor
    pv: torch.Tensor
    w0: torch.Tensor

    def __init__(
        self,
        d: int,
        dy: int = 1,
        eta: float | Sequence[float] = 1.0,
        steps: int = 1,
        w0: ArrayLike | None = None,
        dtype: torch.dtype = torch.float64,
    ) -> None:
        super().__init__()
        self.d = d = check_positive_int("d", d)
        self.dy = dy = check_positive_int("dy", dy)
        self.steps = steps = check_positive_int("steps", steps)
        self.etas = tuple(check_positive("eta", e) for e in per_step("eta", eta, steps))
        if w0 is None:
            w = torch.zeros(dy, d, dtype=dtype)
        else:
            w = as_tensor("w0", w0, ndim=(2,)).to(dtype)
            if w.shape != (dy, d):
                raise ValueError(f"w0: expected shape ({dy}, {d}), got {tuple(w.shape)}")
        products = [summary_products(w, e) for e in self.etas]
        self.register_buffer("w0", w)
        self.register_buffer("kq", torch.stack([k for k, _ in products]))
        self.register_buffer("pv", torch.stack([p for _, p in products]))
        self.layers = nn.ModuleList(Attention("dot", "identity") for _ in range(self.steps))

    @property
    def width(self) -> int:
        """Token width ``D = dy + d``."""
        return self.dy + self.d

    def key_query(self, layer: int = 0) -> torch.Tensor:
        """``W_Kᵀ W_Q = [[0, 0], [0, I_x]]`` of layer ``layer``: ``(D, D)``."""
        return self.kq[layer]

    def value_projection(self, layer: int = 0) -> torch.Tensor:
        """``P W_V = [[−η I_y, η W0], [0, 0]]`` of layer ``layer``: ``(D, D)``."""
        return self.pv[layer]

    def tokens(
        self, x_ctx: torch.Tensor, y_ctx: torch.Tensor, x_query: torch.Tensor
    ) -> torch.Tensor:
        """``[(y_i, x_i)]_{i≤N} ++ [(−W0 x_q, x_q)]`` as ``(B, N + M, D)`` (targets first)."""
        yq = -(x_query @ self.w0.to(x_query.dtype).mT)
        ctx = torch.cat([y_ctx, x_ctx], dim=-1)
        return torch.cat([ctx, torch.cat([yq, x_query], dim=-1)], dim=1)

    def attend(self, i: int, queries: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        """Layer ``i``'s update ``Σ_i P W_V e_i (e_iᵀ W_Kᵀ W_Q e_j)`` of ``queries`` ``(B, T, D)``
        from the context tokens ``(B, N, D)``, through core ``layers[i]`` (a sum, not a mean)."""
        kq = self.kq[i].to(queries.dtype)
        pv = self.pv[i].to(queries.dtype)
        core = self.layers[i]
        return core(queries, ctx, ctx, metric=kq.mT, w_o=pv.mT)

    def forward(
        self, x_ctx: torch.Tensor, y_ctx: torch.Tensor, x_query: torch.Tensor
    ) -> torch.Tensor:
        """The query tokens after the last layer, ``(B, M, D)``, from checked batched tensors;
        the last layer updates only the queries (the context no longer matters)."""
        n = x_ctx.shape[1]
        tokens = self.tokens(x_ctx, y_ctx, x_query)
        for i in range(self.steps - 1):
            tokens = tokens + self.attend(i, tokens, tokens[:, :n])
        queries = tokens[:, n:]
        return queries + self.attend(self.steps - 1, queries, tokens[:, :n])

    def query_tokens(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """The raw query tokens after the layers: ``(B, N, d), (B, N, dy), (B, M, d) ->
        (B, M, dy + d)`` (unbatched inputs: ``(M, dy + d)``). After one layer the first ``dy``
        entries are ``−(W0 + ΔW0) x_q``, the last ``d`` are ``x_q`` unchanged."""
        xc, yc, xq, shape = self._checked(x_ctx, y_ctx, x_query)
        with torch.no_grad():
            out = check_finite_result(self(xc, yc, xq))
        return out.reshape(*shape[:-1], self.width)

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """The one signature: ``(B, N, d), (B, N, dy), (B, M, d) -> (B, M, dy)``, **minus** the
        query tokens' y-entries after the last layer, ``W_K x_q`` after ``K = steps`` GD steps.
        Computed in the inputs' dtype."""
        xc, yc, xq, shape = self._checked(x_ctx, y_ctx, x_query)
        with torch.no_grad():
            out = check_finite_result(self._predict(xc, yc, xq))
        return check_underflow(out, self._predict, xc, yc, xq).reshape(shape)

    def _predict(self, xc: torch.Tensor, yc: torch.Tensor, xq: torch.Tensor) -> torch.Tensor:
        return -self(xc, yc, xq)[..., : self.dy]

    def _checked(
        self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple[int, ...]]:
        xc, yc, xq, shape = check_model_tasks(x_ctx, y_ctx, x_query, self.d, self.dy)
        device = self.kq.device
        return xc.to(device), yc.to(device), xq.to(device), shape


def summary_products(w0: torch.Tensor, eta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One GD step in the summary's layout (targets first, un-normalised sum):
    ``W_Kᵀ W_Q = [[0, 0], [0, I_x]]``, ``P W_V = [[−η I_y, η W0], [0, 0]]`` for ``W0`` ``(dy, d)``;
    both ``(dy + d, dy + d)`` in ``W0``'s dtype."""
    dy, d = w0.shape
    width = dy + d
    kq = torch.zeros(width, width, dtype=w0.dtype)
    kq[dy:, dy:] = torch.eye(d, dtype=w0.dtype)
    pv = torch.zeros(width, width, dtype=w0.dtype)
    pv[:dy, :dy] = -eta * torch.eye(dy, dtype=w0.dtype)
    pv[:dy, dy:] = eta * w0
    return kq, pv
