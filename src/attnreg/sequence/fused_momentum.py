"""The fused token recurrence of the momentum delta rule (and so of Titans' linear memory): one
compiled kernel, forward and backward.

    ``r_t = S_{t−1}ᵀ p_t − v_t``,   ``M_t = μ_t M_{t−1} + η_t k_t r_tᵀ``,
    ``S_t = α_t S_{t−1} − β_t M_t``,   ``o_t = scale · S_tᵀ q_t``   (``S_0 = M_0 = 0``),

``S`` and ``M`` of shape ``d_k × d_v``, every gate one number per token (``(B, H, T)``). The
state is a pair, so the update is not in the diagonal-plus-rank-one family of
:mod:`attnreg.sequence.fused`; the kernel is built the same way: one pass over both states per
token, updating row ``i`` of ``M`` and ``S`` and, as the row is written, accumulating the
read-out ``o_t += q_{t,i} S_t[i]`` and the next token's prediction
``S_tᵀ p_{t+1} += p_{t+1,i} S_t[i]``. Compiled with numba (``parallel=True`` over batch ×
heads, ``cache=True``; FMA contraction, and reassociated dot products in the backward, as in
:mod:`attnreg.sequence.fused`), float32 and float64.

The backward pass runs in reverse time from the pair ``(S, M)`` stored every ``CHUNK`` tokens,
recomputing one chunk's states at a time. With ``dS`` the gradient in ``S_t`` and ``dM`` the
gradient in ``M_t`` carried back from later tokens, token ``t`` gives
``dS += q_t ∂o_tᵀ``, ``∂q_t = S_t ∂o_t``; ``∂α_t = ⟨dS, S_{t−1}⟩``, ``∂β_t = −⟨dS, M_t⟩``;
``G = dM − β_t dS`` (the gradient in ``M_t``), ``∂μ_t = ⟨G, M_{t−1}⟩``, ``∂η_t = k_tᵀ G r_t``,
``∂k_t = η_t G r_t``, ``∂r_t = η_t Gᵀ k_t``, ``∂v_t = −∂r_t``, ``∂p_t = S_{t−1} ∂r_t``; then
``dS ← α_t dS + p_t ∂r_tᵀ`` and ``dM ← μ_t G``.

Source: fla's ``fla/ops/momentum_delta_rule`` (its ``recurrent_momentum_delta_rule_ref`` is the
recurrence above).
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

CHUNK = 64  # tokens between stored state pairs; the backward recomputes one chunk at a time


@njit(parallel=True, cache=True, fastmath=FORWARD_MATH)
def _forward_kernel(  # type: ignore[no-untyped-def]
    q, k, p, v, alpha, beta, eta, mu, scale, out, keep, kept_s, kept_m, largest
):
    """``out[b, h, t] = scale · S_tᵀ q_t``; ``largest[b, h] = max |out[b, h]|`` (NaN if an entry
    is NaN); with ``keep > 0`` the pair before token ``c · keep`` in ``kept_s``, ``kept_m``."""
    n_b, n_h, n_t, d_k = k.shape
    d_v = v.shape[3]
    for bh in prange(n_b * n_h):
        b = bh // n_h
        h = bh % n_h
        s = np.zeros((d_k, d_v), dtype=out.dtype)
        m = np.zeros((d_k, d_v), dtype=out.dtype)
        pred = np.zeros(d_v, dtype=out.dtype)
        nxt = np.zeros(d_v, dtype=out.dtype)
        g = np.zeros(d_v, dtype=out.dtype)
        o = np.zeros(d_v, dtype=out.dtype)
        big = np.zeros(d_v, dtype=out.dtype)
        bad = np.zeros(d_v, dtype=out.dtype)
        zero = np.zeros(1, dtype=out.dtype)[0]  # a float literal would make the loop float64
        for t in range(n_t):
            if keep > 0 and t % keep == 0:
                kept_s[b, h, t // keep] = s
                kept_m[b, h, t // keep] = m
            a_t = alpha[b, h, t]
            b_t = beta[b, h, t]
            m_t = mu[b, h, t]
            e_t = eta[b, h, t]
            for j in range(d_v):
                g[j] = e_t * (pred[j] - v[b, h, t, j])
            o[:] = 0
            nxt[:] = 0
            ahead = t + 1 < n_t
            for i in range(d_k):
                k_i = k[b, h, t, i]
                q_i = q[b, h, t, i]
                p_i = p[b, h, t + 1, i] if ahead else zero
                ms = m[i]
                ss = s[i]
                for j in range(d_v):
                    y = m_t * ms[j] + k_i * g[j]
                    ms[j] = y
                    x = a_t * ss[j] - b_t * y
                    ss[j] = x
                    o[j] += q_i * x
                    nxt[j] += p_i * x
            write_out(out, b, h, t, o, scale, big, bad)
            pred, nxt = nxt, pred
        largest[b, h] = np.nan if np.isnan(bad.sum()) else big.max()
    return out


@njit(cache=True, fastmath=FORWARD_MATH)
def _recompute(k, p, v, alpha, beta, eta, mu, b, h, t0, t1, ss, ms, rs, pred):  # type: ignore[no-untyped-def]
    """The pairs after tokens ``t0 … t1−1`` (``ss[n + 1]``, ``ms[n + 1]``, from the stored
    pair ``ss[0]``, ``ms[0]``) and each token's error ``rs[n] = S_{t−1}ᵀ p_t − v_t``."""
    d_k = k.shape[3]
    d_v = v.shape[3]
    zero = np.zeros(1, dtype=pred.dtype)[0]
    pred[:] = 0
    for i in range(d_k):
        p_i = p[b, h, t0, i]
        for j in range(d_v):
            pred[j] += p_i * ss[0, i, j]
    for t in range(t0, t1):
        n = t - t0
        a_t = alpha[b, h, t]
        b_t = beta[b, h, t]
        m_t = mu[b, h, t]
        e_t = eta[b, h, t]
        for j in range(d_v):
            rs[n, j] = pred[j] - v[b, h, t, j]
        pred[:] = 0
        ahead = t + 1 < t1
        for i in range(d_k):
            k_i = k[b, h, t, i]
            p_i = p[b, h, t + 1, i] if ahead else zero
            for j in range(d_v):
                y = m_t * ms[n, i, j] + k_i * (e_t * rs[n, j])
                ms[n + 1, i, j] = y
                x = a_t * ss[n, i, j] - b_t * y
                ss[n + 1, i, j] = x
                pred[j] += p_i * x


