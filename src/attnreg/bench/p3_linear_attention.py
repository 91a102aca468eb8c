"""P3: whitened linear attention (``associate``, whitened dot, identity separation) and
OLS-attention as self-attention over N tokens: the log-log slope of time in N, and the peak
memory of both calls at the largest N in a child process (no N × N matrix may be formed)."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

from attnreg.bench.common import (
    GIB,
    BenchResult,
    fraction_of_rate,
    loglog_slope,
    measure_peak,
    median,
    time_interleaved,
)
from attnreg.bench.limits import Limit, judge, target_text
from attnreg.bench.sizes import Sizes
from attnreg.constructions.ols import OLSAttention
from attnreg.core.retrieval import associate

LIMITS = (
    Limit("log-log time slope", "<=", 1.15, "slope {op} {bound:g}"),
    Limit(
        "peak memory (GiB)",
        "<=",
        2.0,
        "no N×N matrix: peak memory {op} {bound:g} GiB at the largest N",
    ),
)


def p3_data(n: int, d: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """``N`` float32 tokens ``X (N, d)``, values ``V (N, d)`` and targets ``y = X w + ε``."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=gen)
    v = torch.randn(n, d, generator=gen)
    y = x @ torch.randn(d, 1, generator=gen) + 0.1 * torch.randn(n, 1, generator=gen)
    return x, v, y


def _p3_fns(x: torch.Tensor, v: torch.Tensor, y: torch.Tensor) -> dict[str, Callable[[], object]]:
    return {
        "whitened_associate": lambda: associate(x, x, v, similarity="whitened_dot"),
        "ols_attention": lambda: OLSAttention().predict(x, y, x),
    }


def p3_workload(n: int, d: int) -> Callable[[], object]:
    """Both P3 calls at one ``N``, for :func:`measure_peak` (runs in a child process)."""
    fns = _p3_fns(*p3_data(n, d))
    return lambda: [fn() for fn in fns.values()]


def bench_p3(sizes: Sizes, repeat: int, rate: float, threads: int) -> BenchResult:
    """Whitened linear attention (``associate``, identity separation) and OLS-attention,
    self-attention over ``N`` tokens: time against ``N`` (log-log slope) and peak memory."""
    d = sizes.p3_d
    data = {n: p3_data(n, d) for n in sizes.p3_tokens}
    fns = {f"{name}@{n}": fn for n in sizes.p3_tokens for name, fn in _p3_fns(*data[n]).items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        times = time_interleaved(fns, repeat)
    med = {name: median(t) for name, t in times.items()}
    slopes = {
        name: loglog_slope(sizes.p3_tokens, [med[f"{name}@{n}"] for n in sizes.p3_tokens])
        for name in ("whitened_associate", "ols_attention")
    }
    big = max(sizes.p3_tokens)
    # associate: R-SVD of the keys (Householder QR, 2Nd² multiply-adds ≈ 4Nd² flops), Kᵀ V
    # (2Nd²) and Q (M Kᵀ V) (2Nd²); the d × d products are negligible
    flops = big * 8 * d * d
    frac = fraction_of_rate(flops, med[f"whitened_associate@{big}"], rate)
    peak = measure_peak(
        "attnreg.bench.p3_linear_attention:p3_workload", {"n": big, "d": d}, threads
    )
    peak_gib = peak["peak_bytes"] / GIB if "peak_bytes" in peak else None
    worst = max(slopes.values())
    checks = judge(LIMITS, {"log-log time slope": worst, "peak memory (GiB)": peak_gib})
    return BenchResult(
        id="P3",
        workload=f"whitened linear attention over N tokens (associate whitened_dot/identity; "
        f"OLSAttention fit+predict), N={list(sizes.p3_tokens)}, d={d}, float32",
        value=worst,
        unit="log-log slope of time in N",
        target=target_text(LIMITS),
        passed=all(c["passed"] for c in checks),
        reference="linear growth (slope 1); the child process's peak resident set",
        details={
            "checks": checks,
            "seconds": med,
            "slopes": slopes,
            "fraction_of_matmul_rate_at_largest_n": frac,
            "peak_memory": peak,
            "nxn_matrix_gib_if_formed": big * big * 4 / GIB,
        },
    )
