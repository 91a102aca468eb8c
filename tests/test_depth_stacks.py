"""The fixed-weight stacks (GD, GD++, preconditioned GD, Newton–Schulz) against numpy, layer by
layer, from the hidden state of their one forward pass.

Error bounds (u = 2⁻⁵³, ``γ_n = n u / (1 − n u)``):

* **one layer** — the core computes ``Σ_keys (keyᵀ KQ t) PV key`` as a chain of products over at
  most ``n = N_keys + 3D`` terms, numpy computes the same sums in another order: the two differ
  componentwise by at most ``2 γ_n R + 2u |t'|`` with ``R`` the update computed from absolute
  values and ``t'`` the new state (the residual addition).
* **Newton, from the start** — both runs perturb ``M_{k+1} = 2M_k − M_k S M_k`` by local errors
  ``F_k`` (the one-layer bound above, in Frobenius norm). To first order the difference obeys
  ``E_{k+1} = E_k R_k + R_k E_k + F_k`` (``R_k = I − S M_k``); in the eigenbasis of ``S`` entry
  ``(i, j)`` is multiplied by ``2 − r_i − r_j ≤ 2 − r_i`` with ``r_i = λ_i m_k(λ_i) ∈ [0, 1]``, so
  from step ``j`` to ``K`` by at most ``A_{j,K} = max_i Π_{j<l<K} (2 − r_i^{(l)}) = max_i
  m_K(λ_i)/m_{j+1}(λ_i)`` (``≤ 1/(αλ_min²) ≈ κ²`` on the range; ``2^{K−j−1}`` on the null space
  of a singular ``S``, Söderström & Stewart 1974). ``‖E_K‖_F ≤ Σ_j A_{j,K} ‖F_j‖_F``, which is
  ``O(K u κ)`` relative to ``‖S⁻¹‖`` because ``‖F_j‖`` is small exactly while ``A`` is large.
* **GD, from the start** — ``W_{l+1} = W_l + η (C − W_l S) Γ`` contracts perturbations
  (``‖I − η Γ S‖ ≤ 1`` for ``η ≤ 2/λ_max``), so errors add: ``Σ_l ‖F_l‖``, linear in depth.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.linear_model import Ridge as SkRidge

from attnreg.constructions import LSAStack, NewtonStack, newton_alpha

U64 = 2.0**-53


def gamma(n: int) -> float:
    return n * U64 / (1 - n * U64)


def design(n: int, d: int, kappa: float, seed: int, dy: int = 1, m: int = 5):
    """X (n, d) with singular values log-spaced from 1 to κ^{-1/2} (so κ(XᵀX) = κ on its
    range), Y (n, dy), queries (m, d)."""
    rng = np.random.default_rng(seed)
    r = min(n, d)
    u, _ = np.linalg.qr(rng.normal(size=(n, r)))
    v, _ = np.linalg.qr(rng.normal(size=(d, r)))
    s = kappa ** (-0.5 * np.arange(r) / max(r - 1, 1))
    x = (u * s) @ v.T
    return x, rng.normal(size=(n, dy)), rng.normal(size=(m, d))


def batch(*tasks):
    return tuple(np.stack(parts) for parts in zip(*tasks, strict=True))


# ---------------------------------------------------------------------------------------------
# Newton–Schulz: the slot algorithm of the module docstring, in numpy


def slots(d: int, dy: int) -> dict[str, slice]:
    edges = np.cumsum([0, d, dy, d, d, d, dy])
    names = ("x", "y", "e", "m", "u", "p")
    return {k: slice(int(a), int(b)) for k, a, b in zip(names, edges[:-1], edges[1:], strict=True)}


def newton_layer(t, layer, n, d, dy, alpha, lam, absolute=False):
    """The update of every token by layer ``layer`` (0: start; odd: A; even > 0: B)."""
    f = np.abs if absolute else (lambda a: a)
    s = slots(d, dy)
    keys = f(t[: n + d])
    kv = keys[:, s["x"]] + math.sqrt(lam) * keys[:, s["e"]]
    t = f(t)
    upd = np.zeros_like(t)
    if layer == 0:
        upd[:, s["m"]] = alpha * (t[:, s["e"]] @ kv.T) @ kv
    elif layer % 2 == 1:
        scores = t[:, s["m"]] @ kv.T
        upd[:, s["u"]] = scores @ kv
        if layer == 1:
            upd[:, s["p"]] = scores @ keys[:, s["y"]]
    else:
        diff = t[:, s["e"]] + t[:, s["u"]] if absolute else t[:, s["e"]] - t[:, s["u"]]
        scores = diff @ keys[:, s["e"]].T
        upd[:, s["m"]] = scores @ keys[:, s["m"]]
        upd[:, s["p"]] = scores @ keys[:, s["p"]]
        upd[:, s["u"]] = (
            (1 if absolute else -1) * (t[:, s["e"]] @ keys[:, s["e"]].T) @ keys[:, s["u"]]
        )
    return upd


CASES = [  # (N, d, dy, κ(XᵀX), ridge)
    (12, 4, 1, 1.0, 0.0),
    (12, 4, 2, 1e4, 0.0),
    (4, 4, 1, 1e2, 0.0),
    (3, 5, 2, 1e3, 0.0),
    (3, 5, 1, 1e4, 0.3),
    (20, 6, 3, 1e4, 1e-3),
]


@pytest.mark.parametrize(("n", "d", "dy", "kappa", "lam"), CASES)
def test_newton_every_layer_is_the_numpy_layer(n, d, dy, kappa, lam):
    x, y, q = batch(*(design(n, d, kappa, seed, dy) for seed in (1, 2)))
    alpha = newton_alpha(x, lam)
    steps = 6
    stack = NewtonStack(d, dy, steps, alpha, lam)
    states = [s.numpy() for s in stack.states(x, y, q)]
    assert len(states) == 2 + 2 * steps
    width = 4 * d + 2 * dy
    g = gamma(n + d + 3 * width)
    for layer in range(stack.n_layers):
        for b in range(2):
            before, after = states[layer][b], states[layer + 1][b]
            expected = before + newton_layer(before, layer, n, d, dy, alpha, lam)
            mag = newton_layer(before, layer, n, d, dy, alpha, lam, absolute=True)
            bound = 2 * g * mag + 2 * U64 * np.abs(expected)
            assert (np.abs(after - expected) <= bound).all(), (layer, b)


def newton_bounds(x, y, q, alpha, lam, steps, n_tok):
    """First-order bounds (module docstring) on the difference between two float64 runs of
    the iteration: ``‖E_k‖_F`` for the iterate after each step ``k = 0..steps``, and on each
    query's prediction after ``steps`` steps."""
    g = gamma(n_tok)
    d = x.shape[1]
    s_mat = x.T @ x + lam * np.eye(d)
    gram_abs = np.linalg.norm(np.abs(x).T @ np.abs(x) + lam * np.eye(d))
    yx_abs = np.linalg.norm(np.abs(y).T @ np.abs(x))
    c = y.T @ x
    cz = math.sqrt(1 + np.linalg.norm(c, 2) ** 2)
    lam_i = np.clip(np.linalg.eigvalsh(s_mat), 0, None)
    lam_i[lam_i <= lam_i.max() * 100 * d * U64] = 0.0  # the null space of a singular S
    m = [alpha * lam_i]
    for _ in range(steps):
        m.append(m[-1] * (2 - lam_i * m[-1]))
    factors = [np.where(lam_i > 0, 2 - lam_i * mk, 2.0) for mk in m]  # 2 − r_i per step

    def amp(j: int, k: int) -> float:  # Π_{j<l<k} (2 − r_i^{(l)}), max over i
        return float(np.max(np.prod(factors[j + 1 : k], axis=0))) if k > j + 1 else 1.0

    m_f = [float(np.linalg.norm(mk)) for mk in m]  # ‖M_k‖_F (M_k = V diag(m) Vᵀ)
    m_2 = [float(np.max(np.abs(mk))) for mk in m]
    u_f = [float(np.linalg.norm(lam_i * mk)) for mk in m]  # ‖S M_k‖_F
    f_u = [2 * g * gram_abs * mf for mf in m_f]  # layer A: u = S m
    f_m = [
        2 * g * m_f[k] * (math.sqrt(d) + u_f[k]) + 2 * U64 * m_f[k + 1] + m_2[k] * f_u[k]
        for k in range(steps)
    ]
    e0 = 2 * g * alpha * gram_abs * math.sqrt(d)  # layer 0: M_0 = αS
    e = [e0]
    for k in range(1, steps + 1):
        e.append(amp(-1, k) * e0 + sum(amp(j, k) * f_m[j] for j in range(k)))
    # p-slots of the basis tokens: Z_k = [I; C] M_k, the same right-multiplication
    z0 = cz * e[0] + 2 * g * yx_abs * m_f[0]
    f_z = [cz * f_m[k] + cz * e[k] for k in range(steps)]
    dz = amp(-1, steps) * z0 + sum(amp(j, steps) * f_z[j] for j in range(steps))
    dz_k = [amp(-1, k) * z0 + sum(amp(j, k) * f_z[j] for j in range(k)) for k in range(steps + 1)]
    # each query: m_q ← m_q + M(x_q − u_q) (no growth: ‖I − M S‖ ≤ 1), p_q ← p_q + P(x_q − u_q)
    out = []
    for xq in q:
        nq = float(np.linalg.norm(xq))
        dm = 2 * g * alpha * gram_abs * nq
        dp = np.linalg.norm(c, 2) * dm + 2 * g * yx_abs * m_2[0] * nq
        for k in range(steps):
            local = 2 * g * (m_f[k] + cz * m_f[k]) * 3 * nq + cz * m_2[k] * f_u[k] * nq
            dp = dp + np.linalg.norm(c, 2) * dm + dz_k[k] * nq + local
            dm = dm + e[k] * nq + local
        out.append(dp)
    return e, dz, np.array(out)