@njit(parallel=True, cache=True, fastmath=BACKWARD_MATH)
def _backward_kernel(  # type: ignore[no-untyped-def]
    q, k, p, v, alpha, beta, eta, mu, grad_out, kept_s, kept_m, chunk, grads
):
    """Reverse-time pass (module docstring); ``grads`` = ``(dq, dk, dp, dv, dalpha, dbeta,
    deta, dmu)``, written in place."""
    dq, dk, dp, dv, dalpha, dbeta, deta, dmu = grads
    n_b, n_h, n_t, d_k = k.shape
    d_v = v.shape[3]
    for bh in prange(n_b * n_h):
        b = bh // n_h
        h = bh % n_h
        ds = np.zeros((d_k, d_v), dtype=dq.dtype)
        dm = np.zeros((d_k, d_v), dtype=dq.dtype)
        ss = np.empty((chunk + 1, d_k, d_v), dtype=dq.dtype)
        ms = np.empty((chunk + 1, d_k, d_v), dtype=dq.dtype)
        rs = np.empty((chunk, d_v), dtype=dq.dtype)
        dr = np.empty(d_v, dtype=dq.dtype)
        pred = np.empty(d_v, dtype=dq.dtype)
        zero = np.zeros(1, dtype=dq.dtype)[0]
        for c in range(kept_s.shape[2] - 1, -1, -1):
            t0 = c * chunk
            t1 = min(n_t, t0 + chunk)
            ss[0] = kept_s[b, h, c]
            ms[0] = kept_m[b, h, c]
            _recompute(k, p, v, alpha, beta, eta, mu, b, h, t0, t1, ss, ms, rs, pred)
            for t in range(t1 - 1, t0 - 1, -1):
                n = t - t0
                a_t = alpha[b, h, t]
                b_t = beta[b, h, t]
                m_t = mu[b, h, t]
                e_t = eta[b, h, t]
                dr[:] = 0
                acc_a = zero
                acc_b = zero
                acc_m = zero
                acc_e = zero
                for i in range(d_k):
                    q_i = q[b, h, t, i]
                    k_i = k[b, h, t, i]
                    acc_q = zero
                    acc_k = zero
                    for j in range(d_v):
                        go = grad_out[b, h, t, j]
                        acc_q += ss[n + 1, i, j] * go
                        x = ds[i, j] + q_i * go
                        ds[i, j] = x
                        acc_a += x * ss[n, i, j]
                        acc_b += x * ms[n + 1, i, j]
                        gm = dm[i, j] - b_t * x
                        acc_m += gm * ms[n, i, j]
                        acc_k += gm * rs[n, j]
                        dr[j] += gm * k_i
                        dm[i, j] = m_t * gm
                    dq[b, h, t, i] = acc_q
                    dk[b, h, t, i] = e_t * acc_k
                    acc_e += k_i * acc_k
                for j in range(d_v):
                    dr[j] *= e_t
                    dv[b, h, t, j] = -dr[j]
                for i in range(d_k):
                    p_i = p[b, h, t, i]
                    acc_p = zero
                    for j in range(d_v):
                        acc_p += ss[n, i, j] * dr[j]
                        ds[i, j] = a_t * ds[i, j] + p_i * dr[j]
                    dp[b, h, t, i] = acc_p
                dalpha[b, h, t] = acc_a
                dbeta[b, h, t] = -acc_b
                dmu[b, h, t] = acc_m
                deta[b, h, t] = acc_e
    return dq


