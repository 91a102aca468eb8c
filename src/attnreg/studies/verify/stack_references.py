"""Independent references for the certificate's stack rows: the iterations themselves, written
as numpy loops, and the rounding-error bound of every hidden state. Numpy only, no torch.

**The iterations**, one task ``X (N, d)``, ``Y (N, dy)``, queries ``X* (M, d)``, in extended
precision (``numpy.longdouble``: ``u = 2⁻⁶⁴`` on x86-64), each returning the hidden state before
the first layer and after every layer, in the token layout of the stack it checks:

* **GD / preconditioned GD** (von Oswald et al. 2023; Ahn et al. 2023) on
  ``L(W) = (1/2N) Σ ‖W x_i − y_i‖²``: ``W_{l+1} = W_l − η_l ∇L(W_l) Γ`` from ``W_0``
  (``Γ = I`` for GD). State ``l``: context tokens ``(x_i, y_i − (W_l − W_0) x_i)``, query tokens
  ``(x*, −W_l x*)`` (:class:`attnreg.models.lsa.TrainableLSA`'s layout).
* **GD++** (von Oswald et al. 2023, §4), the token iteration with the x-step ``c_l`` on the
  context mean: ``x_j ← x_j − c_l (1/N) Σ_i x_i x_iᵀ x_j`` and
  ``y_j ← y_j − η_l (1/N) Σ_i y_i x_iᵀ x_j`` for every token (both from the state before the
  layer; the queries' y-entries start at 0).
* **Newton–Schulz** (Schulz 1933) for ``S⁻¹``, ``S = XᵀX + λI``, ``C = YᵀX``:
  ``M_{k+1} = M_k (2I − S M_k)`` from ``M_0 = α S``. States in
  :class:`attnreg.constructions.NewtonStack`'s six slots ``(x, y, e, m, u, p)`` for the context,
  the basis (``e = e_a``) and the query (``e = x*``) tokens: after layer 0, ``m = M_0 e``; after
  the first layer of step k, ``u = S M_k e`` and ``p = C M_k e``; after its second,
  ``m = M_{k+1} e``, ``u = 0``, ``p = C M_{k+1} e``.
* **Kernel Richardson** (Yan, Li, Kulick & Tang 2026) for Gaussian kernel ridge regression,
  ``α_{t+1} = α_t + ω (D + λI)⁻¹ (Y − (K + λI) α_t)``, read into
  :class:`attnreg.constructions.KernelRichardsonStack`'s slots (:func:`kernel_states`; its
  bound, :func:`kernel_bounds`, is a largest-entry bound stated there).

**The bounds** (first order in the unit roundoff ``u`` of the stack's dtype;
``γ_n = n u/(1 − n u)``). One layer of a stack is attention with identity separation; the core
states ``|Δ| ≤ 2 γ_n R`` for its update (``R`` the update computed from absolute values,
``n = N_keys + 4D`` for tokens of width ``D``), and the residual addition adds ``u |t'|``. So the
local error of each slot group (Frobenius norm) is ``F = 2 γ_n ‖R‖ + u ‖t'‖`` with
``n = N_keys + 4D + 2`` (the mean's division and the sum over heads). The errors of the state
after layer ``l`` then obey a recursion through the layer's derivative at the exact iterate
(spectral norms of the exact quantities):

* GD family (``Z = R − X W_0ᵀ`` the context residuals): ``e_X' ≤ (1 + 2c‖X‖²/N) e_X``,
  ``e_Q' ≤ e_Q + 2(c/N)‖Q‖‖X‖ e_X``, ``e_R' ≤ ‖I − (η/N) XΓXᵀ‖ e_R + (η/N)‖Γ‖(2‖X‖‖Z‖ +
  ‖X‖²‖W_0‖) e_X``, ``e_P' ≤ e_P + (η/N)‖Γ‖(‖X‖‖Z‖ e_Q + ‖Q‖‖Z‖ e_X + ‖Q‖‖X‖(e_R +
  ‖W_0‖ e_X))``, each plus its local ``F``; the embedding's ``−W_0 x*`` starts ``e_P`` at
  ``γ_d ‖|X*||W_0|ᵀ‖``. For GD and preconditioned GD ``c = 0`` (the x-slots are never touched)
  and ``‖I − (η/N)XΓXᵀ‖ ≤ 1`` for ``η ≤ 2/λ_max``: errors add, linearly in depth.
* Newton (``R_k = I − S M_k``): the iterate's error ``e_M' ≤ (‖R_k‖ + ‖R_kᵀ‖) e_M + ‖M_k‖ F_u +
  F_m`` — at most doubled per step (``‖R_k‖ ≤ 1`` for ``α ≤ 1/‖S‖²``; exactly doubled on the
  null space of a singular ``S``, Söderström & Stewart 1974); the queries'
  ``e_q' ≤ ‖R_kᵀ‖ e_q + ‖R_k X*ᵀ‖ e_M + ‖M_k‖(e_u + F_u) + F_m``; the p-slots
  ``e_P' ≤ ‖2I − S M_k‖ e_P + ‖C M_k S‖ e_M + ‖C M_k‖ F_u + F_p`` and
  ``e_p' ≤ e_p + ‖R_k X*ᵀ‖ e_P + ‖C M_k‖(e_u + ‖S‖ e_q + F_u) + F_p``; the queries' u-slots keep
  ``S m_q − S M_k x*`` after the second layer (``e_u' ≤ e_u + ‖S‖ e_q + F_u + ‖X*‖(‖S‖ e_M +
  F_u) + F_u``); the basis tokens' u-slots return to exactly 0.

The state's error is at most the sum of its groups' (Frobenius norms), which bounds its largest
entry. The rows' tolerance doubles it: the extended-precision reference's own rounding is below
``2⁻¹¹`` of the float64 bound (and ``2⁻⁴⁰`` of the float32 one).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from attnreg.studies.verify.references import gradient_sum

Array = NDArray[np.float64]
EXT = np.longdouble
"""The references' precision (80-bit extended on x86-64)."""


