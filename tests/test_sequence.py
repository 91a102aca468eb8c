"""Every sequence layer equals its estimator, in float64, in both forms (chunked and
token-by-token), against numpy references written in ``sequence_refs`` (no attnreg code): the
gradient step on weighted least squares, the LMS loop, the proximal step, the decayed ridge
solve per prefix and the kernel-weighted local fits. Keys are random, correlated
(nearly collinear columns), rank-deficient (rank 2 < d, and t < d at the first positions) and
of extreme scale. Tolerances are rounding-error bounds: ``u · n · magnitude`` for sums of
products, ``u · d · t · ‖q_t‖ · Σ β‖k‖‖v‖`` for the contractive online updates (errors are not
amplified), ``u · n · κ`` for the solves.

Extreme scales use exact equivariances with powers of two (exact in binary floating point):
keys and queries times ``s`` with ``β / s²`` (delta rule, Longhorn) or ``λ s²`` (Mesa, local
linear) give the same outputs as the unscaled problem, whose reference is well conditioned.
"""

import importlib

import numpy as np
import pytest
import sequence_refs as ref
import torch

from attnreg.sequence import (
    delta_rule,
    linear_attention,
    local_linear_attention,
    longhorn,
    mesa,
    softmax_attention,
)

mesa_module = importlib.import_module("attnreg.sequence.mesa")  # the module (mesa is the layer)
tiling = importlib.import_module("attnreg.sequence.tiling")

B, H, T, D, DV = 1, 2, 80, 6, 3  # T > 64: two or more blocks of the chunked forms
KINDS = ("random", "correlated", "rank_deficient")
MODES = ("fused", "chunk", "recurrent")
MESA_MODES = ("chunk", "recurrent")  # Mesa has no fused form
BIG, SMALL = 2.0**330, 2.0**-330


