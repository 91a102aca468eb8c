"""P7: the softmax kernel smoother (``KernelSmoother(similarity="dot").predict``, values of
width ``dy`` < ``d``) against ``scaled_dot_product_attention`` on the same keys with the values
zero-padded to width ``d``: time ratio (in alternation), peak extra memory (child process),
agreement with the reference within the float32 bound."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from attnreg.bench.common import (
    GIB,
    BenchResult,
    fraction_of_rate,
    measure_peak,
    median,
    time_interleaved,
)
from attnreg.bench.limits import Limit, judge, target_text
from attnreg.bench.sizes import Sizes
from attnreg.estimators import KernelSmoother

LIMITS = (
    Limit(
        "time / SDPA (values zero-padded)",
        "<=",
        2.0,
        "{op} {bound:g}× SDPA on the same keys with values zero-padded to width d",
    ),
    Limit("peak extra memory (GiB)", "<=", 1.0, "peak extra memory {op} {bound:g} GiB"),
    # relative to max(1, max|y|): the outputs are convex combinations of y
    Limit(
        "max abs diff vs SDPA",
        "<=",
        1e-5,
        "outputs within {bound:g} · max(1, max|y|) of SDPA (float32 rounding)",
    ),
)


def p7_beta(d: int) -> float:
    """The smoother's inverse temperature: ``β = 1/√d``, so that ``β · x*·x`` is the scaled dot
    product of attention (unit-variance inputs give scores of unit variance)."""
    return 1.0 / math.sqrt(d)


def p7_data(n: int, m: int, d: int, dy: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """One float32 regression task: context ``x (1, N, d)`` Gaussian, targets
    ``y = sin(x w) + 0.1 ε`` of width ``dy`` ``(1, N, dy)``, queries ``(1, M, d)`` Gaussian."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(1, n, d, generator=gen)
    w = torch.randn(d, dy, generator=gen) / math.sqrt(d)
    y = torch.sin(x @ w) + 0.1 * torch.randn(1, n, dy, generator=gen)
    xq = torch.randn(1, m, d, generator=gen)
    return x, y, xq


def p7_smoother(
    x: torch.Tensor, y: torch.Tensor, xq: torch.Tensor, beta: float
) -> Callable[[], torch.Tensor]:
    """The P7 call: the library's Nadaraya–Watson smoother, ``softmax(β x* xᵀ) y``."""
    smoother = KernelSmoother(beta=beta, similarity="dot")
    return lambda: smoother.predict(x, y, xq)


def p7_reference(
    x: torch.Tensor, y: torch.Tensor, xq: torch.Tensor, beta: float
) -> Callable[[], torch.Tensor]:
    """The P7 reference: ``scaled_dot_product_attention`` on the same queries and keys with
    the values zero-padded to the key width once, outside the timed call (zero value columns
    change nothing in the first ``dy``). The inputs get a head axis, ``(1, 1, ·, d)``, so that
    the CPU dispatcher picks the flash-attention kernel."""
    from torch.nn.functional import scaled_dot_product_attention

    d, dy = x.shape[-1], y.shape[-1]
    padded = torch.nn.functional.pad(y, (0, d - dy)) if dy < d else y
    q4, k4, v4 = xq.unsqueeze(1), x.unsqueeze(1), padded.unsqueeze(1)
    return lambda: scaled_dot_product_attention(q4, k4, v4, scale=beta)[:, 0, :, :dy]


def p7_workload(n: int, m: int, d: int, dy: int) -> Callable[[], object]:
    """The P7 call, for :func:`measure_peak` (runs in a child process)."""
    x, y, xq = p7_data(n, m, d, dy)
    return p7_smoother(x, y, xq, p7_beta(d))


def p7_reference_workload(n: int, m: int, d: int, dy: int) -> Callable[[], object]:
    """The P7 reference call, for :func:`measure_peak` (the padded values are data)."""
    x, y, xq = p7_data(n, m, d, dy)
    return p7_reference(x, y, xq, p7_beta(d))


