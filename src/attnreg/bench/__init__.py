"""``attnreg bench``: the performance targets P1–P9, measured in one run.

The fp32 matmul rate of the machine (torch, 2048 × 2048) is measured first; then each target
runs its workload and its reference in the same process on the same data, in alternation after
a warm-up, and reports the median ratio, the absolute times, the peak resident set (measured in
a child process) and pass / fail. See ``benchmarks/README.md``.

One module per target — :mod:`~attnreg.bench.p1_ols`, :mod:`~attnreg.bench.p2_retrieval`,
:mod:`~attnreg.bench.p3_linear_attention`, :mod:`~attnreg.bench.p7_kernel_smoother`,
:mod:`~attnreg.bench.p8_sequence`, :mod:`~attnreg.bench.p9_training` (their sizes in
:mod:`~attnreg.bench.sizes`) and
:mod:`~attnreg.bench.studies` (P4–P6) — each with its thresholds as data (``LIMITS``,
:mod:`~attnreg.bench.limits`), from which both the printed target and the pass/fail checks are
derived; the measuring is shared (:mod:`~attnreg.bench.common`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime

import torch

from attnreg.bench import (
    p1_ols,
    p2_retrieval,
    p3_linear_attention,
    p7_kernel_smoother,
    p8_sequence,
    p9_training,
)
from attnreg.bench.common import BenchResult, machine, matmul_rate, set_threads
from attnreg.bench.sizes import SMOKE, Sizes
from attnreg.bench.studies import guarded, p4_p6

TARGETS = ("P1", "P2", "P3", "P4", "P5", "P6", "P7", "P8", "P9")

__all__ = ["TARGETS", "BenchResult", "parse_ids", "run_benchmarks"]


def parse_ids(only: Iterable[str] | None) -> list[str]:
    """Target ids from ``--only`` values (repeatable, comma lists, any case); all if empty."""
    ids: list[str] = []
    for item in only or []:
        for part in item.split(","):
            name = part.strip().upper()
            if not name:
                continue
            if name not in TARGETS:
                raise ValueError(f"only: unknown target {part!r}; valid: {', '.join(TARGETS)}")
            if name not in ids:
                ids.append(name)
    return [t for t in TARGETS if t in ids] if ids else list(TARGETS)


def dense_targets(
    ids: set[str], sizes: Sizes, repeat: int, rate: float, threads: int
) -> dict[str, Callable[[], BenchResult]]:
    """The dense targets (P1–P3, P7–P9) among ``ids``, as deferred calls (each looks its
    ``bench_pN`` up in its module when called)."""
    table: dict[str, Callable[[], BenchResult]] = {
        "P1": lambda: p1_ols.bench_p1(sizes, repeat, rate),
        "P2": lambda: p2_retrieval.bench_p2(sizes, repeat, rate, threads),
        "P3": lambda: p3_linear_attention.bench_p3(sizes, repeat, rate, threads),
        "P7": lambda: p7_kernel_smoother.bench_p7(sizes, repeat, rate, threads),
        "P8": lambda: p8_sequence.bench_p8(sizes, repeat, rate, threads),
        "P9": lambda: p9_training.bench_p9(sizes, repeat),
    }
    return {k: v for k, v in table.items() if k in ids}


def run_benchmarks(
    ids: Iterable[str] | None = None,
    *,
    repeat: int = 5,
    threads: int | None = None,
    smoke: bool = False,
    progress: Callable[[str], None] | None = None,
) -> tuple[list[BenchResult], dict[str, object]]:
    """Run the targets ``ids`` (default all); return their results and the run's context
    (start ``date`` in UTC, ``machine``, threads, matmul rate, torch version). ``smoke`` uses
    tiny sizes (for tests: the numbers mean nothing)."""
    wanted = set(parse_ids(ids))
    date = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    tick = progress or (lambda label: None)
    n_threads = set_threads(threads)
    sizes = SMOKE if smoke else Sizes()
    tick(f"fp32 matmul rate ({sizes.matmul}²)")
    rate = matmul_rate(max(3, repeat), sizes.matmul)
    context: dict[str, object] = {
        "date": date,
        "machine": machine(),
        "threads": n_threads,
        "matmul_gflops": rate["flops_per_s"] / 1e9,
        "matmul_size": sizes.matmul,
        "repeat": repeat,
        "smoke": smoke,
        "torch": torch.__version__,
    }
    jobs = {
        **dense_targets(wanted, sizes, repeat, rate["flops_per_s"], n_threads),
        **p4_p6(wanted, smoke, n_threads),
    }
    results: list[BenchResult] = []
    for name in TARGETS:
        if name in jobs:
            tick(name)
            result = guarded(name, jobs[name])()
            result.details.setdefault("threads", n_threads)
            result.details.setdefault("matmul_gflops_first", context["matmul_gflops"])
            results.append(result)
    return results, context
