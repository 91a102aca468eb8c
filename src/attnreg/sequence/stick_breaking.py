"""Stick-breaking attention (Tan et al. 2025, "Scaling Stick-Breaking Attention: An Efficient
Implementation and In-depth Study", arXiv 2410.17980; fla's ``stickbreaking_attn``).

``o_t = Σ_{i<t} A_{t,i} v_i``, ``A_{t,i} = σ(z_{t,i}) Π_{i<l<t} (1 − σ(z_{t,l}))``,
``z_{t,i} = scale · q_tᵀ k_i``: the nearest key breaks the stick first; the weights of a query
sum to ``1 − Π_{i<t} (1 − σ(z_{t,i})) ≤ 1``. ``attend_current=True`` lets a position see its
own key too (``i ≤ t`` and ``i < l ≤ t``).

Regression (attnreg's reading): ``o_t = argmin_b Σ_i A_{t,i} ‖v_i − b‖² + r_t ‖b‖²`` with the
stick left over ``r_t = 1 − Σ_i A_{t,i}``: the **Nadaraya–Watson (local-constant) smoother**
with the stick-breaking weights and the remainder on the prior value 0 — a weighted mean shrunk
towards zero, the weights set by recency as much as by similarity.
"""

from __future__ import annotations

import torch
from torch.nn.functional import logsigmoid

from attnreg.core.results import check_finite_result
from attnreg.core.validation import ArrayLike, check_flag
from attnreg.sequence.inputs import check_qkv, check_scale


def stick_breaking_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    scale: float = 1.0,
    attend_current: bool = False,
) -> torch.Tensor:
    """Stick-breaking attention (module docstring): ``q, k (B, H, T, d_k)``,
    ``v (B, H, T, d_v)`` → ``o (B, H, T, d_v)`` (zero where a query sees no key).

    The weights are formed in log space, ``log A_{t,i} = log σ(z_{t,i}) + Σ_{i<l<t}
    log σ(−z_{t,l})`` (no product of many factors below 1 underflows before its logarithm is
    taken); the logits are a ``T × T`` matrix per batch element and head."""
    qt, kt, vt = check_qkv(q, k, v)
    check_flag("attend_current", attend_current)
    z = check_scale(scale) * (qt @ kt.mT)
    return check_finite_result(stick_weights(z, attend_current) @ vt, "stick_breaking_attention")


def stick_weights(z: torch.Tensor, attend_current: bool) -> torch.Tensor:
    """``A_{t,i}`` (``(B, H, T, T)``) from the logits ``z``: zero for the keys a query does not
    see. The sum over ``i < l < t`` is a suffix sum along the key axis of the visible
    ``log σ(−z_{t,l})``, minus the term ``l = i`` itself."""
    t_len = z.shape[-1]
    rows = torch.arange(t_len, device=z.device)
    seen = rows[None, :] <= rows[:, None] if attend_current else rows[None, :] < rows[:, None]
    remain = logsigmoid(-z).masked_fill(~seen, 0.0)
    after = remain.flip(-1).cumsum(-1).flip(-1) - remain  # Σ_{l > i, seen} log(1 − σ(z_{t,l}))
    return (logsigmoid(z) + after).masked_fill(~seen, -torch.inf).exp()