def _ext(*arrays: Array) -> list[NDArray[np.longdouble]]:
    return [np.asarray(a, dtype=EXT) for a in arrays]


def _f64(states: list[NDArray[np.longdouble]]) -> list[Array]:
    return [np.asarray(s, dtype=np.float64) for s in states]


def gd_states(
    x: Array, y: Array, xq: Array, etas: list[float], w0: Array, precond: Array
) -> list[Array]:
    """GD (``precond = I``) or preconditioned GD from ``W_0``: the ``len(etas) + 1`` states
    ``(N + M, d + dy)`` of the module docstring, the weights iterated by an explicit loop."""
    xe, ye, qe, w_start, g = _ext(x, y, xq, w0, precond)
    w = w_start.copy()
    states = []
    for step in range(len(etas) + 1):
        ctx = np.hstack([xe, ye - xe @ (w - w_start).T])
        states.append(np.vstack([ctx, np.hstack([qe, -(qe @ w.T)])]))
        if step < len(etas):  # ∇L(W) = (1/N) Σ_i (W x_i − y_i) x_iᵀ
            w = w - EXT(etas[step]) * (gradient_sum(w, xe, ye) / len(xe)) @ g
    return _f64(states)


def gd_plus_plus_states(
    x: Array, y: Array, xq: Array, etas: list[float], cs: list[float]
) -> list[Array]:
    """GD++ (module docstring): the ``len(etas) + 1`` token states ``(N + M, d + dy)``."""
    xe, ye, qe = _ext(x, y, xq)
    n = len(xe)
    py = np.zeros((len(qe), ye.shape[1]), dtype=EXT)
    states = [np.vstack([np.hstack([xe, ye]), np.hstack([qe, py])])]
    for eta, c in zip(etas, cs, strict=True):
        s = xe.T @ xe / n  # (1/N) Σ x_i x_iᵀ
        m = ye.T @ xe / n  # (1/N) Σ y_i x_iᵀ
        xe, qe, ye, py = (
            xe - EXT(c) * xe @ s,
            qe - EXT(c) * qe @ s,
            ye - EXT(eta) * xe @ m.T,
            py - EXT(eta) * qe @ m.T,
        )
        states.append(np.vstack([np.hstack([xe, ye]), np.hstack([qe, py])]))
    return _f64(states)


def _slots(widths: dict[str, int]) -> dict[str, slice]:
    """Consecutive columns of the named slots, in order, of the given widths."""
    edges = np.cumsum([0, *widths.values()])
    return {k: slice(int(a), int(b)) for k, a, b in zip(widths, edges[:-1], edges[1:], strict=True)}


def newton_slots(d: int, dy: int) -> dict[str, slice]:
    """Columns of the Newton stack's slots ``(x, y, e, m, u, p)``."""
    return _slots({"x": d, "y": dy, "e": d, "m": d, "u": d, "p": dy})


