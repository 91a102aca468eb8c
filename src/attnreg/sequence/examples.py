"""Example inputs of the registered layers: each layer's keyword arguments drawn at a shape
``(B, H, T, d_k, d_v)``, as the layer is meant to run — unit keys (DeltaNet's L2-normalised
keys), Gaussian queries and values, steps that do not expand the state (``β ∈ [0.25, 1]`` on
unit keys), decays in ``[0.9, 1)``. The registry's checks, the benchmark and the ``layers``
study run every layer on these (:class:`attnreg.sequence.registry.Example`)."""

from __future__ import annotations

from typing import Any

import torch

from attnreg.sequence.log_linear import levels

Shape = tuple[int, int, int, int, int]
"""``(B, H, T, d_k, d_v)``."""


def uniform(
    gen: torch.Generator, size: tuple[int, ...], low: float, high: float, dtype: Any
) -> Any:
    """``U(low, high)`` draws of ``size``."""
    return low + (high - low) * torch.rand(size, generator=gen, dtype=dtype)


def unit(x: torch.Tensor) -> torch.Tensor:
    """``x / ‖x‖`` over the last axis."""
    return x / x.norm(dim=-1, keepdim=True)


def tokens(gen: torch.Generator, shape: Shape, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Gaussian ``q (B, H, T, d_k)`` and ``v (B, H, T, d_v)``, unit keys ``k (B, H, T, d_k)``."""
    b, h, t, d_k, d_v = shape
    q = torch.randn(b, h, t, d_k, generator=gen, dtype=dtype)
    k = unit(torch.randn(b, h, t, d_k, generator=gen, dtype=dtype))
    return {"q": q, "k": k, "v": torch.randn(b, h, t, d_v, generator=gen, dtype=dtype)}


def per_token(gen: torch.Generator, shape: Shape, low: float, high: float, dtype: Any) -> Any:
    """A ``(B, H, T)`` parameter drawn from ``U(low, high)``."""
    return uniform(gen, shape[:3], low, high, dtype)


def plain(gen: torch.Generator, shape: Shape, dtype: torch.dtype) -> dict[str, Any]:
    """The tokens alone (linear attention, softmax attention, stick-breaking attention)."""
    return tokens(gen, shape, dtype)


def with_step(gen: torch.Generator, shape: Shape, dtype: torch.dtype) -> dict[str, Any]:
    """The tokens and a step ``β_t ∈ [0.25, 1]`` (the delta rule)."""
    return tokens(gen, shape, dtype) | {"beta": per_token(gen, shape, 0.25, 1.0, dtype)}


def longhorn_example(gen: torch.Generator, shape: Shape, dtype: torch.dtype) -> dict[str, Any]:
    """The tokens and Longhorn's ``β_t ∈ [0.5, 4]`` (stable for every ``β ≥ 0``)."""
    return tokens(gen, shape, dtype) | {"beta": per_token(gen, shape, 0.5, 4.0, dtype)}


def mesa_example(gen: torch.Generator, shape: Shape, dtype: torch.dtype) -> dict[str, Any]:
    """The tokens, ``β_t ∈ [0.5, 1]`` and the ridge ``λ ∈ [0.1, 1.1]`` per head and key
    coordinate."""
    lam = uniform(gen, (shape[1], shape[3]), 0.1, 1.1, dtype)
    return tokens(gen, shape, dtype) | {"beta": per_token(gen, shape, 0.5, 1.0, dtype), "lam": lam}


def delta_product_example(gen: torch.Generator, shape: Shape, dtype: torch.dtype) -> dict[str, Any]:
    """Two delta steps per token (``n_h = 2``): keys ``(B, H, T, 2, d_k)``, values
    ``(B, H, T, 2, d_v)``, steps ``(B, H, T, 2)``, and a decay ``α_t ∈ [0.9, 1)``."""
    b, h, t, d_k, d_v = shape
    q = tokens(gen, shape, dtype)["q"]
    k = unit(torch.randn(b, h, t, 2, d_k, generator=gen, dtype=dtype))
    v = torch.randn(b, h, t, 2, d_v, generator=gen, dtype=dtype)
    beta = uniform(gen, (b, h, t, 2), 0.25, 1.0, dtype)
    return {"q": q, "k": k, "v": v, "beta": beta, "decay": per_token(gen, shape, 0.9, 1.0, dtype)}


def rwkv7_example(gen: torch.Generator, shape: Shape, dtype: torch.dtype) -> dict[str, Any]:
    """RWKV-7's form of the generalized delta rule: ``a = −η ⊙ k``, ``b = k`` with
    ``η ∈ [0.25, 1]`` per key channel, and a decay ``α ∈ [0.9, 1)`` per key channel."""
    x = tokens(gen, shape, dtype)
    eta = uniform(gen, x["k"].shape, 0.25, 1.0, dtype)
    decay = uniform(gen, x["k"].shape, 0.9, 1.0, dtype)
    return x | {"a": -eta * x["k"], "b": x["k"], "decay": decay}


def comba_example(gen: torch.Generator, shape: Shape, dtype: torch.dtype) -> dict[str, Any]:
    """Comba read at the previous key (``p_t = k_{t−1}``, ``p_1 = 0``), ``β_t ∈ [0.25, 1]`` and a
    decay ``α_t ∈ [0.9, 1)``."""
    x = with_step(gen, shape, dtype)
    p = torch.cat([torch.zeros_like(x["k"][:, :, :1]), x["k"][:, :, :-1]], dim=2)
    return x | {"p": p, "decay": per_token(gen, shape, 0.9, 1.0, dtype)}


def heavy_ball(gen: torch.Generator, shape: Shape, dtype: torch.dtype) -> dict[str, Any]:
    """The momentum delta rule on its own keys (``p = k``): momentum ``μ_t ∈ [0.1, 0.5]``, steps
    ``β_t = c_t (1 − μ_t)`` with ``c_t ∈ [0.25, 1]`` (stable heavy ball), ``η = 1``, a decay."""
    x = tokens(gen, shape, dtype)
    mu = per_token(gen, shape, 0.1, 0.5, dtype)
    beta = per_token(gen, shape, 0.25, 1.0, dtype) * (1 - mu)
    decay = per_token(gen, shape, 0.9, 1.0, dtype)
    return x | {"p": x["k"], "beta": beta, "eta": 1.0, "momentum": mu, "decay": decay}


def titans_example(gen: torch.Generator, shape: Shape, dtype: torch.dtype) -> dict[str, Any]:
    """Titans' linear memory with :func:`heavy_ball`'s steps as its rates ``lr``."""
    x = heavy_ball(gen, shape, dtype)
    return {n: x[n] for n in ("q", "k", "v", "momentum", "decay")} | {"lr": x["beta"]}


def ttt_example(gen: torch.Generator, shape: Shape, dtype: torch.dtype) -> dict[str, Any]:
    """TTT-Linear in mini-batches of 4 (the last one shorter when 4 does not divide T), rates
    ``η_t ∈ [0.25, 1] / 4``."""
    lr = per_token(gen, shape, 0.25, 1.0, dtype) / 4
    return tokens(gen, shape, dtype) | {"lr": lr, "batch_size": 4}


def log_linear_example(gen: torch.Generator, shape: Shape, dtype: torch.dtype) -> dict[str, Any]:
    """Level weights ``λ ∈ [0.5, 1.5]`` per token and Fenwick level, and a decay."""
    weights = uniform(gen, (*shape[:3], levels(shape[2])), 0.5, 1.5, dtype)
    decay = per_token(gen, shape, 0.9, 1.0, dtype)
    return tokens(gen, shape, dtype) | {"level_weights": weights, "decay": decay}


def forgetting_example(gen: torch.Generator, shape: Shape, dtype: torch.dtype) -> dict[str, Any]:
    """Forget gates ``f_t ∈ [0.9, 1)``."""
    return tokens(gen, shape, dtype) | {"forget": per_token(gen, shape, 0.9, 1.0, dtype)}


def local_linear_example(gen: torch.Generator, shape: Shape, dtype: torch.dtype) -> dict[str, Any]:
    """The local fit's ridge ``λ = 0.1``."""
    return tokens(gen, shape, dtype) | {"lam": 0.1}
