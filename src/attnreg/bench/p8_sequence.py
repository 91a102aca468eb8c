"""P8: the causal sequence layers (linear attention, DeltaNet, Gated DeltaNet, Mesa) in their
default form (``mode="auto"``: the fused token recurrence on the CPU, Mesa's chunked form;
the delta rules' chunked form timed beside it, ``attnreg_chunk``) against
flash-linear-attention's pure-PyTorch references (``fla-core``, its
``fla/ops/<layer>/naive.py``; :mod:`attnreg.bench.sequence_workload`): the token-by-token recurrence
(for Mesa the exact reference ``naive_mesa_net_exact``, a token loop and one batched solve) and
the chunked form (for Mesa 30 steps of conjugate gradient), on the same inputs, in alternation;
DeltaNet's and Gated DeltaNet's rates on their useful flops against the fp32 matmul rate
measured in a second alternation, of attnreg's call with the matmul, the chunked form and the
floor (``attnreg_beside_matmul``: every judged ratio is of two calls from one alternation, and
none of them follows fla's token loop, whose many small allocations leave the next call a
different machine state); the first call's seconds (numba's compile, or its cache load
in a later process: ``first_call_seconds``);
the peak extra memory of each attnreg call in a child process; the largest difference of each
attnreg output from fla's recurrence; and, in alternation with DeltaNet's calls, the floor of its
chunked form: the WY form's matrix products alone at chunk sizes 32 and 64
(:mod:`attnreg.bench.p8_floor`, ``details.delta_wy_floor``), whose fraction of the matmul rate
and speed-up over fla's recurrence bound what any implementation of that form with PyTorch's
batched products reaches on the machine measured.

**Mesa, with and without decay.** The target's Mesa is the Mesa layer without decay (von Oswald
et al. 2023; fla's MesaNet references with the log-gate 0), computed blocked. MesaNet's
per-token decay (``gated_mesa``) is timed and reported beside the target's layers, with its
``note``, but not judged: its ridge is not decayed, so no factorisation is shared between
positions and it solves one system per position (:mod:`attnreg.sequence.mesa`).

**DeltaNet's useful flops.** The recurrence does, per token and head, three products with the
``d_k × d_v`` state: the prediction ``Sᵀ k_t`` (``d_k d_v`` multiply-adds), the write
``S + k_t u_tᵀ`` (``d_k d_v``) and the read-out ``Sᵀ q_t`` (``d_k d_v``): ``6 d_k d_v`` flops, so
``6 · B · H · T · d_k · d_v`` in all (0.81 GFLOP at the full size). It is the minimal count of
the layer's definition; the chunked WY form does more (its intra-block products and the
block triangular solves of the UT transform), which is not counted.

Without ``fla-core`` the attnreg side is timed alone, the row says so and the comparisons
(``None``) fail.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial

import torch

from attnreg.bench.common import (
    BenchResult,
    matmul_fn,
    measure_peak,
    median,
    time_interleaved,
    time_once,
)
from attnreg.bench.limits import Limit, judge, target_text
from attnreg.bench.p8_floor import FLOOR_CHUNKS, wy_products
from attnreg.bench.registered import registered_seconds
from attnreg.bench.sequence_workload import (
    Inputs,
    attnreg_call,
    fla_calls,
    fla_naive,
    fla_output,
    workload_inputs,
)
from attnreg.bench.sizes import Sizes

MIB = 2**20
REGISTERED_SHORTER = 8
"""Every registered layer is also timed, beside the target (not judged), at ``T / 8``: the
token loops of the 2025 layers take about a second per call at P8's ``T``."""
P8_LAYERS = ("linear_attention", "delta_rule", "gated_delta_rule", "mesa")
REPORTED_LAYERS = ("gated_mesa",)  # timed beside the target's layers, not judged
FRACTION_LAYERS = ("delta_rule", "gated_delta_rule")  # judged on the matmul rate
NOTES = {
    "gated_mesa": "reported, not judged: MesaNet's per-token decay leaves the ridge Λ undecayed, "
    "so H_t + Λ = a_t (S + Λ/a_t + Σ (β_i/a_i) k_i k_iᵀ) has a new base at every token and no "
    "factorisation is shared between positions; it is solved per position (one d × d LU solve "
    "each), without the blocked Woodbury form of the Mesa layer without decay",
}

