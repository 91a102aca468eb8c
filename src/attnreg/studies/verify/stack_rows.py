"""The certificate's rows for the fixed-weight stacks: GD, GD++, preconditioned GD
(:class:`attnreg.constructions.LSAStack`) at 1, 2, 4 and 8 layers, Newton–Schulz
(:class:`attnreg.constructions.NewtonStack`) at 1, 2, 4 and 8 steps (3, 5, 9, 17 layers) and
the kernel Richardson stack (:class:`attnreg.constructions.KernelRichardsonStack`, softmax
attention and gated blocks) at 1, 2, 4 and 8 steps (4, 6, 10, 18 layers; :data:`KERNEL`). Each
row runs one forward pass of the stack (:meth:`~attnreg.models.lsa.TokenModel.states`) and
checks **every hidden state** — the embedding and the state after each layer, every token —
against the same iteration written as a numpy loop
(:mod:`attnreg.studies.verify.stack_references`).

Data, on every case of the certificate: as for the gradient-descent rows, ``X`` enters divided
by ``s = max_b ‖X_b‖₂/√N`` (then ``λ_max(XᵀX)/N ≤ 1``) and rounded to the dtype, ``X*``
unscaled, and the extreme scale ``2^k`` is carried by ``Y`` (and ``W_0``): the slots that carry
``Y`` (the y-slots; Newton's y- and p-slots) are compared after multiplying them back by
``2^-k`` (exact: a power of two), the reference runs on the unscaled task. Parameters, all
numbers of the dtype so that the stack and the reference use the same ones: the steps
:data:`ETAS` (dyadic, ``η ≤ 7/8``, so ``η λ_max ≤ 2``); ``W_0`` Gaussian; GD++'s x-step
``c = 1/8`` on the context mean (``γ = c/N`` on the sum); ``Γ = (GGᵀ/d + I)/‖GGᵀ/d + I‖₂``;
Newton with ``λ = 0`` (the minimum-norm least-squares inverse on ``N < d`` and collinear
designs) and ``α = 2^⌊log₂(1/max_b ‖S_b²‖_F)⌋`` — Fu et al.'s ``2/‖SSᵀ‖_F`` halved and rounded
down to a power of two, so that ``α ≤ 1/‖S‖₂²`` and ``‖I − S M_k‖₂ ≤ 1``; the kernel stack's
Y-carrying slots are y, a, u and p.

A row's error at state ``l`` of task ``b`` is ``max |ŝ − s| / max |s|``, its tolerance
``max(base, 2 B_l / max |s|) · tol_scale`` with ``B_l`` the rounding-error bound of
:mod:`~attnreg.studies.verify.stack_references` (the factor 2 covers the reference's own
rounding). The row passes when every state of every task is within its tolerance; it reports the
state closest to (or furthest beyond) it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import torch

from attnreg.constructions import KernelRichardsonStack, LSAStack, NewtonStack
from attnreg.models.lsa import TokenModel
from attnreg.studies.verify import stack_references as sref
from attnreg.studies.verify.cases import gd_scale
from attnreg.studies.verify.config import (
    DTYPES,
    VerifyConfig,
    round_to,
    smallest_normal,
    unit_roundoff,
)
from attnreg.studies.verify.measure import attempt, problem_of, row, warn_failed

DEPTHS = (1, 2, 4, 8)
"""The depths of every stack: layers for the GD family, steps for Newton–Schulz and kernel
Richardson."""
ETAS = (0.75, 0.5, 0.625, 0.875, 0.5, 0.75, 0.625, 0.875)
"""The step of each layer (a stack of depth L takes the first L)."""
GDPP_C = 0.125
"""GD++'s x-step on the context mean."""


Builder = Callable[[int, torch.dtype], TokenModel]
Expected = tuple[list[list[np.ndarray]], list[np.ndarray]]


def _prefixes(
    states: list[list[np.ndarray]], bounds: list[np.ndarray]
) -> Callable[[int], Expected]:
    """``expect`` of an iteration whose shallower stacks' states are the first states of the
    deepest one's: ``layers(depth) + 1`` of them, ``layers`` given to the returned function."""

    def expect(layers: int) -> Expected:
        return [st[: layers + 1] for st in states], [bd[: layers + 1] for bd in bounds]

    return expect


@dataclass(frozen=True)
class StackFamily:
    """One stack at every depth: ``build(depth, dtype)`` the module, ``label(depth)`` its row
    name, ``expect(depth)`` the reference states ``[b][l]`` of every task ``b`` and their error
    bounds ``[b]`` (one per state), ``y_slots`` the columns that carry ``Y``."""

    name: str
    reference: str
    build: Builder
    label: Callable[[int], str]
    expect: Callable[[int], Expected]
    y_slots: np.ndarray


