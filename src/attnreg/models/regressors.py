"""Trainable attention regressors: the training rows are keys and values, the queries are the
rows being predicted (self-attention on the training set, cross-attention for a test set).

One layer, values = the context targets ``Y`` (the Goulet Coulombe reading, arXiv 2504.09663):

``ŷ* = sep(s(X*, X)) · Y``, with scores ``s = Q Kᵀ`` (or ``Q W Kᵀ`` for a single matrix) and

* ``variant="softmax"`` — vanilla attention (Vaswani et al. 2017): ``sep = softmax``, scores
  divided by ``√d_k``; with values ``Y`` this is a Nadaraya–Watson kernel smoother.
* ``variant="regression"`` — regression-like attention: identity separation, scores divided
  by ``N`` (the number of keys), so ``ŷ* = X* M XᵀY / N`` with ``M = W_q W_kᵀ``; at
  ``M = (XᵀX/N)⁻¹`` it is OLS exactly (the one form with identity separation).
* ``variant="whitened"`` — whitening built into the layer: after the projections the keys'
  covariance ``S_K = KᵀK/N + ρI`` is whitened inside the forward pass (``L_K L_Kᵀ = S_K⁻¹``,
  Cholesky form; any such ``L_K`` gives the same layer) and ``(Q L_K)(K L_K)ᵀ / N`` is used
  with identity separation. With ``qk="shared"`` and an invertible ``W`` this equals
  ``X* (XᵀX + Nρ (W Wᵀ)⁻¹)⁻¹ XᵀY`` — OLS as ``ρ → 0``, for every ``W`` (Tan & Zhao,
  arXiv 2604.13656; Goulet Coulombe).

Switches:

* ``whitening=True`` — the inputs (queries and keys) are whitened by the *context* covariance
  before the projections: ``x ↦ x S^{-1/2}`` with ``S^{-1/2} = V Λ^{-1/2} Vᵀ`` from the
  eigendecomposition of ``S = XᵀX/N`` (symmetric / ZCA form; no parameters; the context is the
  training set, so this is the usual preprocessing by the training covariance).
* ``qk`` — ``"shared"`` (``W_q = W_k = W``, so ``M = W Wᵀ`` is positive semi-definite),
  ``"separate"`` (``W_q``, ``W_k``), or ``"single"`` (one ``d × d`` matrix ``W = M``).
* ``layernorm=True`` — ``nn.LayerNorm(d)`` on queries and keys before the projections.

The attention itself is the core's (:class:`attnreg.core.attention.Attention`): queries and keys
after the projections, values ``Y``, the scaling as β. Its tensors are readable by hook name
(TransformerLens-style, ``run_with_cache``): ``attn.hook_scores`` (after scaling, before
separation) and ``attn.hook_weights`` (the matrix ``A`` with ``ŷ* = A Y``).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attnreg.core.attention import Attention
from attnreg.core.hooks import Hooked
from attnreg.core.results import check_finite_result
from attnreg.core.scaling import check_underflow
from attnreg.core.tasks import check_model_tasks, check_tasks
from attnreg.core.validation import ArrayLike, check_choice, check_positive, check_seed
from attnreg.core.whitening import whitening_matrix

VARIANTS = ("softmax", "regression", "whitened")
QK_MODES = ("shared", "separate", "single")


def symmetric_whitening(x: torch.Tensor) -> torch.Tensor:
    """The symmetric (ZCA) whitening ``S^{-1/2} = V Λ^{-1/2} Vᵀ`` of ``S = XᵀX/N`` (``(B, d, d)``).

    Built from :func:`attnreg.core.whitening.whitening_matrix` (``L = V Λ^{-1/2}``, eigh) as
    ``L Vᵀ``; dropped (rank-deficient) directions stay zero. Unlike ``L`` itself it does not
    depend on the eigenvector basis or signs, so a learned matrix between whitened queries and
    keys keeps its meaning when the context changes (fit rows → all training rows).
    """
    lmat = whitening_matrix(x, covariance="mean", method="eigh").matrix
    norms = lmat.norm(dim=-2, keepdim=True)
    vecs = torch.where(norms > 0, lmat / norms.clamp_min(torch.finfo(x.dtype).tiny), 0.0)
    return lmat @ vecs.mT


class AttentionRegression(Hooked):
    """One attention layer that regresses query targets on the context (see module docstring).

    Parameters: ``w_q``, ``w_k`` (``qk="separate"``, each ``d × d_k``), ``w`` (``"shared"``:
    ``d × d_k``; ``"single"``: ``d × d``), and the layer norm's affine weights if used. Initial
    entries are ``N(0, init_scale² / d)`` drawn from ``torch.Generator().manual_seed(seed)``.
    ``exclude_self`` masks each query's own row when the queries *are* the context rows (the
    leave-one-out fit; used for the softmax variant, which can otherwise recall its own target).
    """

    def __init__(
        self,
        d: int,
        variant: str = "softmax",
        whitening: bool = False,
        qk: str = "separate",
        layernorm: bool = False,
        d_k: int | None = None,
        init_scale: float = 0.5,
        whiten_ridge: float = 1e-6,
        seed: int = 0,
        dtype: torch.dtype = torch.float64,
    ) -> None:
        super().__init__()
        if isinstance(d, bool) or int(d) != d or d < 1:
            raise ValueError(f"d: must be an integer >= 1, got {d!r}")
        self.d = int(d)
        self.variant = check_choice("variant", variant, VARIANTS)
        self.qk = check_choice("qk", qk, QK_MODES)
        self.whitening = bool(whitening)
        self.use_layernorm = bool(layernorm)
        self.d_k = self.d if d_k is None or qk == "single" else int(d_k)
        if self.d_k < 1:
            raise ValueError(f"d_k: must be an integer >= 1, got {d_k!r}")
        check_positive("init_scale", init_scale)
        self.whiten_ridge = check_positive("whiten_ridge", whiten_ridge)
        gen = torch.Generator().manual_seed(check_seed("seed", seed))
        std = init_scale / math.sqrt(self.d)

        def init(rows: int, cols: int) -> nn.Parameter:
            return nn.Parameter(torch.randn(rows, cols, generator=gen, dtype=dtype) * std)

        if qk == "separate":
            self.w_q, self.w_k = init(self.d, self.d_k), init(self.d, self.d_k)
        elif qk == "shared":
            self.w = init(self.d, self.d_k)
        else:
            self.w = init(self.d, self.d)
        self.norm = nn.LayerNorm(self.d, dtype=dtype) if self.use_layernorm else None
        self.attn = Attention("dot", "softmax" if variant == "softmax" else "identity")

    def extra_repr(self) -> str:
        return (
            f"d={self.d}, variant={self.variant}, whitening={self.whitening}, qk={self.qk}, "
            f"layernorm={self.use_layernorm}, d_k={self.d_k}"
        )

    # ------------------------------------------------------------------ pieces of the layer
    def _data_whitening(self, x_ctx: torch.Tensor) -> torch.Tensor | None:
        if not self.whitening:
            return None
        return symmetric_whitening(x_ctx.detach())

    def _project(self, f: torch.Tensor, role: str) -> torch.Tensor:
        if self.qk == "single":
            return f
        if self.qk == "shared":
            return f @ self.w
        return f @ (self.w_q if role == "q" else self.w_k)

    def _key_whitening(self, k: torch.Tensor) -> torch.Tensor:
        white = whitening_matrix(k, ridge=self.whiten_ridge, covariance="mean", method="cholesky")
        return white.matrix

    @property
    def qk_product(self) -> torch.Tensor:
        """The learned ``W_q W_kᵀ`` (``W Wᵀ`` if shared, ``W`` if single), detached."""
        if self.qk == "separate":
            return (self.w_q @ self.w_k.mT).detach()
        if self.qk == "shared":
            return (self.w @ self.w.mT).detach()
        return self.w.detach().clone()

    def queries_keys(
        self, x_query: torch.Tensor, x_ctx: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Queries and keys as the core receives them: data whitening, layer norm, the
        projections and (whitened variant) the keys' whitening ``L_K`` applied."""
        lmat = self._data_whitening(x_ctx)
        fq, fc = (x_query, x_ctx) if lmat is None else (x_query @ lmat, x_ctx @ lmat)
        if self.norm is not None:
            fq, fc = self.norm(fq), self.norm(fc)
        q, k = self._project(fq, "q"), self._project(fc, "k")
        if self.variant == "whitened":
            lk = self._key_whitening(k)
            q, k = q @ lk, k @ lk
        return q, k

    def forward(
        self,
        x_query: torch.Tensor,
        x_ctx: torch.Tensor,
        y_ctx: torch.Tensor,
        exclude_self: bool = False,
    ) -> torch.Tensor:
        """``ŷ* = sep(β · Q M Kᵀ) · Y`` (``M = W`` for ``qk="single"``, else ``I``; ``β = 1/√d_k``
        for softmax, ``1/N`` otherwise) for batched ``(B, M, d), (B, N, d), (B, N, dy)`` tensors
        (2-D tensors are one task). ``exclude_self`` masks each query's own row (leave-one-out;
        the queries must be the context rows). No input checks: see :meth:`predict`."""
        squeeze = x_query.ndim == 2
        if squeeze:
            x_query, x_ctx, y_ctx = x_query[None], x_ctx[None], y_ctx[None]
        if exclude_self and x_query.shape[-2] != x_ctx.shape[-2]:
            raise ValueError(
                f"exclude_self needs the queries to be the context rows: x_query shape "
                f"{tuple(x_query.shape)}, x_ctx shape {tuple(x_ctx.shape)}"
            )
        q, k = self.queries_keys(x_query, x_ctx)
        metric = self.w if self.qk == "single" else None
        softmax = self.variant == "softmax"
        beta = 1 / math.sqrt(self.d_k) if softmax else 1.0
        out = self.attn(
            q, k, y_ctx, metric=metric, beta=beta, mean=not softmax, mask_self=exclude_self
        )
        return out[0] if squeeze else out

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """The one signature: ``(B, N, d), (B, N, dy), (B, M, d) -> (B, M, dy)``, no gradient;
        computed and returned in the model's dtype (float32 inputs to a float64 model give
        float64)."""
        xc, yc, xq, shape = check_tasks(x_ctx, y_ctx, x_query)
        if xc.shape[-1] != self.d:
            raise ValueError(f"x_ctx: expected d = {self.d} features, got shape {tuple(xc.shape)}")
        dtype = next(self.parameters()).dtype
        xc, yc, xq = xc.to(dtype), yc.to(dtype), xq.to(dtype)

        def run(xc: torch.Tensor, yc: torch.Tensor, xq: torch.Tensor) -> torch.Tensor:
            return self(xq, xc, yc)

        with torch.no_grad():
            out = check_finite_result(run(xc, yc, xq))
        return check_underflow(out, run, xc, yc, xq).reshape(shape)

    def effective_metric(self, x_ctx: torch.Tensor) -> torch.Tensor:
        """``M`` (``(B, d, d)``) with raw scores ``x* M xᵀ`` in the input coordinates.

        ``M = L_X · core · L_Xᵀ`` (``L_X`` the data whitening, or ``I``), where ``core`` is
        ``W_q W_kᵀ`` / ``W`` — or, for the whitened variant, ``W_q L_K L_Kᵀ W_kᵀ`` (single:
        ``L_K W L_Kᵀ``). Exact without layer norm; with it, the bilinear part only.
        """
        x = x_ctx if x_ctx.ndim == 3 else x_ctx[None]
        with torch.no_grad():
            lmat = self._data_whitening(x)
            f = x if lmat is None else x @ lmat
            if self.norm is not None:
                f = self.norm(f)
            k = self._project(f, "k")
            if self.qk == "single":
                core = self.w.expand(x.shape[0], self.d, self.d)
                if self.variant == "whitened":
                    lk = self._key_whitening(k)
                    core = lk @ self.w @ lk.mT
            else:
                wq = self.w if self.qk == "shared" else self.w_q
                wk = self.w if self.qk == "shared" else self.w_k
                if self.variant == "whitened":
                    lk = self._key_whitening(k)
                    core = wq @ lk @ lk.mT @ wk.mT
                else:
                    core = (wq @ wk.mT).expand(x.shape[0], self.d, self.d)
            if lmat is not None:
                core = lmat @ core @ lmat.mT
        return core.detach().clone()