@pytest.mark.parametrize(("n", "d", "dy", "kappa", "lam"), CASES)
def test_newton_iterates_match_a_numpy_loop_from_the_start(n, d, dy, kappa, lam):
    x, y, q = batch(*(design(n, d, kappa, seed, dy) for seed in (3, 4)))
    alpha = newton_alpha(x, lam)
    steps = 12
    stack = NewtonStack(d, dy, steps, alpha, lam)
    states = stack.states(x, y, q)
    width = 4 * d + 2 * dy
    for b in range(2):
        s_mat = x[b].T @ x[b] + lam * np.eye(d)
        e, _, _ = newton_bounds(x[b], y[b], q[b], alpha, lam, steps, n + d + 3 * width)
        mk = alpha * s_mat
        for k in range(steps + 1):
            got = stack.iterate(states[2 * k + 1], n)[b].numpy()
            assert np.linalg.norm(got - mk) <= 2 * e[k], (k, b)
            mk = 2 * mk - mk @ s_mat @ mk


@pytest.mark.parametrize(("n", "d", "dy", "kappa", "lam"), CASES)
def test_newton_residual_squares_every_step(n, d, dy, kappa, lam):
    """``‖I − S M_k‖₂ = ‖I − S M_0‖₂^{2^k}`` on the range of ``S``, read from the stack."""
    x, y, q = design(n, d, kappa, 5, dy)
    alpha = newton_alpha(x, lam)
    steps = 10
    stack = NewtonStack(d, dy, steps, alpha, lam)
    states = stack.states(x, y, q)
    s_mat = x.T @ x + lam * np.eye(d)
    lam_i, vecs = np.linalg.eigh(s_mat)
    keep = lam_i > lam_i.max() * 100 * d * U64
    basis = vecs[:, keep]
    rho = float(np.max(np.abs(1 - alpha * lam_i[keep] ** 2)))
    e, _, _ = newton_bounds(x, y, q, alpha, lam, steps, n + d + 3 * (4 * d + 2 * dy))
    norm_s = float(np.linalg.norm(s_mat, 2))
    d_rho = 2 * alpha * norm_s * (d * U64 * norm_s + gamma(n) * np.linalg.norm(np.abs(x) ** 2))
    for k in range(steps + 1):
        mk = stack.iterate(states[2 * k + 1], n)[0].numpy()
        r = basis.T @ (np.eye(d) - s_mat @ mk) @ basis
        got = float(np.linalg.norm(r, 2))
        power = 2**k
        want = rho**power
        bound = (
            norm_s * 2 * e[k]
            + gamma(d) * norm_s * np.linalg.norm(mk)
            + power * rho ** (power - 1) * d_rho
            + 4 * d * U64
        )
        assert abs(got - want) <= bound, (k, got, want, bound)
    assert rho < 1


