"""Every registered sequence layer timed on its example inputs: the benchmark's view of the
registry (:data:`attnreg.sequence.registry.REGISTRY`), reported beside P8, not judged.

Each layer runs in its default form on :class:`attnreg.sequence.registry.Example`'s inputs at
``B = 1`` (float32, seed 0), without autograd; the layers are timed in alternation after one
untimed round, and each reports its median seconds and tokens per second."""

from __future__ import annotations

from typing import Any

import torch

from attnreg.bench.common import median, time_interleaved
from attnreg.sequence.registry import REGISTRY


def registered_seconds(heads: int, length: int, d: int, repeat: int) -> dict[str, dict[str, Any]]:
    """``{layer: {"seconds", "tokens_per_second", "shape"}}`` for every registered layer with
    an example, at ``(1, heads, length, d, d)``."""
    shape = (1, heads, length, d, d)
    calls = {}
    for entry in REGISTRY.values():
        if entry.example is None:
            continue
        args = entry.example.draw(torch.Generator().manual_seed(0), shape, torch.float32)
        calls[entry.name] = lambda f=entry.function, a=args: f(**a)
    with torch.no_grad():
        times = time_interleaved(calls, repeat)
    return {
        name: {
            "seconds": median(t),
            "tokens_per_second": heads * length / median(t),
            "shape": f"B=1, H={heads}, T={length}, d_k=d_v={d}, float32",
        }
        for name, t in times.items()
    }
