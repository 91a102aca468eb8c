"""P9: a training step of DeltaNet — forward and backward of ``Σ ⟨W, o⟩`` (``W`` a fixed
Gaussian weight, so every output has a gradient) in ``q, k, v, β`` — at B = 4, H = 4, T = 2,048,
d_k = d_v = 64, float32: the fused form (:class:`attnreg.sequence.fused_autograd.FusedRecurrence`,
its reverse-time backward) against autograd through attnreg's chunked form and through fla's
pure-PyTorch chunked reference (``delta_rule_chunkwise``), same inputs: the judged pair (fused,
chunked) in one alternation, fla's reference in a second alternation with the fused step
(``fused_beside_fla``; timed in the first, fla's step — about 10⁶ page faults of small
allocations per call — put the fused step that followed it at 60–70 ms against 48–52 ms beside
the chunked step alone, measured). The fused form's first call (numba's compile of the backward,
or its cache load) is reported.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from attnreg.bench.common import BenchResult, median, time_interleaved, time_once
from attnreg.bench.limits import Limit, judged
from attnreg.bench.sequence_workload import fla_naive, workload_inputs
from attnreg.bench.sizes import Sizes
from attnreg.sequence import delta_rule

LIMITS = (
    Limit(
        "chunked step / fused step",
        ">=",
        2.0,
        "fused forward + backward {op} {bound:g}× faster than autograd through the chunked form",
    ),
)


def training_step(
    mode: str, x: dict[str, torch.Tensor], weight: torch.Tensor
) -> Callable[[], None]:
    """One forward + backward of DeltaNet in form ``mode`` (gradients in ``q, k, v, β``)."""
    scale = x["q"].shape[-1] ** -0.5

    def run() -> None:
        leaves = [x[n].detach().requires_grad_() for n in ("q", "k", "v", "beta")]
        out = delta_rule(*leaves, scale=scale, mode=mode)
        (out * weight).sum().backward()

    return run


def fla_step(x: dict[str, torch.Tensor], weight: torch.Tensor) -> Callable[[], None]:
    """The same step through fla's ``delta_rule_chunkwise`` (chunks of 64), autograd."""
    m = fla_naive("delta_rule")

    def run() -> None:
        q, k, v, beta = (x[n].detach().requires_grad_() for n in ("q", "k", "v", "beta"))
        out = m.delta_rule_chunkwise(q, k, v, beta, chunk_size=64)[0]
        (out * weight).sum().backward()

    return run


def bench_p9(sizes: Sizes, repeat: int) -> BenchResult:
    """Fused against chunked (and fla's chunked) training steps, in alternation."""
    x = workload_inputs(
        batch=sizes.p9_batch,
        heads=sizes.p9_heads,
        length=sizes.p9_length,
        d_k=sizes.p9_d,
        d_v=sizes.p9_d,
    )
    g = torch.Generator().manual_seed(1)
    weight = torch.randn(x["v"].shape, generator=g)
    fused = training_step("fused", x, weight)
    fns: dict[str, Callable[[], object]] = {
        "fused": fused,
        "chunk": training_step("chunk", x, weight),
    }
    first = time_once(fused)
    times = time_interleaved(fns, repeat)
    fla_error = None
    try:
        beside = {"fused_beside_fla": fused, "fla_chunk": fla_step(x, weight)}
        times.update(time_interleaved(beside, repeat))
    except ValueError as exc:
        fla_error = str(exc)
    seconds = {name: median(t) for name, t in times.items()}
    ratio = seconds["chunk"] / seconds["fused"]
    details: dict[str, object] = {
        "seconds": seconds,
        "first_call_seconds": first,
        "fla_chunk_over_fused": (
            seconds["fla_chunk"] / seconds["fused_beside_fla"] if not fla_error else None
        ),
    }
    if fla_error:
        details["fla"] = f"not installed: {fla_error}"
    return judged(
        LIMITS,
        {"chunked step / fused step": ratio},
        row_id="P9",
        workload=f"DeltaNet training step (forward + backward in q, k, v, β): B={sizes.p9_batch}, "
        f"H={sizes.p9_heads}, T={sizes.p9_length}, d_k=d_v={sizes.p9_d}, float32",
        value=ratio,
        unit="× faster than autograd through the chunked form",
        reference="autograd through attnreg's chunked form; fla-core's delta_rule_chunkwise "
        "(autograd) timed beside it; in alternation",
        details=details,
    )
