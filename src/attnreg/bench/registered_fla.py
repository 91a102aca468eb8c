"""fla's reference of each registered layer (``fla/ops/<layer>/naive.py``, loaded from the
package files by :func:`attnreg.bench.sequence_workload.fla_naive`), called on the layer's own
example inputs with fla's conventions — layout ``(B, T, H, d)`` where fla uses it, log-decays
for decays, its query scale — for the timing table beside P8 (:mod:`attnreg.bench.registered`).
The same computation as ours on the same inputs (a test holds each call to the layer's output
in float32), so the two timings compare forms, not models.

Layers without an fla reference of their computation have no entry: causal softmax and local
linear attention (fla has none), Longhorn (none), Titans (fla's ``titans`` is a LayerNorm
memory with chunked gradients, not the linear memory) and TTT-Linear (fla's reference always
applies TTT's LayerNorm and residual; the registered example runs without them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from attnreg.bench.sequence_workload import fla_naive

Call = Callable[[], object]
"""One timed call."""


def _flat(x: torch.Tensor) -> torch.Tensor:
    """Ours ``(B, H, T, …)`` → fla's ``(B, T, H, …)``."""
    return x.transpose(1, 2).contiguous()


def _steps(x: torch.Tensor) -> torch.Tensor:
    """DeltaProduct's ``(B, H, T, n_h, …)`` → fla's ``(B, T · n_h, H, …)``."""
    return x.flatten(2, 3).transpose(1, 2).contiguous()


def _linear(a: dict[str, Any]) -> Call:
    m = fla_naive("linear_attn")
    q, k, v = (_flat(a[n]) for n in "qkv")
    return lambda: m.naive_recurrent_linear_attn(q, k, v, 1.0)


def _delta(a: dict[str, Any]) -> Call:
    m = fla_naive("delta_rule")
    q = a["q"] * a["q"].shape[-1] ** 0.5  # fla scales the queries by d_k^{-1/2}, always
    return lambda: m.delta_rule_recurrence(q, a["k"], a["v"], a["beta"])


def _delta_product(a: dict[str, Any]) -> Call:
    m = fla_naive("gated_delta_product")
    q, g = _flat(a["q"]), _flat(a["decay"].log())
    k, v, beta = (_steps(a[n]) for n in ("k", "v", "beta"))
    n_h = a["k"].shape[3]
    return lambda: m.naive_recurrent_gated_delta_product(q, k, v, g, beta, 1.0, num_householder=n_h)


def _generalized(a: dict[str, Any]) -> Call:
    m = fla_naive("generalized_delta_rule/dplr")
    decay = a["decay"]
    gk = (decay if decay.ndim == 4 else decay[..., None].expand_as(a["k"])).log()
    q = a["q"] * a["q"].shape[-1] ** 0.5  # fla scales the queries by d_k^{-1/2}, always
    return lambda: m.dplr_recurrence(q, a["k"], a["v"], a["b"], a["a"], gk)


def _comba(a: dict[str, Any]) -> Call:
    m = fla_naive("comba")
    q, k, v, p, beta = (_flat(a[n]) for n in ("q", "k", "v", "p", "beta"))
    g = _flat(a["decay"].log())
    return lambda: m.naive_recurrent_comba(q, k, v, p, beta, g, 1.0)


def _momentum(a: dict[str, Any]) -> Call:
    m = fla_naive("momentum_delta_rule")
    ones = torch.ones_like(a["beta"])
    q, k, v, p = (_flat(a[n]) for n in ("q", "k", "v", "p"))
    log_alpha, log_mu = _flat(a["decay"].log()), _flat(torch.as_tensor(a["momentum"]).log())
    beta, eta = _flat(a["beta"]), _flat(ones * a["eta"])
    return lambda: m.recurrent_momentum_delta_rule_ref(
        q, k, v, log_alpha, log_mu, p, beta, eta, 1.0
    )


def _log_linear(a: dict[str, Any]) -> Call:
    m = fla_naive("log_linear_attn")
    q, k, v, lam = (_flat(a[n]) for n in ("q", "k", "v", "level_weights"))
    g = _flat(a["decay"].log())
    return lambda: m.naive_log_linear_attn(q, k, v, g, lam, 1.0)


def _forgetting(a: dict[str, Any]) -> Call:
    m = fla_naive("forgetting_attn")
    q, k, v, g = (_flat(x) for x in (a["q"], a["k"], a["v"], a["forget"].log()))
    return lambda: m.naive_forgetting_attn(q, k, v, g, 1.0)


def _stick_breaking(a: dict[str, Any]) -> Call:
    m = fla_naive("stickbreaking_attn")
    q, k, v = (_flat(a[n]) for n in "qkv")
    return lambda: m.naive_stickbreaking_attn(q, k, v, 1.0, False)


def _mesa(a: dict[str, Any]) -> Call:
    m = fla_naive("mesa_net")
    q, k, v, beta = (_flat(a[n]) for n in ("q", "k", "v", "beta"))
    g = torch.zeros_like(beta)  # no decay: the log-gate 0
    return lambda: m.naive_mesa_net_exact(q, k, v, g, a["lam"], beta)


FLA_CALLS: dict[str, Callable[[dict[str, Any]], Call]] = {
    "linear_attention": _linear,
    "delta_rule": _delta,
    "delta_product": _delta_product,
    "generalized_delta_rule": _generalized,
    "comba": _comba,
    "momentum_delta_rule": _momentum,
    "log_linear_attention": _log_linear,
    "forgetting_attention": _forgetting,
    "stick_breaking_attention": _stick_breaking,
    "mesa": _mesa,
}
"""For each registered layer with an fla reference of its computation: the reference's call
on the layer's example arguments (fla's token loop, or its direct form for the smoothers)."""