LIMITS = (
    Limit(
        "min speed-up vs fla recurrence",
        ">=",
        20.0,
        "each layer {op} {bound:g}× flash-linear-attention's token-by-token reference",
    ),
    Limit(
        "max time / fla chunked form",
        "<=",
        1.0,
        "time {op} {bound:g}× its pure-PyTorch chunked form",
    ),
    Limit(
        "DeltaNet fraction of matmul rate",
        ">=",
        0.40,
        "DeltaNet {op} {bound:.2f} of the fp32 matmul rate on its useful flops",
    ),
    Limit(
        "Gated DeltaNet fraction of matmul rate",
        ">=",
        0.40,
        "Gated DeltaNet {op} {bound:.2f} of the fp32 matmul rate on its useful flops",
    ),
    Limit("peak extra memory (MiB)", "<=", 256.0, "peak extra memory {op} {bound:g} MiB"),
)


def p8_inputs(heads: int, length: int, d: int) -> Inputs:
    """The P8 inputs (B = 1, ``d_k = d_v = d``, float32, seed 0; see ``workload_inputs``)."""
    return workload_inputs(heads=heads, length=length, d_k=d, d_v=d)


def p8_workload(layer: str, heads: int, length: int, d: int) -> Callable[[], object]:
    """One attnreg layer call, for :func:`measure_peak` (runs in a child process)."""
    x = p8_inputs(heads, length, d)

    def run() -> object:
        with torch.no_grad():
            return attnreg_call(layer, x)

    return run


def delta_useful_flops(batch: int, heads: int, length: int, d_k: int, d_v: int) -> float:
    """``6 · B · H · T · d_k · d_v``: prediction, write and read-out of the recurrence."""
    return 6.0 * batch * heads * length * d_k * d_v


def _fla_available() -> str | None:
    """``None`` when fla's references load, else why not."""
    try:
        fla_naive("linear_attn")
    except ValueError as exc:
        return str(exc)
    return None


def _bench_layer(
    layer: str, x: Inputs, repeat: int, with_fla: bool, extra: dict[str, Callable[[], object]]
) -> dict[str, object]:
    """Median seconds of attnreg's default form and fla's two forms in alternation; with
    ``extra`` (the matmul, the chunked form, the WY floor) a second alternation of those with
    attnreg's form, whose seconds are ``attnreg_beside_matmul`` (each ratio is of two calls
    timed in the same alternation: a call timed right after fla's token loop — hundreds of
    milliseconds of small allocations — runs on a different machine state than one timed after
    the matmul); the seconds of attnreg's first call (compile or cache load, before the
    warm-up); the largest difference of attnreg's output from fla's recurrence."""
    ours_fn = partial(attnreg_call, layer, x)
    with torch.no_grad():
        first = time_once(ours_fn)
    fns: dict[str, Callable[[], object]] = {"attnreg": ours_fn}
    if with_fla:
        fns.update({f"fla_{k}": f for k, f in fla_calls(layer, x).items()})
    with torch.no_grad():
        seconds = {name: median(t) for name, t in time_interleaved(fns, repeat).items()}
        if extra:
            beside = time_interleaved({"attnreg_beside_matmul": ours_fn} | extra, repeat)
            seconds.update({name: median(t) for name, t in beside.items()})
        ours = attnreg_call(layer, x)
        diff = None
        if with_fla:
            theirs = fla_output(layer, fns["fla_recurrent"]())
            diff = float((ours - theirs).abs().max())
    return {"seconds": seconds, "first_call_seconds": first, "max_abs_diff": diff}


