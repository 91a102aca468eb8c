"""The layers of 2025 as regressions, each against a reference written from its stated
optimiser or estimator, independent of the layer's code: here (``torch.optim.SGD`` stepping
the map token by token; mini-batch SGD through ``F.layer_norm``) or the numpy references that
``attnreg verify`` uses too (``attnreg.studies.verify.references``: one set). DeltaProduct is
SGD taking ``n_h`` steps per token on ``½‖W k − v‖²`` after a decay; the generalized delta
rule the loop of its update; forgetting and stick-breaking attention their weighted means
written out. float64; bounds from the rounding of each recurrence. Cases: random keys,
correlated keys, ``T < d_k``, extreme-scale keys, several heads and ``T`` not a multiple of
any block size; then the special cases that make each a layer we know.
"""

import numpy as np
import pytest
import sequence_refs as ref
import torch
import torch.nn.functional as F

from attnreg.sequence import (
    comba,
    delta_product,
    forgetting_attention,
    generalized_delta_rule,
    log_linear_attention,
    momentum_delta_rule,
    softmax_attention,
    stick_breaking_attention,
    titans,
    ttt_linear,
)
from attnreg.studies.verify import references as vref

B, H, DV = 2, 3, 4
MODES = ("fused", "chunk", "recurrent")


def keys(rng, shape, correlated=False):
    k = rng.standard_normal(shape)
    if correlated:  # every column ≈ one common factor: ρ ≈ 0.9 between coordinates
        k = rng.standard_normal((*shape[:-1], 1)) + np.sqrt(1 / 9) * k
    return k / np.linalg.norm(k, axis=-1, keepdims=True)


def sgd_delta_product(q, k, v, beta, alpha):
    """One head: ``W`` (``d_v × d_k``, a ``torch`` parameter) multiplied by ``α_t`` (or
    ``Diag(α_t)`` from the right), then ``n_h`` steps of ``torch.optim.SGD`` with learning rate
    ``β_{t,j}`` on ``½‖W k_{t,j} − v_{t,j}‖²``; ``o_t = W q_t``. Also the magnitudes
    ``m_t = Σ γ β ‖k‖ ‖v‖`` over every step so far (the LMS bound's)."""
    w = torch.zeros(v.shape[-1], k.shape[-1], dtype=torch.float64, requires_grad=True)
    opt = torch.optim.SGD([w], lr=1.0)
    out, mags, mag = [], [], 0.0
    for t in range(k.shape[0]):
        with torch.no_grad():
            w.mul_(torch.as_tensor(alpha[t]))
        mag *= np.max(alpha[t])
        for j in range(k.shape[1]):
            kt, vt = torch.as_tensor(k[t, j]), torch.as_tensor(v[t, j])
            opt.param_groups[0]["lr"] = float(beta[t, j])
            opt.zero_grad()
            (0.5 * ((w @ kt - vt) ** 2).sum()).backward()
            opt.step()
            mag += beta[t, j] * np.linalg.norm(k[t, j]) * np.linalg.norm(v[t, j])
        out.append((w @ torch.as_tensor(q[t])).detach().numpy())
        mags.append(mag)
    return np.array(out), np.array(mags)


def product_data(t, d_k, n_h, seed, correlated=False, key_scale=1.0, channels=False):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, H, t, d_k))
    k = keys(rng, (B, H, t, n_h, d_k), correlated) * key_scale
    v = rng.standard_normal((B, H, t, n_h, DV))
    beta = rng.uniform(0.0, 1.5, (B, H, t, n_h)) / key_scale**2  # β ‖k‖² ≤ 1.5
    alpha = rng.uniform(0.4, 1.0, (B, H, t, d_k) if channels else (B, H, t))
    return q, k, v, beta, alpha


PRODUCT_CASES = {
    "random": dict(t=37, d_k=6, n_h=3),
    "correlated": dict(t=20, d_k=5, n_h=2, correlated=True),
    "T < d_k": dict(t=3, d_k=8, n_h=2),
    "huge keys": dict(t=21, d_k=4, n_h=3, key_scale=1e100),
    "tiny keys": dict(t=21, d_k=4, n_h=2, key_scale=1e-100),
    "one gate per channel": dict(t=37, d_k=6, n_h=3, channels=True),
    "past a fused chunk": dict(t=70, d_k=3, n_h=2),
}


