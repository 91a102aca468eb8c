"""The score-block paths: fused softmax and streamed, neither holding an ``M × N`` matrix whole.

* **fused** — softmax separation with a bilinear similarity: PyTorch's fused
  ``scaled_dot_product_attention`` (on the CPU a flash-attention kernel: tiles of queries × keys
  with an online softmax; Dao et al. 2022).
* **streamed** — any similarity and separation: blocks of keys sized to a memory budget, with a
  running max and sum for softmax (the online softmax of Milakov & Gimelshein 2018), a running
  arg-max for ``max``, plain accumulation for identity, power and signed power.

Bilinear similarities arrive folded into the queries: ``β · sim(q, k) = scale · (q M) · k``.
"""

from __future__ import annotations

import math

import torch
from torch.nn.functional import pad, scaled_dot_product_attention

from attnreg.core.scores import BILINEAR, separate, similarity_scores, weight_mass

DEFAULT_MEMORY_BUDGET = 256 * 2**20


def chunk_sizes(batch: int, m: int, n: int, itemsize: int, memory_budget: int) -> tuple[int, int]:
    """Query and key block sizes so that the score temporaries of one block fit the budget.

    At most three score-sized temporaries live at once (scores, a mask or the distance
    kernel's scratch, the weighted block), so one ``batch × q × k`` block holds
    ``memory_budget / (3 · itemsize · batch)`` elements. Queries take up to 1024 rows; keys
    fill the rest of the budget.
    """
    elements = max(1, memory_budget // (3 * itemsize * batch))
    q_block = min(m, 1024, max(1, elements // min(n, 4096)))
    k_block = max(1, min(n, elements // q_block))
    return q_block, k_block


def fused_softmax(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """``softmax(scale · Q Kᵀ) V`` through ``scaled_dot_product_attention`` (queries already
    carry the metric). 3-D inputs get a head axis: with 4-D inputs PyTorch's CPU dispatcher
    picks the flash-attention kernel (it takes the O(M·N) "math" path for 3-D inputs). Values
    of another width than the keys are zero-padded to one head width (zero value columns, or
    zero query/key columns, change nothing)."""
    squeeze = q.ndim == 3
    if squeeze:
        q, k, v = q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1)
    d, dv = k.shape[-1], v.shape[-1]
    if dv < d:
        v = pad(v, (0, d - dv))
    elif dv > d:
        q, k = pad(q, (0, dv - d)), pad(k, (0, dv - d))
    if k.shape[1] != q.shape[1]:
        k, v = k.expand(-1, q.shape[1], -1, -1), v.expand(-1, q.shape[1], -1, -1)
    out = scaled_dot_product_attention(q, k, v, scale=scale)[..., :dv]
    return out.squeeze(1) if squeeze else out


def streamed(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    similarity: str,
    separation: str,
    scale: float,
    power: int,
    normalize: bool,
    mean_divisor: int,
    memory_budget: int,
    offset: torch.Tensor | None = None,
) -> torch.Tensor:
    """``sep(scale · sim(Q, K) + offset) V / mean_divisor`` (weights divided by their mass with
    ``normalize``) for ``(B, [H,] M, d)`` queries; ``offset`` is ``None`` or one shift per query,
    ``(B, [H,] M, 1)``; a head axis is kept, not summed."""
    b, h = q.shape[0], q.shape[1] if q.ndim == 4 else 0
    if h:
        q, k, v = (t.expand(b, h, *t.shape[2:]).reshape(b * h, *t.shape[2:]) for t in (q, k, v))
        if offset is not None:
            offset = offset.expand(b, h, *offset.shape[2:]).reshape(b * h, *offset.shape[2:])
    out = _streamed_3d(
        q, k, v, similarity, separation, scale, power, normalize, memory_budget, offset
    )
    if mean_divisor != 1:
        out = out / mean_divisor
    return out.view(b, h, *out.shape[1:]) if h else out


def _streamed_3d(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    similarity: str,
    separation: str,
    scale: float,
    power: int,
    normalize: bool,
    memory_budget: int,
    offset: torch.Tensor | None = None,
) -> torch.Tensor:
    """Stream over ``q_block × k_block`` score blocks (sizes from :func:`chunk_sizes`).

    Softmax keeps a running max ``m``, sum ``ℓ`` and numerator per query and rescales them by
    ``exp(m_old − m_new)`` at each block; ``max`` keeps a running arg-max; the others
    accumulate ``w V`` and the weights' mass."""
    b, m, n = q.shape[0], q.shape[1], k.shape[1]
    q_block, k_block = chunk_sizes(b, m, n, q.element_size(), memory_budget)
    bilinear = similarity in BILINEAR
    out = torch.empty(b, m, v.shape[-1], dtype=q.dtype, device=q.device)
    for qs in range(0, m, q_block):
        qc = q[:, qs : qs + q_block]
        rows = qc.shape[1]
        acc = torch.zeros(b, rows, v.shape[-1], dtype=q.dtype, device=q.device)
        total = torch.zeros(b, rows, 1, dtype=q.dtype, device=q.device)
        best = torch.full((b, rows, 1), -math.inf, dtype=q.dtype, device=q.device)
        for ks in range(0, n, k_block):
            kc, vc = k[:, ks : ks + k_block], v[:, ks : ks + k_block]
            s = qc @ kc.mT if bilinear else similarity_scores(qc, kc, similarity)
            if scale != 1.0:
                s.mul_(scale)
            if offset is not None:
                s.add_(offset[:, qs : qs + q_block])
            if separation == "softmax":
                # the shift is a constant for autograd: softmax does not depend on it
                new_best = torch.maximum(best, s.detach().amax(-1, keepdim=True))
                rescale = (best - new_best).exp_()
                s.sub_(new_best).exp_()
                acc = torch.baddbmm(acc * rescale, s, vc)
                total = total * rescale + s.sum(-1, keepdim=True)
                best = new_best
            elif separation == "max":
                block_max, idx = s.max(-1, keepdim=True)
                better = block_max > best
                picked = torch.gather(vc, 1, idx.expand(-1, -1, vc.shape[-1]))
                acc = torch.where(better, picked, acc)
                best = torch.where(better, block_max, best)
            else:
                w = s if separation == "identity" else separate(s, separation, power)
                acc = torch.baddbmm(acc, w, vc)
                total = total + weight_mass(w, separation)
        if separation == "softmax" or (normalize and separation != "max"):
            acc = acc / total
        out[:, qs : qs + rows] = acc
    return out