def momentum_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    p: torch.Tensor,
    v: torch.Tensor,
    gates: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    scale: float,
    keep: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """The recurrence (module docstring) for ``q, k, p (B, H, T, d_k)``, ``v (B, H, T, d_v)``
    and ``gates = (alpha, beta, eta, mu)``, each ``(B, H, T)``; returns ``o (B, H, T, d_v)``,
    the largest ``|o|`` per batch element and head (``(B, H)``, NaN where an entry is NaN)
    and, with ``keep > 0``, the pairs ``S``, ``M`` before tokens ``0, keep, 2·keep, …``."""
    if k.device.type != "cpu":
        raise ValueError(f"mode='fused' runs on the CPU only; got tensors on {k.device}")
    set_threads()
    arrays = [as_array(x) for x in (q, k, p, v, *gates)]
    n_b, n_h, n_t, d_k = arrays[1].shape
    d_v = arrays[3].shape[3]
    dtype = arrays[1].dtype
    out = np.empty((n_b, n_h, n_t, d_v), dtype=dtype)
    n_kept = -(-n_t // keep) if keep > 0 else 0
    kept_s = np.empty((n_b, n_h, n_kept, d_k, d_v), dtype=dtype)
    kept_m = np.empty_like(kept_s)
    largest = np.empty((n_b, n_h), dtype=dtype)
    _forward_kernel(*arrays, scale, out, int(keep), kept_s, kept_m, largest)  # type: ignore[call-arg]
    pairs = (torch.from_numpy(kept_s), torch.from_numpy(kept_m)) if keep else (None, None)
    return torch.from_numpy(out), torch.from_numpy(largest), *pairs


def momentum_backward(
    inputs: tuple[torch.Tensor, ...],
    grad_out: torch.Tensor,
    kept_s: torch.Tensor,
    kept_m: torch.Tensor,
    chunk: int,
) -> tuple[torch.Tensor, ...]:
    """The gradients of ``Σ ⟨grad_out, o⟩`` in ``inputs = (q, k, p, v, alpha, beta, eta, mu)``
    (scale 1: the caller scales ``grad_out``), from the pairs stored every ``chunk`` tokens."""
    set_threads()
    arrays = [as_array(x) for x in inputs]
    grads = tuple(np.empty_like(x) for x in arrays)
    _backward_kernel(  # type: ignore[call-arg]
        *arrays,
        as_array(grad_out.to(inputs[1].dtype)),
        as_array(kept_s),
        as_array(kept_m),
        int(chunk),
        grads,
    )
    return tuple(torch.from_numpy(x) for x in grads)


class FusedMomentum(torch.autograd.Function):
    """``o, largest = FusedMomentum.apply(q, k, p, v, alpha, beta, eta, mu, scale)`` (module
    docstring; every gate ``(B, H, T)``), differentiable in every tensor argument; ``largest``
    (``(B, H)``) is not. Memory kept for the backward: ``2 ⌈T / CHUNK⌉ d_k d_v`` per head."""

    @staticmethod
    def forward(ctx: Any, *args: Any) -> tuple[torch.Tensor, torch.Tensor]:
        *inputs, scale = args
        grad = any(ctx.needs_input_grad[:8])
        q, k, p, v, *gates = inputs
        out, largest, kept_s, kept_m = momentum_forward(
            q,
            k,
            p,
            v,
            tuple(gates),
            scale,
            CHUNK if grad else 0,
        )
        if kept_s is not None:
            ctx.save_for_backward(*inputs, kept_s, kept_m)
        ctx.scale = scale
        ctx.mark_non_differentiable(largest)
        return out, largest

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor, _grad_largest: torch.Tensor) -> Any:
        *inputs, kept_s, kept_m = ctx.saved_tensors
        grad = grad_out if ctx.scale == 1 else grad_out * ctx.scale
        return (*momentum_backward(tuple(inputs), grad, kept_s, kept_m, CHUNK), None)


def fused_momentum(
    q: torch.Tensor,
    k: torch.Tensor,
    p: torch.Tensor,
    v: torch.Tensor,
    gates: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    scale: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The momentum delta rule's recurrence (module docstring), ``gates = (alpha, beta, eta,
    mu)`` each ``(B, H, T)``, differentiable; returns ``o`` and the largest ``|o|`` of each
    batch element and head (``(B, H)``, NaN where ``o`` has a NaN)."""
    out, largest = FusedMomentum.apply(q, k, p, v, *gates, float(scale))
    return out, largest
