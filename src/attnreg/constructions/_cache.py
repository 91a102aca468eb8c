"""Named attention read-outs, TransformerLens-style, shared by every construction."""

from __future__ import annotations

import torch
from torch import nn


class RecordsAttention(nn.Module):
    """A module whose forward pass can record its attention tensors by name.

    Set ``record = True`` (or use :meth:`recording`) and every forward pass stores its scores
    and weights in ``cache`` under names such as ``"scores"`` or ``"layers.0.weights"``; with
    ``record = False`` (the default) linear attention is computed as ``Q (Kᵀ V)`` and no
    ``M × N`` matrix is formed.
    """

    def __init__(self) -> None:
        super().__init__()
        self.record = False
        self.cache: dict[str, torch.Tensor] = {}

    def recording(self, on: bool = True) -> RecordsAttention:
        """Turn recording on (or off) for this module and its children; returns ``self``."""
        for module in self.modules():
            if isinstance(module, RecordsAttention):
                module.record = on
        return self

    def _linear_attention(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, name: str = ""
    ) -> torch.Tensor:
        """``(Q Kᵀ / scale) V``, recorded under ``name + "scores"`` / ``"weights"`` if asked."""
        if self.record:
            scores = (q @ k.mT) / scale
            self.cache[name + "scores"] = scores.detach()
            self.cache[name + "weights"] = scores.detach()  # identity separation
            return scores @ v
        return (q @ (k.mT @ v)) / scale
