"""Measuring, the same way for every target: interleaved repeats, medians, measured memory.

Shared machines are noisy, so nothing here is an absolute: a workload and its reference run in
the same process on the same data, after a warm-up, in alternation (``A B A B …``) so that a
burst of load from another process hits both, and the medians are compared. Peak memory is the
resident set of a child process (``ru_maxrss``, from the kernel), never an estimate.
"""

from __future__ import annotations

import gc
import importlib
import json
import math
import multiprocessing
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import psutil
import torch

from attnreg.core.threads import check_count

GIB = 2**30
MATMUL_SIZE = 2048


@dataclass
class BenchResult:
    """One row of ``attnreg bench``: a performance target and its measurement.

    ``value`` is the headline number in ``unit`` (``None`` when the workload could not run),
    ``target`` the threshold in words, ``reference`` what the value is measured against, and
    ``details`` every absolute time, ratio, memory figure and sub-check behind ``passed``.
    """

    id: str
    workload: str
    value: float | None
    unit: str
    target: str
    passed: bool
    reference: str
    details: dict[str, Any] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        """The JSON object: exactly ``id, workload, value, unit, target, passed, reference,
        details``."""
        return asdict(self)


def default_threads() -> int:
    """The cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def machine() -> dict[str, Any]:
    """The machine a run measured: CPU model (``/proc/cpuinfo``; ``platform.processor()``
    elsewhere), logical cores, the cores this process may use, total memory, OS and Python."""
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            cpu = next(
                (line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")),
                cpu,
            )
    except OSError:  # pragma: no cover - not Linux
        pass
    return {
        "cpu": cpu or "unknown",
        "logical_cores": os.cpu_count(),
        "usable_cores": default_threads(),
        "memory_gib": round(psutil.virtual_memory().total / GIB, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def set_threads(threads: int | None) -> int:
    """Set torch's intra-op thread count (default: :func:`default_threads`); return it."""
    n = default_threads() if threads is None else check_count("threads", threads)
    torch.set_num_threads(n)
    return n


def time_once(fn: Callable[[], object]) -> float:
    """Wall seconds of one call."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def time_interleaved(
    fns: Mapping[str, Callable[[], object]], repeat: int, warmup: int = 1
) -> dict[str, list[float]]:
    """Wall seconds of each function over ``repeat`` rounds, run in alternation after
    ``warmup`` untimed rounds; ``{name: [seconds, …]}``."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(max(1, repeat)):
        for name, fn in fns.items():
            times[name].append(time_once(fn))
    return times


def median(values: Sequence[float]) -> float:
    """The median."""
    return float(statistics.median(values))


def fraction_of_rate(flops: float, seconds: float, rate: float) -> float:
    """The achieved fraction of a rate: ``flops / seconds / rate`` (rate in flop/s)."""
    return flops / seconds / rate


def matmul_fn(size: int = MATMUL_SIZE, seed: int = 0) -> tuple[Callable[[], object], float]:
    """A ``size × size`` float32 matmul and its flop count ``2·size³``."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(size, size, generator=gen)
    b = torch.randn(size, size, generator=gen)
    return (lambda: a @ b), 2.0 * size**3


def matmul_rate(repeat: int = 5, size: int = MATMUL_SIZE) -> dict[str, Any]:
    """The machine's fp32 matmul rate (flop/s): median over ``repeat`` timed products."""
    fn, flops = matmul_fn(size)
    times = time_interleaved({"matmul": fn}, repeat)["matmul"]
    t = median(times)
    return {"flops_per_s": flops / t, "seconds": t, "size": size, "times": times}


def rss_bytes() -> int:
    """The current resident set of this process."""
    return int(psutil.Process().memory_info().rss)