def steps_for(rho: float, eps: float) -> int:
    return max(1, math.ceil(math.log2(math.log(eps) / math.log(rho))))


@pytest.mark.parametrize(("n", "d", "dy", "kappa", "lam"), CASES)
def test_newton_prediction_is_ols_or_ridge(n, d, dy, kappa, lam):
    x, y, q = design(n, d, kappa, 6, dy)
    alpha = newton_alpha(x, lam)
    s_mat = x.T @ x + lam * np.eye(d)
    lam_i = np.linalg.eigvalsh(s_mat)
    keep = lam_i > lam_i.max() * 100 * d * U64
    rho = float(np.max(np.abs(1 - alpha * lam_i[keep] ** 2)))
    steps = steps_for(rho, U64)
    got = NewtonStack(d, dy, steps, alpha, lam).predict(x, y, q).numpy()
    if lam == 0:
        w = np.linalg.lstsq(x, y, rcond=None)[0]
        kx = np.linalg.cond(x[:, :] if n >= d else x.T)
        resid = np.linalg.norm(y - x @ w)
        sv = np.linalg.svd(x, compute_uv=False)
        ref_err = gamma(n * d) * kx * (2 * np.linalg.norm(w) + (kx + 1) * resid / sv[0])
    else:
        w = SkRidge(alpha=lam, fit_intercept=False).fit(x, y).coef_.reshape(dy, d).T
        ks = np.linalg.cond(s_mat)
        ref_err = gamma(n + d) * ks * (np.linalg.norm(w) + np.linalg.norm(x.T @ y) / lam_i[-1])
    ref = q @ w
    _, _, pred_bound = newton_bounds(x, y, q, alpha, lam, steps, n + d + 3 * (4 * d + 2 * dy))
    qn = np.linalg.norm(q, axis=1)
    trunc = np.linalg.norm(w, 2) * rho ** (2**steps) * qn
    bound = trunc + pred_bound + ref_err * qn
    err = np.linalg.norm(got - ref, axis=1)
    assert (err <= bound).all(), (err, bound)


