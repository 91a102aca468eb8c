"""The one task signature ``predict(x_ctx, y_ctx, x_query)``: its shapes checked and batched
(:func:`check_tasks`), for a model of fixed widths too (:func:`check_model_tasks`)."""

from __future__ import annotations

import torch

from attnreg.core.validation import ArrayLike, as_tensor


def result_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """The widest floating dtype among ``tensors`` (float64 wins over float32)."""
    dtypes = [t.dtype for t in tensors]
    return torch.float64 if torch.float64 in dtypes else dtypes[0]


def check_tasks(
    x_ctx: ArrayLike,
    y_ctx: ArrayLike,
    x_query: ArrayLike,
    *,
    dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple[int, ...]]:
    """Validate the one signature ``predict(x_ctx, y_ctx, x_query)`` and batch it.

    Accepts unbatched ``(N, d), (N,) | (N, dy), (M, d)`` or batched ``(B, N, d), (B, N, dy),
    (B, M, d)``. Returns float tensors of shape ``(B, N, d), (B, N, dy), (B, M, d)`` in a common
    dtype, and the output shape the caller should reshape predictions ``(B, M, dy)`` to.
    """
    xc = as_tensor("x_ctx", x_ctx, ndim=(2, 3), allow_empty=True)
    yc = as_tensor("y_ctx", y_ctx, ndim=(1, 2, 3), allow_empty=True)
    xq = as_tensor("x_query", x_query, ndim=(2, 3), allow_empty=True)
    if xc.ndim != xq.ndim:
        raise ValueError(
            f"x_ctx and x_query must both be batched or both unbatched: "
            f"x_ctx shape {tuple(xc.shape)}, x_query shape {tuple(xq.shape)}"
        )
    shapes = {"x_ctx": tuple(xc.shape), "y_ctx": tuple(yc.shape), "x_query": tuple(xq.shape)}
    batched = xc.ndim == 3
    vector_y = yc.ndim == xc.ndim - 1
    if not vector_y and yc.ndim != xc.ndim:
        raise ValueError(
            f"y_ctx rank does not fit x_ctx: x_ctx shape {tuple(xc.shape)}, "
            f"y_ctx shape {tuple(yc.shape)}"
        )
    if vector_y:
        yc = yc.unsqueeze(-1)
    if not batched:
        xc, yc, xq = xc.unsqueeze(0), yc.unsqueeze(0), xq.unsqueeze(0)
    if xc.shape[0] == 0:
        raise ValueError(f"x_ctx: empty batch (B = 0 tasks), shape {shapes['x_ctx']}")
    if xc.shape[1] == 0:
        raise ValueError(f"x_ctx: empty context (N = 0), shape {shapes['x_ctx']}")
    if xc.shape[2] == 0:
        raise ValueError(f"x_ctx: zero features (d = 0), shape {shapes['x_ctx']}")
    if yc.shape[-1] == 0:
        raise ValueError(f"y_ctx: zero targets (dy = 0), shape {shapes['y_ctx']}")
    if yc.shape[:2] != xc.shape[:2]:
        raise ValueError(
            f"x_ctx and y_ctx disagree on (batch, N): x_ctx shape {shapes['x_ctx']}, "
            f"y_ctx shape {shapes['y_ctx']}"
        )
    if xq.shape[0] != xc.shape[0] or xq.shape[2] != xc.shape[2]:
        raise ValueError(
            f"x_query does not fit x_ctx (batch and d must agree): x_ctx shape "
            f"{shapes['x_ctx']}, x_query shape {shapes['x_query']}"
        )
    common = dtype or result_dtype(xc, yc, xq)
    xc, yc, xq = xc.to(common), yc.to(common), xq.to(common)
    m = xq.shape[1]
    out_shape: tuple[int, ...] = (m,) if vector_y else (m, yc.shape[-1])
    if batched:
        out_shape = (xc.shape[0], *out_shape)
    return xc, yc, xq, out_shape


def check_model_tasks(
    x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike, d: int, dy: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple[int, ...]]:
    """:func:`check_tasks` for a model built for ``d`` features and ``dy`` targets: a
    ``ValueError`` stating both shapes and the model's widths when they do not fit."""
    xc, yc, xq, shape = check_tasks(x_ctx, y_ctx, x_query)
    if xc.shape[2] != d or yc.shape[2] != dy:
        raise ValueError(
            f"x_ctx/y_ctx shapes {tuple(xc.shape)}/{tuple(yc.shape)} do not fit this model "
            f"(d = {d}, dy = {dy})"
        )
    return xc, yc, xq, shape