PRODUCT_RUNS = [(case, mode) for case in PRODUCT_CASES for mode in MODES]


@pytest.mark.parametrize(("case", "mode"), PRODUCT_RUNS)
def test_delta_product_is_sgd_taking_n_h_steps_per_token(case, mode):
    spec = PRODUCT_CASES[case]
    q, k, v, beta, alpha = product_data(seed=len(case), **spec)
    want, mags = ref.heads(sgd_delta_product, q, k, v, beta, alpha)
    out = delta_product(q, k, v, beta, decay=alpha, scale=0.5, mode=mode).numpy()
    n_h, d_k = spec["n_h"], spec["d_k"]
    steps = n_h * np.arange(1, spec["t"] + 1)
    n = d_k + ref.heads(ref.log_budget, alpha)
    bound = 8 * ref.U64 * n * steps * np.linalg.norm(0.5 * q, axis=-1) * mags
    assert np.all(np.linalg.norm(out - 0.5 * want, axis=-1) <= bound)


@pytest.mark.parametrize("mode", MODES)
def test_delta_product_with_one_step_per_token_is_deltanet(mode):
    q, k, v, beta, alpha = product_data(33, 5, 1, 4)
    want, mags = ref.heads(ref.lms, q, k[:, :, :, 0], v[:, :, :, 0], beta[..., 0], alpha)
    out = delta_product(q, k, v, beta, decay=alpha, mode=mode).numpy()
    bound = 8 * ref.U64 * (5 + ref.heads(ref.log_budget, alpha)) * np.arange(1, 34)
    assert np.all(np.linalg.norm(out - want, axis=-1) <= bound * np.linalg.norm(q, axis=-1) * mags)


def test_delta_product_shapes_are_checked_by_name():
    q, k, v, beta, _ = product_data(5, 4, 2, 0)
    with pytest.raises(ValueError, match="beta"):
        delta_product(q, k, v, beta[..., :1])
    with pytest.raises(ValueError, match="v must agree"):
        delta_product(q, k, v[:, :, :, :1], beta)
    with pytest.raises(ValueError, match="k must be"):
        delta_product(q, k[..., :3], v, beta)
    with pytest.raises(ValueError, match="k: is empty"):
        delta_product(q, k[:, :, :, :0], v[:, :, :, :0], 0.5)


@pytest.mark.parametrize("mode", ["fused", "chunk", "recurrent"])
@pytest.mark.parametrize(
    ("t", "d_k", "correlated", "key_scale"),
    [
        (17, 5, False, 1.0),
        (12, 4, True, 1.0),
        (3, 8, False, 1.0),
        (13, 4, False, 1e150),
        (70, 5, False, 1.0),  # past the fused backward's stored chunk of 64, and three blocks
    ],
)
def test_generalized_delta_rule_is_its_update(t, d_k, correlated, key_scale, mode):
    """RWKV-7's form: ``a = −η ⊙ κ̂``, ``b = κ̂`` with a unit ``κ̂`` and ``η ∈ [0, 1]``, a gate
    per channel, and keys (the write) of any scale; every form (the chunked one in blocks of
    32)."""
    rng = np.random.default_rng(t + d_k)
    q = rng.standard_normal((B, H, t, d_k))
    k = keys(rng, (B, H, t, d_k), correlated) * key_scale
    v = rng.standard_normal((B, H, t, DV))
    kappa = keys(rng, (B, H, t, d_k))
    a = -rng.uniform(0, 1, (B, H, t, d_k)) * kappa
    alpha = rng.uniform(0.5, 1.0, (B, H, t, d_k))
    want, bound = ref.heads(vref.dplr_loop, q, k, v, a, kappa, alpha)
    out = generalized_delta_rule(q, k, v, a, kappa, decay=alpha, mode=mode).numpy()
    assert np.all(np.abs(out - want).max(-1) <= ref.U64 * bound)