def test_newton_stack_is_batched_and_unbatched_alike():
    x, y, q = batch(*(design(6, 3, 10.0, s, 2) for s in (7, 8, 9)))
    stack = NewtonStack(3, 2, 8, newton_alpha(x))
    out = stack.predict(x, y, q).numpy()
    assert out.shape == (3, 5, 2)
    for b in range(3):
        single = stack.predict(x[b], y[b], q[b]).numpy()
        assert single.shape == (5, 2)
        _, _, bound = newton_bounds(x[b], y[b], q[b], stack.alpha, 0.0, 8, 6 + 3 + 3 * 16)
        assert (np.linalg.norm(single - out[b], axis=1) <= bound).all()


def test_newton_refuses_bad_arguments():
    with pytest.raises(ValueError, match="steps"):
        NewtonStack(3, 1, 0, 0.1)
    with pytest.raises(ValueError, match="alpha"):
        NewtonStack(3, 1, 2, -1.0)
    with pytest.raises(ValueError, match="ridge"):
        NewtonStack(3, 1, 2, 0.1, ridge=-1.0)
    with pytest.raises(ValueError, match="x_ctx"):
        newton_alpha(np.zeros((1, 4, 3)))
    with pytest.raises(ValueError, match="x_ctx/y_ctx"):
        NewtonStack(3, 1, 2, 0.1).predict(
            np.ones((1, 4, 2)), np.ones((1, 4, 1)), np.ones((1, 1, 2))
        )


