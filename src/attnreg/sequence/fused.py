"""The fused token recurrence of the diagonal-plus-rank-one layers: one compiled kernel family.

Every layer whose state update is diagonal plus rank one,

    ``S_t = (Diag(α_t) + a_t b_tᵀ) S_{t−1} + k_t w_tᵀ``,   ``o_t = S_tᵀ q_t``   (``S_0 = 0``),

with ``S`` of shape ``d_k × d_v``, is computed here by one kernel, given its gates. The family
is stated by four arrays and one flag:

* ``alpha`` — ``α_t``: ``(B, H, T, 1)`` (one factor per token) or ``(B, H, T, d_k)`` (one per
  state row);
* ``beta`` — ``β_t`` ``(B, H, T)``: the write is ``w_t = β_t v_t`` and, with ``delta``, the
  erase is ``a_t = k_t``, ``b_t = −β_t Diag(α_t) k_t`` (so ``w_t − b_tᵀ…`` is the delta rule's
  ``u_t = β_t (v_t − S'ᵀ k_t)`` with ``S' = Diag(α_t) S_{t−1}``); without ``delta``, ``a_t = 0``;
* ``p`` — the key the prediction is read at: ``b_t = −β_t Diag(α_t) p_t``, so
  ``u_t = β_t (v_t − S'ᵀ p_t)`` (``None``: ``p = k``; Comba's ``p_t`` otherwise).

The layers today: linear attention (``α`` one factor or none, ``β = 1``), DeltaNet and Gated
DeltaNet (``delta``, ``α`` one factor), Longhorn (``delta``, ``β = ε_t``, ``α = 1``) and its
diagonal form (``α = 1 − ε_t k_t ⊙ k_t`` per row, ``β = ε_t``), KDA (``delta``, ``α`` per row)
and Comba (``delta``, ``p``). A new layer of that shape gets its fused form by stating its
``alpha``, ``beta``, ``p`` and ``delta``.

The kernel makes one pass over the state per token: it updates row ``i``
(``S_t[i] = α_{t,i} S_{t−1}[i] + k_{t,i} u_t``) and in the same pass accumulates the read-out
``o_t += q_{t,i} S_t[i]`` and the next token's prediction
``pred_{t+1} += α_{t+1,i} p_{t+1,i} S_t[i]`` (``= S'ᵀ_{t+1} p_{t+1}``), so each token costs exactly
the useful ``6 · d_k · d_v`` flops (four rows at a time when the decay is one factor per
token; performance notes in ``benchmarks/README.md``). The state is a local array; the inputs
are read in place.
Compiled with numba (``@njit(parallel=True, cache=True)``; FMA contraction allowed, and in the
backward reassociated dot products: :data:`FORWARD_MATH`, :data:`BACKWARD_MATH`; no flag that
assumes finite values), parallel over batch × heads, float32 and float64.

The backward pass (:mod:`attnreg.sequence.fused_autograd`) runs the same recurrence in reverse
time from states stored every ``chunk`` tokens (as fla's ``fused_recurrent`` does; llama.cpp's
``ggml_gated_delta_net`` is the same forward loop).

Sources: fla's ``fla/ops/delta_rule/fused_recurrent.py`` and
``fla/ops/gated_delta_rule/fused_recurrent.py`` (Yang et al.); llama.cpp's
``ggml_gated_delta_net``.
"""

from __future__ import annotations

import numba
import numpy as np
import torch
from numba import njit, prange

FORWARD_MATH = {"contract"}
"""LLVM may fuse a multiply and an add into one FMA (one rounding instead of two): the state
update ``α s + k u`` and the two accumulations are FMAs (measured at P8's size: 17.2 → 14.0 ms).
No flag that assumes finite values or drops signed zeros."""
BACKWARD_MATH = {"contract", "reassoc"}
"""The backward's inner loops are dot products over a state row (``Σ_j S_ij g_j``, …): with
``reassoc`` LLVM sums them in SIMD lanes, as any BLAS dot product does, instead of one scalar
chain (measured at P9's size: 211 → 76 ms per training step with ``contract``)."""