@pytest.mark.parametrize("mode", ["fused", "chunk", "recurrent"])
def test_generalized_delta_rule_with_the_delta_step_is_deltanet(mode):
    """``a = −α_t β_t k_t``, ``b = k_t``: the erase reads the state before the decay, so Gated
    DeltaNet's ``(I − β k kᵀ) α S`` needs the decay in ``a`` too (``a = −β k`` without one);
    one decay per token, in every form."""
    rng = np.random.default_rng(5)
    q = rng.standard_normal((B, H, 29, 6))
    k = keys(rng, (B, H, 29, 6))
    v = rng.standard_normal((B, H, 29, DV))
    beta = rng.uniform(0, 1.5, (B, H, 29))
    alpha = rng.uniform(0.5, 1.0, (B, H, 29))
    want, mags = ref.heads(ref.lms, q, k, v, beta, alpha)
    erase = -(alpha * beta)[..., None] * k
    out = generalized_delta_rule(q, beta[..., None] * k, v, erase, k, decay=alpha, mode=mode)
    out = out.numpy()
    bound = 8 * ref.U64 * (6 + ref.heads(ref.log_budget, alpha)) * np.arange(1, 30)
    assert np.all(np.linalg.norm(out - want, axis=-1) <= bound * np.linalg.norm(q, axis=-1) * mags)
    # the same with the values carrying β (DeltaNet's write is β k vᵀ either way)
    again = generalized_delta_rule(q, k, beta[..., None] * v, erase, k, decay=alpha, mode=mode)
    error = np.linalg.norm(again.numpy() - want, axis=-1)
    assert np.all(error <= bound * np.linalg.norm(q, axis=-1) * mags)


def test_generalized_delta_rule_refuses_a_mismatched_low_rank_term():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 1, 4, 3)) for _ in range(3))
    with pytest.raises(ValueError, match="a: must have"):
        generalized_delta_rule(q, k, v, k[..., :2], k)


@pytest.mark.parametrize(("t", "d_k", "scale"), [(1, 4, 0.5), (23, 6, 0.4), (3, 8, 1.0)])
def test_forgetting_attention_is_the_gated_weighted_mean(t, d_k, scale):
    rng = np.random.default_rng(t)
    q = rng.standard_normal((B, H, t, d_k))
    k = rng.standard_normal((B, H, t, d_k))
    v = rng.standard_normal((B, H, t, DV))
    f = rng.uniform(0.2, 1.0, (B, H, t))
    want, bound = ref.heads(vref.gated_smoother, q, k, v, f, np.full((B, H), scale))
    out = forgetting_attention(q, k, v, f, scale=scale).numpy()
    assert np.all(np.abs(out - want).max(-1) <= ref.U64 * bound)


def test_forgetting_attention_without_forgetting_is_softmax_attention():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((B, H, 19, 5)) for _ in range(3))
    want, bound = ref.heads(ref.smoother, q, k, v, np.full((B, H), 0.6))
    for out in (
        forgetting_attention(q, k, v, 1.0, scale=0.6),
        softmax_attention(q, k, v, scale=0.6),
    ):
        assert np.all(np.abs(out.numpy() - want) <= 4 * ref.U64 * bound[..., None])


def test_forgetting_attention_refuses_a_gate_outside_the_unit_interval():
    q = np.ones((1, 1, 3, 2))
    for bad in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="forget"):
            forgetting_attention(q, q, q, bad)


@pytest.mark.parametrize("attend_current", [False, True])
@pytest.mark.parametrize(("t", "d_k", "scale"), [(1, 4, 0.5), (29, 6, 0.7), (3, 8, 1.0)])
def test_stick_breaking_attention_is_the_stick_broken_nearest_first(t, d_k, scale, attend_current):
    rng = np.random.default_rng(t + 7)
    q = rng.standard_normal((B, H, t, d_k))
    k = rng.standard_normal((B, H, t, d_k))
    v = rng.standard_normal((B, H, t, DV))
    want, bound = ref.heads(
        vref.stick_breaking, q, k, v, np.full((B, H), scale), np.full((B, H), attend_current)
    )
    out = stick_breaking_attention(q, k, v, scale=scale, attend_current=attend_current).numpy()
    assert np.all(np.abs(out - want).max(-1) <= ref.U64 * bound)


