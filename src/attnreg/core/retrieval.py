"""Retrieval through one attention core: ``associate(Q, K, V)`` and the whitened-dot metric.

The functional form of :class:`attnreg.core.attention.Attention` used by the memories and the
benchmarks: checked inputs, unbatched 2-D inputs, the metric ``(KᵀK + λI)⁺`` by default.
"""

from __future__ import annotations

import threading
from functools import lru_cache

import torch

from attnreg.core.attention import Attention
from attnreg.core.streamed import DEFAULT_MEMORY_BUDGET
from attnreg.core.tasks import result_dtype
from attnreg.core.validation import ArrayLike, as_tensor, check_nonnegative
from attnreg.core.whitening import whitening_matrix

_THREAD = threading.local()


def _core(
    similarity: str,
    separation: str,
    beta: float,
    power: int,
    normalize: bool,
    memory_budget: int,
) -> Attention:
    """The :class:`Attention` core for these arguments, built once per thread and kept (the 64
    last used): building one, six hook points included, costs tens of µs, more than a small
    retrieval. A kept core carries no hook (:func:`associate` removes its own after the call).
    Arguments equal in value but not in type are different keys (``power=True`` is refused,
    not taken for 1); an unhashable argument gets a core of its own."""
    build = getattr(_THREAD, "build", None)
    if build is None:
        build = _THREAD.build = lru_cache(maxsize=64, typed=True)(Attention)
    try:
        return build(similarity, separation, beta, power, normalize, memory_budget)
    except TypeError:  # unhashable (or invalid: then the constructor raises it again)
        return Attention(similarity, separation, beta, power, normalize, memory_budget)


def whitened_metric(keys: torch.Tensor, ridge: float = 0.0) -> torch.Tensor:
    """``M = L Lᵀ = (KᵀK + λI)⁺`` from validated keys ``(B, N, d)``: the metric of the whitened
    dot product ``q M kᵀ`` (:func:`attnreg.core.whitening.whitening_matrix`)."""
    w = whitening_matrix(keys, ridge=ridge, checked=True).matrix
    return w @ w.mT


def associate(
    queries: ArrayLike,
    keys: ArrayLike,
    values: ArrayLike,
    *,
    similarity: str = "dot",
    separation: str = "identity",
    beta: float = 1.0,
    power: int = 2,
    metric: ArrayLike | None = None,
    ridge: float = 0.0,
    normalize: bool = False,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    return_weights: bool = False,
    offset: ArrayLike | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Retrieve ``sep(β · sim(Q, K)) · V`` for ``Q (B, M, d)``, ``K (B, N, d)``, ``V (B, N, dv)``
    through one :class:`Attention` core (the functional form used by the memories).

    Unbatched 2-D inputs give a 2-D result. ``metric`` is read by ``whitened_dot`` only; without
    it the metric is ``(KᵀK + λI)⁺`` from the keys (``ridge`` = λ). With ``return_weights`` the
    ``(B, M, N)`` weights are read from the core's ``hook_weights`` (and so materialised).
    ``offset``: one shift per query, ``(M,)`` or ``(B, M)``, added to ``β · sim`` before the
    separation: ``sep(β · sim(q, k) + c_q)``.
    """
    core = _core(similarity, separation, beta, power, normalize, memory_budget)
    check_nonnegative("ridge", ridge)
    q = as_tensor("queries", queries, ndim=(2, 3))
    k = as_tensor("keys", keys, ndim=(2, 3))
    v = as_tensor("values", values, ndim=(2, 3))
    if not (q.ndim == k.ndim == v.ndim):
        raise ValueError(
            f"queries, keys and values must have the same rank: shapes {tuple(q.shape)}, "
            f"{tuple(k.shape)}, {tuple(v.shape)}"
        )
    unbatched = q.ndim == 2
    if unbatched:
        q, k, v = q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0)
    if q.shape[-1] != k.shape[-1] or q.shape[0] != k.shape[0]:
        raise ValueError(f"queries {tuple(q.shape)} and keys {tuple(k.shape)} disagree on (B, d)")
    if k.shape[:2] != v.shape[:2]:
        raise ValueError(f"keys {tuple(k.shape)} and values {tuple(v.shape)} disagree on (B, N)")
    dtype = result_dtype(q, k, v)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    shift = None
    if offset is not None:
        shift = as_tensor("offset", offset, ndim=(1, 2)).to(dtype)
        want = tuple(q.shape[1:-1] if unbatched else q.shape[:-1])
        if tuple(shift.shape) != want:
            raise ValueError(f"offset: one shift per query, shape {want}; got {tuple(shift.shape)}")
        shift = shift.reshape(q.shape[0], q.shape[-2], 1)
    m: torch.Tensor | None = None
    if similarity == "whitened_dot" and metric is not None:
        m = as_tensor("metric", metric, ndim=(2, 3)).to(dtype)
    elif similarity == "whitened_dot":
        m = whitened_metric(k, ridge)
    if not return_weights:
        out = core(q, k, v, metric=m, offset=shift)
        return out[0] if unbatched else out
    seen: dict[str, torch.Tensor] = {}
    handle = core.hook_weights.register_forward_hook(
        lambda _mod, _inp, out: seen.__setitem__("weights", out)
    )
    try:
        out = core(q, k, v, metric=m, offset=shift)
    finally:
        handle.remove()
    weights = seen["weights"]
    return (out[0], weights[0]) if unbatched else (out, weights)