def newton_states(
    x: Array, y: Array, xq: Array, alpha: float, lam: float, steps: int
) -> list[Array]:
    """Newton–Schulz from ``M_0 = αS`` (module docstring): the ``2·steps + 2`` states
    ``(N + d + M, 4d + 2dy)``."""
    xe, ye, qe = _ext(x, y, xq)
    (n, d), dy = xe.shape, ye.shape[1]
    sl = newton_slots(d, dy)
    eye = np.eye(d, dtype=EXT)
    s, c = xe.T @ xe + EXT(lam) * eye, ye.T @ xe
    v = np.vstack([eye, qe])  # the basis and query tokens' e-slots
    base = np.zeros((n + d + len(qe), 4 * d + 2 * dy), dtype=EXT)
    base[:n, sl["x"]], base[:n, sl["y"]], base[n:, sl["e"]] = xe, ye, v

    def state(m: NDArray[np.longdouble], u: bool, p: NDArray[np.longdouble] | None) -> Array:
        out = base.copy()
        out[n:, sl["m"]] = v @ m.T
        if u:
            out[n:, sl["u"]] = v @ (s @ m).T
        if p is not None:
            out[n:, sl["p"]] = v @ p.T
        return out

    m = EXT(alpha) * s
    states = [base.copy(), state(m, False, None)]
    for _ in range(steps):
        states.append(state(m, True, c @ m))  # layer A; p = C M_k (set by the first step's A)
        m = m @ (2 * eye - s @ m)
        states.append(state(m, False, c @ m))
    return _f64(states)


def _gamma(n: int, unit: float) -> float:
    return n * unit / (1 - n * unit)


def _fro(a: Array) -> float:
    return float(np.linalg.norm(a))


def _two(a: Array) -> float:
    return float(np.linalg.norm(a, 2)) if a.size else 0.0


@dataclass(frozen=True)
class LsaStep:
    """One layer of the GD family: step ``eta``, the x-step ``c`` on the context mean (GD++;
    0 otherwise), ``precond`` Γ and ``w0`` (zero for GD++)."""

    eta: float
    c: float
    precond: Array
    w0: Array


def lsa_bounds(states: list[Array], layers: list[LsaStep], n: int, d: int, unit: float) -> Array:
    """The bound on the Frobenius error of every state (module docstring, GD family)."""
    width = states[0].shape[1]
    g = _gamma(n + 4 * width + 2, unit)
    w0 = layers[0].w0
    xq0 = states[0][n:, :d]
    e_x = e_q = e_r = 0.0
    e_p = _gamma(d, unit) * _fro(np.abs(xq0) @ np.abs(w0).T)
    out = [e_x + e_q + e_r + e_p]
    spectrum: Array = np.zeros(0)
    nx = nq = 0.0
    for step, before, after in zip(layers, states[:-1], states[1:], strict=True):
        x, r, q = before[:n, :d], before[:n, d:], before[n:, :d]
        gam, eta, c = step.precond, step.eta, step.c
        z = r - x @ step.w0.T
        ax, aq, ag = np.abs(x), np.abs(q), np.abs(gam)
        values = eta * (ax @ np.abs(step.w0).T + np.abs(r))
        local = [  # (|update| of the x-, query-x-, y- and query-y-slots, their new values)
            (c * ax @ (ax.T @ ax) / n, after[:n, :d]),
            (c * aq @ (ax.T @ ax) / n, after[n:, :d]),
            (ax @ ag.T @ ax.T @ values / n, after[:n, d:]),
            (aq @ ag.T @ ax.T @ values / n, after[n:, d:]),
        ]
        f = [2 * g * _fro(a) + (unit * _fro(new) if a.any() else 0.0) for a, new in local]
        if c or not spectrum.size:  # X moves only under GD++
            spectrum = np.asarray(np.linalg.eigvalsh(x @ ((gam + gam.T) / 2) @ x.T), np.float64)
            nx, nq = _two(x), _two(q)
        nz, ng, nw = _two(z), _two(gam), _two(step.w0)
        contract = float(np.abs(1 - (eta / n) * spectrum).max())  # ‖I − (η/N) XΓXᵀ‖₂
        e_p = e_p + (eta / n) * ng * (nx * nz * e_q + nq * nz * e_x + nq * nx * (e_r + nw * e_x))
        e_r = contract * e_r + (eta / n) * ng * (2 * nx * nz + nx * nx * nw) * e_x
        e_q = e_q + 2 * (c / n) * nq * nx * e_x
        e_x = (1 + 2 * c * nx * nx / n) * e_x
        e_x, e_q, e_r, e_p = e_x + f[0], e_q + f[1], e_r + f[2], e_p + f[3]
        out.append(e_x + e_q + e_r + e_p)
    return np.array(out)