def test_stick_breaking_sees_no_key_at_the_first_position_unless_it_attends_to_itself():
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((1, 1, 4, 3)) for _ in range(3))
    assert np.all(stick_breaking_attention(q, k, v).numpy()[0, 0, 0] == 0)
    first = stick_breaking_attention(q, k, v, attend_current=True).numpy()[0, 0, 0]
    p = 1 / (1 + np.exp(-(q[0, 0, 0] @ k[0, 0, 0])))
    assert np.allclose(first, p * v[0, 0, 0], rtol=0, atol=4 * ref.U64 * np.abs(v).max())


def per_token_data(t, d_k, seed, correlated=False, key_scale=1.0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, H, t, d_k))
    k = keys(rng, (B, H, t, d_k), correlated) * key_scale
    p = keys(rng, (B, H, t, d_k), correlated) * key_scale
    v = rng.standard_normal((B, H, t, DV))
    beta = rng.uniform(0.0, 1.0, (B, H, t)) / key_scale**2
    alpha = rng.uniform(0.5, 1.0, (B, H, t))
    mu = rng.uniform(0.1, 0.9, (B, H, t))  # no μ = 0: SGD skips its buffer at momentum 0
    return q, k, p, v, beta, alpha, mu


FAMILY_CASES = {
    "random": dict(t=29, d_k=5),
    "correlated": dict(t=17, d_k=4, correlated=True),
    "T < d_k": dict(t=3, d_k=8),
    "huge keys": dict(t=15, d_k=4, key_scale=1e100),
}


def iv_lms(q, k, p, v, beta, alpha):
    """One head: ``W ← α_t W``, ``W ← W + β_t (v_t − W p_t) k_tᵀ`` (the instrumental-variable
    LMS step), ``o_t = W q_t``; and the magnitudes ``Σ γ β ‖k‖ ‖v‖``."""
    w = np.zeros((v.shape[1], k.shape[1]))
    out, mags, mag = [], [], 0.0
    for t in range(len(k)):
        w = alpha[t] * w
        w = w + beta[t] * np.outer(v[t] - w @ p[t], k[t])
        mag = alpha[t] * mag + beta[t] * np.linalg.norm(k[t]) * np.linalg.norm(v[t])
        out.append(w @ q[t])
        mags.append(mag)
    return np.array(out), np.array(mags)


@pytest.mark.parametrize("mode", ["fused", "recurrent"])
@pytest.mark.parametrize("case", FAMILY_CASES | {"past a chunk": dict(t=70, d_k=5)})
def test_comba_is_the_instrumental_variable_lms_step(case, mode):
    spec = (FAMILY_CASES | {"past a chunk": dict(t=70, d_k=5)})[case]
    q, k, p, v, beta, alpha, _ = per_token_data(seed=len(case), **spec)
    want, mags = ref.heads(iv_lms, q, k, p, v, beta, alpha)
    out = comba(q, k, v, p, beta, decay=alpha, mode=mode).numpy()
    n = spec["d_k"] + ref.heads(ref.log_budget, alpha)
    bound = 8 * ref.U64 * n * np.arange(1, spec["t"] + 1) * np.linalg.norm(q, axis=-1) * mags
    assert np.all(np.linalg.norm(out - want, axis=-1) <= bound)


def test_comba_read_at_the_key_is_gated_deltanet():
    q, k, _, v, beta, alpha, _ = per_token_data(31, 6, 9)
    want, mags = ref.heads(ref.lms, q, k, v, beta, alpha)
    out = comba(q, k, v, k, beta, decay=alpha).numpy()
    bound = 8 * ref.U64 * (6 + ref.heads(ref.log_budget, alpha)) * np.arange(1, 32)
    assert np.all(np.linalg.norm(out - want, axis=-1) <= bound * np.linalg.norm(q, axis=-1) * mags)