def _columns(slots: dict[str, slice], names: tuple[str, ...]) -> np.ndarray:
    """The columns of the named slots."""
    return np.concatenate([np.arange(slots[k].start, slots[k].stop) for k in names])


def _count(n: int, word: str) -> str:
    """``1 layer``, ``2 layers``."""
    return f"{n} {word}{'s' * (n > 1)}"


def _layers_label(name: str, depth: int) -> str:
    return f"stack: {name}, {_count(depth, 'layer')} (every hidden state)"


def _lsa_families(
    x: np.ndarray, y: np.ndarray, q: np.ndarray, k: int, dtype: str, rng: np.random.Generator
) -> list[StackFamily]:
    """GD, GD++ and preconditioned GD on the tasks ``(x, y, q)`` (``Y`` to be scaled by
    ``2^k`` in the stacks' input), with ``W_0`` and ``Γ`` drawn from ``rng``."""
    (b, n, d), dy = x.shape, y.shape[2]
    unit = unit_roundoff(dtype)
    w0 = round_to(rng.normal(size=(dy, d)), dtype)
    g = rng.normal(size=(d, d))
    g = g @ g.T / d + np.eye(d)
    precond = round_to(g / np.linalg.norm(g, 2), dtype)
    c = float(round_to((GDPP_C / n) * n, dtype))  # the value LSAStack's weight holds
    etas = list(ETAS[: max(DEPTHS)])
    eye, w_in = np.eye(d), np.ldexp(w0, k)
    gdpp = [sref.LsaStep(e, c, eye, np.zeros((dy, d))) for e in etas]
    plans: list[tuple[str, str, Builder, list[sref.LsaStep], Callable[[int], Any]]] = [
        (
            "GD",
            "numpy GD loop on W",
            lambda depth, dt: LSAStack.gd(d, dy, etas[:depth], depth, w_in, dt),
            [sref.LsaStep(e, 0.0, eye, w0) for e in etas],
            lambda i: sref.gd_states(x[i], y[i], q[i], etas, w0, eye),
        ),
        (
            "GD++",
            "numpy GD++ token loop",
            lambda depth, dt: LSAStack.gd_plus_plus(
                d, dy, n, etas[:depth], [GDPP_C / n] * depth, depth, dt
            ),
            gdpp,
            lambda i: sref.gd_plus_plus_states(x[i], y[i], q[i], etas, [c] * len(etas)),
        ),
        (
            "preconditioned GD (Γ)",
            "numpy preconditioned GD loop on W",
            lambda depth, dt: LSAStack.preconditioned(precond, dy, etas[:depth], depth, w_in, dt),
            [sref.LsaStep(e, 0.0, precond, w0) for e in etas],
            lambda i: sref.gd_states(x[i], y[i], q[i], etas, w0, precond),
        ),
    ]
    families = []
    for name, reference, build, steps, refer in plans:
        states = [refer(i) for i in range(b)]
        families.append(
            StackFamily(
                name,
                f"{reference}, every state (extended precision)",
                build,
                partial(_layers_label, name),
                _prefixes(states, [sref.lsa_bounds(s, steps, n, d, unit) for s in states]),
                np.arange(d, d + dy),
            )
        )
    return families


def newton_start(x: np.ndarray, lam: float = 0.0) -> float:
    """``α = 2^⌊log₂(1/max_b ‖S_b S_bᵀ‖_F)⌋``, ``S_b = X_bᵀX_b + λI`` (module docstring)."""
    eye = np.eye(x.shape[2])
    norm = max(float(np.linalg.norm((xb.T @ xb + lam * eye) @ (xb.T @ xb + lam * eye))) for xb in x)
    return math.ldexp(1.0, math.floor(math.log2(1.0 / norm)))


def _newton_family(x: np.ndarray, y: np.ndarray, q: np.ndarray, dtype: str) -> StackFamily:
    (b, _, d), dy = x.shape, y.shape[2]
    unit = unit_roundoff(dtype)
    alpha, deep = newton_start(x), max(DEPTHS)
    y_slots = _columns(sref.newton_slots(d, dy), ("y", "p"))
    prefixes = _prefixes(
        [sref.newton_states(x[i], y[i], q[i], alpha, 0.0, deep) for i in range(b)],
        [sref.newton_bounds(x[i], y[i], q[i], alpha, 0.0, deep, unit) for i in range(b)],
    )
    return StackFamily(
        "Newton–Schulz",
        "numpy Newton–Schulz loop M ← M(2I − SM), every state (extended precision)",
        lambda steps, dt: NewtonStack(d, dy, steps, alpha, 0.0, dt),
        lambda steps: (
            f"stack: Newton–Schulz, {_count(steps, 'step')} = "
            f"{1 + 2 * steps} layers (every hidden state)"
        ),
        lambda steps: prefixes(1 + 2 * steps),
        y_slots,
    )