def newton_bounds(
    x: Array, y: Array, xq: Array, alpha: float, lam: float, steps: int, unit: float
) -> Array:
    """The bound on the Frobenius error of every state (module docstring, Newton)."""
    (n, d), dy = x.shape, y.shape[1]
    g = _gamma(n + d + 4 * (4 * d + 2 * dy) + 2, unit)
    eye = np.eye(d)
    s, c = x.T @ x + lam * eye, y.T @ x
    kk = np.abs(x).T @ np.abs(x) + lam * eye  # |K|ᵀ|K| over the keys K = [X; √λ I]
    ky = np.abs(x).T @ np.abs(y)
    aq = np.abs(xq)
    ns, nc, nq = _two(s), _two(c), _two(xq)

    def f(magnitude: Array, new: Array) -> float:
        return 2 * g * _fro(magnitude) + unit * _fro(new)

    m = alpha * s
    e_m = f(alpha * kk, m)
    e_q = f(alpha * aq @ kk, xq @ m.T)
    e_pb = e_pq = e_u = 0.0
    out = [0.0, e_m + e_q]
    for k in range(steps):
        am, u = np.abs(m), s @ m
        f_ub, f_uq = f(am.T @ kk, u), f(aq @ am.T @ kk, xq @ u.T)
        if k == 0:  # the first layer A also writes p = C m
            e_pb = nc * e_m + f(am.T @ ky, c @ m)
            e_pq = nc * e_q + f(aq @ am.T @ ky, xq @ (c @ m).T)
        out.append(e_m + e_q + (ns * e_m + f_ub) + (e_u + ns * e_q + f_uq) + e_pb + e_pq)
        resid = eye - s @ m
        nr, nrt, nrq = _two(resid), _two(resid.T), _two(resid @ xq.T)
        m_next = m @ (2 * eye - s @ m)
        au, ap = np.abs(u), np.abs(c @ m)
        f_mb = f((eye + au.T) @ am.T, m_next)
        f_mq = f((aq + np.abs(xq @ u.T)) @ am.T, xq @ m_next.T)
        f_pb = f((eye + au.T) @ ap.T, c @ m_next)
        f_pq = f((aq + np.abs(xq @ u.T)) @ ap.T, xq @ (c @ m_next).T)
        f_u = 2 * g * _fro(aq @ au.T)
        nm, ncm = _two(m), _two(c @ m)
        e_pq = e_pq + nrq * e_pb + ncm * (e_u + ns * e_q + f_uq) + f_pq
        e_pb = _two(2 * eye - s @ m) * e_pb + _two(c @ m @ s) * e_m + ncm * f_ub + f_pb
        e_u_next = e_u + ns * e_q + f_uq + nq * (ns * e_m + f_ub) + f_u
        e_q = nrt * e_q + nrq * e_m + nm * (e_u + f_uq) + f_mq
        e_m = (nr + nrt) * e_m + nm * f_ub + f_mb
        e_u, m = e_u_next, m_next
        out.append(e_m + e_q + e_pb + e_pq + e_u)
    return np.array(out)


def kernel_slots(d: int, dy: int) -> dict[str, slice]:
    """Columns of the kernel Richardson stack's slots ``(x, y, one, n, f, m, s, a, u, p)``."""
    return _slots(
        {"x": d, "y": dy, "one": 1, "n": 1, "f": 1, "m": 1, "s": 1, "a": dy, "u": dy, "p": dy}
    )


def _kernel_weights(
    x: NDArray[np.longdouble], xq: NDArray[np.longdouble], h: float, lam: float
) -> tuple[NDArray[np.longdouble], NDArray[np.longdouble]]:
    """``k(z_t, x_j)`` for every token position ``z_t`` (the context, the sink at 0, the
    queries) against the context, ``(T, N)``, and the degrees ``D_t + λ``."""
    points = np.vstack([x, np.zeros((1, x.shape[1]), dtype=EXT), xq])
    kern = np.exp(-((points[:, None, :] - x[None, :, :]) ** 2).sum(-1) / EXT(2 * h * h))
    return kern, kern.sum(1) + EXT(lam)