def _float64_check(
    x: torch.Tensor, y: torch.Tensor, xq: torch.Tensor, beta: float, rows: int = 8
) -> float:
    """Max abs difference of the smoother from a float64 softmax over all keys, on the first
    ``rows`` queries (``rows × N`` float64 scores: 64 MB at N = 10⁶)."""
    got = KernelSmoother(beta=beta, similarity="dot").predict(x, y, xq[:, :rows])
    scores = beta * (xq[:, :rows].double() @ x.double().mT)
    exact = torch.softmax(scores, dim=-1) @ y.double()
    return float((got.double() - exact).abs().max())


def bench_p7(sizes: Sizes, repeat: int, rate: float, threads: int) -> BenchResult:
    """The softmax kernel smoother (``KernelSmoother(similarity="dot").predict``, values of
    width ``dy`` < ``d``) against SDPA on the same keys with the values zero-padded to width
    ``d``: time ratio (in alternation), peak extra memory (child process), agreement."""
    n, m, d, dy = sizes.p7_keys, sizes.p7_queries, sizes.p7_d, sizes.p7_dy
    beta = p7_beta(d)
    x, y, xq = p7_data(n, m, d, dy)
    smoother = p7_smoother(x, y, xq, beta)
    reference = p7_reference(x, y, xq, beta)
    times = time_interleaved({"smoother": smoother, "sdpa_padded": reference}, repeat)
    med = {name: median(t) for name, t in times.items()}
    ratio = med["smoother"] / med["sdpa_padded"]
    err = float((smoother() - reference()).abs().max())
    # float32 bound: the outputs are convex combinations of y, so rounding is relative to |y|
    y_scale = max(1.0, float(y.abs().max()))
    err64 = _float64_check(x, y, xq, beta)
    kwargs = {"n": n, "m": m, "d": d, "dy": dy}
    peak = measure_peak("attnreg.bench.p7_kernel_smoother:p7_workload", kwargs, threads)
    ref_peak = measure_peak(
        "attnreg.bench.p7_kernel_smoother:p7_reference_workload", kwargs, threads
    )
    extra = peak.get("extra_bytes")
    # the kernel's work on the padded values: Q Kᵀ (2·M·N·d) and P V (2·M·N·d)
    flops = 4.0 * m * n * d
    values = {
        "time / SDPA (values zero-padded)": ratio,
        "peak extra memory (GiB)": None if extra is None else extra / GIB,
        "max abs diff vs SDPA": err,
    }
    checks = judge(LIMITS, values, {"max abs diff vs SDPA": y_scale})
    limit_of = {c["check"]: c["limit"] for c in checks}
    return BenchResult(
        id="P7",
        workload=f"kernel-smoother softmax regression KernelSmoother(beta=1/√d, similarity="
        f'"dot").predict: N={n} keys, d={d}, {m} queries, dy={dy}, float32',
        value=ratio,
        unit="× SDPA time (values zero-padded to width d)",
        target=target_text(LIMITS),
        passed=all(c["passed"] for c in checks),
        reference="scaled_dot_product_attention (flash kernel, head axis) on the same queries "
        "and keys, values zero-padded to width d, in alternation with the workload",
        details={
            "checks": checks,
            "seconds": med,
            "times": times,
            "beta": beta,
            "flops_padded": flops,
            "fraction_of_matmul_rate": fraction_of_rate(flops, med["smoother"], rate),
            "sdpa_fraction_of_matmul_rate": fraction_of_rate(flops, med["sdpa_padded"], rate),
            "max_abs_diff_vs_sdpa": err,
            "max_abs_diff_limit": limit_of["max abs diff vs SDPA"],
            "max_abs_diff_vs_float64_first_8_queries": err64,
            "peak_memory": peak,
            "reference_peak_memory": ref_peak,
            "scores_gib_if_formed": m * n * 4 / GIB,
        },
    )
