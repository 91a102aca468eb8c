"""The one kernel: similarity → separation → projection, batched and chunked.

``associate(Q, K, V) = sep(β · sim(Q, K)) · V`` — the Universal Hopfield form of Millidge et al.
(2022, "Universal Hopfield Networks"), which is also attention (``sim`` = scaled dot,
``sep`` = softmax; Vaswani et al. 2017), regression (``sim`` = whitened dot ``q S⁻¹ kᵀ``,
``sep`` = identity; Goulet Coulombe 2025) and a GD step (``sim`` = dot, ``sep`` = identity,
``β = η/N``; von Oswald et al. 2023). See ``math.md`` → "the one form".

Nothing of size ``M × N`` is ever held whole unless ``return_weights=True``:

* identity separation with a bilinear similarity is computed as ``(Q M)(Kᵀ V)`` — linear in N;
* softmax separation with a bilinear similarity goes to PyTorch's fused attention kernel
  (``scaled_dot_product_attention``; on CPU the flash-attention kernel: tiles of queries × keys
  with an online softmax, per-thread buffers of a few hundred KiB), with ``β`` as its scale;
* every other case streams over blocks of keys sized to ``memory_budget`` bytes: a running
  max / sum for softmax (the online softmax of Milakov & Gimelshein 2018), a running arg-max
  for ``max``, and plain accumulation for identity / power.
"""

from __future__ import annotations

import math

import torch
from torch.nn.functional import scaled_dot_product_attention

from attnreg.core.validation import as_tensor, check_choice, check_positive, check_positive_int
from attnreg.core.whitening import whitening_matrix

SIMILARITIES = ("dot", "scaled_dot", "whitened_dot", "euclidean", "manhattan")
SEPARATIONS = ("identity", "softmax", "power", "max")
BILINEAR = ("dot", "scaled_dot", "whitened_dot")
DEFAULT_MEMORY_BUDGET = 256 * 2**20


def similarity_scores(
    queries: torch.Tensor,
    keys: torch.Tensor,
    similarity: str,
    metric: torch.Tensor | None = None,
) -> torch.Tensor:
    """``sim(Q, K)`` of shape ``(B, M, N)``.

    dot ``q·k``; scaled_dot ``q·k/√d``; whitened_dot ``q M kᵀ`` (``M = metric``, e.g. ``S⁻¹``);
    euclidean ``−‖q − k‖₂``; manhattan ``−‖q − k‖₁`` (Millidge et al. 2022, Table 1).
    """
    if similarity == "dot":
        return queries @ keys.mT
    if similarity == "scaled_dot":
        return (queries @ keys.mT) / math.sqrt(queries.shape[-1])
    if similarity == "whitened_dot":
        if metric is None:
            raise ValueError("metric: whitened_dot needs the metric matrix M (e.g. S⁻¹)")
        return (queries @ metric) @ keys.mT
    if similarity == "euclidean":
        return -torch.cdist(queries, keys, p=2.0, compute_mode="donot_use_mm_for_euclid_dist")
    if similarity == "manhattan":
        return -torch.cdist(queries, keys, p=1.0)
    check_choice("similarity", similarity, SIMILARITIES)
    raise AssertionError("unreachable")


def separate(scores: torch.Tensor, separation: str, power: int = 2) -> torch.Tensor:
    """``sep(scores)`` along the last (key) axis: identity, softmax, ``xⁿ``, or one-hot arg-max."""
    if separation == "identity":
        return scores
    if separation == "softmax":
        return torch.softmax(scores, dim=-1)
    if separation == "power":
        return scores.pow(power)
    if separation == "max":
        hot = torch.zeros_like(scores)
        return hot.scatter_(-1, scores.argmax(-1, keepdim=True), 1.0)
    check_choice("separation", separation, SEPARATIONS)
    raise AssertionError("unreachable")