def sgd_momentum(q, k, v, beta, eta, mu, alpha):
    """One head: ``torch.optim.SGD(momentum=μ_t, lr=β_t)`` on ``η_t ½‖Sᵀ k_t − v_t‖²`` (the
    gradient at the state before the token), ``S`` multiplied by ``α_t`` between the gradient
    and the step; ``o_t = Sᵀ q_t``. Also ``Σ_{i≤t} β_i η_i ‖k_i‖ ‖v_i‖ / (1 − max μ)``, the
    magnitude the rounding is relative to."""
    s = torch.zeros(k.shape[1], v.shape[1], dtype=torch.float64, requires_grad=True)
    opt = torch.optim.SGD([s], lr=1.0, momentum=0.5)
    out, mags, mag = [], [], 0.0
    for t in range(len(k)):
        kt, vt = torch.as_tensor(k[t]), torch.as_tensor(v[t])
        opt.zero_grad()
        (eta[t] * 0.5 * ((s.T @ kt - vt) ** 2).sum()).backward()
        with torch.no_grad():
            s.mul_(float(alpha[t]))
        opt.param_groups[0]["lr"] = float(beta[t])
        opt.param_groups[0]["momentum"] = float(mu[t])
        opt.step()
        mag += beta[t] * eta[t] * np.linalg.norm(k[t]) * np.linalg.norm(v[t])
        out.append((s.T @ torch.as_tensor(q[t])).detach().numpy())
        mags.append(mag / (1 - mu.max()))
    return np.array(out), np.array(mags)


PAST_A_CHUNK = {"past a chunk": dict(t=70, d_k=5)}  # the fused backward stores every 64 tokens


@pytest.mark.parametrize("mode", ["fused", "recurrent"])
@pytest.mark.parametrize("case", FAMILY_CASES | PAST_A_CHUNK)
def test_momentum_delta_rule_is_sgd_with_momentum(case, mode):
    spec = (FAMILY_CASES | PAST_A_CHUNK)[case]
    q, k, _, v, beta, alpha, mu = per_token_data(seed=3 + len(case), **spec)
    eta = np.random.default_rng(0).uniform(0.2, 1.0, beta.shape)
    want, mags = ref.heads(sgd_momentum, q, k, v, beta, eta, mu, alpha)
    out = momentum_delta_rule(q, k, v, k, beta, eta, momentum=mu, decay=alpha, mode=mode).numpy()
    n = spec["d_k"] + ref.heads(ref.log_budget, alpha * mu)
    bound = 8 * ref.U64 * n * np.arange(1, spec["t"] + 1) * np.linalg.norm(q, axis=-1) * mags
    assert np.all(np.linalg.norm(out - want, axis=-1) <= bound)


def momentum_loop(q, k, p, v, beta, eta, mu, alpha):
    """One head, fla's convention written out: ``e = Sᵀ p − v``, ``M ← μ M + η k eᵀ``,
    ``S ← α S − β M``."""
    s = np.zeros((k.shape[1], v.shape[1]))
    m = np.zeros_like(s)
    out = []
    for t in range(len(k)):
        m = mu[t] * m + eta[t] * np.outer(k[t], s.T @ p[t] - v[t])
        s = alpha[t] * s - beta[t] * m
        out.append(s.T @ q[t])
    return np.array(out)


@pytest.mark.parametrize("mode", ["fused", "recurrent"])
def test_momentum_delta_rule_reads_the_error_at_p(mode):
    q, k, p, v, beta, alpha, mu = per_token_data(23, 5, 4)
    eta = np.full(beta.shape, 0.7)
    want = ref.heads(momentum_loop, q, k, p, v, beta, eta, mu, alpha)
    out = momentum_delta_rule(q, k, v, p, beta, eta, momentum=mu, decay=alpha, mode=mode)
    out = out.numpy()
    _, mags = ref.heads(sgd_momentum, q, k, v, beta, eta, mu, alpha)  # same magnitudes
    bound = 8 * ref.U64 * (5 + 23) * np.arange(1, 24) * np.linalg.norm(q, axis=-1) * mags
    assert np.all(np.linalg.norm(out - want, axis=-1) <= bound)


