"""The fused token recurrence of the generalized (diagonal-plus-low-rank) delta rule behind
RWKV-7: one compiled kernel, forward and backward.

    ``r_t = b_tᵀ S_{t−1}``,   ``S_t = Diag(α_t) S_{t−1} + a_t r_tᵀ + k_t v_tᵀ``,
    ``o_t = scale · S_tᵀ q_t``   (``S_0 = 0``),

``S`` of shape ``d_k × d_v``, ``a_t, b_t`` free, ``α_t`` one factor per token or per key channel.
The erase and write are two rank-one terms with their own keys, so the update is outside the
delta rules' kernel (:mod:`attnreg.sequence.fused`, whose erase is read at the write key); the
kernel is built the same way: one pass over the state per token, updating row ``i`` and, as it
is written, accumulating the read-out ``o_t += q_{t,i} S_t[i]`` and the next token's read
``r_{t+1} += b_{t+1,i} S_t[i]``. Compiled with numba (``parallel=True`` over batch × heads,
``cache=True``; FMA contraction, reassociated dot products in the backward, as in
:mod:`attnreg.sequence.fused`), float32 and float64.

The backward pass runs in reverse time from the states stored every ``CHUNK`` tokens. With
``dS`` the gradient in ``S_t``, token ``t`` gives ``dS += q_t ∂o_tᵀ``, ``∂q_t = S_t ∂o_t``;
``∂a_t = dS r_t``, ``∂r_t = dSᵀ a_t``, ``∂k_t = dS v_t``, ``∂v_t = dSᵀ k_t``,
``∂α_{t,i} = Σ_j dS_{ij} S_{t−1,ij}`` (summed over ``i`` for one factor per token),
``∂b_t = S_{t−1} ∂r_t``; then ``dS ← Diag(α_t) dS + b_t ∂r_tᵀ``.

Source: fla's ``fla/ops/generalized_delta_rule/dplr`` (its ``dplr_recurrence`` is the recurrence
above).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from numba import njit, prange

from attnreg.sequence.fused import (
    BACKWARD_MATH,
    FORWARD_MATH,
    as_array,
    set_threads,
    write_out,
)
from attnreg.sequence.fused import gates as gates_of

CHUNK = 64  # tokens between stored states; the backward recomputes one chunk at a time


@njit(parallel=True, cache=True, fastmath=FORWARD_MATH)
def _forward_kernel(  # type: ignore[no-untyped-def]
    q, k, v, a, b_, alpha, scale, out, keep, kept, largest
):
    """``out[b, h, t] = scale · S_tᵀ q_t``; ``largest[b, h] = max |out[b, h]|`` (NaN if an entry
    is NaN); with ``keep > 0`` the state before token ``c · keep`` in ``kept[b, h, c]``."""
    n_b, n_h, n_t, d_k = k.shape
    d_v = v.shape[3]
    per_row = alpha.shape[3] != 1
    for bh in prange(n_b * n_h):
        b = bh // n_h
        h = bh % n_h
        s = np.zeros((d_k, d_v), dtype=out.dtype)
        r = np.zeros(d_v, dtype=out.dtype)
        nxt = np.zeros(d_v, dtype=out.dtype)
        o = np.zeros(d_v, dtype=out.dtype)
        big = np.zeros(d_v, dtype=out.dtype)
        bad = np.zeros(d_v, dtype=out.dtype)
        zero = np.zeros(1, dtype=out.dtype)[0]  # a float literal would make the loop float64
        for t in range(n_t):
            if keep > 0 and t % keep == 0:
                kept[b, h, t // keep] = s
            o[:] = 0
            nxt[:] = 0
            ahead = t + 1 < n_t
            vt = v[b, h, t]
            for i in range(d_k):
                a_i = alpha[b, h, t, i] if per_row else alpha[b, h, t, 0]
                e_i = a[b, h, t, i]
                k_i = k[b, h, t, i]
                q_i = q[b, h, t, i]
                n_i = b_[b, h, t + 1, i] if ahead else zero
                row = s[i]
                for j in range(d_v):
                    x = a_i * row[j] + e_i * r[j] + k_i * vt[j]
                    row[j] = x
                    o[j] += q_i * x
                    nxt[j] += n_i * x
            write_out(out, b, h, t, o, scale, big, bad)
            r, nxt = nxt, r
        largest[b, h] = np.nan if np.isnan(bad.sum()) else big.max()
    return out


@njit(cache=True, fastmath=FORWARD_MATH)
def _recompute(k, v, a, b_, alpha, b, h, t0, t1, states, reads):  # type: ignore[no-untyped-def]
    """The states after tokens ``t0 … t1−1`` (``states[n + 1]``, from the stored
    ``states[0]``) and each token's read ``reads[n] = b_tᵀ S_{t−1}``: the first read from the
    stored state, each next one accumulated while the state rows are written (as in the
    forward kernel)."""
    d_k = k.shape[3]
    d_v = v.shape[3]
    per_row = alpha.shape[3] != 1
    reads[0] = 0
    for i in range(d_k):
        for j in range(d_v):
            reads[0, j] += b_[b, h, t0, i] * states[0, i, j]
    for t in range(t0, t1):
        n = t - t0
        ahead = t + 1 < t1
        if ahead:
            reads[n + 1] = 0
        for i in range(d_k):
            a_i = alpha[b, h, t, i] if per_row else alpha[b, h, t, 0]
            e_i = a[b, h, t, i]
            k_i = k[b, h, t, i]
            for j in range(d_v):
                x = a_i * states[n, i, j] + e_i * reads[n, j] + k_i * v[b, h, t, j]
                states[n + 1, i, j] = x
                if ahead:
                    reads[n + 1, j] += b_[b, h, t + 1, i] * x


@njit(parallel=True, cache=True, fastmath=BACKWARD_MATH)
def _backward_kernel(  # type: ignore[no-untyped-def]
    q, k, v, a, b_, alpha, grad_out, kept, chunk, grads
):
    """Reverse-time pass (module docstring); ``grads`` = ``(dq, dk, dv, da, db, dalpha)``,
    written in place."""
    dq, dk, dv, da, db, dalpha = grads
    n_b, n_h, n_t, d_k = k.shape
    d_v = v.shape[3]
    per_row = alpha.shape[3] != 1
    for bh in prange(n_b * n_h):
        b = bh // n_h
        h = bh % n_h
        ds = np.zeros((d_k, d_v), dtype=dq.dtype)
        states = np.empty((chunk + 1, d_k, d_v), dtype=dq.dtype)
        reads = np.empty((chunk, d_v), dtype=dq.dtype)
        dr = np.empty(d_v, dtype=dq.dtype)
        dvt = np.empty(d_v, dtype=dq.dtype)
        zero = np.zeros(1, dtype=dq.dtype)[0]
        for c in range(kept.shape[2] - 1, -1, -1):
            t0 = c * chunk
            t1 = min(n_t, t0 + chunk)
            states[0] = kept[b, h, c]
            _recompute(k, v, a, b_, alpha, b, h, t0, t1, states, reads)
            for t in range(t1 - 1, t0 - 1, -1):
                n = t - t0
                dr[:] = 0
                dvt[:] = 0
                acc_a = zero
                for i in range(d_k):
                    q_i = q[b, h, t, i]
                    k_i = k[b, h, t, i]
                    e_i = a[b, h, t, i]
                    acc_q = zero
                    acc_e = zero
                    acc_k = zero
                    acc_r = zero
                    for j in range(d_v):
                        go = grad_out[b, h, t, j]
                        acc_q += states[n + 1, i, j] * go
                        x = ds[i, j] + q_i * go
                        ds[i, j] = x
                        acc_e += x * reads[n, j]
                        acc_k += x * v[b, h, t, j]
                        acc_r += x * states[n, i, j]
                        dr[j] += e_i * x
                        dvt[j] += k_i * x
                    dq[b, h, t, i] = acc_q
                    da[b, h, t, i] = acc_e
                    dk[b, h, t, i] = acc_k
                    if per_row:
                        dalpha[b, h, t, i] = acc_r
                    else:
                        acc_a += acc_r
                if not per_row:
                    dalpha[b, h, t, 0] = acc_a
                for j in range(d_v):
                    dv[b, h, t, j] = dvt[j]
                for i in range(d_k):
                    a_i = alpha[b, h, t, i] if per_row else alpha[b, h, t, 0]
                    n_i = b_[b, h, t, i]
                    acc_b = zero
                    for j in range(d_v):
                        acc_b += states[n, i, j] * dr[j]
                        ds[i, j] = a_i * ds[i, j] + n_i * dr[j]
                    db[b, h, t, i] = acc_b
    return dq


def generalized_forward(
    inputs: tuple[torch.Tensor, ...], alpha: torch.Tensor | None, scale: float, keep: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The recurrence (module docstring) for ``inputs = (q, k, v, a, b)`` (``q, k, a, b
    (B, H, T, d_k)``, ``v (B, H, T, d_v)``) and ``alpha`` ``(B, H, T)``, ``(B, H, T, d_k)`` or
    ``None``; returns ``o (B, H, T, d_v)``, the largest ``|o|`` per batch element and head
    (``(B, H)``, NaN where an entry is NaN) and, with ``keep > 0``, the states before tokens
    ``0, keep, 2·keep, …``."""
    k = inputs[1]
    if k.device.type != "cpu":
        raise ValueError(f"mode='fused' runs on the CPU only; got tensors on {k.device}")
    set_threads()
    arrays = [as_array(x) for x in inputs]
    n_b, n_h, n_t, d_k = arrays[1].shape
    d_v = arrays[2].shape[3]
    dtype = arrays[1].dtype
    out = np.empty((n_b, n_h, n_t, d_v), dtype=dtype)
    n_kept = -(-n_t // keep) if keep > 0 else 0
    kept = np.empty((n_b, n_h, n_kept, d_k, d_v), dtype=dtype)
    largest = np.empty((n_b, n_h), dtype=dtype)
    gates = gates_of(k, alpha, None)[0]
    _forward_kernel(*arrays, gates, scale, out, int(keep), kept, largest)  # type: ignore[call-arg]
    return (
        torch.from_numpy(out),
        torch.from_numpy(largest),
        torch.from_numpy(kept) if keep else None,
    )


def generalized_backward(
    inputs: tuple[torch.Tensor, ...],
    alpha: torch.Tensor | None,
    grad_out: torch.Tensor,
    kept: torch.Tensor,
    chunk: int,
) -> tuple[torch.Tensor, ...]:
    """The gradients ``(∂q, ∂k, ∂v, ∂a, ∂b, ∂α)`` of ``Σ ⟨grad_out, o⟩`` (scale 1: the caller
    scales ``grad_out``), from the states stored every ``chunk`` tokens; ``∂α`` has the gates
    array's shape (``(B, H, T, 1)`` or ``(B, H, T, d_k)``)."""
    set_threads()
    arrays = [as_array(x) for x in inputs]
    gates = gates_of(inputs[1], alpha, None)[0]
    grads = (*(np.empty_like(x) for x in arrays), np.empty_like(gates))
    _backward_kernel(  # type: ignore[call-arg]
        *arrays, gates, as_array(grad_out.to(inputs[1].dtype)), as_array(kept), int(chunk), grads
    )
    return tuple(torch.from_numpy(x) for x in grads)


class FusedGeneralized(torch.autograd.Function):
    """``o, largest = FusedGeneralized.apply(q, k, v, a, b, alpha, scale)`` (module docstring;
    ``alpha`` ``(B, H, T)``, ``(B, H, T, d_k)`` or ``None``), differentiable in every tensor
    argument; ``largest`` (``(B, H)``) is not. Memory kept for the backward:
    ``⌈T / CHUNK⌉ d_k d_v`` per head."""

    @staticmethod
    def forward(ctx: Any, *args: Any) -> tuple[torch.Tensor, torch.Tensor]:
        *inputs, alpha, scale = args
        grad = any(ctx.needs_input_grad[:6])
        out, largest, kept = generalized_forward(tuple(inputs), alpha, scale, CHUNK if grad else 0)
        if kept is not None:
            ctx.save_for_backward(*inputs, alpha, kept)
        ctx.scale = scale
        ctx.mark_non_differentiable(largest)
        return out, largest

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor, _grad_largest: torch.Tensor) -> Any:
        *inputs, alpha, kept = ctx.saved_tensors
        grad = grad_out if ctx.scale == 1 else grad_out * ctx.scale
        *grads, dalpha = generalized_backward(tuple(inputs), alpha, grad, kept, CHUNK)
        return (*grads, None if alpha is None else dalpha.reshape(alpha.shape), None)


def fused_generalized(
    inputs: tuple[torch.Tensor, ...], alpha: torch.Tensor | None, scale: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """The generalized delta rule's recurrence (module docstring) for ``inputs = (q, k, v, a,
    b)``, differentiable; returns ``o`` and the largest ``|o|`` of each batch element and head
    (``(B, H)``, NaN where ``o`` has a NaN)."""
    out, largest = FusedGeneralized.apply(*inputs, alpha, float(scale))
    return out, largest