class TrainableOLSTransformer(Hooked):
    """The OLS-Transformer's architecture with free weights (Tan & Zhao, arXiv 2604.13656):
    one linear attention layer, no softmax, values from the inputs,

    ``out = (X* W_Q)(X W_K)ᵀ (X W_V) W_P / N``   (``W_Q, W_K, W_V`` ``d × d``, ``W_P`` ``d × dy``).

    The construction sets ``W_Q = W_K = W_V = L`` (``L Lᵀ = (XᵀX/N)⁻¹``) and ``W_P = Lᵀ XᵀY / N``
    (:class:`attnreg.constructions.OLSTransformer` with ``covariance="mean"``); here the weights
    start at ``N(0, init_scale²/d)`` and are learned. Only the products ``W_Q W_Kᵀ`` and
    ``W_V W_P`` enter the output, and only up to ``(s·W_Q W_Kᵀ, W_V W_P / s)``. The training
    context ``X`` is fast memory (it enters through the scores); the weights are slow memory.
    """

    def __init__(
        self,
        d: int,
        dy: int = 1,
        init_scale: float = 0.5,
        seed: int = 0,
        dtype: torch.dtype = torch.float64,
    ) -> None:
        super().__init__()
        for name, value in (("d", d), ("dy", dy)):
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ValueError(f"{name}: must be an integer >= 1, got {value!r}")
        check_positive("init_scale", init_scale)
        gen = torch.Generator().manual_seed(check_seed("seed", seed))
        std = init_scale / math.sqrt(d)

        def init(rows: int, cols: int) -> nn.Parameter:
            return nn.Parameter(torch.randn(rows, cols, generator=gen, dtype=dtype) * std)

        self.w_q, self.w_k, self.w_v, self.w_p = init(d, d), init(d, d), init(d, d), init(d, dy)
        self.d, self.dy = int(d), int(dy)
        self.attn = Attention("dot", "identity")

    def forward(self, x_query: torch.Tensor, x_ctx: torch.Tensor) -> torch.Tensor:
        """``(X* W_Q)(X W_K)ᵀ(X W_V) W_P / N`` for ``(B, M, d)`` queries and ``(B, N, d)`` context
        (or 2-D, one task), through the core: ``Q (Kᵀ V W_P) / N``, no ``M × N`` matrix."""
        squeeze = x_query.ndim == 2
        if squeeze:
            x_query, x_ctx = x_query[None], x_ctx[None]
        q, k, v = x_query @ self.w_q, x_ctx @ self.w_k, x_ctx @ self.w_v
        out = self.attn(q, k, v, w_o=self.w_p, mean=True)
        return out[0] if squeeze else out

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """The one signature. The targets live in the slow weights (``W_P``, learned from the
        training targets), so ``y_ctx`` is validated for its shape but not read: the context
        ``X`` is the fast memory. ``(B, N, d), (B, N, dy), (B, M, d) -> (B, M, dy)``, computed
        and returned in the model's dtype."""
        xc, yc, xq, shape = check_model_tasks(x_ctx, y_ctx, x_query, self.d, self.dy)
        dtype = self.w_q.dtype
        xc, yc, xq = xc.to(dtype), yc.to(dtype), xq.to(dtype)

        def run(xc: torch.Tensor, yc: torch.Tensor, xq: torch.Tensor) -> torch.Tensor:
            return self(xq, xc)

        with torch.no_grad():
            out = check_finite_result(run(xc, yc, xq))
        return check_underflow(out, run, xc, yc, xq).reshape(shape)

    @property
    def qk_product(self) -> torch.Tensor:
        """``W_Q W_Kᵀ`` (detached); constructed value ``(XᵀX/N)⁻¹``."""
        return (self.w_q @ self.w_k.mT).detach()

    @property
    def vp_product(self) -> torch.Tensor:
        """``W_V W_P`` (detached); constructed value ``L Lᵀ XᵀY/N = β̂`` (the OLS coefficients)."""
        return (self.w_v @ self.w_p).detach()
