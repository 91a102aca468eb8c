"""The bad-input catalogue (``quality.md``, "Reliability") walked row by row over every sequence
layer, as ``test_contract.py`` walks it over every predictor and scikit-learn's
``parametrize_with_checks`` over estimators.

:data:`REGISTRY` lists every public layer function of :mod:`attnreg.sequence` in each of its
forms (``mode`` ``fused``, ``chunk`` and ``recurrent`` where the layer has them) and every layer
module, unhooked and with a read-only hook on its state (the hooked path computes the per-token
states: another code path, the same contract). A public layer without an entry fails
:func:`test_every_public_layer_is_registered`. Rows:

* NaN or Inf in ``q``, ``k`` or ``v``: a ``ValueError`` naming the argument and the first bad
  index;
* shapes that do not agree (``T`` of ``k`` and ``v``, ``d_k`` of ``q`` and ``k``, wrong rank): a
  ``ValueError`` stating both shapes (or the shape found);
* empty batch, sequence or feature axis: a ``ValueError`` saying the input is empty;
* integer, bool and unsigned inputs: promoted to float64 — the answer equals the float64 call on
  the same values, and the float64 call equals the layer's numpy reference
  (``sequence_refs``) within its rounding bound;
* float16 and bfloat16: refused, naming the argument;
* a read-only hook: the answer within rounding of the numpy reference, as unhooked.

The extreme-scale rows (``1e±200``) are in ``test_sequence_inputs.py``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
from sequence_refs import (
    U64,
    heads,
    lms,
    proximal,
    smoother,
    weighted_sum,
)

import attnreg.sequence as seq
from attnreg.studies.verify import references as vref

B, H, T, D = 2, 2, 5, 3
BETA = 0.25
LAM = 1.0


def _ones(t: int) -> np.ndarray:
    return np.ones(t)


def ref_linear(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    return heads(lambda a, b, c: weighted_sum(a, b, c, _ones(len(b)))[0], q, k, v)


def ref_delta(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    return heads(lambda a, b, c: lms(a, b, c, np.full(len(b), BETA), _ones(len(b)))[0], q, k, v)


def ref_longhorn(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    return heads(lambda a, b, c: proximal(a, b, c, np.full(len(b), BETA)), q, k, v)


def ref_mesa(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Ridge per prefix, ``o_t = (Σ β v kᵀ)(Σ β k kᵀ + λI)⁻¹ q_t``, solved by numpy."""

    def one(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        out = []
        for t in range(len(b)):
            kk = BETA * b[: t + 1].T @ b[: t + 1] + LAM * np.eye(b.shape[1])
            kv = BETA * b[: t + 1].T @ c[: t + 1]
            out.append(kv.T @ np.linalg.solve(kk, a[t]))
        return np.array(out)

    return heads(one, q, k, v)


def ref_softmax(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    return heads(lambda a, b, c: smoother(a, b, c, 1.0)[0], q, k, v)


FORGET = 0.8


def ref_forgetting(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    return heads(
        lambda a, b, c: vref.gated_smoother(a, b, c, np.full(len(b), FORGET), 1.0)[0], q, k, v
    )


def ref_stick(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    return heads(lambda a, b, c: vref.stick_breaking(a, b, c, 1.0)[0], q, k, v)


def ref_local_linear(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    from sequence_refs import local_linear_fit

    return heads(lambda a, b, c: local_linear_fit(a, b, c, LAM, 1.0)[0], q, k, v)


@dataclass(frozen=True)
class Entry:
    """One layer in one form: ``call(q, k, v)`` and its numpy reference."""

    name: str
    call: Callable[[Any, Any, Any], torch.Tensor]
    reference: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
    steps: bool = False  # k and v carry an axis of steps per token (DeltaProduct's n_h = 1)


def hooked(module: torch.nn.Module, point: str) -> torch.nn.Module:
    """``module`` with a read-only hook on ``point`` (it looks, it never returns a value)."""
    seen: list[tuple[int, ...]] = []
    getattr(module, point).register_forward_hook(lambda m, i, out: seen.append(tuple(out.shape)))
    assert getattr(module, point).active
    return module


def entries() -> list[Entry]:
    out: list[Entry] = []
    for mode in ("fused", "chunk", "recurrent"):
        out += [
            Entry(
                f"linear_attention[{mode}]",
                lambda q, k, v, m=mode: seq.linear_attention(q, k, v, mode=m),
                ref_linear,
            ),
            Entry(
                f"delta_rule[{mode}]",
                lambda q, k, v, m=mode: seq.delta_rule(q, k, v, BETA, mode=m),
                ref_delta,
            ),
            Entry(
                f"delta_product[{mode}]",
                lambda q, k, v, m=mode: seq.delta_product(q, *_steps(k, v), BETA, mode=m),
                ref_delta,
                steps=True,
            ),
            Entry(
                f"longhorn[{mode}]",
                lambda q, k, v, m=mode: seq.longhorn(q, k, v, BETA, mode=m),
                ref_longhorn,
            ),
        ]
    for mode in ("chunk", "recurrent"):
        out.append(
            Entry(
                f"mesa[{mode}]",
                lambda q, k, v, m=mode: seq.mesa(q, k, v, BETA, lam=LAM, mode=m),
                ref_mesa,
            )
        )
    out += [
        Entry("softmax_attention", lambda q, k, v: seq.softmax_attention(q, k, v), ref_softmax),
        Entry(  # the delta step written as the rule's low-rank term: DeltaNet
            "generalized_delta_rule",
            lambda q, k, v: seq.generalized_delta_rule(q, k, BETA * v, -BETA * k, k),
            ref_delta,
        ),
        Entry(  # read at the key: DeltaNet
            "comba",
            lambda q, k, v: seq.comba(q, k, v, k, BETA),
            ref_delta,
        ),
        Entry(  # no momentum, η = 1, read at the key: DeltaNet
            "momentum_delta_rule",
            lambda q, k, v: seq.momentum_delta_rule(q, k, v, k, BETA, 1.0, momentum=0.0),
            ref_delta,
        ),
        Entry(  # no momentum, no decay: DeltaNet
            "titans",
            lambda q, k, v: seq.titans(q, k, v, lr=BETA, momentum=0.0, decay=1.0),
            ref_delta,
        ),
        Entry(  # mini-batches of one, no LayerNorm: DeltaNet
            "ttt_linear",
            lambda q, k, v: seq.ttt_linear(q, k, v, BETA, batch_size=1),
            ref_delta,
        ),
        Entry(  # every level weighted 1: linear attention
            "log_linear_attention",
            lambda q, k, v: seq.log_linear_attention(q, k, v, np.ones((B, H, T, 4))),
            ref_linear,
        ),
        Entry(
            "forgetting_attention",
            lambda q, k, v: seq.forgetting_attention(q, k, v, FORGET),
            ref_forgetting,
        ),
        Entry(
            "stick_breaking_attention",
            lambda q, k, v: seq.stick_breaking_attention(q, k, v),
            ref_stick,
        ),
        Entry(
            "local_linear_attention",
            lambda q, k, v: seq.local_linear_attention(q, k, v, lam=LAM),
            ref_local_linear,
        ),
    ]
    modules: list[tuple[str, Callable[[], torch.nn.Module], str, tuple[Any, ...], Any]] = [
        ("LinearAttentionLayer", seq.LinearAttentionLayer, "hook_state", (), ref_linear),
        ("DeltaRuleLayer", seq.DeltaRuleLayer, "hook_state", (BETA,), ref_delta),
        ("LonghornLayer", seq.LonghornLayer, "hook_state", (BETA,), ref_longhorn),
        ("MesaNetLayer", lambda: seq.MesaNetLayer(lam=LAM), "hook_kk", (BETA,), ref_mesa),
        ("SoftmaxAttentionLayer", seq.SoftmaxAttentionLayer, "hook_weights", (), ref_softmax),
        (
            "LocalLinearAttentionLayer",
            lambda: seq.LocalLinearAttentionLayer(lam=LAM),
            "hook_weights",
            (),
            ref_local_linear,
        ),
    ]
    for name, build, point, extra, ref in modules:
        out.append(Entry(name, lambda q, k, v, b=build, e=extra: b()(q, k, v, *e), ref))
        out.append(
            Entry(
                f"{name}[{point} hooked]",
                lambda q, k, v, b=build, p=point, e=extra: hooked(b(), p)(q, k, v, *e),
                ref,
            )
        )
    return out


def _steps(k: Any, v: Any) -> tuple[Any, Any]:
    """``k``, ``v`` with one step per token: ``(B, H, T, 1, d)``."""
    return k[:, :, :, None], v[:, :, :, None]


REGISTRY = entries()
IDS = [e.name for e in REGISTRY]


def inputs(dtype: torch.dtype = torch.float64, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Gaussian ``q``, ``v`` and unit-norm keys ``(B, H, T, D)`` (well conditioned)."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, T, D, generator=g, dtype=torch.float64) for _ in range(3))
    return q.to(dtype), (k / k.norm(dim=-1, keepdim=True)).to(dtype), v.to(dtype)


def bound(ref: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> float:
    """``64 · u · T · D · max|q| max|k| max|v| · (1 + max|ref|)``: a first-order rounding bound
    for chains of at most ``T · D`` products of these magnitudes (the layers' states are sums of
    ``T`` rank-one terms of ``D`` entries, read out by ``D``-term dot products; ``64`` covers the
    solves' and the softmax's constants at these sizes, on well-conditioned data)."""
    size = np.abs(q).max() * np.abs(k).max() * np.abs(v).max()
    return float(64 * U64 * T * D * max(size, 1.0) * (1 + np.abs(ref).max()))


@pytest.mark.parametrize("entry", REGISTRY, ids=IDS)
@pytest.mark.parametrize("argument", ["q", "k", "v"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_inputs_name_the_argument_and_index(entry, argument, bad):
    args = dict(zip("qkv", inputs(), strict=True))
    args[argument] = args[argument].clone()
    args[argument][1, 0, 3, 2] = bad
    word = "NaN" if bad != bad else "Inf"
    at = "1, 0, 3, 0, 2" if entry.steps and argument != "q" else "1, 0, 3, 2"
    with pytest.raises(ValueError, match=rf"{argument}: contains {word} at index \({at}\)"):
        entry.call(args["q"], args["k"], args["v"])


@pytest.mark.parametrize("entry", REGISTRY, ids=IDS)
def test_shapes_that_do_not_agree_are_refused_with_both_shapes(entry):
    q, k, v = inputs()
    one = ", 1" if entry.steps else ""  # the axis of steps shows in the shapes stated
    with pytest.raises(ValueError, match=rf"k \(2, 2, 5{one}, 3\), v \(2, 2, 4{one}, 3\)"):
        entry.call(q, k, v[:, :, :4])
    with pytest.raises(ValueError, match=rf"q \(2, 2, 5, 3\), k \(2, 2, 5{one}, 2\)"):
        entry.call(q, k[..., :2], v)
    with pytest.raises(ValueError, match=r"q: expected a 4-D array, got shape \(2, 5, 3\)"):
        entry.call(q[0], k[0], v[0])


@pytest.mark.parametrize("entry", REGISTRY, ids=IDS)
@pytest.mark.parametrize("axis", [0, 2, 3])
def test_empty_inputs_are_refused(entry, axis):
    q, k, v = (t.narrow(axis, 0, 0) for t in inputs())
    with pytest.raises(ValueError, match="q: is empty"):
        entry.call(q, k, v)


@pytest.mark.parametrize("entry", REGISTRY, ids=IDS)
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool])
def test_integer_bool_and_unsigned_inputs_are_promoted_to_float64(entry, dtype):
    """Small integers (0…3; 0/1 for bool), so that the float64 answer is the answer on the same
    values, compared with the layer's numpy reference."""
    g = torch.Generator().manual_seed(1)
    top = 2 if dtype == torch.bool else 4
    q, k, v = (torch.randint(0, top, (B, H, T, D), generator=g) for _ in range(3))
    k[..., 0] = 1  # no all-zero key (softmax's and the local fit's weights stay defined)
    q, k, v = (t.to(dtype) for t in (q, k, v))
    out = entry.call(q, k, v)
    wide = entry.call(*(t.to(torch.float64) for t in (q, k, v)))
    assert out.dtype == torch.float64
    assert torch.equal(out, wide)
    arrays = [t.to(torch.float64).numpy() for t in (q, k, v)]
    ref = entry.reference(*arrays)
    assert np.abs(out.numpy() - ref).max() <= bound(ref, *arrays)


@pytest.mark.parametrize("entry", REGISTRY, ids=IDS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_floats_are_refused_naming_the_argument(entry, dtype):
    q, k, v = inputs()
    with pytest.raises(ValueError, match=r"q: (float16|bfloat16)"):
        entry.call(q.to(dtype), k, v)


@pytest.mark.parametrize("entry", REGISTRY, ids=IDS)
def test_the_answer_is_the_numpy_reference(entry):
    """Every form, hooked or not, within rounding of the independent reference."""
    q, k, v = inputs(seed=2)
    out = entry.call(q, k, v)
    arrays = [t.numpy() for t in (q, k, v)]
    ref = entry.reference(*arrays)
    assert np.abs(out.detach().numpy() - ref).max() <= bound(ref, *arrays)


def test_every_public_layer_is_registered():
    """Every public layer function and module of :mod:`attnreg.sequence` has an entry."""
    public = {
        name
        for name in seq.__all__
        if name != "SequenceLayer"
        and (inspect.isfunction(getattr(seq, name)) or inspect.isclass(getattr(seq, name)))
    }
    registered = {e.name.split("[")[0] for e in REGISTRY}
    assert public <= registered, f"unregistered layers: {sorted(public - registered)}"
