"""Trainable softmax self-attention in the von Oswald token layout (default: 2 heads).

Same tokens and negated read-out as :class:`attnreg.models.lsa.TrainableLSA`; each head
attends to the context tokens through a softmax over ``N`` (Vaswani et al. 2017):

``e_j ← e_j + Σ_h PV_h Σ_{i≤N} softmax_i(e_iᵀ KQ_h e_j) e_i``

i.e. a Nadaraya–Watson kernel smoother of the value vectors ``PV_h e_i`` (the one form with
``sep`` = softmax), run through the attention core's fused softmax kernel. von Oswald et al.
(2023) train this model with 2 heads and compare it with GD.
"""

from __future__ import annotations

from typing import Any

import torch

from attnreg.core.validation import check_nonnegative, check_seed
from attnreg.models.token import LayoutModel, init_parameter


class SoftmaxAttention(LayoutModel):
    """Softmax attention with ``heads`` heads, ``layers`` layers (deep or recurrent); the
    products ``KQ_h`` and ``PV_h`` are the parameters (``(L, H, D, D)``)."""

    kind = "softmax"

    def __init__(
        self,
        d: int,
        dy: int = 1,
        layers: int = 1,
        heads: int = 2,
        recurrent: bool = False,
        init_scale: float = 0.05,
        seed: int = 0,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__(d, dy, layers, heads, recurrent, "softmax")
        self.init_scale = check_nonnegative("init_scale", init_scale)
        self.seed = check_seed("seed", seed)
        gen = torch.Generator().manual_seed(self.seed)
        shape = (self.n_weight_sets, heads, self.width, self.width)
        self.kq = init_parameter(shape, init_scale, gen, dtype)
        self.pv = init_parameter(shape, init_scale, gen, dtype)

    def key_query(self, layer: int = 0) -> torch.Tensor:
        """``KQ_h``: ``(H, D, D)``."""
        return self.kq[layer]

    def value_projection(self, layer: int = 0) -> torch.Tensor:
        """``PV_h``: ``(H, D, D)``."""
        return self.pv[layer]

    context_mean = False  # softmax normalises over the context itself

    def spec(self) -> dict[str, Any]:
        return {
            "d": self.d,
            "dy": self.dy,
            "layers": self.n_layers,
            "heads": self.heads,
            "recurrent": self.recurrent,
            "init_scale": self.init_scale,
            "seed": self.seed,
        }
