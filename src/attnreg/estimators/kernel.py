"""Kernel-weighted estimators at the query: the Nadaraya–Watson smoother (softmax attention
with values ``Y``, through the core) and local-linear regression with the same weights."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnreg.core.attention import Attention
from attnreg.core.results import check_finite_result
from attnreg.core.retrieval import whitened_metric
from attnreg.core.scaling import power_of_two_scale
from attnreg.core.scores import SIMILARITIES
from attnreg.core.tasks import check_tasks
from attnreg.core.validation import ArrayLike, check_choice, check_positive


@dataclass
class KernelSmoother:
    """Nadaraya–Watson kernel smoother = softmax attention with values Y:
    ``ŷ* = softmax(β · sim(x*, X)) Y`` (Nadaraya 1964, Watson 1964; the one form with
    ``sep`` = softmax), through the attention core (fused kernel for bilinear similarities: no
    ``M × N`` matrix, whatever the width of ``Y``). ``whitened_dot`` uses ``(XᵀX)⁺``; its scores
    do not depend on the scale of ``X`` (shared by the queries), so they are computed on ``X``
    and the queries divided by a power of two at extreme magnitudes. The ``dot`` scores
    ``β x*ᵀx`` do: past the float range ``predict`` raises a ``ValueError``.
    """

    beta: float = 1.0
    similarity: str = "dot"

    def __post_init__(self) -> None:
        check_choice("similarity", self.similarity, SIMILARITIES)
        self.beta = check_positive("beta", self.beta)

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """Softmax-weighted average of the context targets."""
        xc, yc, xq, shape = check_tasks(x_ctx, y_ctx, x_query)
        metric = None
        if self.similarity == "whitened_dot":
            # q (XᵀX)⁺ xᵀ does not change when X and the queries share a power of two: divide
            # them by it where XᵀX would over- or underflow (exact)
            scale = power_of_two_scale(xc)
            if bool((scale != 1).any()):
                xc, xq = xc / scale, xq / scale
            metric = whitened_metric(xc)
        out = Attention(self.similarity, "softmax", self.beta)(xq, xc, yc, metric=metric)
        return check_finite_result(out).reshape(shape)


@dataclass
class LocalLinear:
    """Kernel-weighted local-linear regression at the query (Cleveland 1979; Fan & Gijbels
    1996): ``ŷ* = ȳ + Σ^{yx} (Σ^{xx} + λI)⁻¹ (x* − x̄)``, the intercept of
    ``min_{b, W} Σ_i w_i ‖y_i − b − W (x_i − x*)‖² + λ‖W‖²`` with the softmax weights
    ``w_i = softmax_i(β x*ᵀ x_i)``, the weighted means ``x̄ = Σ w_i x_i``, ``ȳ`` and the centred
    weighted moments ``Σ^{xx} = Σ w_i (x_i − x̄)(x_i − x̄)ᵀ``, ``Σ^{yx}``. It is what local linear
    attention (:func:`attnreg.sequence.local_linear_attention`, Zuo et al. 2025) computes at
    its last position; the kernel smoother is its local-constant special case.
    """

    beta: float = 1.0
    lam: float = 1e-3

    def __post_init__(self) -> None:
        check_positive("beta", self.beta)
        check_positive("lam", self.lam)

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """The local-linear fit's intercept at every query."""
        xc, yc, xq, shape = check_tasks(x_ctx, y_ctx, x_query)
        w = torch.softmax(self.beta * (xq @ xc.mT), dim=-1)  # (B, M, N)
        x_mean, y_mean = w @ xc, w @ yc
        x_centred = xc.unsqueeze(1) - x_mean.unsqueeze(-2)  # (B, M, N, d)
        y_centred = yc.unsqueeze(1) - y_mean.unsqueeze(-2)
        weighted = x_centred * w.unsqueeze(-1)
        eye = torch.eye(xc.shape[-1], dtype=xc.dtype, device=xc.device)
        s_xx = weighted.mT @ x_centred + self.lam * eye
        s_xy = weighted.mT @ y_centred
        slope = torch.linalg.solve(s_xx, (xq - x_mean).unsqueeze(-1))
        out = y_mean + (s_xy.mT @ slope).squeeze(-1)
        return check_finite_result(out).reshape(shape)
