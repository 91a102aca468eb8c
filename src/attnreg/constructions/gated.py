"""A gated token-wise block: ``t ← t + ((t A) ⊙ g(t B)) C``, the feed-forward part of a stack.

Each token is mapped on its own (no mixing across tokens): two linear read-ins ``t A`` and
``t B`` (``(…, D) → (…, H)``), a gate ``g`` on the second, their elementwise product and a
linear write-out ``C`` (``(H, D)``), added to the token (the residual stream). With
``g = identity`` it is the bilinear unit — the GLU of Dauphin et al. (2017) without its sigmoid,
the "Bilinear" variant of Shazeer (2020, "GLU Variants Improve Transformer") — which computes
products of token entries exactly (a linear term is a product with a constant-1 entry). With
``g = reciprocal`` (``1/z``) it computes quotients exactly; a ReLU MLP only approximates
``1/z`` on a bounded interval (Yan, Li, Kulick & Tang 2026 use one for this scalar step).

Hook points: ``hook_a`` (``t A``), ``hook_gate`` (``g(t B)``), ``hook_output`` (the update
added to the token). Hooks read or replace these tensors (:class:`attnreg.core.hooks.Hooked`).
Rounding: every entry of the update is a product of two dot products of length ``D``, a gate
(one rounding) and a sum of ``H`` terms, so componentwise ``|Δ| ≤ γ_{2D + H + 2} R`` with ``R``
the update computed from ``|t A|``, ``|g(t B)|`` and ``|C|``.
"""

from __future__ import annotations

import torch
from torch import nn

from attnreg.core.hooks import HookPoint
from attnreg.core.validation import check_choice

GATES = ("identity", "reciprocal")


class GatedUnit(nn.Module):
    """``t ← t + ((t A) ⊙ g(t B)) C`` per token, ``g`` = ``gate`` (module docstring).

    ``a``, ``b``: ``(D, H)``; ``c``: ``(H, D)``; fixed weights (they do not train), computed
    in the tokens' dtype.
    """

    def __init__(
        self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, gate: str = "identity"
    ) -> None:
        super().__init__()
        if a.shape != b.shape or c.shape != a.shape[::-1]:
            raise ValueError(
                f"a, b, c: expected (D, H), (D, H), (H, D); got {tuple(a.shape)}, "
                f"{tuple(b.shape)}, {tuple(c.shape)}"
            )
        self.gate = check_choice("gate", gate, GATES)
        self.a = nn.Parameter(a, requires_grad=False)
        self.b = nn.Parameter(b, requires_grad=False)
        self.c = nn.Parameter(c, requires_grad=False)
        self.hook_a, self.hook_gate, self.hook_output = HookPoint(), HookPoint(), HookPoint()

    def extra_repr(self) -> str:
        return f"width={self.a.shape[0]}, hidden={self.a.shape[1]}, gate={self.gate}"

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``(…, D) -> (…, D)``: the tokens plus the gated update."""
        dtype = tokens.dtype
        left = self.hook_a(tokens @ self.a.to(dtype))
        right = tokens @ self.b.to(dtype)
        gated = self.hook_gate(right if self.gate == "identity" else 1.0 / right)
        return tokens + self.hook_output((left * gated) @ self.c.to(dtype))
