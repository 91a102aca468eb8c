"""The linear path: identity separation with a bilinear similarity, ``Q (β M (Kᵀ V) W_O)``.

Linear in N and M: the ``d × do`` state ``Kᵀ V`` (the key-value state of linear attention,
Katharopoulos et al. 2020) comes first, so no ``M × N`` matrix is formed. Two shortcuts give the
same number as the plain formula up to rounding:

* **shared heads** — keys, values or queries that every head shares (a stride-0 head axis, as
  ``expand`` makes) are multiplied once, not once per head;
* **overflow** — if ``M · (Kᵀ V)`` is not finite because of features the metric ignores
  (targets at 1e300 in the tokens), the metric moves to the key side, ``Q ((K Mᵀ)ᵀ V)``, where
  its zero rows keep those features out of the state.
"""

from __future__ import annotations

import torch

TASK_BLOCK_BYTES = 2**20


def project(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``X W`` for token batches ``(B, N, d)`` and per-task weights ``(B, d, k)``.

    Many small tasks (``B > 1``, ``N ≤ 1024``) are evaluated as ``(Wᵀ Xᵀ)ᵀ``, the same product
    in the layout PyTorch's CPU batched matmul runs fastest (``benchmarks/README.md``, P1).
    """
    if x.ndim == 3 and w.ndim == 3 and x.shape[0] > 1 and x.shape[-2] <= 1024:
        return (w.mT @ x.mT).mT
    return x @ w


def key_value_state(k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``Kᵀ V`` summed over the tokens; one value column of many tasks as ``(Vᵀ K)ᵀ``."""
    if v.shape[-1] == 1 and k.shape[0] > 1:
        return (v.mT @ k).mT
    return k.mT @ v


def task_blocks(batch: int, per_task_bytes: int) -> list[slice]:
    """Slices of the task axis covering about ``TASK_BLOCK_BYTES`` each (at least one task)."""
    step = max(1, TASK_BLOCK_BYTES // max(1, per_task_bytes))
    return [slice(start, min(start + step, batch)) for start in range(0, batch, step)]


def linear_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    metric: torch.Tensor | None,
    w_o: torch.Tensor | None,
    scale: float,
    mean_divisor: int,
) -> torch.Tensor:
    """``Σ_heads Q (scale · M (Kᵀ V / mean_divisor) W_O)``, one block of about
    ``TASK_BLOCK_BYTES`` of tasks at a time (so many small tasks stay in cache).

    ``scale`` is β with a scaled dot's ``1/√d`` folded in; ``mean_divisor`` is N for a context
    mean, 1 otherwise."""
    if _narrow_shared_heads(q, k, v, metric, w_o):
        assert metric is not None and w_o is not None
        return _shared_heads_readout(q, k, v, metric, w_o, scale, mean_divisor)
    per_task = max(t[0].numel() * t.element_size() for t in (q, k, v))
    blocks = task_blocks(q.shape[0], per_task)
    if len(blocks) == 1:
        return _linear_block(q, k, v, metric, w_o, scale, mean_divisor)
    parts = [
        _linear_block(
            q[b], k[b], v[b], _rows(metric, b, q.ndim), _rows(w_o, b, q.ndim), scale, mean_divisor
        )
        for b in blocks
    ]
    return torch.cat(parts, dim=0)


def _rows(t: torch.Tensor | None, block: slice, ndim: int) -> torch.Tensor | None:
    """The tasks ``block`` of a per-task tensor: one of the tokens' rank ``ndim`` (``(B, d, d)``
    beside ``(B, N, d)`` tokens, ``(B, 1, d, d)`` beside ``(B, H, N, d)``). Shared tensors
    (2-D, per head ``(H, d, d)`` beside 4-D tokens, or one task) are kept whole."""
    if t is None or t.ndim != ndim or t.shape[0] == 1:
        return t
    return t[block]


def _shared_over_heads(t: torch.Tensor) -> bool:
    """A head axis whose heads all see the same tensor (one head, or a stride-0 expand)."""
    return t.ndim == 4 and (t.shape[1] == 1 or t.stride(1) == 0)


def _linear_block(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    metric: torch.Tensor | None,
    w_o: torch.Tensor | None,
    scale: float,
    mean_divisor: int,
) -> torch.Tensor:
    state = _state(k, v, mean_divisor)
    if metric is not None:
        weighted = metric @ state
        if not bool(torch.isfinite(weighted).all()):
            keys = (k[:, 0] if _shared_over_heads(k) and metric.ndim < 3 else k) @ metric.mT
            if keys.ndim == 3 and v.ndim == 4:
                keys = keys.unsqueeze(1).expand(-1, v.shape[1], -1, -1)
            weighted = _state(keys, v, mean_divisor)
        state = weighted
    if w_o is not None:
        state = state @ w_o
    if scale != 1.0:
        state = state * scale
    if state.ndim == 4 and _shared_over_heads(q):
        total = state.sum(1)
        if state.shape[1] == 1 and q.shape[1] > 1:  # every head shares Q and the state
            total = total * q.shape[1]
        return project(q[:, 0], total)
    if state.ndim == 4 and q.ndim == 4:
        return (q @ state).sum(1)
    return project(q, state)


def _state(k: torch.Tensor, v: torch.Tensor, mean_divisor: int) -> torch.Tensor:
    """``Kᵀ V / mean_divisor`` per task (and head); keys and values shared by every head, once."""
    if _shared_over_heads(k) and _shared_over_heads(v):
        state = key_value_state(k[:, 0], v[:, 0]).unsqueeze(1)
    else:
        state = key_value_state(k, v)
    return state / mean_divisor if mean_divisor != 1 else state


def _narrow_shared_heads(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    metric: torch.Tensor | None,
    w_o: torch.Tensor | None,
) -> bool:
    """Heads that share one token stream (stride-0 head axis on Q, K and V), with per-head
    metrics and output projections that narrow the values (``do < dv``: a read-out)."""
    return (
        all(_shared_over_heads(t) for t in (q, k, v))
        and metric is not None
        and w_o is not None
        and metric.ndim == 3
        and w_o.ndim == 3
        and metric.shape[0] == w_o.shape[0] == q.shape[1]
        and w_o.shape[-1] < v.shape[-1]
    )


def _shared_heads_readout(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    metric: torch.Tensor,
    w_o: torch.Tensor,
    scale: float,
    mean_divisor: int,
) -> torch.Tensor:
    """``Σ_h (Q M_h)(Kᵀ (V W_O,h)) · scale / mean_divisor`` with the heads side by side in two
    GEMMs: values are projected first (``do < dv``), so the state is ``d × do`` per head, not
    ``d × dv``; the metric goes to the (fewer) queries, or to the keys if the state overflows."""
    b, h, m, d = q.shape
    n_keys, do = k.shape[2], w_o.shape[-1]
    u = v[:, 0] @ w_o.permute(1, 0, 2).reshape(v.shape[-1], h * do)
    z = (k[:, 0].mT @ u).view(b, d, h, do)
    if bool(torch.isfinite(z).all()):
        qm = (q[:, 0] @ metric.permute(1, 0, 2).reshape(d, h * d)).view(b, m, h, d)
        out = torch.einsum("bmhe,behk->bmk", qm, z)
    else:
        km = (k[:, 0] @ metric.mT.permute(1, 0, 2).reshape(d, h * d)).view(b, n_keys, h, d)
        z = torch.einsum("bnhe,bnhk->bhek", km, u.view(b, n_keys, h, do))
        out = torch.einsum("bme,bhek->bmk", q[:, 0], z)
    if scale != 1.0:
        out = out * scale
    return out / mean_divisor if mean_divisor != 1 else out