KERNEL = (1.0, 1.0, 1.0)
"""The kernel Richardson stack's bandwidth ``h``, ridge ``λ`` and step ``ω``: with these every
weight is exact in both dtypes (``β = 1/h² = 1``, the sink's ``h² ln λ = 0``, ``1/λ = 1``)."""


def _kernel_family(x: np.ndarray, y: np.ndarray, q: np.ndarray, dtype: str) -> StackFamily:
    (b, _, d), dy = x.shape, y.shape[2]
    unit = unit_roundoff(dtype)
    h, lam, omega = KERNEL
    y_slots = _columns(sref.kernel_slots(d, dy), ("y", "a", "u", "p"))
    return StackFamily(
        "kernel Richardson",
        "numpy preconditioned Richardson loop for Gaussian kernel ridge, every state "
        "(extended precision)",
        lambda steps, dt: KernelRichardsonStack(d, dy, steps, h, lam, omega, dt),
        lambda steps: (
            f"stack: kernel Richardson (softmax), {_count(steps, 'step')} = "
            f"{2 * steps + 2} layers (every hidden state)"
        ),
        lambda steps: (
            [sref.kernel_states(x[i], y[i], q[i], h, lam, omega, steps) for i in range(b)],
            [sref.kernel_bounds(x[i], y[i], q[i], h, lam, omega, steps, unit) for i in range(b)],
        ),
        y_slots,
    )


def stack_rows(
    data: dict[str, np.ndarray],
    k: int,
    shape: str,
    dtype: str,
    cfg: VerifyConfig,
    rng: np.random.Generator,
) -> list[dict[str, Any]]:
    """Every stack's row at every depth of :data:`DEPTHS` on one case's tasks, ``Y`` scaled by
    ``2^k``; ``shape`` names the case."""
    x = round_to(data["x"] / gd_scale(data["x"]), dtype)
    y, q = data["y"], data["q"]
    dt = DTYPES[dtype]
    tensors = [torch.as_tensor(a, dtype=dt) for a in (x, np.ldexp(y, k), q)]
    families = [
        *_lsa_families(x, y, q, k, dtype, rng),
        _newton_family(x, y, q, dtype),
        _kernel_family(x, y, q, dtype),
    ]
    rows = []
    for fam in families:
        for depth in DEPTHS:

            def run(fam: StackFamily = fam, depth: int = depth) -> list[torch.Tensor]:
                return fam.build(depth, dt).states(*tensors)

            expected, bounds = fam.expect(depth)
            rows.append(
                measure_states(fam, fam.label(depth), run, expected, bounds, k, shape, dtype, cfg)
            )
    return rows


def measure_states(
    fam: StackFamily,
    name: str,
    run: Callable[[], list[torch.Tensor]],
    expected: list[list[np.ndarray]],
    bounds: list[np.ndarray],
    k: int,
    shape: str,
    dtype: str,
    cfg: VerifyConfig,
) -> dict[str, Any]:
    """One row: ``run()``'s states against ``expected[b][l]`` (module docstring: every state's
    error within its own tolerance; the row reports the worst state). A stack that raises or
    returns inf/NaN gets a failed row with infinite error and a ``RuntimeWarning``."""
    floor, base = smallest_normal(dtype), cfg.tolerance[dtype]
    got, exc = attempt(run)
    problem = problem_of(got, exc)
    if problem is None and len(got) != len(expected[0]):
        problem = f"kept {len(got)} states, expected {len(expected[0])}"
    if problem is not None:
        warn_failed(name, shape, dtype, problem)
        return row(name, fam.reference, dtype, shape, float("inf"), float("inf"), base)
    worst = (-1.0, 0.0, 0.0, base)
    for b, (states, bound) in enumerate(zip(expected, bounds, strict=True)):
        for layer, want in enumerate(states):
            have = got[layer][b].copy()
            have[:, fam.y_slots] = np.ldexp(have[:, fam.y_slots], -k)
            err = float(np.max(np.abs(have - want)))
            size = max(float(np.max(np.abs(want))), floor)
            tol = max(base, 2 * float(bound[layer]) / size) * cfg.tol_scale
            if err / size / tol > worst[0]:
                worst = (err / size / tol, err, err / size, tol)
    _, err, rel, tol = worst
    return row(name, fam.reference, dtype, shape, err, rel, tol)
