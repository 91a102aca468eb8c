"""P2: softmax retrieval through ``associate`` (scaled dot, softmax) over many memories, as a
fraction of the fp32 matmul rate (measured in alternation with it), against PyTorch's fused
attention kernel; the peak extra memory of one call in a child process."""

from __future__ import annotations

from collections.abc import Callable

import torch

from attnreg.bench.common import (
    GIB,
    BenchResult,
    fraction_of_rate,
    matmul_fn,
    measure_peak,
    median,
    time_interleaved,
)
from attnreg.bench.limits import Limit, judge, target_text
from attnreg.bench.sizes import Sizes
from attnreg.core.retrieval import associate

LIMITS = (
    Limit("fraction of matmul rate", ">=", 0.70, "{op} {bound:.2f} of the fp32 matmul rate"),
    Limit("peak extra memory (GiB)", "<=", 1.0, "peak extra memory {op} {bound:g} GiB"),
)


def p2_data(n: int, m: int, d: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """``N`` float32 memories (keys = values, Gaussian) and ``M`` queries near stored ones."""
    gen = torch.Generator().manual_seed(seed)
    keys = torch.randn(n, d, generator=gen)
    values = torch.randn(n, d, generator=gen)
    pick = torch.randint(0, n, (m,), generator=gen)
    queries = keys[pick] + 0.5 * torch.randn(m, d, generator=gen)
    return queries, keys, values


def p2_workload(n: int, m: int, d: int) -> Callable[[], object]:
    """The P2 call, for :func:`measure_peak` (runs in a child process)."""
    q, k, v = p2_data(n, m, d)
    return lambda: associate(q, k, v, similarity="scaled_dot", separation="softmax")


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    from torch.nn.functional import scaled_dot_product_attention

    return scaled_dot_product_attention(q[None, None], k[None, None], v[None, None])[0, 0]


def bench_p2(sizes: Sizes, repeat: int, rate: float, threads: int) -> BenchResult:
    """Softmax retrieval through ``associate`` against PyTorch's fused attention kernel and the
    matmul rate (both measured in alternation with it); top-1 retrieval for the record."""
    n, m, d = sizes.p2_memories, sizes.p2_queries, sizes.p2_d
    q, k, v = p2_data(n, m, d)
    mm, mm_flops = matmul_fn(sizes.matmul)
    fns: dict[str, Callable[[], object]] = {
        "associate": lambda: associate(q, k, v, similarity="scaled_dot", separation="softmax"),
        "sdpa": lambda: _sdpa(q, k, v),
        "matmul": mm,
    }
    times = time_interleaved(fns, repeat)
    med = {name: median(t) for name, t in times.items()}
    top1 = median(
        time_interleaved({"top1": lambda: associate(q, k, v, separation="max")}, 1)["top1"]
    )
    local_rate = mm_flops / med["matmul"]
    flops = 4.0 * m * n * d
    frac = fraction_of_rate(flops, med["associate"], local_rate)
    got = associate(q, k, v, similarity="scaled_dot", separation="softmax")
    assert isinstance(got, torch.Tensor)
    err = float((got - _sdpa(q, k, v)).abs().max())
    peak = measure_peak("attnreg.bench.p2_retrieval:p2_workload", {"n": n, "m": m, "d": d}, threads)
    extra = peak.get("extra_bytes")
    checks = judge(
        LIMITS,
        {
            "fraction of matmul rate": frac,
            "peak extra memory (GiB)": None if extra is None else extra / GIB,
        },
    )
    return BenchResult(
        id="P2",
        workload=f"softmax retrieval associate(scaled_dot, softmax): N={n} memories, d={d}, "
        f"{m} queries, float32",
        value=frac,
        unit="fraction of fp32 matmul rate",
        target=target_text(LIMITS),
        passed=all(c["passed"] for c in checks),
        reference=f"torch {sizes.matmul}² fp32 matmul (rate), scaled_dot_product_attention",
        details={
            "checks": checks,
            "seconds": med,
            "flops": flops,
            "matmul_rate_gflops_interleaved": local_rate / 1e9,
            "matmul_rate_gflops_first": rate / 1e9,
            "fraction_vs_first_rate": fraction_of_rate(flops, med["associate"], rate),
            "sdpa_fraction_of_matmul_rate": fraction_of_rate(flops, med["sdpa"], local_rate),
            "time_vs_sdpa": med["associate"] / med["sdpa"],
            "top1_seconds": top1,
            "top1_fraction_of_matmul_rate": fraction_of_rate(flops / 2, top1, local_rate),
            "max_abs_diff_vs_sdpa": err,
            "peak_memory": peak,
        },
    )