def chunk_sizes(batch: int, m: int, n: int, itemsize: int, memory_budget: int) -> tuple[int, int]:
    """Query and key block sizes so that the score temporaries of one block fit the budget.

    At most three score-sized temporaries live at once (scores, a mask or the distance
    kernel's scratch, the weighted block), so one ``batch × q × k`` block holds
    ``memory_budget / (3 · itemsize · batch)`` elements. Queries take up to 1024 rows; keys
    fill the rest of the budget, so the number of Python-level blocks is the smallest the
    budget allows.
    """
    elements = max(1, memory_budget // (3 * itemsize * batch))
    q_block = min(m, 1024, max(1, elements // min(n, 4096)))
    k_block = max(1, min(n, elements // q_block))
    return q_block, k_block


def associate(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    *,
    similarity: str = "dot",
    separation: str = "identity",
    beta: float = 1.0,
    power: int = 2,
    metric: torch.Tensor | None = None,
    ridge: float = 0.0,
    normalize: bool = False,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    return_weights: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Retrieve ``sep(β · sim(Q, K)) · V`` for ``Q (B, M, d)``, ``K (B, N, d)``, ``V (B, N, dv)``.

    Unbatched 2-D inputs are accepted and give a 2-D result. ``whitened_dot`` uses ``metric``
    if given, else ``(KᵀK + λI)⁺`` from the keys (``ridge`` = λ). ``normalize`` divides identity
    / power weights by their sum over keys. With ``return_weights`` the ``(B, M, N)`` weight
    matrix is returned too (and therefore materialised).
    """
    check_choice("similarity", similarity, SIMILARITIES)
    check_choice("separation", separation, SEPARATIONS)
    check_positive_int("power", power)
    check_positive("memory_budget", memory_budget)
    q = as_tensor("queries", queries, ndim=(2, 3))
    k = as_tensor("keys", keys, ndim=(2, 3))
    v = as_tensor("values", values, ndim=(2, 3))
    unbatched = q.ndim == 2
    if not (q.ndim == k.ndim == v.ndim):
        raise ValueError(
            f"queries, keys and values must have the same rank: shapes {tuple(q.shape)}, "
            f"{tuple(k.shape)}, {tuple(v.shape)}"
        )
    if unbatched:
        q, k, v = q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0)
    if q.shape[-1] != k.shape[-1] or q.shape[0] != k.shape[0]:
        raise ValueError(f"queries {tuple(q.shape)} and keys {tuple(k.shape)} disagree on (B, d)")
    if k.shape[:2] != v.shape[:2]:
        raise ValueError(f"keys {tuple(k.shape)} and values {tuple(v.shape)} disagree on (B, N)")
    dtype = torch.float64 if torch.float64 in (q.dtype, k.dtype, v.dtype) else q.dtype
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    beta = float(beta)
    if similarity == "whitened_dot":
        if metric is None:
            w = whitening_matrix(k, ridge=ridge, checked=True).matrix
            metric = w @ w.mT
        else:
            metric = as_tensor("metric", metric, ndim=(2, 3)).to(dtype)
    if return_weights:
        weights = separate(beta * similarity_scores(q, k, similarity, metric), separation, power)
        if normalize and separation in ("identity", "power"):
            weights = weights / weights.sum(-1, keepdim=True)
        out = weights @ v
        return (out[0], weights[0]) if unbatched else (out, weights)
    if separation == "identity" and similarity in BILINEAR and not normalize:
        out = _linear(q, k, v, similarity, metric, beta)
    elif separation == "softmax" and similarity in BILINEAR:
        out = _fused_softmax(q, k, v, similarity, beta, metric)
    else:
        out = _streamed(
            q, k, v, similarity, separation, beta, power, metric, normalize, memory_budget
        )
    return out[0] if unbatched else out


def _linear(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    similarity: str,
    metric: torch.Tensor | None,
    beta: float = 1.0,
) -> torch.Tensor:
    """``(Q M)(Kᵀ V)``: identity-separated bilinear attention without the N×N matrix.

    Computed as ``Q (β M (Kᵀ V))`` (``β/√d`` folded into the state for scaled_dot): the same
    product, with one ``M × dv`` output and no ``M × d`` intermediate.
    """
    state = k.mT @ v
    if similarity == "whitened_dot":
        assert metric is not None
        state = metric @ state
    elif similarity == "scaled_dot":
        beta = beta / math.sqrt(q.shape[-1])
    if beta != 1.0:
        state = state * beta
    return q @ state


def _bilinear_queries(
    q: torch.Tensor, similarity: str, beta: float, metric: torch.Tensor | None
) -> tuple[torch.Tensor, float]:
    """Fold a bilinear similarity into the queries: ``β·sim(q, k) = scale · (q M)·k``."""
    if similarity == "whitened_dot":
        assert metric is not None
        return q @ metric, beta
    if similarity == "scaled_dot":
        return q, beta / math.sqrt(q.shape[-1])
    return q, beta


def _fused_softmax(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    similarity: str,
    beta: float,
    metric: torch.Tensor | None,
) -> torch.Tensor:
    """``softmax(scale · (Q M) Kᵀ) V`` through ``scaled_dot_product_attention``.

    The inputs get a head axis, ``(B, 1, ·, d)``: with 4-D inputs PyTorch's CPU dispatcher
    picks the flash-attention kernel (it takes the O(M·N) "math" path for 3-D inputs).
    """
    qm, scale = _bilinear_queries(q, similarity, beta, metric)
    out = scaled_dot_product_attention(qm.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1), scale=scale)
    return out.squeeze(1)


def _streamed(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    similarity: str,
    separation: str,
    beta: float,
    power: int,
    metric: torch.Tensor | None,
    normalize: bool,
    memory_budget: int,
) -> torch.Tensor:
    """Stream over ``q_block × k_block`` score blocks (sizes from :func:`chunk_sizes`).

    Softmax keeps a running max ``m``, sum ``ℓ`` and numerator ``a`` per query and rescales
    them by ``exp(m_old − m_new)`` at each block (Milakov & Gimelshein 2018); ``max`` keeps a
    running arg-max; identity / power accumulate. Bilinear similarities fold ``M`` and ``β``
    into the queries once; the block arithmetic is done in place where autograd allows it.
    """
    b, m, n = q.shape[0], q.shape[1], k.shape[1]
    q_block, k_block = chunk_sizes(b, m, n, q.element_size(), memory_budget)
    bilinear = similarity in BILINEAR
    scale = beta
    if bilinear:
        q, scale = _bilinear_queries(q, similarity, beta, metric)
    out = torch.empty(b, m, v.shape[-1], dtype=q.dtype, device=q.device)
    for qs in range(0, m, q_block):
        qc = q[:, qs : qs + q_block]
        rows = qc.shape[1]
        acc = torch.zeros(b, rows, v.shape[-1], dtype=q.dtype, device=q.device)
        total = torch.zeros(b, rows, 1, dtype=q.dtype, device=q.device)
        best = torch.full((b, rows, 1), -math.inf, dtype=q.dtype, device=q.device)
        for ks in range(0, n, k_block):
            kc, vc = k[:, ks : ks + k_block], v[:, ks : ks + k_block]
            s = qc @ kc.mT if bilinear else similarity_scores(qc, kc, similarity, metric)
            if scale != 1.0:
                s.mul_(scale)
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
                w = s.pow(power) if separation == "power" else s
                acc = torch.baddbmm(acc, w, vc)
                total = total + w.sum(-1, keepdim=True)
        if separation == "softmax" or (normalize and separation != "max"):
            acc = acc / total
        out[:, qs : qs + rows] = acc
    return out