@pytest.mark.parametrize("mode", ["fused", "recurrent"])
@pytest.mark.parametrize("case", FAMILY_CASES | PAST_A_CHUNK)
def test_titans_is_sgd_with_momentum_and_weight_decay(case, mode):
    """A constant ``θ``: Titans' surprise is ``−θ`` times SGD's momentum buffer."""
    spec = (FAMILY_CASES | PAST_A_CHUNK)[case]
    q, k, _, v, beta, alpha, mu = per_token_data(seed=5 + len(case), **spec)
    theta = 0.6 / (np.linalg.norm(k, axis=-1).max() ** 2)
    want, mags = ref.heads(
        sgd_momentum, q, k, v, np.full(beta.shape, theta), np.ones(beta.shape), mu, alpha
    )
    out = titans(q, k, v, lr=theta, momentum=mu, decay=alpha, mode=mode).numpy()
    n = spec["d_k"] + ref.heads(ref.log_budget, alpha * mu)
    bound = 8 * ref.U64 * n * np.arange(1, spec["t"] + 1) * np.linalg.norm(q, axis=-1) * mags
    assert np.all(np.linalg.norm(out - want, axis=-1) <= bound)


def test_titans_is_the_momentum_delta_rule_read_at_the_key():
    q, k, _, v, beta, alpha, mu = per_token_data(19, 4, 6)
    out = titans(q, k, v, lr=beta, momentum=mu, decay=alpha).numpy()
    want = ref.heads(momentum_loop, q, k, k, v, np.ones(beta.shape), beta, mu, alpha)
    _, mags = ref.heads(sgd_momentum, q, k, v, np.ones(beta.shape), beta, mu, alpha)
    bound = 8 * ref.U64 * (4 + 19) * np.arange(1, 20) * np.linalg.norm(q, axis=-1) * mags
    assert np.all(np.linalg.norm(out - want, axis=-1) <= bound)


def test_the_token_loop_layers_refuse_other_forms_and_bad_parameters():
    q, k, p, v, beta, _, _ = per_token_data(5, 3, 0)
    with pytest.raises(ValueError, match="mode"):
        comba(q, k, v, p, beta, mode="chunk")
    with pytest.raises(ValueError, match="p: must have"):
        comba(q, k, v, p[..., :2], beta)
    with pytest.raises(ValueError, match="momentum"):
        momentum_delta_rule(q, k, v, p, beta, 1.0, momentum=1.5)
    with pytest.raises(ValueError, match="eta"):
        momentum_delta_rule(q, k, v, p, beta, -1.0, momentum=0.5)
    with pytest.raises(ValueError, match="decay"):
        titans(q, k, v, lr=0.1, momentum=0.5, decay=None)
    with pytest.raises(ValueError, match="lr"):
        titans(q, k, v, lr="0.1", momentum=0.5, decay=0.9)