def test_states_are_the_forward_pass_the_hooks_see():
    """state_{l+1} = state_l + the output of layer l's core, bit for bit (the hooks read it);
    the last state's read-out is ``predict`` (which updates only the queries in the last
    layer) up to that layer's rounding."""
    n, d, dy = 7, 3, 2
    x, y, q = design(n, d, 100.0, 10, dy)
    alpha = newton_alpha(x)
    for stack in (NewtonStack(d, dy, 3, alpha), LSAStack.gd(d, dy, 0.3, steps=4)):
        names = [f"layers.{i}.hook_output" for i in range(stack.n_layers)]
        states = stack.states(x, y, q)
        _, cache = stack.run_with_cache(x, y, q, names=names, method="states")
        for i, name in enumerate(names):
            assert torch.equal(states[i + 1], states[i] + cache[name])
        depth = stack.depth_predictions(x, y, q)
        assert depth.shape == (stack.n_layers + 1, 1, 5, dy)
        final = stack.predict(x, y, q).numpy()
        before = states[-2][0].numpy()
        last = stack.n_layers - 1
        if isinstance(stack, NewtonStack):
            mag = newton_layer(before, last, n, d, dy, alpha, 0.0, absolute=True)[-5:, -dy:]
        else:
            kq, pv = stack.key_query(last)[0].numpy(), stack.value_projection(last)[0].numpy()
            mag = lsa_layer(before, n, kq, pv, absolute=True)[n:, d:]
        bound = 2 * gamma(n + d + 3 * stack.width) * mag + 2 * U64 * np.abs(final)
        assert (np.abs(depth[-1, 0].numpy() - final) <= bound).all()


# ---------------------------------------------------------------------------------------------
# GD, GD++ and preconditioned GD: the token layer in numpy (mean over the context)


def lsa_layer(t, n, kq, pv, absolute=False):
    """``e_j ← e_j + PV (1/N) Σ_{i≤N} e_i (e_iᵀ KQ e_j)`` for every token (the update only)."""
    f = np.abs if absolute else (lambda a: a)
    ctx = f(t[:n])
    return (f(t) @ f(kq).T @ ctx.T) @ ctx @ f(pv).T / n


def gd_family(d, dy, n, steps, rng):
    w0 = rng.normal(size=(dy, d))
    g = rng.normal(size=(d, d))
    g = g @ g.T / d + np.eye(d)
    etas = list(rng.uniform(0.05, 0.4, steps))
    gammas = list(rng.uniform(0.0, 0.05, steps))
    return {
        "gd": LSAStack.gd(d, dy, etas, steps, w0),
        "gd++": LSAStack.gd_plus_plus(d, dy, n, etas, gammas, steps),
        "preconditioned": LSAStack.preconditioned(g / np.linalg.norm(g, 2), dy, etas, steps, w0),
    }