@njit(cache=True, fastmath=FORWARD_MATH)
def write_out(out, b, h, t, o, scale, big, bad):  # type: ignore[no-untyped-def]
    """Token ``t``'s output ``out[b, h, t] = scale · o``, keeping per column the largest
    ``|entry|`` so far (``big``) and ``Σ 0 · entry`` (``bad``: NaN once an entry is NaN or
    ±Inf) — the kernels' finiteness and underflow record, read once at the end."""
    for j in range(o.shape[0]):
        x = scale * o[j]
        out[b, h, t, j] = x
        m = abs(x)
        big[j] = m if m > big[j] else big[j]
        bad[j] += x * 0


@njit(parallel=True, cache=True, fastmath=FORWARD_MATH)
def _forward_kernel(  # type: ignore[no-untyped-def]
    q, k, p, v, alpha, beta, delta, scale, out, keep, kept, largest
):
    """``out[b, h, t] = scale · S_tᵀ q_t``; ``largest[b, h] = max |out[b, h]|`` (NaN if an entry
    is NaN); with ``keep > 0`` the state before token ``c · keep`` is stored in ``kept[b, h, c]``
    (the starts of the chunks the backward pass recomputes).

    Each token is one pass over the state: ``s[i] ← a_i s[i] + k_i u`` for every row,
    accumulating ``o += Σ_i q_i s[i]`` and ``nxt += Σ_i kn_i s[i]`` (the next token's
    prediction; ``kn = 0`` when there is none) as the rows are written, four rows per pass over
    ``u``, ``o`` and ``nxt``: their loads and stores, not the multiply-adds, bound a one-row
    loop (measured at P8's size: 10.5 → 7.5 ms; two rows 8 ms, eight rows 10 ms). Four rows
    need one decay factor (a broadcast register per row's factor took it back to 9.8 ms, and so
    did a second, per-row four-row loop beside it): per-row decays (Longhorn's diagonal form)
    run the one-row loop. The loop is written here, not in a helper: called as a function
    (even inlined by numba) it ran at the one-row loop's speed."""
    n_b, n_h, n_t, d_k = k.shape
    d_v = v.shape[3]
    per_row = alpha.shape[3] != 1
    for bh in prange(n_b * n_h):
        b = bh // n_h
        h = bh % n_h
        s = np.zeros((d_k, d_v), dtype=out.dtype)
        pred = np.zeros(d_v, dtype=out.dtype)
        nxt = np.zeros(d_v, dtype=out.dtype)
        u = np.zeros(d_v, dtype=out.dtype)
        o = np.zeros(d_v, dtype=out.dtype)
        a = np.zeros(d_k, dtype=out.dtype)
        kn = np.zeros(d_k, dtype=out.dtype)
        big = np.zeros(d_v, dtype=out.dtype)  # max |out| per column
        bad = np.zeros(d_v, dtype=out.dtype)  # Σ 0 · out: NaN once an entry is NaN or ±Inf
        for t in range(n_t):
            if keep > 0 and t % keep == 0:
                kept[b, h, t // keep] = s
            bt = beta[b, h, t]
            if delta:
                for j in range(d_v):
                    u[j] = bt * (v[b, h, t, j] - pred[j])
            else:
                for j in range(d_v):
                    u[j] = bt * v[b, h, t, j]
            if per_row:
                a[:] = alpha[b, h, t]
            else:
                a[:] = alpha[b, h, t, 0]
            if delta and t + 1 < n_t:
                if per_row:
                    for i in range(d_k):
                        kn[i] = alpha[b, h, t + 1, i] * p[b, h, t + 1, i]
                else:
                    a_next = alpha[b, h, t + 1, 0]
                    for i in range(d_k):
                        kn[i] = a_next * p[b, h, t + 1, i]
            else:
                kn[:] = 0
            o[:] = 0
            nxt[:] = 0
            kt = k[b, h, t]
            qt = q[b, h, t]
            i = 0
            if not per_row:  # four rows at a time (one decay factor: one broadcast register)
                a0 = a[0]
                while i + 4 <= d_k:
                    r0, r1, r2, r3 = s[i], s[i + 1], s[i + 2], s[i + 3]
                    k0, k1, k2, k3 = kt[i], kt[i + 1], kt[i + 2], kt[i + 3]
                    q0, q1, q2, q3 = qt[i], qt[i + 1], qt[i + 2], qt[i + 3]
                    n0, n1, n2, n3 = kn[i], kn[i + 1], kn[i + 2], kn[i + 3]
                    for j in range(d_v):
                        uj = u[j]
                        x0 = a0 * r0[j] + k0 * uj
                        x1 = a0 * r1[j] + k1 * uj
                        x2 = a0 * r2[j] + k2 * uj
                        x3 = a0 * r3[j] + k3 * uj
                        r0[j] = x0
                        r1[j] = x1
                        r2[j] = x2
                        r3[j] = x3
                        o[j] += (q0 * x0 + q1 * x1) + (q2 * x2 + q3 * x3)
                        nxt[j] += (n0 * x0 + n1 * x1) + (n2 * x2 + n3 * x3)
                    i += 4
            while i < d_k:
                row = s[i]
                for j in range(d_v):
                    x = a[i] * row[j] + kt[i] * u[j]
                    row[j] = x
                    o[j] += qt[i] * x
                    nxt[j] += kn[i] * x
                i += 1
            write_out(out, b, h, t, o, scale, big, bad)
            pred, nxt = nxt, pred
        largest[b, h] = np.nan if np.isnan(bad.sum()) else big.max()
    return out


@njit(cache=True, fastmath=FORWARD_MATH)
def _recompute(q, k, p, v, alpha, beta, delta, b, h, t0, t1, states, us, rs, pred):  # type: ignore[no-untyped-def]
    """The states after tokens ``t0 … t1−1`` (``states[n + 1]``, from ``states[0]`` = the state
    before ``t0``), with each token's residual ``rs[n] = v_t − [delta] S'ᵀ_t p_t`` and write
    ``us[n] = β_t rs[n]``: one pass over the state per token, the next token's prediction
    accumulated while the state row is written (as in the forward kernel)."""
    d_k = k.shape[3]
    d_v = v.shape[3]
    per_row = alpha.shape[3] != 1
    pred[:] = 0
    if delta:
        for i in range(d_k):
            a_i = alpha[b, h, t0, i] if per_row else alpha[b, h, t0, 0]
            p_i = a_i * p[b, h, t0, i]
            for j in range(d_v):
                pred[j] += p_i * states[0, i, j]
    for t in range(t0, t1):
        n = t - t0
        bt = beta[b, h, t]
        for j in range(d_v):
            r = v[b, h, t, j] - pred[j] if delta else v[b, h, t, j]
            rs[n, j] = r
            us[n, j] = bt * r
        pred[:] = 0
        ahead = delta and t + 1 < t1
        for i in range(d_k):
            a_i = alpha[b, h, t, i] if per_row else alpha[b, h, t, 0]
            k_i = k[b, h, t, i]
            src = states[n, i]
            dst = states[n + 1, i]
            if ahead:
                a_next = alpha[b, h, t + 1, i] if per_row else alpha[b, h, t + 1, 0]
                p_next = a_next * p[b, h, t + 1, i]
                for j in range(d_v):
                    x = a_i * src[j] + k_i * us[n, j]
                    dst[j] = x
                    pred[j] += p_next * x
            else:
                for j in range(d_v):
                    dst[j] = a_i * src[j] + k_i * us[n, j]


@njit(cache=True, fastmath=BACKWARD_MATH)
def _read_back(q, k, grad_out, b, h, t, after, u, ds, du, dq, dk, zero):  # type: ignore[no-untyped-def]
    """Token ``t``'s read-out and write, back: ``∂q_t = S_t ∂o_t`` (``after`` = ``S_t``),
    ``dS += q_t ∂o_tᵀ``, ``∂u_t = dSᵀ k_t`` (into ``du``), ``∂k_t = dS u_t``. ``zero``: 0 in
    the arrays' dtype, so the dot products accumulate in it (a float literal would make them
    float64 for float32 data: measured at P9's size, 52 → 38 ms for the backward)."""
    d_k = k.shape[3]
    d_v = grad_out.shape[3]
    du[:] = 0
    for i in range(d_k):
        q_i = q[b, h, t, i]
        k_i = k[b, h, t, i]
        acc_q = zero
        acc_k = zero
        for j in range(d_v):
            g = grad_out[b, h, t, j]
            acc_q += after[i, j] * g
            x = ds[i, j] + q_i * g
            ds[i, j] = x
            du[j] += x * k_i
            acc_k += x * u[j]
        dq[b, h, t, i] = acc_q
        dk[b, h, t, i] = acc_k


@njit(cache=True, fastmath=BACKWARD_MATH)
def _step_back(  # type: ignore[no-untyped-def]
    q, k, p, alpha, grad_out, b, h, t, before, u_prev, ds, dp, du, dq, dk, dpk, dalpha, prev, zero
):
    """Token ``t``'s erase and decay, back — with ``∂pred_t`` in ``dp``: ``dS' = dS + p_t
    ∂pred_tᵀ``, ``∂p_t += S' ∂pred_t`` (into ``dpk``: ``dk`` itself when ``p`` is ``k``),
    ``∂α_{t,i} = Σ_j dS'_{ij} S_{t−1,ij}``, ``dS ← Diag(α_t) dS'`` (``before`` = ``S_{t−1}``) —
    and, with ``prev``, token ``t − 1``'s read-back (:func:`_read_back`) in the same pass over
    each row: both read row ``i`` of ``S_{t−1}`` and of ``dS`` once."""
    d_k = k.shape[3]
    d_v = grad_out.shape[3]
    per_row = alpha.shape[3] != 1
    tp = t - 1
    if prev:
        du[:] = 0
    acc_a = zero
    for i in range(d_k):
        a_i = alpha[b, h, t, i] if per_row else alpha[b, h, t, 0]
        p_i = p[b, h, t, i]
        acc_k = zero
        acc_r = zero
        if prev:
            q_p = q[b, h, tp, i]
            k_p = k[b, h, tp, i]
            acc_q = zero
            acc_kp = zero
            for j in range(d_v):
                sp = before[i, j]
                g = ds[i, j] + p_i * dp[j]
                acc_k += sp * dp[j]
                acc_r += g * sp
                g_p = grad_out[b, h, tp, j]
                acc_q += sp * g_p
                x = a_i * g + q_p * g_p
                ds[i, j] = x
                du[j] += x * k_p
                acc_kp += x * u_prev[j]
            dq[b, h, tp, i] = acc_q
            dk[b, h, tp, i] = acc_kp
        else:
            for j in range(d_v):
                sp = before[i, j]
                g = ds[i, j] + p_i * dp[j]
                acc_k += sp * dp[j]
                acc_r += g * sp
                ds[i, j] = a_i * g
        dpk[b, h, t, i] += a_i * acc_k
        if per_row:
            dalpha[b, h, t, i] = acc_r
        else:
            acc_a += acc_r
    if not per_row:
        dalpha[b, h, t, 0] = acc_a


@njit(parallel=True, cache=True, fastmath=BACKWARD_MATH)
def _backward_kernel(  # type: ignore[no-untyped-def]
    q, k, p, v, alpha, beta, delta, grad_out, kept, chunk, dq, dk, dpk, dv, dalpha, dbeta
):
    """Reverse-time pass: per chunk of ``chunk`` tokens (last first), the states are recomputed
    from the stored chunk start (:func:`_recompute`), then ``dS`` (the gradient of the loss in
    ``S_t``) is carried back token by token: ``dS += q_t ∂o_tᵀ``; ``∂u_t = dSᵀ k_t``;
    ``∂k_t = dS u_t`` (:func:`_read_back`); ``∂v_t = β_t ∂u_t``, ``∂β_t = ∂u_tᵀ r_t``; with
    ``delta`` ``∂pred_t = −β_t ∂u_t``, ``dS' = dS + p_t ∂pred_tᵀ``, ``∂p_t += S' ∂pred_t``;
    ``∂α_{t,i} = Σ_j dS'_{ij} S_{t−1,ij}``; ``dS ← Diag(α_t) dS'`` (:func:`_step_back`, which
    runs token ``t − 1``'s read-back in the same pass)."""
    n_b, n_h, n_t, d_k = k.shape
    d_v = v.shape[3]
    for bh in prange(n_b * n_h):
        b = bh // n_h
        h = bh % n_h
        ds = np.zeros((d_k, d_v), dtype=dq.dtype)
        states = np.empty((chunk + 1, d_k, d_v), dtype=dq.dtype)
        us = np.empty((chunk, d_v), dtype=dq.dtype)
        rs = np.empty((chunk, d_v), dtype=dq.dtype)
        du = np.empty(d_v, dtype=dq.dtype)
        dp = np.zeros(d_v, dtype=dq.dtype)
        pred = np.empty(d_v, dtype=dq.dtype)
        zero = np.zeros(1, dtype=dq.dtype)[0]
        for c in range(kept.shape[2] - 1, -1, -1):
            t0 = c * chunk
            t1 = min(n_t, t0 + chunk)
            states[0] = kept[b, h, c]
            _recompute(q, k, p, v, alpha, beta, delta, b, h, t0, t1, states, us, rs, pred)
            last = t1 - 1 - t0
            _read_back(
                q, k, grad_out, b, h, t1 - 1, states[last + 1], us[last], ds, du, dq, dk, zero
            )
            for t in range(t1 - 1, t0 - 1, -1):
                n = t - t0
                bt = beta[b, h, t]
                acc_b = zero
                for j in range(d_v):
                    acc_b += du[j] * rs[n, j]
                    dv[b, h, t, j] = bt * du[j]
                    dp[j] = -bt * du[j] if delta else zero
                dbeta[b, h, t] = acc_b
                u_prev = us[n - 1] if n > 0 else us[0]
                _step_back(
                    q,
                    k,
                    p,
                    alpha,
                    grad_out,
                    b,
                    h,
                    t,
                    states[n],
                    u_prev,
                    ds,
                    dp,
                    du,
                    dq,
                    dk,
                    dpk,
                    dalpha,
                    n > 0,
                    zero,
                )
    return dq


def as_array(x: torch.Tensor) -> np.ndarray:
    """``x`` as a C-contiguous numpy array sharing memory where it can (CPU tensors only)."""
    return np.ascontiguousarray(x.detach().resolve_conj().numpy())


def set_threads() -> None:
    """numba's threads = torch's intra-op threads (``attnreg bench --threads`` and
    :func:`attnreg.core.threads.torch_threads` set those), capped at numba's pool."""
    pool = int(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]
    numba.set_num_threads(max(1, min(torch.get_num_threads(), pool)))


def gates(
    k: torch.Tensor, alpha: torch.Tensor | None, beta: torch.Tensor | None
) -> tuple[np.ndarray, np.ndarray]:
    """``alpha`` as ``(B, H, T, 1 or d_k)`` and ``beta`` as ``(B, H, T)`` arrays (ones if None)."""
    b, h, t = k.shape[:3]
    if alpha is None:
        a = np.ones((b, h, t, 1), dtype=as_dtype(k))
    else:
        a = as_array(alpha.unsqueeze(-1) if alpha.ndim == 3 else alpha)
    bt = np.ones((b, h, t), dtype=as_dtype(k)) if beta is None else as_array(beta)
    return a, bt


def as_dtype(x: torch.Tensor) -> np.dtype:
    """The numpy dtype of ``x`` (float32 or float64)."""
    return np.dtype(np.float64) if x.dtype == torch.float64 else np.dtype(np.float32)


def fused_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    alpha: torch.Tensor | None,
    beta: torch.Tensor | None,
    delta: bool,
    *,
    scale: float = 1.0,
    keep: int = 0,
    p: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The family's recurrence (module docstring) for ``q, k (B, H, T, d_k)``,
    ``v (B, H, T, d_v)``, ``alpha (B, H, T)`` or ``(B, H, T, d_k)`` or ``None`` (no decay),
    ``beta (B, H, T)`` or ``None`` (1), the prediction read at ``p (B, H, T, d_k)`` (``None``:
    at ``k``, the delta rule; Comba's ``p_t`` otherwise), the read-out scaled by ``scale``
    (``o_t = scale · S_tᵀ q_t``: the query scale applied once per output entry, not as a copy
    of ``q``); returns
    ``o (B, H, T, d_v)``, the largest ``|o|`` of each batch element and head (``(B, H)``, NaN
    where an entry is NaN: the finiteness and underflow checks need nothing else) and, with
    ``keep > 0``, the
    states before tokens ``0, keep, 2·keep, …`` (``(B, H, ⌈T/keep⌉, d_k, d_v)``)."""
    if k.device.type != "cpu":
        raise ValueError(f"mode='fused' runs on the CPU only; got tensors on {k.device}")
    set_threads()
    qa, ka, va = as_array(q), as_array(k), as_array(v)
    a, bt = gates(k, alpha, beta)
    n_b, n_h, n_t, d_k = ka.shape
    out = np.empty((n_b, n_h, n_t, va.shape[3]), dtype=ka.dtype)
    n_kept = -(-n_t // keep) if keep > 0 else 1
    kept = np.empty((n_b, n_h, n_kept if keep > 0 else 0, d_k, va.shape[3]), dtype=ka.dtype)
    largest = np.empty((n_b, n_h), dtype=ka.dtype)
    pa = ka if p is None else as_array(p)
    _forward_kernel(qa, ka, pa, va, a, bt, bool(delta), scale, out, int(keep), kept, largest)
    return (
        torch.from_numpy(out),
        torch.from_numpy(largest),
        torch.from_numpy(kept) if keep else None,
    )


def fused_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    alpha: torch.Tensor | None,
    beta: torch.Tensor | None,
    delta: bool,
    grad_out: torch.Tensor,
    kept: torch.Tensor,
    chunk: int,
    p: torch.Tensor | None = None,
) -> tuple[
    torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None
]:
    """The gradients ``(∂q, ∂k, ∂v, ∂α, ∂β, ∂p)`` of ``Σ ⟨grad_out, o⟩`` for
    :func:`fused_forward`'s recurrence, from the states ``kept`` it stored every ``chunk``
    tokens; ``∂α`` has the shape of the gates array (``(B, H, T, 1)`` or ``(B, H, T, d_k)``),
    ``∂β`` ``(B, H, T)``; ``∂p`` is ``None`` when ``p`` is (its part is then in ``∂k``)."""
    set_threads()
    qa, ka, va = as_array(q), as_array(k), as_array(v)
    a, bt = gates(k, alpha, beta)
    dq, dk, dv = np.empty_like(qa), np.empty_like(ka), np.empty_like(va)
    dalpha, dbeta = np.empty_like(a), np.empty_like(bt)
    pa, dp = (ka, dk) if p is None else (as_array(p), np.zeros_like(ka))
    _backward_kernel(
        qa,
        ka,
        pa,
        va,
        a,
        bt,
        bool(delta),
        as_array(grad_out.to(k.dtype)),
        as_array(kept),
        int(chunk),
        dq,
        dk,
        dp,
        dv,
        dalpha,
        dbeta,
    )
    dq_, dk_, dv_, da_, db_ = (torch.from_numpy(x) for x in (dq, dk, dv, dalpha, dbeta))
    return dq_, dk_, dv_, da_, db_, None if p is None else torch.from_numpy(dp)