def sgd_ttt(q, k, v, lr, batch, weight=None, bias=None, eps=1e-6):
    """One head, TTT-Linear by autograd and ``torch.optim.SGD``: each token's loss (``½‖Wᵀk −
    v‖²``; with ``weight``, ``½‖layer_norm(Wᵀk + c) − (v − k)‖²`` by ``F.layer_norm``) adds its
    gradient at the batch's starting map into ``.grad``; token t reads out with
    ``W − η_t · grad`` (and ``+ layer_norm(o)`` with ``weight``); at the batch's end SGD steps
    with ``η`` of its last token. Also the largest ``1/σ`` of the LayerNorm's inputs."""
    d_k, d_v = k.shape[1], v.shape[1]
    w = torch.zeros(d_k, d_v, dtype=torch.float64, requires_grad=True)
    c = torch.zeros(d_v, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.SGD([w, c], lr=1.0)
    ln = None
    if weight is not None:
        ln = (d_v,), torch.as_tensor(weight), torch.as_tensor(bias)
    out, inv_sigma = [], 1.0
    for start in range(0, len(k), batch):
        opt.zero_grad()
        for t in range(start, min(start + batch, len(k))):
            kt, vt, qt = (torch.as_tensor(x[t]) for x in (k, v, q))
            z = w.T @ kt
            if ln is None:
                loss = 0.5 * ((z - vt) ** 2).sum()
            else:
                loss = 0.5 * ((F.layer_norm(z + c, *ln, eps) - (vt - kt)) ** 2).sum()
                inv_sigma = max(inv_sigma, spread(z + c, eps))
            loss.backward()
            with torch.no_grad():
                o = (w - lr[t] * w.grad).T @ qt
                if ln is not None:
                    o = o + c - lr[t] * c.grad
                    inv_sigma = max(inv_sigma, spread(o, eps))
                    o = o + F.layer_norm(o, *ln, eps)
            out.append(o.numpy())
        opt.param_groups[0]["lr"] = float(lr[t])
        opt.step()
    return np.array(out), np.full(len(k), inv_sigma)


def spread(z, eps):
    """``1/√(var z + ε)``, the factor a LayerNorm multiplies its input's rounding by (1 for an
    exactly zero input, which carries none)."""
    z = z.detach()
    return float(1 / z.var(unbiased=False).add(eps).sqrt()) if bool(z.any()) else 1.0


TTT_CASES = {
    "random": dict(t=37, d=5, batch=8),
    "correlated": dict(t=20, d=4, batch=16, correlated=True),
    "T < d_k": dict(t=3, d=8, batch=2),
    "one batch": dict(t=12, d=4, batch=16),
    "huge keys": dict(t=19, d=4, batch=4, key_scale=1e100),
}


def ttt_data(t, d, seed, correlated=False, key_scale=1.0, **_):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, H, t, d))
    k = keys(rng, (B, H, t, d), correlated) * key_scale
    v = rng.standard_normal((B, H, t, d))
    lr = rng.uniform(0.0, 1.0, (B, H, t)) / key_scale**2
    return q, k, v, lr


TTT_FORMS = ("chunk", "recurrent")


@pytest.mark.parametrize("mode", TTT_FORMS)
@pytest.mark.parametrize("case", TTT_CASES)
def test_ttt_linear_is_mini_batch_sgd_read_out_in_the_dual_form(case, mode):
    spec = TTT_CASES[case]
    q, k, v, lr = ttt_data(seed=len(case), **spec)
    want, _ = ref.heads(sgd_ttt, q, k, v, lr, np.full((B, H), spec["batch"]))
    out = ttt_linear(q, k, v, lr, batch_size=spec["batch"], mode=mode).numpy()
    _, mags = ref.heads(ref.lms, q, k, v, lr, np.ones(lr.shape))  # Σ η ‖k‖ ‖v‖ so far
    n = spec["d"] + spec["batch"]
    bound = 8 * ref.U64 * n * np.arange(1, spec["t"] + 1) * np.linalg.norm(q, axis=-1) * mags
    assert np.all(np.linalg.norm(out - want, axis=-1) <= bound)


@pytest.mark.parametrize("mode", TTT_FORMS)
def test_ttt_linear_with_batches_of_one_is_deltanet(mode):
    q, k, v, lr = ttt_data(33, 5, 8)
    want, mags = ref.heads(ref.lms, q, k, v, lr, np.ones(lr.shape))
    out = ttt_linear(q, k, v, lr, batch_size=1, mode=mode).numpy()
    bound = 8 * ref.U64 * 5 * np.arange(1, 34) * np.linalg.norm(q, axis=-1) * mags
    assert np.all(np.linalg.norm(out - want, axis=-1) <= bound)