@pytest.mark.parametrize(
    ("n", "d", "dy", "kappa"), [(12, 4, 1, 1.0), (4, 6, 2, 1e4), (5, 5, 1, 1e3)]
)
def test_gd_stacks_every_layer_is_the_numpy_layer(n, d, dy, kappa):
    x, y, q = batch(*(design(n, d, kappa, seed, dy) for seed in (11, 12)))
    x = x * math.sqrt(n)  # unit scale of XᵀX/N
    for name, stack in gd_family(d, dy, n, 5, np.random.default_rng(0)).items():
        states = [s.numpy() for s in stack.states(x, y, q)]
        g = gamma(n + 3 * (d + dy))
        for layer in range(stack.n_layers):
            kq = stack.key_query(layer)[0].numpy()
            pv = stack.value_projection(layer)[0].numpy()
            for b in range(2):
                before, after = states[layer][b], states[layer + 1][b]
                expected = before + lsa_layer(before, n, kq, pv)
                bound = 2 * g * lsa_layer(before, n, kq, pv, True) + 2 * U64 * np.abs(expected)
                assert (np.abs(after - expected) <= bound).all(), (name, layer, b)


@pytest.mark.parametrize(
    ("n", "d", "dy", "kappa"), [(30, 4, 2, 1e2), (3, 6, 1, 1e4), (6, 6, 1, 10.0)]
)
def test_gd_and_preconditioned_states_are_the_weight_iteration(n, d, dy, kappa):
    """Context y-entries ``r_l = y_i − (W_l − W_0) x_i``, query ``−W_l x_q`` with ``W_{l+1} =
    W_l + η (C − W_l S) Γ`` (mean convention), from the start. The stack's residuals move by
    ``I − η XΓXᵀ/N`` (norm ≤ 1), so their errors add (linear in depth); the query sums them
    (quadratic); numpy's ``W`` iteration moves by ``I − η SΓ``, similar to a contraction
    through ``Γ^{1/2}`` (factor ``√κ(Γ)``)."""
    x, y, q = design(n, d, kappa, 13, dy)
    x = x * math.sqrt(n)
    rng = np.random.default_rng(1)
    w0 = rng.normal(size=(dy, d))
    s_mat, c = x.T @ x / n, y.T @ x / n
    ax, aq = np.abs(x), np.abs(q)
    xw0 = np.linalg.norm(ax @ np.abs(w0).T)
    for gam in (np.eye(d), np.diag(rng.uniform(0.5, 1.5, d))):
        ag = np.abs(gam)
        top = np.linalg.eigvals(gam @ s_mat).real.max()
        eta = 1.9 / top
        layers = 60
        stack = LSAStack.preconditioned(gam, dy, eta, layers, w0)
        states = [s[0].numpy() for s in stack.states(x, y, q)]
        g = gamma(n + 3 * (d + dy))
        kxg = np.linalg.norm(ax @ ag @ ax.T) * eta / n
        kqg = np.linalg.norm(aq @ ag @ ax.T) * eta / n
        couple = np.linalg.norm(x @ gam @ q.T, 2) * eta / n
        cond_g = math.sqrt(np.linalg.cond(gam))
        w = w0.copy()
        d_ctx = d_w = 0.0
        d_q = 2 * gamma(d) * np.linalg.norm(aq @ np.abs(w0).T)  # the embedding −W_0 x_q
        for layer in range(layers + 1):
            ctx, qry = y - x @ (w - w0).T, -q @ w.T
            diff_ctx = np.linalg.norm(states[layer][:n, d:] - ctx)
            diff_q = np.linalg.norm(states[layer][n:, d:] - qry)
            assert diff_ctx <= d_ctx + np.linalg.norm(x, 2) * d_w, layer
            assert diff_q <= d_q + np.linalg.norm(q, 2) * d_w, layer
            np.testing.assert_array_equal(states[layer][:, :d], np.vstack([x, q]))
            w_next = w + eta * (c - w @ s_mat) @ gam
            r_next = y - x @ (w_next - w0).T
            f_ctx = g * kxg * (xw0 + np.linalg.norm(ctx)) + 2 * U64 * np.linalg.norm(r_next)
            f_q = g * kqg * (xw0 + np.linalg.norm(ctx)) + 2 * U64 * np.linalg.norm(q @ w_next.T)
            f_w = gamma(d + 2) * eta * np.linalg.norm(
                (np.abs(c) + np.abs(w) @ np.abs(s_mat)) @ ag
            ) + U64 * np.linalg.norm(w_next)
            d_q = d_q + couple * d_ctx + f_q
            d_ctx = d_ctx + f_ctx
            d_w = d_w + cond_g * f_w
            w = w_next