def kernel_states(
    x: Array, y: Array, xq: Array, h: float, lam: float, omega: float, steps: int
) -> list[Array]:
    """Preconditioned Richardson for Gaussian kernel ridge regression (Yan et al. 2026),
    ``α_{t+1} = α_t + ω (D + λI)⁻¹ (Y − (K + λI) α_t)`` from ``α_0 = 0``, read into
    :class:`attnreg.constructions.KernelRichardsonStack`'s slots: the ``2·steps + 3`` states
    ``(N + 1 + M, d + 4dy + 5)`` — after attention ``A_t`` every token (a query at its ``x``;
    the sink at 0) holds ``u = k(z, ·) α_t / (D(z) + λ)`` and, from ``A_0`` on,
    ``s = λ/(D(z) + λ)``; after the step block ``E_t`` the context holds ``a = α_{t+1}`` and
    ``u = 0``; the read-out ``R`` writes ``p = k(z, ·) α_K / (D(z) + λ)`` and ``Q`` scales it
    to ``k(z, ·) α_K``."""
    xe, ye, qe = _ext(x, y, xq)
    (n, d), dy = xe.shape, ye.shape[1]
    sl = kernel_slots(d, dy)
    kern, deg = _kernel_weights(xe, qe, h, lam)
    weights = kern / deg[:, None]
    state = np.zeros((n + 1 + len(qe), d + 4 * dy + 5), dtype=EXT)
    state[:n, sl["x"]], state[n + 1 :, sl["x"]], state[:n, sl["y"]] = xe, qe, ye
    state[:, sl["one"]] = 1
    state[:n, sl["n"]] = (xe * xe).sum(1, keepdims=True) / 2
    state[n + 1 :, sl["n"]] = (qe * qe).sum(1, keepdims=True) / 2
    state[:n, sl["f"]], state[n, sl["m"]] = 1, 1
    states = [state.copy()]
    alpha = np.zeros_like(ye)
    precond = 1 / deg[:n, None]
    for _ in range(steps):
        state[:, sl["u"]] = weights @ alpha
        state[:, sl["s"]] = EXT(lam) / deg[:, None]
        states.append(state.copy())
        alpha = alpha + EXT(omega) * precond * (ye - kern[:n] @ alpha - EXT(lam) * alpha)
        state[:n, sl["a"]], state[:, sl["u"]] = alpha, 0
        states.append(state.copy())
    state[:, sl["p"]] = weights @ alpha
    states.append(state.copy())
    state[:, sl["p"]] = kern @ alpha
    states.append(state)
    return _f64(states)


def kernel_bounds(
    x: Array, y: Array, xq: Array, h: float, lam: float, omega: float, steps: int, unit: float
) -> Array:
    """Bounds on the largest error of every state of :func:`kernel_states`: the analysis of
    ``tests/test_kernel_richardson.py`` — a layer's relative error ``r = u (2(3W + N + 1) +
    4 W S + 2W + 3dy + 2)`` (``W`` the width, ``S`` the largest ``|β · score|``), the local
    error ``r (ω m_t + max|α_t|)`` of step t with ``m_t = max_i [P(|Y| + (K + λI)|α_t|)]_i``,
    carried to ``max|α̂_t − α_t| ≤ e_t = √(N κ(P)) Σ_{τ<t}`` of them; the u-slots
    ``r max (w|α_t|) + e_t`` (``w`` the attention weights, summing to at most 1), the s-slot
    ``r max s``, the read-out ``r max (w|α_K|) + e_K`` and after ``Q``
    ``max_z (D(z) e_K + 2 r (k(z, ·)|α_K|))``."""
    n, d = x.shape
    dy = y.shape[1]
    width = d + 4 * dy + 5
    xe, qe = _ext(x, xq)
    kern, deg = (np.asarray(a, dtype=np.float64) for a in _kernel_weights(xe, qe, h, lam))
    points = np.vstack([x, np.zeros((1, d)), xq])
    ctx = (points @ x.T - (x * x).sum(1)[None, :] / 2) / h**2
    sink = (points * points).sum(1) / (2 * h**2) + np.log(lam)
    score = float(max(np.abs(ctx).max(), np.abs(sink).max()))
    r = unit * (2 * (3 * width + n + 1) + 4 * width * score + 2 * width + 3 * dy + 2)
    growth = np.sqrt(n * deg[:n].max() / deg[:n].min())
    weights, s_err = kern / deg[:, None], r * float((lam / deg).max())
    gram = kern[:n] + lam * np.eye(n)
    alpha, e_alpha = np.zeros_like(y), 0.0
    out = [0.0]
    for _ in range(steps):
        out.append(max(e_alpha, s_err, r * float((weights @ np.abs(alpha)).max()) + e_alpha))
        m_t = float(((np.abs(y) + gram @ np.abs(alpha)) / deg[:n, None]).max())
        e_alpha += growth * r * (omega * m_t + float(np.abs(alpha).max()))
        alpha = alpha + omega * (y - gram @ alpha) / deg[:n, None]
        out.append(max(e_alpha, s_err))
    read = r * float((weights @ np.abs(alpha)).max()) + e_alpha
    out.append(max(e_alpha, s_err, read))
    pred = float((deg * e_alpha + 2 * r * (kern @ np.abs(alpha)).max(1)).max())
    out.append(max(e_alpha, s_err, pred))
    return np.array(out)
