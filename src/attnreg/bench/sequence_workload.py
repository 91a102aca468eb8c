"""The sequence layers' timing workload: their default forms against flash-linear-attention's
pure-PyTorch references (``fla-core``, its ``fla/ops/<layer>/naive.py`` files, loaded without
importing the ``fla`` package, whose ``__init__`` needs Triton).

:func:`bench_sequence` times, for each layer, attnreg's chunked form, fla's token-by-token
recurrence and fla's chunked form on the same inputs (B = 1, H = 4, T = 8,192, d_k = d_v = 64,
float32 by default), in alternation (``A B C A B C …``), and returns the median seconds.
Conventions are mapped as in the conformance tests: fla scales the queries by ``d_k^{-1/2}``,
takes gates as log-decays and mostly the layout ``(B, T, H, d)``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import time
from collections.abc import Callable
from functools import partial
from types import ModuleType

import torch

from attnreg.core.validation import check_positive_int
from attnreg.sequence import delta_rule, linear_attention, mesa

Inputs = dict[str, torch.Tensor]
LAYERS = (
    "linear_attention",
    "gated_linear_attention",
    "delta_rule",
    "gated_delta_rule",
    "mesa",
    "gated_mesa",
)


def workload_inputs(
    *,
    batch: int = 1,
    heads: int = 4,
    length: int = 8192,
    d_k: int = 64,
    d_v: int = 64,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
) -> Inputs:
    """Gaussian ``q``, ``v``; L2-normalised keys; ``β ∈ (0, 1)``, ``α ∈ (0.9, 1)`` and its log,
    and ``λ ∈ (0.1, 1.1)`` per head and key coordinate."""
    g = torch.Generator().manual_seed(seed)
    shape = (batch, heads, length)
    k = torch.randn(*shape, d_k, generator=g, dtype=dtype)
    alpha = 0.9 + 0.1 * torch.rand(shape, generator=g, dtype=dtype)
    return {
        "q": torch.randn(*shape, d_k, generator=g, dtype=dtype),
        "k": k / k.norm(dim=-1, keepdim=True),
        "v": torch.randn(*shape, d_v, generator=g, dtype=dtype),
        "beta": torch.rand(shape, generator=g, dtype=dtype),
        "alpha": alpha,
        "log_alpha": alpha.log(),
        "lam": 0.1 + torch.rand(heads, d_k, generator=g, dtype=dtype),
    }


def attnreg_call(layer: str, x: Inputs, mode: str = "auto") -> torch.Tensor:
    """The layer in form ``mode`` (default ``"auto"``: the layer's default form) on the workload
    (queries scaled by ``d_k^{-1/2}`` like fla's, except Mesa's, which fla does not scale).
    ``"mesa"`` is the Mesa layer without decay (von Oswald et al. 2023), ``"gated_mesa"``
    MesaNet's, with the per-token decay ``α``."""
    q, k, v, scale = x["q"], x["k"], x["v"], x["q"].shape[-1] ** -0.5
    if layer == "linear_attention":
        return linear_attention(q, k, v, scale=scale, mode=mode)
    if layer == "gated_linear_attention":
        return linear_attention(q, k, v, decay=x["alpha"], scale=scale, mode=mode)
    if layer == "delta_rule":
        return delta_rule(q, k, v, x["beta"], scale=scale, mode=mode)
    if layer == "gated_delta_rule":
        return delta_rule(q, k, v, x["beta"], decay=x["alpha"], scale=scale, mode=mode)
    if layer == "mesa":
        return mesa(q, k, v, x["beta"], lam=x["lam"], mode=mode)
    return mesa(q, k, v, x["beta"], decay=x["alpha"], lam=x["lam"], mode=mode)


def fla_naive(layer: str) -> ModuleType:
    """fla's ``fla/ops/<layer>/naive.py`` as a module of its own; ``ValueError`` when
    ``fla-core`` is not installed (it is a test dependency: ``pip install attnreg[test]``)."""
    try:
        dist = importlib.metadata.distribution("fla-core")
    except importlib.metadata.PackageNotFoundError as exc:
        raise ValueError("fla-core is not installed (pip install 'fla-core>=0.6,<0.7')") from exc
    path = dist.locate_file(f"fla/ops/{layer}/naive.py")
    spec = importlib.util.spec_from_file_location(f"fla_naive_{layer}", str(path))
    if spec is None or spec.loader is None:
        raise ValueError(f"fla-core has no fla/ops/{layer}/naive.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fla_calls(layer: str, x: Inputs) -> dict[str, Callable[[], object]]:
    """fla's recurrence (``"recurrent"``) and chunked form (``"chunk"``) of ``layer`` on the
    workload (fla's conventions; ``"mesa"`` is fla's MesaNet with the log-gate 0); each call
    returns a tuple whose first item is the output, ``(B, T, H, d_v)`` except for ``delta_rule``
    (``(B, H, T, d_v)``), or for fla's chunked linear attention the output alone."""
    q, k, v, beta, g = x["q"], x["k"], x["v"], x["beta"], x["log_alpha"]
    qf, kf, vf, bf, gf = (t.transpose(1, 2).contiguous() for t in (q, k, v, beta, g))
    if layer == "linear_attention":
        m = fla_naive("linear_attn")
        return {
            "recurrent": lambda: m.naive_recurrent_linear_attn(qf, kf, vf),
            "chunk": lambda: m.naive_chunk_linear_attn(qf, kf, vf),
        }
    if layer == "gated_linear_attention":
        m = fla_naive("simple_gla")
        return {
            "recurrent": lambda: m.naive_recurrent_simple_gla(qf, kf, vf, gf),
            "chunk": lambda: m.naive_chunk_simple_gla(qf, kf, vf, gf),
        }
    if layer == "delta_rule":
        m = fla_naive("delta_rule")
        return {
            "recurrent": lambda: m.delta_rule_recurrence(q, k, v, beta),
            "chunk": lambda: m.delta_rule_chunkwise(q, k, v, beta, chunk_size=64),
        }
    if layer == "gated_delta_rule":
        m = fla_naive("gated_delta_rule")
        return {
            "recurrent": lambda: m.naive_recurrent_gated_delta_rule(qf, kf, vf, bf, gf),
            "chunk": lambda: m.naive_chunk_gated_delta_rule(qf, kf, vf, gf, bf),
        }
    m = fla_naive("mesa_net")  # fla's chunked Mesa is conjugate gradient (30 steps, inexact)
    if layer == "mesa":  # no decay: the log-gate 0
        gf = torch.zeros_like(gf)
    return {
        "recurrent": lambda: m.naive_mesa_net_exact(qf, kf, vf, gf, x["lam"], bf),
        "chunk": lambda: m.naive_mesa_net_CG(qf, kf, vf, gf, x["lam"], bf, 64),
    }


def bench_sequence(
    *, repeat: int = 3, length: int = 8192, layers: tuple[str, ...] = LAYERS
) -> dict[str, dict[str, float]]:
    """Median seconds per layer: ``{"attnreg": …, "fla_recurrent": …, "fla_chunk": …}`` (Mesa's
    recurrence, with or without decay, is fla's exact reference ``naive_mesa_net_exact``: a
    token loop that keeps every ``H_t``, 1 GiB at the default size, then one batched solve). One
    untimed warm-up round, then ``repeat`` rounds in alternation, without autograd."""
    check_positive_int("repeat", repeat)
    x = workload_inputs(length=length)
    out: dict[str, dict[str, float]] = {}
    with torch.no_grad():
        for layer in layers:
            calls: dict[str, Callable[[], object]] = {"attnreg": partial(attnreg_call, layer, x)}
            calls.update({f"fla_{k}": f for k, f in fla_calls(layer, x).items()})
            times: dict[str, list[float]] = {name: [] for name in calls}
            for call in calls.values():
                call()
            for _ in range(repeat):
                for name, call in calls.items():
                    start = time.perf_counter()
                    call()
                    times[name].append(time.perf_counter() - start)
            out[layer] = {name: sorted(ts)[len(ts) // 2] for name, ts in times.items()}
    return out


def fla_output(layer: str, result: object) -> torch.Tensor:
    """The output of an fla call from :func:`fla_calls`, in attnreg's layout ``(B, H, T, d_v)``."""
    out = result[0] if isinstance(result, tuple) else result
    if not isinstance(out, torch.Tensor):
        raise ValueError(f"layer: fla's {layer} returned {type(out).__name__}, not a tensor")
    return out if layer == "delta_rule" else out.transpose(1, 2)