@pytest.mark.parametrize(
    ("n", "d", "dy", "kappa"), [(20, 4, 2, 1e2), (3, 6, 1, 1e4), (6, 6, 1, 10.0)]
)
def test_gd_plus_plus_states_are_the_token_iteration_from_the_start(n, d, dy, kappa):
    """GD++ from the embedding, every state against the token loop written here:
    ``x_j ← x_j − γ Σ_i x_i x_iᵀ x_j``, ``y_j ← y_j − (η/N) Σ_i y_i x_iᵀ x_j`` (query y from 0).
    Both runs make the one-layer error above per layer (``2γ_n R + 2u|t'|`` each), and a layer
    ``T ↦ T + T KQᵀ E_cᵀE_c PVᵀ / N`` amplifies an earlier error by at most
    ``1 + ‖KQ‖‖PV‖(‖E_c‖² + 2‖T‖‖E_c‖)/N`` (its derivative), so the bound is the recursion
    ``B_{l+1} = L_l B_l + 2 F_l``."""
    x, y, q = design(n, d, kappa, 14, dy)
    x = x * math.sqrt(n)
    etas = [0.3, 0.2, 0.4, 0.1, 0.25, 0.35]
    gammas = [g / n for g in (0.1, 0.05, 0.2, 0.1, 0.15, 0.05)]
    stack = LSAStack.gd_plus_plus(d, dy, n, etas, gammas, len(etas))
    states = [s[0].numpy() for s in stack.states(x, y, q)]
    assert len(states) == len(etas) + 1
    g = gamma(n + 4 * (d + dy) + 2)
    xs, ys, qx, qy = x.copy(), y.copy(), q.copy(), np.zeros((len(q), dy))
    bound = 0.0
    for layer, (eta, gam) in enumerate(zip(etas, gammas, strict=True)):
        want = np.vstack([np.hstack([xs, ys]), np.hstack([qx, qy])])
        assert np.abs(states[layer] - want).max() <= bound, layer
        s_sum = sum(np.outer(xs[i], xs[i]) for i in range(n))
        c_sum = sum(np.outer(ys[i], xs[i]) for i in range(n))
        new = (
            np.array([xj - gam * s_sum @ xj for xj in xs]),
            np.array([yj - (eta / n) * c_sum @ xj for xj, yj in zip(xs, ys, strict=True)]),
            np.array([xj - gam * s_sum @ xj for xj in qx]),
            np.array([yj - (eta / n) * c_sum @ xj for xj, yj in zip(qx, qy, strict=True)]),
        )
        kq, pv = stack.key_query(layer)[0].numpy(), stack.value_projection(layer)[0].numpy()
        ctx = want[:n]
        lip = (
            1
            + np.linalg.norm(kq, 2)
            * np.linalg.norm(pv, 2)
            * (np.linalg.norm(ctx, 2) ** 2 + 2 * np.linalg.norm(want, 2) * np.linalg.norm(ctx, 2))
            / n
        )
        after = np.vstack([np.hstack(new[:2]), np.hstack(new[2:])])
        local = 2 * g * np.linalg.norm(lsa_layer(want, n, kq, pv, absolute=True))
        bound = lip * bound + 2 * (local + 2 * U64 * np.linalg.norm(after))
        xs, ys, qx, qy = new
    want = np.vstack([np.hstack([xs, ys]), np.hstack([qx, qy])])
    assert np.abs(states[-1] - want).max() <= bound, bound
