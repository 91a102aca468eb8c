"""Problem sizes of the dense targets P1–P3 and P7–P9: the full run, and the ``--smoke`` run
(tiny sizes to check that the command works; its numbers mean nothing)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    """Problem sizes of the dense targets P1–P3, P7, P8 and P9, or of the ``--smoke`` run."""

    p1_tasks: int = 512
    p1_n: int = 64
    p1_d: int = 16
    p1_queries: int = 64
    p2_memories: int = 200_000
    p2_queries: int = 4_096
    p2_d: int = 64
    p3_tokens: tuple[int, ...] = (100_000, 300_000, 1_000_000)
    p3_d: int = 32
    p7_keys: int = 1_000_000
    p7_queries: int = 4_096
    p7_d: int = 8
    p7_dy: int = 1
    p8_heads: int = 4
    p8_length: int = 8192
    p8_d: int = 64
    p9_batch: int = 4
    p9_heads: int = 4
    p9_length: int = 2048
    p9_d: int = 64
    matmul: int = 2048


SMOKE = Sizes(
    p1_tasks=8,
    p1_n=12,
    p1_d=3,
    p1_queries=5,
    p2_memories=600,
    p2_queries=40,
    p2_d=8,
    p3_tokens=(500, 1500, 5000),
    p3_d=4,
    p7_keys=3_000,
    p7_queries=50,
    p7_d=4,
    p7_dy=1,
    p8_heads=2,
    p8_length=256,
    p8_d=16,
    p9_batch=1,
    p9_heads=2,
    p9_length=128,
    p9_d=16,
    matmul=128,
)
