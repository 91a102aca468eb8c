"""Every registered sequence layer timed on its example inputs: the benchmark's view of the
registry (:data:`attnreg.sequence.registry.REGISTRY`), reported beside P8, not judged.

Each layer runs in its default form on :class:`attnreg.sequence.registry.Example`'s inputs at
``B = 1`` (float32, seed 0), without autograd, and — where fla-core is installed and has a
reference of the layer's computation (:data:`attnreg.bench.registered_fla.FLA_CALLS`) — fla's
``naive.py`` reference on the same inputs beside it; all calls are timed in alternation after
one untimed round, and each layer reports its median seconds, tokens per second and fla's
median seconds (``None`` without a reference)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from attnreg.bench.common import median, time_interleaved
from attnreg.bench.registered_fla import FLA_CALLS
from attnreg.sequence.registry import REGISTRY


def registered_seconds(
    heads: int, length: int, d: int, repeat: int, *, with_fla: bool = True
) -> dict[str, dict[str, Any]]:
    """``{layer: {"seconds", "tokens_per_second", "fla_seconds", "shape"}}`` for every
    registered layer with an example, at ``(1, heads, length, d, d)``; ``fla_seconds`` is
    ``None`` where fla is not timed (no reference, or ``with_fla`` false)."""
    shape = (1, heads, length, d, d)
    calls: dict[str, Callable[[], object]] = {}
    for entry in REGISTRY.values():
        if entry.example is None:
            continue
        args = entry.example.draw(torch.Generator().manual_seed(0), shape, torch.float32)
        calls[entry.name] = partial(entry.function, **args)
        if with_fla and entry.name in FLA_CALLS:
            calls[f"fla:{entry.name}"] = FLA_CALLS[entry.name](args)
    with torch.no_grad():
        times = time_interleaved(calls, repeat)
    return {
        name: {
            "seconds": median(t),
            "tokens_per_second": heads * length / median(t),
            "fla_seconds": median(times[f"fla:{name}"]) if f"fla:{name}" in times else None,
            "shape": f"B=1, H={heads}, T={length}, d_k=d_v={d}, float32",
        }
        for name, t in times.items()
        if not name.startswith("fla:")
    }
