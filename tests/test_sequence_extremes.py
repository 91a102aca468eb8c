"""The sequence layers at extreme inputs (issue 29): a ridge system that is singular in floating
point is a ``ValueError`` naming ``lam``; inputs so small that ``q·k`` underflows are refused
like the estimators refuse them (never silent zeros); Longhorn with keys of magnitude 1e200 is
computed (its step ``ε = β / (1 + β‖k‖²)`` underflows, ``‖k‖²`` overflows, the output does not).
Each test failed on 9e9883b (a raw ``LinAlgError``, zeros, zeros or a false overflow error)."""

from __future__ import annotations

from decimal import Decimal, localcontext

import numpy as np
import pytest
import torch

from attnreg.sequence import delta_rule, linear_attention, longhorn, mesa

U = np.finfo(np.float64).eps / 2
MODES = ["fused", "chunk", "recurrent"]


def qkv(t_len: int, d: int, d_v: int = 2, seed: int = 0):
    rng = np.random.default_rng(seed)
    shapes = [(1, 2, t_len, d), (1, 2, t_len, d), (1, 2, t_len, d_v)]
    return tuple(rng.normal(size=s) for s in shapes)


@pytest.mark.parametrize("mode", ["chunk", "recurrent"])
@pytest.mark.parametrize("decay", [None, 0.9])
def test_a_singular_ridge_system_names_lam(mode, decay):
    q, k, v = qkv(3, 5)  # T = 3 < d_k = 5: H^{kk} has rank 3, and 1e-17 vanishes against it
    with pytest.raises(ValueError, match=r"lam: .*singular.*lam is too small for the rank"):
        mesa(q, k, v, 1.0, lam=1e-17, decay=decay, mode=mode)