def maxrss_bytes() -> int:
    """The high-water resident set of this process (Linux reports ``ru_maxrss`` in KiB)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def reset_peak() -> bool:
    """Reset this process's resident-set high-water mark (``VmHWM``; Linux ≥ 4.0, by writing 5
    to ``/proc/self/clear_refs``). False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    """This process's resident-set high-water mark: ``VmHWM`` from ``/proc/self/status``
    (it counts this process only; ``ru_maxrss`` can include the parent's, after a spawn)."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return maxrss_bytes()


def _peak_child(target: str, kwargs: dict[str, Any], threads: int, conn: Any) -> None:
    """Child side of :func:`measure_peak`: build the data, note the resident set, run once."""
    try:
        torch.set_num_threads(threads)
        module, name = target.split(":")
        run = getattr(importlib.import_module(module), name)(**kwargs)
        gc.collect()
        was_reset = reset_peak()
        before = rss_bytes()
        start = time.perf_counter()
        run()
        seconds = time.perf_counter() - start
        peak = peak_rss_bytes()
        conn.send(
            {"before_bytes": before, "peak_bytes": peak, "seconds": seconds, "reset": was_reset}
        )
    except Exception as exc:  # pragma: no cover - reported to the parent
        conn.send({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        conn.close()


def measure_peak(target: str, kwargs: dict[str, Any], threads: int) -> dict[str, Any]:
    """Peak memory of one call, measured in a fresh (spawned) child process.

    ``target`` is ``"module:function"``; the function takes ``kwargs``, builds its data and
    returns the zero-argument workload. The child's high-water mark is reset once the data
    exists; reported are its resident set just before the call (``before_bytes``), its
    high-water mark after (``peak_bytes``: data and runtime included) and their difference
    (``extra_bytes``: what the call itself added).
    """
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_peak_child, args=(target, kwargs, threads, child))
    proc.start()
    child.close()
    try:
        result: dict[str, Any] = parent.recv()
    except EOFError:
        result = {"error": "the child process died (out of memory?)"}
    proc.join()
    if "error" not in result:
        result["extra_bytes"] = max(0, result["peak_bytes"] - result["before_bytes"])
    return result


def run_child_process(args: Sequence[str], timeout: float) -> dict[str, Any]:
    """Run ``args`` as a child process: wall seconds, exit code, and ``ru_maxrss`` from
    ``wait4`` (the largest of the child and its waited-for descendants; after a vfork/exec
    it can include this process's own high-water mark, so children that can should report
    their own :func:`peak_rss_bytes`), and ``tree_peak_bytes``: the largest sum of resident
    sets over the child and all its descendants, sampled every 50 ms (worker processes a study
    starts count too)."""
    tree_peak = 0
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        proc = subprocess.Popen(list(args), stdout=out, stderr=subprocess.STDOUT)
        deadline = start + timeout
        status, usage = 0, None
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                _, status, usage = os.wait4(proc.pid, 0)
                break
            tree_peak = max(tree_peak, _tree_rss(proc.pid))
            time.sleep(0.05)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        tail = out.read().decode(errors="replace")[-2000:]
    return {
        "seconds": seconds,
        "exit_code": proc.returncode,
        "timed_out": seconds > timeout,
        "rusage_maxrss_bytes": int(usage.ru_maxrss) * 1024 if usage is not None else None,
        "tree_peak_bytes": tree_peak,
        "output_tail": tail,
    }


def _tree_rss(pid: int) -> int:
    """Resident bytes of process ``pid`` and all its descendants (0 once it is gone)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for proc in procs:
        try:
            total += int(proc.memory_info().rss)
        except psutil.Error:
            continue
    return total


def python_child(code: str) -> list[str]:
    """The command line that runs ``code`` in this interpreter."""
    return [sys.executable, "-c", code]


def json_line(text: str) -> dict[str, Any] | None:
    """The last line of ``text`` that parses as a JSON object (a child's report)."""
    for line in reversed(text.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def loglog_slope(sizes: Sequence[float], seconds: Sequence[float]) -> float:
    """Least-squares slope of ``log t`` against ``log N``."""
    xs = [math.log(s) for s in sizes]
    ys = [math.log(t) for t in seconds]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    num = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    den = sum((x - mx) ** 2 for x in xs)
    return num / den