def bench_p8(sizes: Sizes, repeat: int, rate: float, threads: int) -> BenchResult:
    """The four layers against fla's recurrence and chunked form, ``gated_mesa`` beside them
    (see the module docstring)."""
    heads, length, d = sizes.p8_heads, sizes.p8_length, sizes.p8_d
    x = p8_inputs(heads, length, d)
    missing = _fla_available()
    mm, mm_flops = matmul_fn(sizes.matmul)
    layers: dict[str, dict[str, object]] = {}
    floors = {f"wy_floor_c{c}": wy_products(x, c) for c in FLOOR_CHUNKS if length % c == 0}
    for layer in P8_LAYERS + REPORTED_LAYERS:
        extra: dict[str, Callable[[], object]] = {}
        if layer in FRACTION_LAYERS:
            extra = {"matmul": mm, "attnreg_chunk": partial(attnreg_call, layer, x, "chunk")}
        if layer == "delta_rule":
            extra.update(floors)
        layers[layer] = _bench_layer(layer, x, repeat, missing is None, extra)
        sec = layers[layer]["seconds"]
        assert isinstance(sec, dict)
        if missing is None:
            layers[layer]["speedup_vs_fla_recurrent"] = sec["fla_recurrent"] / sec["attnreg"]
            layers[layer]["time_vs_fla_chunk"] = sec["attnreg"] / sec["fla_chunk"]
        kwargs = {"layer": layer, "heads": heads, "length": length, "d": d}
        layers[layer]["peak_memory"] = measure_peak(
            "attnreg.bench.p8_sequence:p8_workload", kwargs, threads
        )
        if layer in NOTES:
            layers[layer]["note"] = NOTES[layer]
    flops = delta_useful_flops(1, heads, length, d, d)
    fractions = {}
    for layer in FRACTION_LAYERS:
        sec = layers[layer]["seconds"]
        assert isinstance(sec, dict)
        rate_here = mm_flops / sec["matmul"]
        fractions[layer] = flops / sec["attnreg_beside_matmul"] / rate_here
        layers[layer]["fraction_of_matmul_rate"] = fractions[layer]
        layers[layer]["chunk_fraction_of_matmul_rate"] = flops / sec["attnreg_chunk"] / rate_here
    delta_sec = layers["delta_rule"]["seconds"]
    assert isinstance(delta_sec, dict)
    local_rate = mm_flops / delta_sec["matmul"]
    judged = {name: layers[name] for name in P8_LAYERS}
    extras = [p["extra_bytes"] for p in _column(judged, "peak_memory") if "extra_bytes" in p]
    speedups = _column(judged, "speedup_vs_fla_recurrent")
    ratios = _column(judged, "time_vs_fla_chunk")
    full = len(extras) == len(P8_LAYERS)
    values = {
        "min speed-up vs fla recurrence": min(speedups) if speedups else None,
        "max time / fla chunked form": max(ratios) if ratios else None,
        "DeltaNet fraction of matmul rate": fractions["delta_rule"],
        "Gated DeltaNet fraction of matmul rate": fractions["gated_delta_rule"],
        "peak extra memory (MiB)": max(extras) / MIB if full else None,
    }
    checks = judge(LIMITS, values)
    reference = (
        "flash-linear-attention (fla-core) naive.py: token-by-token recurrence "
        "(Mesa: naive_mesa_net_exact, log-gate 0) and chunked form (Mesa: conjugate gradient), "
        f"in alternation; torch {sizes.matmul}² fp32 matmul (rate)"
    )
    if missing is not None:
        reference = f"attnreg alone: {missing}"
    return BenchResult(
        id="P8",
        workload=f"causal sequence layers {', '.join(P8_LAYERS)} (default form; "
        f"{', '.join(REPORTED_LAYERS)} reported beside them): B=1, H={heads}, T={length}, "
        f"d_k=d_v={d}, float32",
        value=values["min speed-up vs fla recurrence"],
        unit="× faster than fla's token-by-token reference (slowest layer)",
        target=target_text(LIMITS),
        passed=all(c["passed"] for c in checks),
        reference=reference,
        details={
            "checks": checks,
            "layers": layers,
            "fla": "not installed: " + missing if missing is not None else "fla-core naive.py",
            "delta_useful_flops": flops,
            "matmul_rate_gflops_interleaved": local_rate / 1e9,
            "matmul_rate_gflops_first": rate / 1e9,
            "delta_fraction_vs_first_rate": flops / delta_sec["attnreg_beside_matmul"] / rate,
            "delta_wy_floor": _floor_rows(delta_sec, floors, flops, local_rate),
            "registered": registered_seconds(
                heads, max(length // REGISTERED_SHORTER, 1), d, repeat, with_fla=missing is None
            ),
        },
    )


def _floor_rows(
    seconds: dict[str, float], names: Iterable[str], flops: float, rate: float
) -> dict[str, dict[str, float | None]]:
    """Per chunk size, the WY floor's median seconds, its fraction of the matmul rate on
    DeltaNet's useful flops and its speed-up over fla's recurrence (``None`` without fla)."""
    rows: dict[str, dict[str, float | None]] = {}
    fla = seconds.get("fla_recurrent")
    for name in names:
        sec = seconds[name]
        rows[name.removeprefix("wy_floor_c")] = {
            "seconds": sec,
            "fraction_of_matmul_rate": flops / sec / rate,
            "speedup_vs_fla_recurrent": None if fla is None else fla / sec,
        }
    return rows


def _column(layers: dict[str, dict[str, object]], key: str) -> list:
    """The values of ``key`` over the layers that have it."""
    return [row[key] for row in layers.values() if key in row]