LAYERS = {
    "linear_attention": lambda q, k, v, mode: linear_attention(q, k, v, mode=mode),
    "delta_rule": lambda q, k, v, mode: delta_rule(q, k, v, 0.5, mode=mode),
    "longhorn": lambda q, k, v, mode: longhorn(q, k, v, 0.5, mode=mode),
    "longhorn diagonal": lambda q, k, v, mode: longhorn(q, k, v, 0.5, diagonal=True, mode=mode),
    "mesa": lambda q, k, v, mode: mesa(
        q, k, v, 1.0, lam=1.0, mode="recurrent" if mode == "fused" else mode
    ),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_underflowing_products_are_refused(name, mode):
    """``q, k ~ 1e-200``: every ``q·k`` (≈ 1e-400) underflows in float64, so the output is 0
    while the answer is not: a ``ValueError`` naming q and k and asking to rescale."""
    q, k, v = qkv(4, 3)
    with pytest.raises(ValueError, match=rf"{name.split()[0]}: .*q and k .*underflow.*rescale"):
        LAYERS[name](q * 1e-200, k * 1e-200, v, mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_one_head_underflowing_beside_a_normal_head_is_refused_naming_it(name, mode):
    """The heads are separate regressions: head 1's ``q, k ~ 1e-200`` underflow while head 0's
    answer is normal, so the batch element is not all zero — the check is per head."""
    q, k, v = qkv(4, 3)
    q[:, 1] *= 1e-200
    k[:, 1] *= 1e-200
    with pytest.raises(ValueError, match=r"underflow \(batch element 0, head 1\).*rescale"):
        LAYERS[name](q, k, v, mode)


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_a_genuinely_zero_answer_at_tiny_scale_is_returned(name):
    q, k, v = qkv(4, 3)
    out = LAYERS[name](q * 1e-200, k * 1e-200, 0 * v, "chunk")
    assert torch.equal(out, torch.zeros_like(out))


def longhorn_decimal(q, k, v, beta, diagonal):
    """Longhorn written as defined, ``S_t = (I − ε_t k_t k_tᵀ) S_{t−1} + ε_t k_t v_tᵀ`` (its
    diagonal with ``diag(1 − ε_t k_t ⊙ k_t)``), ``ε_t = β / (1 + β k_tᵀ k_t)``, ``o_t = S_tᵀ q_t``,
    in 50-digit decimal arithmetic (exponents unbounded: ``‖k‖² ~ 1e400`` is exact enough), for
    one head; also ``m_t = ‖q_t‖ Σ_{i≤t} ε_i ‖k_i‖ ‖v_i‖``, the size of the terms (the update is
    a contraction: ``0 ≤ ε k_i² ≤ ε ‖k‖² < 1``)."""
    with localcontext() as ctx:
        ctx.prec = 50
        ctx.Emin, ctx.Emax = -9999, 9999
        dq, dk, dv = ([[Decimal(float(x)) for x in row] for row in a] for a in (q, k, v))
        b = Decimal(beta)
        d, d_v = len(dk[0]), len(dv[0])
        s = [[Decimal(0)] * d_v for _ in range(d)]
        out, mags, mag = [], [], Decimal(0)
        for qt, kt, vt in zip(dq, dk, dv, strict=True):
            sq = sum(x * x for x in kt)
            eps = b / (1 + b * sq)
            if diagonal:
                s = [[(1 - eps * kt[i] * kt[i]) * s[i][j] for j in range(d_v)] for i in range(d)]
            else:
                ks = [sum(kt[i] * s[i][j] for i in range(d)) for j in range(d_v)]  # kᵀS
                s = [[s[i][j] - eps * kt[i] * ks[j] for j in range(d_v)] for i in range(d)]
            s = [[s[i][j] + eps * kt[i] * vt[j] for j in range(d_v)] for i in range(d)]
            out.append([float(sum(s[i][j] * qt[i] for i in range(d))) for j in range(d_v)])
            norm_v = sum(x * x for x in vt).sqrt()
            mag += eps * sq.sqrt() * norm_v
            mags.append(float(mag * sum(x * x for x in qt).sqrt()))
    return np.array(out), np.array(mags)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("diagonal", [True, False])
def test_longhorn_with_huge_keys_against_decimal_arithmetic(mode, diagonal):
    """``k ~ 1e200``: the answer is ~1e-200, representable; within ``16 (T + d) u m_t``."""
    q, k, v = qkv(5, 3)
    k[0, 0, 2] *= 1e-200  # one token of ordinary size among the huge ones
    k = k * 1e200
    got = longhorn(q, k, v, 1.0, diagonal=diagonal, mode=mode).numpy()
    for h in range(2):
        ref, mag = longhorn_decimal(q[0, h], k[0, h], v[0, h], 1.0, diagonal)
        assert np.all(np.abs(ref) > 0)
        err = np.linalg.norm(got[0, h] - ref, axis=-1)
        assert np.all(err <= 16 * (5 + 3) * U * mag), (h, err / mag)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("diagonal", [True, False])
def test_longhorn_gradients_stay_finite_beside_a_huge_key(mode, diagonal):
    """A key ~1e200 among ordinary ones and a token with β = 0: the branch of the step not
    taken holds no inf, so no 0·inf reaches the gradients."""
    q, k, v = (torch.from_numpy(x) for x in qkv(4, 3))
    k[:, :, 1] *= 1e200
    k.requires_grad_()
    beta = torch.tensor([0.0, 0.5, 0.7, 0.9], dtype=torch.float64).requires_grad_()
    longhorn(
        q, k, v, beta.view(1, 1, 4).expand(1, 2, 4), diagonal=diagonal, mode=mode
    ).sum().backward()
    assert torch.isfinite(beta.grad).all() and torch.isfinite(k.grad).all()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size", [1e-200, 1e200])
def test_normalized_linear_attention_at_extreme_scale(size, mode):
    """Normalised, ``o_t = Σ (q_tᵀk_i) v_i / Σ (q_tᵀk_i)`` does not depend on the scale of q or
    k: at ``q, k ~ 1e±200`` (``q·k`` under- or overflows) it is the numpy kernel smoother of
    the unscaled inputs, within ``8 u (d + t) (Σ |q·k| |v| / Σ q·k + |o_t|)`` (on 9e9883b: a false
    "z_tᵀ q_t = 0" or "overflowed" error)."""
    q, k, v = qkv(6, 3)
    q, k = np.exp(q / 2), np.exp(k / 2)  # positive features: no cancellation in Σ q·k
    out = linear_attention(q * size, k * size, v, normalize=True, mode=mode).numpy()
    for h in range(2):
        kernel = np.tril(q[0, h] @ k[0, h].T)
        den = kernel.sum(1, keepdims=True)
        want = kernel @ v[0, h] / den
        steps = np.arange(1, 7)[:, None]
        tol = 8 * U * (3 + steps) * (kernel @ np.abs(v[0, h]) / den + np.abs(want))
        assert np.all(np.abs(out[0, h] - want) <= tol)