def draw(kind, seed, t=T, d=D, normalize=False):
    """``q, k, v`` as numpy float64 ``(B, H, t, ·)`` with keys of the given kind."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, H, t, d))
    v = rng.standard_normal((B, H, t, DV))
    if kind == "random":
        k = rng.standard_normal((B, H, t, d))
    elif kind == "correlated":  # every column ≈ one common factor
        k = rng.standard_normal((B, H, t, 1)) + 0.01 * rng.standard_normal((B, H, t, d))
    else:  # rank 2 < d
        k = rng.standard_normal((B, H, t, 2)) @ rng.standard_normal((2, d))
    if normalize:
        k = k / np.linalg.norm(k, axis=-1, keepdims=True)
    return q, k, v


def gates(seed, kind, t=T):
    """Per-token factors in (0.5, 1) (``"token"``), a per-head constant (``"head"``) or none."""
    rng = np.random.default_rng(seed + 1000)
    if kind == "token":
        return rng.uniform(0.5, 1.0, (B, H, t))
    if kind == "head":
        return np.array([0.9, 0.99])
    return None


def full(alpha, t=T):
    """A decay argument as ``(B, H, t)`` for the references (1 without decay)."""
    if alpha is None:
        return np.ones((B, H, t))
    return np.broadcast_to(alpha.reshape(1, H, 1) if alpha.ndim == 1 else alpha, (B, H, t))


def budget(alpha, t=T):
    return ref.heads(ref.log_budget, full(alpha, t))


def per_position_norm(x):
    return np.linalg.norm(x, axis=-1)


# ------------------------------------------------------------------------------ linear


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("decay", [None, "head", "token"])
@pytest.mark.parametrize("kind", KINDS)
def test_linear_attention_is_the_weighted_sum(kind, decay, mode):
    q, k, v = draw(kind, 1)
    alpha = gates(1, decay)
    out = linear_attention(q, k, v, decay=alpha, scale=0.7, mode=mode).numpy()
    want, mag = ref.heads(ref.weighted_sum, 0.7 * q, k, v, full(alpha))
    tol = 4 * ref.U64 * (D + budget(alpha))[..., None] * mag
    assert np.all(np.abs(out - want) <= tol)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("s", [BIG, SMALL])
def test_linear_attention_at_extreme_scale(s, mode):
    q, k, v = draw("random", 2)
    alpha = gates(2, "token")
    out = linear_attention(q, s * k, v, decay=alpha, mode=mode).numpy()
    want, mag = ref.heads(ref.weighted_sum, q, k, v, alpha)
    tol = 4 * ref.U64 * (D + budget(alpha))[..., None] * mag
    assert np.all(np.abs(out / s - want) <= tol)


@pytest.mark.parametrize("mode", MODES)
def test_linear_attention_is_one_gradient_step_from_zero(mode):
    """``W_t = 0 − ∇_W ½ Σ_{i≤t} γ_{t,i} ‖W k_i − v_i‖²`` at ``W = 0``, the gradient by autograd."""
    q, k, v = (torch.from_numpy(a) for a in draw("random", 3, t=10))
    alpha = torch.from_numpy(gates(3, "token", t=10))
    out = linear_attention(q, k, v, decay=alpha, mode=mode)
    for h in range(H):
        for t in range(10):
            w = torch.zeros(DV, D, dtype=torch.float64, requires_grad=True)
            weights = torch.tensor(ref.decay_weights(alpha[0, h].numpy())[t, : t + 1])
            resid = k[0, h, : t + 1] @ w.T - v[0, h, : t + 1]
            (0.5 * (weights * resid.square().sum(-1)).sum()).backward()
            step = -w.grad @ q[0, h, t]
            mag = weights @ (k[0, h, : t + 1].abs().sum(-1) * v[0, h, : t + 1].abs().max())
            bound = 4 * ref.U64 * ref.log_budget(alpha[0, h].numpy())[t] * D * float(mag)
            bound *= float(q[0, h, t].abs().max())
            assert float((out[0, h, t] - step).abs().max()) <= bound


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("decay", [None, "token"])
def test_normalized_linear_attention_is_a_kernel_smoother(decay, mode):
    """Positive features: ``o_t = Σ γ (q_tᵀk_i) v_i / Σ γ (q_tᵀk_i)``, no cancellation in the
    denominator, so the bound is ``u · n · (magnitude / denominator + |o_t|)``."""
    q, k, v = draw("random", 4)
    q, k = np.exp(q / 2), np.exp(k / 2)
    alpha = gates(4, decay)
    out = linear_attention(q, k, v, decay=alpha, normalize=True, mode=mode).numpy()
    num, mag = ref.heads(ref.weighted_sum, q, k, v, full(alpha))
    den, _ = ref.heads(ref.weighted_sum, q, k, np.ones((B, H, T, 1)), full(alpha))
    want = num / den
    tol = 8 * ref.U64 * (D + budget(alpha))[..., None] * (mag / den + np.abs(want))
    assert np.all(np.abs(out - want) <= tol)


# -------------------------------------------------------------------------- delta rule


def online_bound(q, mags, alpha, t=T):
    """``8 u (d + n_t) t ‖q_t‖ m_t``: a contractive online update adds at most ``u · O(d) · m_i``
    of rounding per step and never amplifies it (``γ_{t,i} m_i ≤ m_t``)."""
    steps = np.arange(1, t + 1)
    return 8 * ref.U64 * (D + budget(alpha, t)) * steps * per_position_norm(q) * mags


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("decay", [None, "token"])
@pytest.mark.parametrize("kind", KINDS)
def test_delta_rule_is_online_least_squares(kind, decay, mode):
    q, k, v = draw(kind, 5, normalize=True)
    beta = np.random.default_rng(5).uniform(0.0, 1.5, (B, H, T))
    alpha = gates(5, decay)
    out = delta_rule(q, k, v, beta, decay=alpha, scale=0.5, mode=mode).numpy()
    want, mags = ref.heads(ref.lms, 0.5 * q, k, v, beta, full(alpha))
    err = per_position_norm(out - want)
    assert np.all(err <= online_bound(0.5 * q, mags, alpha))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("s", [BIG, SMALL])
def test_delta_rule_at_extreme_scale(s, mode):
    """Keys and queries times ``s``, ``β / s²``: the same LMS iterates up to the factor ``1/s``
    on the state, so the same outputs."""
    q, k, v = draw("correlated", 6, normalize=True)
    beta = np.random.default_rng(6).uniform(0.0, 1.0, (B, H, T))
    alpha = gates(6, "token")
    out = delta_rule(s * q, s * k, v, beta / s**2, decay=alpha, mode=mode).numpy()
    want, mags = ref.heads(ref.lms, q, k, v, beta, alpha)
    assert np.all(per_position_norm(out - want) <= online_bound(q, mags, alpha))


@pytest.mark.parametrize("mode", MODES)
def test_delta_rule_recalls_orthonormal_keys(mode):
    """β = 1 and orthonormal keys: every stored value is recalled exactly; writing a key again
    overwrites its value (the delta rule replaces, linear attention would add)."""
    rng = np.random.default_rng(7)
    keys = np.linalg.qr(rng.standard_normal((D, D)))[0].T  # rows orthonormal
    values = rng.standard_normal((D + 1, DV))
    k = np.vstack([keys, keys[:1], keys])  # write all, overwrite key 0, then read all
    v = np.vstack([values[:D], values[D:], np.zeros((D, DV))])
    beta = np.r_[np.ones(D + 1), np.zeros(D)]
    q = np.vstack([np.zeros((D + 1, D)), keys])

    def lift(a):
        return np.broadcast_to(a, (B, H, *a.shape)).copy()

    out = delta_rule(lift(q), lift(k), lift(v), lift(beta), mode=mode).numpy()
    recalled = out[0, 0, D + 1 :]
    want = np.vstack([values[D:], values[1:D]])
    assert np.abs(recalled - want).max() <= 8 * ref.U64 * D * (D + 1) * np.abs(values).max()


# ---------------------------------------------------------------------------- Longhorn


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", KINDS)
def test_longhorn_is_the_proximal_step(kind, mode):
    q, k, v = draw(kind, 8)
    beta = np.random.default_rng(8).uniform(0.0, 3.0, (B, H, T))
    out = longhorn(q, k, v, beta, mode=mode).numpy()
    want = ref.heads(ref.proximal, q, k, v, beta)
    eps = beta / (1 + beta * (k * k).sum(-1))
    _, mags = ref.heads(ref.lms, q, k, v, eps, np.ones((B, H, T)))
    assert np.all(per_position_norm(out - want) <= online_bound(q, mags, None))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("s", [BIG, SMALL])
def test_longhorn_at_extreme_scale(s, mode):
    q, k, v = draw("random", 9)
    beta = np.random.default_rng(9).uniform(0.0, 3.0, (B, H, T))
    out = longhorn(s * q, s * k, v, beta / s**2, mode=mode).numpy()
    want = ref.heads(ref.proximal, q, k, v, beta)
    eps = beta / (1 + beta * (k * k).sum(-1))
    _, mags = ref.heads(ref.lms, q, k, v, eps, np.ones((B, H, T)))
    assert np.all(per_position_norm(out - want) <= online_bound(q, mags, None))


@pytest.mark.parametrize("mode", MODES)
def test_longhorn_with_overflowing_step_is_the_projection(mode):
    """β_t ‖k_t‖² beyond the floating range (keys 2^300, β 2^500): the proximal step is its
    β → ∞ limit, the projection ``W ← W + (v − W k) kᵀ / ‖k‖²`` (Kaczmarz / normalised LMS),
    not the 0 that ``β / (1 + β ‖k‖²) = β / ∞`` would give."""
    q, k, v = draw("random", 23)
    out = longhorn(BIG * q, BIG * k, v, 2.0**500, mode=mode).numpy()
    unit = (k * k).sum(-1)
    want, mags = ref.heads(ref.lms, q, k, v, 1 / unit, np.ones((B, H, T)))
    assert np.all(per_position_norm(out - want) <= online_bound(q, mags, None))


def test_longhorn_step_is_the_argmin():
    """Each state is ``argmin_W ‖W − W_{t−1}‖² + β_t ‖W k_t − v_t‖²``, minimised numerically by
    scipy (BFGS to gradient norm ≤ g: the objective is 2-strongly convex, so ‖W − W*‖ ≤ g / 2)."""
    from scipy.optimize import minimize

    q, k, v = draw("random", 10, t=4, d=3)
    beta = np.random.default_rng(10).uniform(0.5, 2.0, (B, H, 4))
    out = longhorn(q, k, v, beta).numpy()
    gtol = 1e-10
    w = np.zeros((DV, 3))
    for t in range(4):
        kt, vt, bt, prev = k[0, 0, t], v[0, 0, t], beta[0, 0, t], w.copy()

        def objective(x, kt=kt, vt=vt, bt=bt, prev=prev):
            m = x.reshape(DV, 3)
            r = m @ kt - vt
            f = ((m - prev) ** 2).sum() + bt * (r @ r)
            return f, (2 * (m - prev) + 2 * bt * np.outer(r, kt)).ravel()

        options = {"gtol": gtol, "norm": 2}
        res = minimize(objective, prev.ravel(), jac=True, method="BFGS", options=options)
        assert res.success
        w = res.x.reshape(DV, 3)
        # each step's minimiser is within gtol/2 of the exact one (2-strong convexity) and the
        # proximal map is non-expansive, so the chain is within (t+1)·gtol/2; plus rounding
        qn = np.linalg.norm(q[0, 0, t])
        rounding = 16 * ref.U64 * (t + 1) * 3 * np.abs(v[0, 0, : t + 1]).max()
        bound = ((t + 1) * gtol / 2 + rounding) * qn
        assert np.linalg.norm(out[0, 0, t] - w @ q[0, 0, t]) <= bound


@pytest.mark.parametrize("mode", MODES)
def test_longhorn_diagonal_approximation(mode):
    q, k, v = draw("random", 11)
    beta = np.random.default_rng(11).uniform(0.0, 3.0, (B, H, T))
    out = longhorn(q, k, v, beta, diagonal=True, mode=mode).numpy()
    want = ref.heads(ref.diagonal_proximal, q, k, v, beta)
    eps = beta / (1 + beta * (k * k).sum(-1))
    _, mags = ref.heads(ref.lms, q, k, v, eps, np.ones((B, H, T)))
    strongest = 1 - eps * (k * k).max(-1)  # the smallest per-coordinate decay of each token
    assert np.all(per_position_norm(out - want) <= online_bound(q, mags, strongest))


# -------------------------------------------------------------------------------- Mesa


def mesa_bound(parts, alpha, t=T):
    return 8 * ref.U64 * (D + budget(alpha, t)) * parts


@pytest.mark.parametrize("mode", MESA_MODES)
@pytest.mark.parametrize("decay", [None, "token"])
@pytest.mark.parametrize("kind", KINDS)
def test_mesa_is_decayed_ridge_per_prefix(kind, decay, mode):
    q, k, v = draw(kind, 12)
    rng = np.random.default_rng(12)
    beta = rng.uniform(0.1, 1.0, (B, H, T))
    lam = rng.uniform(0.05, 1.0, (H, D))
    alpha = gates(12, decay)
    out = mesa(q, k, v, beta, decay=alpha, lam=lam, scale=0.8, mode=mode).numpy()
    want, parts = ref.heads(
        lambda qq, kk, vv, bb, aa, ll: ref.decayed_ridge(qq, kk, vv, bb, aa, ll),
        0.8 * q,
        k,
        v,
        beta,
        full(alpha),
        np.broadcast_to(lam, (B, H, D)),
    )
    assert np.all(per_position_norm(out - want) <= mesa_bound(parts, alpha))


@pytest.mark.parametrize("mode", MESA_MODES)
@pytest.mark.parametrize("decay", [None, "token"])
@pytest.mark.parametrize("s", [BIG, SMALL])
def test_mesa_at_extreme_scale(s, decay, mode):
    """Keys and queries times ``s``, ``λ s²``: ``H^{kk} + Λ`` scales by ``s²``, ``H^{kv}`` by
    ``s``, so ``o_t`` is unchanged (without decay the chunked form is the blocked one)."""
    q, k, v = draw("correlated", 13)
    beta = np.random.default_rng(13).uniform(0.1, 1.0, (B, H, T))
    alpha = gates(13, decay)
    out = mesa(s * q, s * k, v, beta, decay=alpha, lam=0.3 * s**2, mode=mode).numpy()
    want, parts = ref.heads(
        lambda qq, kk, vv, bb, aa: ref.decayed_ridge(qq, kk, vv, bb, aa, 0.3),
        q,
        k,
        v,
        beta,
        full(alpha),
    )
    assert np.all(per_position_norm(out - want) <= mesa_bound(parts, alpha))


@pytest.mark.parametrize("limit", [0.0, mesa_module.MAX_GROWTH, np.inf])
@pytest.mark.parametrize("kind", KINDS)
def test_mesa_blocked_form_is_ridge_per_prefix(kind, limit, monkeypatch):
    """Without decay, in ten blocks of 8 tokens (t < d in the first): the blocked Woodbury form
    in every block (growth limit ∞), the per-position solve in every block (limit 0) and the
    default mix are the numpy ridge fit per prefix, with ``β = 0`` tokens (a whole block of
    them, and every fifth token)."""
    monkeypatch.setattr(mesa_module, "MAX_GROWTH", limit)
    q, k, v = draw(kind, 17)
    rng = np.random.default_rng(17)
    beta = rng.uniform(0.1, 1.0, (B, H, T))
    beta[..., 8:16] = 0.0
    beta[..., ::5] = 0.0
    lam = rng.uniform(0.05, 1.0, (H, D))
    args = (torch.from_numpy(np.ascontiguousarray(a)) for a in (q, k, v, beta))
    out = mesa_module.mesa_chunked(*args, None, torch.from_numpy(lam), chunk=8).numpy()
    lams = np.broadcast_to(lam, (B, H, D))
    want, parts = ref.heads(ref.decayed_ridge, q, k, v, beta, full(None), lams)
    assert np.all(per_position_norm(out - want) <= mesa_bound(parts, None))


def ridge_per_token(q, k, v, beta, lam):
    """Mesa without decay, as defined (one head): ``o_t = H^{kv}_tᵀ (H^{kk}_t + λI)⁻¹ q_t`` with
    ``H^{kk}_t = Σ_{i≤t} β_i k_i k_iᵀ``, ``H^{kv}_t = Σ_{i≤t} β_i k_i v_iᵀ``, one numpy solve per
    token."""
    kk, kv, out = lam * np.eye(k.shape[1]), np.zeros((k.shape[1], v.shape[1])), []
    for t in range(len(k)):
        kk = kk + beta[t] * np.outer(k[t], k[t])
        kv = kv + beta[t] * np.outer(k[t], v[t])
        out.append(kv.T @ np.linalg.solve(kk, q[t]))
    return np.array(out)


def test_mesa_with_unit_decay_is_the_blocked_form(monkeypatch):
    """``decay`` all 1 takes the blocked form (the per-position solve, patched to fail, is never
    called) and gives, like ``decay=None``, the ridge solve per token written above, within the
    bound (before: the two calls were compared with each other, both ``mesa_woodbury``)."""
    q, k, v = draw("random", 18)
    beta = np.random.default_rng(18).uniform(0.1, 1.0, (B, H, T))
    plain = mesa(q, k, v, beta, lam=0.4, mode="chunk").numpy()

    def per_position(*args, **kwargs):
        raise AssertionError("decay all 1 solved per position")

    monkeypatch.setattr(mesa_module, "mesa_per_position", per_position)
    ones = mesa(q, k, v, beta, decay=np.ones((B, H, T)), lam=0.4, mode="chunk").numpy()
    want = ref.heads(lambda qq, kk, vv, bb: ridge_per_token(qq, kk, vv, bb, 0.4), q, k, v, beta)
    _, parts = ref.heads(
        lambda qq, kk, vv, bb: ref.decayed_ridge(qq, kk, vv, bb, np.ones(T), 0.4), q, k, v, beta
    )
    for out in (plain, ones):
        assert np.all(per_position_norm(out - want) <= mesa_bound(parts, None))


@pytest.mark.parametrize("size", [1, 5, 8, 9, 17, 64, 70])
def test_lower_inverse_is_the_triangular_inverse(size):
    """``tiling.lower_inverse`` (halves, row substitution below 8 rows) against numpy's
    inverse: lower triangular, residual ``|X L − I| ≤ 2 n u |X| |L|`` (the bound of triangular
    inversion, Higham 2002 §8.3), and within ``2 n u κ`` of ``numpy.linalg.inv``."""
    rng = np.random.default_rng(size)
    low = np.tril(rng.standard_normal((3, size, size))) / np.sqrt(size)
    low[..., np.arange(size), np.arange(size)] = rng.uniform(0.5, 2.0, (3, size))
    x = tiling.lower_inverse(torch.from_numpy(low)).numpy()
    assert np.all(np.triu(x, 1) == 0)
    eye = np.eye(size)
    assert np.all(np.abs(x @ low - eye) <= 2 * size * ref.U64 * (np.abs(x) @ np.abs(low)))
    want = np.linalg.inv(low)
    kappa = np.linalg.norm(low, 2, axis=(-2, -1)) * np.linalg.norm(want, 2, axis=(-2, -1))
    err = np.linalg.norm(x - want, 2, axis=(-2, -1)) / np.linalg.norm(want, 2, axis=(-2, -1))
    assert np.all(err <= 2 * size * ref.U64 * kappa)


@pytest.mark.parametrize("mode", MESA_MODES)
def test_mesa_tends_to_least_squares(mode):
    """λ → 0, β = 1, no decay: once t ≥ d the output is the least-squares fit ``W_t q_t``
    (numpy ``lstsq``); ridge moves it by at most ``λ ‖(KᵀK)⁻¹‖ ‖W_LS‖ ‖q‖`` (+ rounding ``u κ``)."""
    q, k, v = draw("random", 14)
    lam = 1e-9
    out = mesa(q, k, v, 1.0, lam=lam, mode=mode).numpy()
    for h in range(H):
        for t in range(D - 1, T):
            kt, vt = k[0, h, : t + 1], v[0, h, : t + 1]
            w = np.linalg.lstsq(kt, vt, rcond=None)[0].T
            inv = np.linalg.norm(np.linalg.inv(kt.T @ kt), 2)
            kappa = inv * np.linalg.norm(kt.T @ kt, 2)
            qn = np.linalg.norm(q[0, h, t])
            bound = lam * inv * np.linalg.norm(w, 2) * qn
            bound += 16 * ref.U64 * (D + t) * kappa * np.linalg.norm(w, 2) * qn
            assert np.linalg.norm(out[0, h, t] - w @ q[0, h, t]) <= bound


def test_mesa_with_unit_weights_is_the_causal_ridge_estimator():
    """The same numbers as :func:`attnreg.estimators.causal_ridge` (β = 1, no decay, one λ),
    both within their bound of the numpy reference."""
    from attnreg.estimators import causal_ridge

    q, k, v = draw("random", 15)
    out = mesa(q, k, v, 1.0, lam=0.5).numpy()
    other = causal_ridge(*(torch.from_numpy(a[0]) for a in (k, v, q)), 0.5).numpy()[0]
    want, parts = ref.decayed_ridge(q[0, 0], k[0, 0], v[0, 0], np.ones(T), np.ones(T), 0.5)
    bound = 8 * ref.U64 * (D + ref.log_budget(np.ones(T))) * parts
    assert np.all(np.linalg.norm(out[0, 0] - want, axis=-1) <= bound)
    assert np.all(np.linalg.norm(other - want, axis=-1) <= bound)


# -------------------------------------------------------------- softmax and local linear


@pytest.mark.parametrize("scale", [0.3, 40.0])
@pytest.mark.parametrize("kind", KINDS)
def test_softmax_attention_is_the_nadaraya_watson_smoother(kind, scale):
    q, k, v = draw(kind, 16)
    out = softmax_attention(q, k, v, scale=scale).numpy()
    want, mags = ref.heads(lambda qq, kk, vv: ref.smoother(qq, kk, vv, scale), q, k, v)
    assert np.all(np.abs(out - want) <= 4 * ref.U64 * mags[..., None])


def test_softmax_attention_with_values_wider_than_keys():
    """d_v > d_k: the fused kernel sees queries and keys zero-padded to the value width."""
    rng = np.random.default_rng(22)
    q, k = rng.standard_normal((B, H, T, 2)), rng.standard_normal((B, H, T, 2))
    v = rng.standard_normal((B, H, T, 5))
    out = softmax_attention(q, k, v, scale=0.9).numpy()
    want, mags = ref.heads(lambda qq, kk, vv: ref.smoother(qq, kk, vv, 0.9), q, k, v)
    assert np.all(np.abs(out - want) <= 4 * ref.U64 * mags[..., None])


@pytest.mark.parametrize("s", [BIG, SMALL])
def test_softmax_attention_at_extreme_scale(s):
    """Keys times ``s`` and the scale divided by ``s``: the same scores, the same weights."""
    q, k, v = draw("random", 17)
    out = softmax_attention(q, s * k, v, scale=0.5 / s).numpy()
    want, mags = ref.heads(lambda qq, kk, vv: ref.smoother(qq, kk, vv, 0.5), q, k, v)
    assert np.all(np.abs(out - want) <= 4 * ref.U64 * mags[..., None])


@pytest.mark.parametrize("kind", KINDS)
def test_local_linear_attention_is_the_local_linear_fit(kind):
    q, k, v = draw(kind, 18, t=16)
    out = local_linear_attention(q, k, v, lam=0.1, scale=0.5).numpy()
    want, mags = ref.heads(lambda qq, kk, vv: ref.local_linear_fit(qq, kk, vv, 0.1, 0.5), q, k, v)
    assert np.all(np.abs(out - want) <= 4 * ref.U64 * mags[..., None])


@pytest.mark.parametrize("s", [BIG, SMALL])
def test_local_linear_attention_at_extreme_scale(s):
    """Keys and queries times ``s``, λ s², scale / s²: the same weights and ``Ŵ / s``, so the
    same intercepts."""
    q, k, v = draw("random", 19, t=16)
    out = local_linear_attention(s * q, s * k, v, lam=0.1 * s**2, scale=0.5 / s**2).numpy()
    want, mags = ref.heads(lambda qq, kk, vv: ref.local_linear_fit(qq, kk, vv, 0.1, 0.5), q, k, v)
    assert np.all(np.abs(out - want) <= 4 * ref.U64 * mags[..., None])


def test_local_linear_attention_generalises_softmax_attention():
    """λ → ∞ forces ``W → 0``: the intercept tends to the weighted mean (softmax attention),
    at distance ≤ ``‖Σ^{vk}‖ ‖q − k̄‖ / λ``."""
    q, k, v = draw("random", 20, t=16)
    lam = 1e8
    out = local_linear_attention(q, k, v, lam=lam, scale=0.5).numpy()
    mean = softmax_attention(q, k, v, scale=0.5).numpy()
    spread = np.abs(k).max() * 2 + np.abs(q).max()
    bound = D * DV * spread * 2 * np.abs(v).max() * spread / lam
    assert np.abs(out - mean).max() <= bound
    assert np.abs(out - mean).max() > 0  # and not equal: the slope is there


# ---------------------------------------------------------------- chunked vs recurrent


@pytest.mark.parametrize("decayed", [False, True])
def test_chunked_forms_equal_the_recurrences_at_moderate_length(decayed):
    """T = 600 (two segments of 512 tokens; nine full blocks of 64 and a padded one, eighteen of
    32 for the delta rules), d = 16:
    the chunked forms equal the token-by-token recurrences, both within the bounds of the numpy
    references."""
    t, d = 600, 16
    rng = np.random.default_rng(21)
    q = rng.standard_normal((1, 1, t, d))
    k = rng.standard_normal((1, 1, t, d))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v = rng.standard_normal((1, 1, t, DV))
    beta = rng.uniform(0.0, 1.0, (1, 1, t))
    alpha = rng.uniform(0.9, 1.0, (1, 1, t)) if decayed else np.ones((1, 1, t))
    gate = alpha if decayed else None
    steps = np.arange(1, t + 1)
    n = d + ref.log_budget(alpha[0, 0])

    lin = [linear_attention(q, k, v, decay=gate, mode=m).numpy()[0, 0] for m in MODES]
    want, mag = ref.weighted_sum(q[0, 0], k[0, 0], v[0, 0], alpha[0, 0])
    for out in lin:
        assert np.all(np.abs(out - want) <= 4 * ref.U64 * n[:, None] * mag)

    delta = [delta_rule(q, k, v, beta, decay=gate, mode=m).numpy()[0, 0] for m in MODES]
    want, mags = ref.lms(q[0, 0], k[0, 0], v[0, 0], beta[0, 0], alpha[0, 0])
    bound = 8 * ref.U64 * n * steps * np.linalg.norm(q[0, 0], axis=-1) * mags
    for out in delta:
        assert np.all(np.linalg.norm(out - want, axis=-1) <= bound)
    assert np.all(np.linalg.norm(delta[0] - delta[1], axis=-1) <= 2 * bound)

    diag = [longhorn(q, k, v, beta, diagonal=True, mode=m).numpy()[0, 0] for m in MODES]
    want = ref.diagonal_proximal(q[0, 0], k[0, 0], v[0, 0], beta[0, 0])
    eps = beta[0, 0] / (1 + beta[0, 0])  # unit keys
    _, mags = ref.lms(q[0, 0], k[0, 0], v[0, 0], eps, np.ones(t))
    n_diag = d + steps * (1 + np.cumsum(-np.log1p(-eps)))  # the per-coordinate log-decays
    bound = 8 * ref.U64 * n_diag * steps * np.linalg.norm(q[0, 0], axis=-1) * mags
    for out in diag:
        assert np.all(np.linalg.norm(out - want, axis=-1) <= bound)

    lam = 0.5
    ms = [mesa(q, k, v, beta, decay=gate, lam=lam, mode=m).numpy()[0, 0] for m in MESA_MODES]
    want, parts = ref.decayed_ridge(q[0, 0], k[0, 0], v[0, 0], beta[0, 0], alpha[0, 0], lam)
    for out in ms:
        assert np.all(np.linalg.norm(out - want, axis=-1) <= 8 * ref.U64 * n * parts)


@pytest.mark.parametrize("c", [32, 64])
@pytest.mark.parametrize("kind", KINDS)
def test_the_ut_transform_solve_is_a_triangular_solve(kind, c):
    """The delta rule's block solve ``[Ũ | W] = T diag(β) [V | K]`` with ``T = (I + A)⁻¹`` from
    ``lower_inverse`` (as ``delta_chunked`` forms it) against scipy's triangular solve of
    ``(I + A) X = diag(β) [V | K]``, for ``A`` the strictly lower part of ``diag(β) K Kᵀ`` of
    random, nearly collinear and rank-deficient keys, in float64: within
    ``4 u C |T| |I + A| |X|`` elementwise (the forward error of a triangular solve; the inverse
    followed by a product meets it here)."""
    from scipy.linalg import solve_triangular

    from attnreg.sequence.tiling import lower_inverse

    _, k, v = draw(kind, 31, t=c, d=D)
    beta = np.random.default_rng(31).uniform(0.0, 1.5, c)
    lower = np.tril(beta[:, None] * (k[0, 0] @ k[0, 0].T), -1)
    unit = np.eye(c) + lower
    inverse = lower_inverse(torch.from_numpy(unit)).numpy()
    got = (inverse * beta) @ np.hstack([v[0, 0], k[0, 0]])
    rhs = beta[:, None] * np.hstack([v[0, 0], k[0, 0]])
    want = solve_triangular(unit, rhs, lower=True, unit_diagonal=True)
    t_abs = np.abs(solve_triangular(unit, np.eye(c), lower=True, unit_diagonal=True))
    assert np.all(np.abs(got - want) <= 4 * ref.U64 * c * (t_abs @ np.abs(unit) @ np.abs(want)))