@pytest.mark.parametrize("mode", TTT_FORMS)
@pytest.mark.parametrize("case", ["random", "correlated", "T < d_k"])
def test_ttt_linear_with_its_layer_norm_is_sgd_through_f_layer_norm(case, mode):
    spec = TTT_CASES[case]
    q, k, v, lr = ttt_data(seed=11 + len(case), **spec)
    rng = np.random.default_rng(1)
    weight = rng.uniform(0.5, 1.5, (H, spec["d"]))
    bias = rng.standard_normal((H, spec["d"])) * 0.1
    want, inv_sigma = ref.heads(
        lambda a, b_, c, e, j: sgd_ttt(a, b_, c, e, spec["batch"], weight[j], bias[j]),
        q,
        k,
        v,
        lr,
        np.broadcast_to(np.arange(H), (B, H)),
    )
    out = ttt_linear(
        q,
        k,
        v,
        lr,
        batch_size=spec["batch"],
        norm=True,
        norm_weight=weight,
        norm_bias=bias,
        mode=mode,
    ).numpy()
    # every LayerNorm multiplies the rounding of its input by 1/σ; magnitudes are O(1 + |o|)
    t = np.arange(1, spec["t"] + 1)[:, None]
    bound = 64 * ref.U64 * (spec["d"] + spec["batch"]) * t * inv_sigma[..., None] ** 2
    assert np.all(np.abs(out - want) <= bound * (1 + np.abs(want)))


def test_ttt_linear_refuses_bad_settings_by_name():
    q, k, v, lr = ttt_data(8, 4, 0)
    for bad in (0, -1, 2.5, True, "16"):
        with pytest.raises(ValueError, match="batch_size"):
            ttt_linear(q, k, v, lr, batch_size=bad)
    with pytest.raises(ValueError, match="d_v = d_k"):
        ttt_linear(q, k, v[..., :3], lr, norm=True)
    with pytest.raises(ValueError, match="norm_weight"):
        ttt_linear(q, k, v, lr, norm=True, norm_weight=np.ones((H, 3)))
    with pytest.raises(ValueError, match="without norm"):
        ttt_linear(q, k, v, lr, norm_weight=np.ones((H, 4)))
    with pytest.raises(ValueError, match="mode: this layer has no fused form"):
        ttt_linear(q, k, v, lr, mode="fused")


def test_the_fenwick_segments_cover_each_prefix_once():
    for t in range(70):
        covered = sorted(i for _, first, end in vref.fenwick_segments(t) for i in range(first, end))
        assert covered == list(range(t + 1))


@pytest.mark.parametrize("mode", ["chunk", "recurrent"])
@pytest.mark.parametrize(
    ("t", "d_k", "decayed"), [(1, 4, True), (37, 5, True), (16, 3, False), (200, 3, True)]
)
def test_log_linear_attention_is_the_level_weighted_sum(t, d_k, decayed, mode):
    """Both forms against the level-weighted sum written out; T = 200 spans four blocks of 64
    (levels above a block's, in the segments of the block index)."""
    rng = np.random.default_rng(t)
    q, k = rng.standard_normal((B, H, t, d_k)), rng.standard_normal((B, H, t, d_k))
    v = rng.standard_normal((B, H, t, DV))
    lam = rng.uniform(-1.0, 2.0, (B, H, t, 9))  # any sign: the weights are the query's
    alpha = rng.uniform(0.5, 1.0, (B, H, t)) if decayed else np.ones((B, H, t))
    want, bound = ref.heads(vref.level_weighted_sum, q, k, v, lam, alpha)
    out = log_linear_attention(q, k, v, lam, decay=alpha if decayed else None, scale=1.0, mode=mode)
    assert np.all(np.abs(out.numpy() - want).max(-1) <= ref.U64 * bound)


def test_log_linear_attention_with_equal_levels_is_linear_attention():
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((B, H, 21, 4)) for _ in range(3))
    alpha = rng.uniform(0.5, 1.0, (B, H, 21))
    want, mag = ref.heads(ref.weighted_sum, q, k, v, alpha)
    out = log_linear_attention(q, k, v, np.ones((B, H, 21, 6)), decay=alpha)
    tol = 4 * ref.U64 * (4 + ref.heads(ref.log_budget, alpha))[..., None] * mag
    assert np.all(np.abs(out.numpy() - want) <= tol)


def test_log_linear_attention_needs_every_level():
    q = np.ones((1, 1, 9, 2))
    with pytest.raises(ValueError, match=r"level_weights: .*L ≥ 5"):
        log_linear_attention(q, q, q, np.ones((1, 1, 9, 4)))
