"""The layers agree with the field's own references: the pure-PyTorch ``naive.py`` files of
flash-linear-attention (``fla-core==0.6.0``, a test dependency), loaded from the installed
distribution's files without importing the ``fla`` package (whose ``__init__`` needs Triton).

Conventions mapped: fla scales the queries by ``d_k^{-1/2}`` (ours: ``scale=d_k**-0.5``); its gates
are log-decays ``g`` (ours: ``decay=exp(g)``); most files use the layout ``(B, T, H, d)`` (ours:
``(B, H, T, d)``); ``delta_rule`` and ``retention`` use ours. fla computes in float32; so do the
comparisons, to twice the float32 rounding bound of each layer (both sides are within one bound
of the exact value), with the magnitudes in the bound computed in float64.
"""

import importlib.metadata
import importlib.util
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import sequence_refs as ref
import torch

from attnreg.bench.registered_fla import FLA_CALLS
from attnreg.sequence import (
    comba,
    delta_product,
    delta_rule,
    forgetting_attention,
    generalized_delta_rule,
    linear_attention,
    log_linear_attention,
    mesa,
    momentum_delta_rule,
    stick_breaking_attention,
    ttt_linear,
)
from attnreg.sequence.registry import REGISTRY
from attnreg.studies.verify import references as vref

B, H, T, D = 1, 2, 128, 8  # two blocks of the chunked forms
MODES = ("fused", "chunk", "recurrent")
MESA_MODES = ("chunk", "recurrent")  # Mesa has no fused form


def naive(layer):
    """fla's ``fla/ops/<layer>/naive.py`` as a module of its own (the package is not imported)."""
    path = importlib.metadata.distribution("fla-core").locate_file(f"fla/ops/{layer}/naive.py")
    spec = importlib.util.spec_from_file_location(f"fla_naive_{layer}", path)
    assert spec is not None and spec.loader is not None, f"fla-core has no {layer}/naive.py"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fla_layout(x):
    """``(B, H, T, …) <-> (B, T, H, …)``."""
    return x.transpose(1, 2).contiguous()


def data(seed, normalize=False, positive=False, d_v=D):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(B, H, T, D, generator=g), torch.randn(B, H, T, D, generator=g)
    v = torch.randn(B, H, T, d_v, generator=g)
    if normalize:
        k = k / k.norm(dim=-1, keepdim=True)
    if positive:
        q, k = (q / 2).exp(), (k / 2).exp()
    beta = torch.rand(B, H, T, generator=g)
    log_decay = torch.log(0.5 + 0.5 * torch.rand(B, H, T, generator=g))
    return q, k, v, beta, log_decay


def f64(*xs):
    return [x.double().numpy() for x in xs]


def linear_tol(q, k, v, alpha):
    """Twice ``4 u₃₂ (d + n_t) Σ_{i≤t} γ_{t,i} |q_t|ᵀ|k_i| |v_i|`` (elementwise)."""
    _, mag = ref.heads(ref.weighted_sum, *f64(q, k, v, alpha))
    n = D + ref.heads(ref.log_budget, alpha.double().numpy())
    return torch.from_numpy(8 * ref.U32 * n[..., None] * mag)


def online_tol(q, k, v, beta, alpha):
    """Twice ``8 u₃₂ (d + n_t) t ‖q_t‖ Σ_{i≤t} γ_{t,i} β_i ‖k_i‖ ‖v_i‖`` (per position)."""
    _, mags = ref.heads(ref.lms, *f64(q, k, v, beta, alpha))
    n = D + ref.heads(ref.log_budget, alpha.double().numpy())
    steps = np.arange(1, T + 1)
    return torch.from_numpy(16 * ref.U32 * n * steps * q.double().norm(dim=-1).numpy() * mags)


def test_references_load_without_the_fla_package():
    for layer in ("delta_rule", "gated_delta_rule", "mesa_net", "linear_attn", "retention", "gla"):
        naive(layer)
    naive("simple_gla")
    for layer in (
        "gated_delta_product",
        "generalized_delta_rule/dplr",
        "forgetting_attn",
        "stickbreaking_attn",
        "comba",
        "momentum_delta_rule",
        "ttt",
        "log_linear_attn",
    ):
        naive(layer)
    assert "fla" not in sys.modules and "triton" not in sys.modules


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("normalize", [False, True])
def test_linear_attn(normalize, mode):
    fla = naive("linear_attn")
    q, k, v, _, _ = data(0, positive=normalize)
    ours = linear_attention(q, k, v, normalize=normalize, scale=D**-0.5, mode=mode)
    args = [fla_layout(x) for x in (q, k, v)]
    theirs = [
        fla.naive_recurrent_linear_attn(*args, normalize=normalize)[0],
        fla.naive_chunk_linear_attn(*args, normalize=normalize),
    ]
    ones = torch.ones(B, H, T)
    if normalize:  # |Δo| ≤ bound(num)/den + |o| bound(den)/den; fla's den carries + 1e-10
        den = (q.double() * k.double().cumsum(2)).sum(-1, keepdim=True) * D**-0.5
        tol = linear_tol(q * D**-0.5, k, v, ones) / den
        tol += ours.abs().double() * linear_tol(q * D**-0.5, k, torch.ones(B, H, T, 1), ones) / den
        tol += 1e-10 / den * ours.abs().double()
    else:
        tol = linear_tol(q * D**-0.5, k, v, ones)
    for out in theirs:
        assert torch.all((ours.double() - fla_layout(out).double()).abs() <= tol)


@pytest.mark.parametrize("mode", MODES)
def test_retention(mode):
    """RetNet's per-head decays ``γ_h = 1 − 2^{−5−h}`` as a per-head constant."""
    fla = naive("retention")
    q, k, v, _, _ = data(1)
    gamma = 1 - 2.0 ** (-5.0 - torch.arange(H, dtype=torch.float32))
    ours = linear_attention(q, k, v, decay=gamma, scale=D**-0.5, mode=mode)
    theirs = fla.naive_retention(q, k, v)
    alpha = gamma.view(1, H, 1).expand(B, H, T)
    assert torch.all((ours - theirs).abs().double() <= linear_tol(q * D**-0.5, k, v, alpha))


@pytest.mark.parametrize("mode", MODES)
def test_simple_gla(mode):
    """GLA's / Mamba-2's scalar gate per token and head: ``decay = exp(g)``."""
    fla = naive("simple_gla")
    q, k, v, _, g = data(2)
    ours = linear_attention(q, k, v, decay=g.exp(), scale=D**-0.5, mode=mode)
    args = [fla_layout(x) for x in (q, k, v)] + [g.transpose(1, 2).contiguous()]
    tol = linear_tol(q * D**-0.5, k, v, g.exp())
    for out in (
        fla.naive_recurrent_simple_gla(*args)[0],
        fla.naive_chunk_simple_gla(*args)[0],
        fla.naive_parallel_simple_gla(*args)[0],
    ):
        assert torch.all((ours - fla_layout(out)).abs().double() <= tol)


def channel_gates(seed):
    """Log-decays ``g (B, H, T, D)``, one per key channel, in ``(log 0.5, 0]``."""
    g = torch.Generator().manual_seed(seed)
    return torch.log(0.5 + 0.5 * torch.rand(B, H, T, D, generator=g))


@pytest.mark.parametrize("mode", MODES)
def test_gla(mode):
    """GLA: one gate per key channel, ``decay = exp(gk)`` of shape ``(B, H, T, d_k)``."""
    fla = naive("gla")
    q, k, v, _, _ = data(6)
    gk = channel_gates(6)
    ours = linear_attention(q, k, v, decay=gk.exp(), scale=D**-0.5, mode=mode)
    theirs = fla.naive_recurrent_gla(*(fla_layout(x) for x in (q, k, v, gk)))[0]
    _, mag = ref.heads(ref.channel_weighted_sum, *f64(q * D**-0.5, k, v, gk.exp()))
    n = D + ref.heads(ref.log_budget, gk.exp().double().numpy())
    tol = torch.from_numpy(8 * ref.U32 * n[..., None] * mag)
    assert torch.all((ours - fla_layout(theirs)).abs().double() <= tol)


@pytest.mark.parametrize("mode", MODES)
def test_kda(mode):
    """Kimi Delta Attention: the delta rule after a per-channel decay ``exp(g)``, β per token;
    fla's layout ``(B, T, H, d)``, its query scale ``d_k^{-1/2}`` by default; against fla's
    token loop and its chunked form."""
    fla = naive("kda")
    q, k, v, beta, _ = data(7, normalize=True)
    g = channel_gates(7)
    ours = delta_rule(q, k, v, beta, decay=g.exp(), scale=D**-0.5, mode=mode)
    qf, kf, vf, gf = (fla_layout(x) for x in (q, k, v, g))
    bf = beta.transpose(1, 2).contiguous()
    tol = online_tol(q * D**-0.5, k, v, beta, g.exp())
    for theirs in (
        fla.naive_recurrent_kda(qf, kf, vf, gf, bf)[0],
        fla.naive_chunk_kda(qf, kf, vf, gf, bf)[0],
    ):
        assert torch.all((ours - fla_layout(theirs)).norm(dim=-1).double() <= tol)


@pytest.mark.parametrize("mode", MODES)
def test_delta_rule(mode):
    """DeltaNet with L2-normalised keys and β per token; fla's layout is ours here."""
    fla = naive("delta_rule")
    q, k, v, beta, _ = data(3, normalize=True)
    ours = delta_rule(q, k, v, beta, scale=D**-0.5, mode=mode)
    tol = online_tol(q * D**-0.5, k, v, beta, torch.ones(B, H, T))
    for out in (
        fla.delta_rule_recurrence(q, k, v, beta)[0],
        fla.delta_rule_chunkwise(q, k, v, beta, chunk_size=32)[0],
    ):
        err = (ours - out).norm(dim=-1).double()
        assert torch.all(err <= tol)


@pytest.mark.parametrize("mode", MODES)
def test_gated_delta_rule(mode):
    """Gated DeltaNet: ``decay = exp(g)``; fla's chunk form takes ``(…, g, beta)`` in that order."""
    fla = naive("gated_delta_rule")
    q, k, v, beta, g = data(4, normalize=True)
    ours = delta_rule(q, k, v, beta, decay=g.exp(), scale=D**-0.5, mode=mode)
    qf, kf, vf = (fla_layout(x) for x in (q, k, v))
    bf, gf = beta.transpose(1, 2).contiguous(), g.transpose(1, 2).contiguous()
    tol = online_tol(q * D**-0.5, k, v, beta, g.exp())
    for out in (
        fla.naive_recurrent_gated_delta_rule(qf, kf, vf, bf, gf)[0],
        fla.naive_chunk_gated_delta_rule(qf, kf, vf, gf, bf, chunk_size=16)[0],
    ):
        err = (ours - fla_layout(out)).norm(dim=-1).double()
        assert torch.all(err <= tol)


@pytest.mark.parametrize("mode", MESA_MODES)
@pytest.mark.parametrize("gated", [True, False])
def test_mesa_net_exact(gated, mode):
    """MesaNet's exact reference: no query scaling, ``λ (H, d_k)``, gates as log-decays; the
    Mesa layer without decay is its log-gate 0."""
    fla = naive("mesa_net")
    q, k, v, beta, g = data(5, normalize=True)
    lam = 0.1 + torch.rand(H, D, generator=torch.Generator().manual_seed(5))
    if not gated:
        g = torch.zeros_like(g)
    ours = mesa(q, k, v, beta, decay=g.exp() if gated else None, lam=lam, mode=mode)
    tr = lambda x: x.transpose(1, 2).contiguous()  # noqa: E731
    theirs = fla_layout(fla.naive_mesa_net_exact(tr(q), tr(k), tr(v), tr(g), lam, tr(beta))[0])
    _, parts = ref.heads(
        ref.decayed_ridge,
        *f64(q, k, v, beta, g.exp()),
        np.broadcast_to(lam.double().numpy(), (B, H, D)),
    )
    n = D + ref.heads(ref.log_budget, g.exp().double().numpy())
    tol = torch.from_numpy(16 * ref.U32 * n * parts)
    assert torch.all((ours - theirs).norm(dim=-1).double() <= tol)


class FakeClock:
    """``perf_counter`` for :func:`attnreg.bench.sequence_workload.bench_sequence` with 3 calls per
    layer and 3 rounds: timed call ``m`` (start and end: two clock reads) takes
    ``10 (n + 1) + (5, 1, 3)[r]`` seconds, ``n`` its call's place in the round, ``r`` the round."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> float:
        m, end = divmod(self.calls, 2)
        self.calls += 1
        r, n = divmod(m % 9, 3)
        return 1000.0 * m + (10.0 * (n + 1) + (5, 1, 3)[r] if end else 0.0)


def test_timing_workload_runs_every_layer_and_its_references(monkeypatch):
    """``attnreg.bench.sequence_workload.bench_sequence`` (the P8 workload) at a small length:
    every layer is timed with fla's forms beside it, and its call gives the layer's numbers."""
    from attnreg.bench import sequence_workload as workload

    clock = FakeClock()  # the timed rounds take the durations it hands out
    monkeypatch.setattr(workload, "time", SimpleNamespace(perf_counter=clock))
    times = workload.bench_sequence(repeat=3, length=64)
    assert set(times) == set(workload.LAYERS)
    assert clock.calls == 2 * 3 * 3 * len(workload.LAYERS)  # start and end of every timed call
    for row in times.values():
        assert set(row) == {"attnreg", "fla_chunk", "fla_recurrent"}
        # in call order, the rounds took 10 (n + 1) + 5, + 1, + 3 s: the median is + 3
        assert row == {name: 10.0 * (n + 1) + 3 for n, name in enumerate(row)}
    x = workload.workload_inputs(batch=B, heads=H, length=T, d_k=D, d_v=D)
    ours = workload.attnreg_call("gated_delta_rule", x)
    theirs = workload.fla_calls("gated_delta_rule", x)["recurrent"]()
    assert isinstance(theirs, tuple)
    tol = online_tol(x["q"] * D**-0.5, x["k"], x["v"], x["beta"], x["alpha"])
    assert torch.all((ours - fla_layout(theirs[0])).norm(dim=-1).double() <= tol)


N_H = 2  # DeltaProduct's steps per token


@pytest.mark.parametrize("mode", MODES)
def test_gated_delta_product(mode):
    """Gated DeltaProduct: fla stacks a token's ``n_h`` keys, values and β along its time axis
    (``(B, T · n_h, H, d)``, ours ``(B, H, T, n_h, d)``), one log-decay per token."""
    fla = naive("gated_delta_product")
    g = torch.Generator().manual_seed(11)
    q = torch.randn(B, H, T, D, generator=g)
    k = torch.nn.functional.normalize(torch.randn(B, H, T, N_H, D, generator=g), dim=-1)
    v = torch.randn(B, H, T, N_H, D, generator=g)
    beta = torch.rand(B, H, T, N_H, generator=g)
    log_decay = torch.log(0.5 + 0.5 * torch.rand(B, H, T, generator=g))
    ours = delta_product(q, k, v, beta, decay=log_decay.exp(), scale=D**-0.5, mode=mode)

    def steps(x):  # (B, H, T, n_h, …) -> (B, T · n_h, H, …)
        return x.flatten(2, 3).transpose(1, 2).contiguous()

    theirs = fla.naive_recurrent_gated_delta_product(
        fla_layout(q),
        steps(k),
        steps(v),
        fla_layout(log_decay),
        steps(beta),
        D**-0.5,
        num_householder=N_H,
    )[0]
    # the bound of the delta rule on the T · n_h sub-tokens, read at each token's last one
    sub = [x.flatten(2, 3) for x in (k, v, beta)]
    q_sub = torch.zeros(B, H, T, N_H, D)
    q_sub[:, :, :, -1] = q * D**-0.5
    alpha_sub = torch.ones(B, H, T, N_H)
    alpha_sub[:, :, :, 0] = log_decay.exp()
    _, mags = ref.heads(ref.lms, *f64(q_sub.flatten(2, 3), *sub, alpha_sub.flatten(2, 3)))
    n = D + ref.heads(ref.log_budget, alpha_sub.flatten(2, 3).double().numpy())
    steps_so_far = np.arange(1, T * N_H + 1)
    bound = 16 * ref.U32 * n * steps_so_far * mags
    tol = torch.from_numpy(bound[:, :, N_H - 1 :: N_H]) * q.double().norm(dim=-1) * D**-0.5
    assert torch.all((ours - fla_layout(theirs)).norm(dim=-1).double() <= tol)


@pytest.mark.parametrize("mode", MODES)
def test_generalized_delta_rule_dplr(mode):
    """RWKV-7's diagonal-plus-low-rank rule: fla's ``dplr_recurrence`` and ``dplr_chunkwise``
    keep ``S`` as ours (``d_k × d_v``), name our ``a`` ``beta`` and our ``b`` ``alpha``, take
    per-channel log-decays ``gk`` and always scale the queries by ``d_k^{-1/2}``; layout
    ours."""
    fla = naive("generalized_delta_rule/dplr")
    g = torch.Generator().manual_seed(12)
    q, k, v = (torch.randn(B, H, T, D, generator=g) for _ in range(3))
    kappa = torch.nn.functional.normalize(torch.randn(B, H, T, D, generator=g), dim=-1)
    a = -torch.rand(B, H, T, D, generator=g) * kappa
    gk = channel_gates(12)
    ours = generalized_delta_rule(q, k, v, a, kappa, decay=gk.exp(), scale=D**-0.5, mode=mode)
    loop = fla.dplr_recurrence(q, k, v, kappa, a, gk)[0]
    chunked = fla.dplr_chunkwise(q, k, v, kappa, a, gk)[0]
    # the running magnitude |W| of the update (the loop on absolute values), in float32
    w = torch.zeros(B, H, D, D, dtype=torch.float64)
    tol = torch.zeros(B, H, T, D, dtype=torch.float64)
    aa, bb, kk, vv, qq = (x.double().abs() for x in (a, kappa, k, v, q * D**-0.5))
    alpha = gk.exp().double()
    for t in range(T):
        read = torch.einsum("bhk,bhkv->bhv", bb[:, :, t], w)
        w = alpha[:, :, t, :, None] * w + aa[:, :, t, :, None] * read[:, :, None]
        w = w + kk[:, :, t, :, None] * vv[:, :, t, None]
        tol[:, :, t] = (
            8 * ref.U32 * (D + 3) * (t + 1) * torch.einsum("bhk,bhkv->bhv", qq[:, :, t], w)
        )
    for theirs in (loop, chunked):
        assert torch.all((ours - theirs).abs().double() <= tol)


def test_forgetting_attention():
    """Forgetting attention: fla's gate is the log forget ``g = log f`` ``(B, T, H)``."""
    fla = naive("forgetting_attn")
    q, k, v, _, log_forget = data(13)
    ours = forgetting_attention(q, k, v, log_forget.exp(), scale=D**-0.5)
    theirs = fla.naive_forgetting_attn(*(fla_layout(x) for x in (q, k, v, log_forget)), D**-0.5)
    _, bound = ref.heads(ref.smoother, *f64(q, k, v), np.full((B, H), D**-0.5))
    budget = np.cumsum(-log_forget.double().numpy(), axis=-1)
    tol = 8 * ref.U32 * (bound + budget * np.abs(v.numpy()).max())
    assert torch.all((ours - fla_layout(theirs)).abs().double() <= torch.from_numpy(tol)[..., None])


@pytest.mark.parametrize("attend_current", [False, True])
def test_stick_breaking_attention(attend_current):
    """Stick-breaking attention: fla computes in log space too; layout ``(B, T, H, d)``."""
    fla = naive("stickbreaking_attn")
    q, k, v, _, _ = data(14)
    ours = stick_breaking_attention(q, k, v, scale=D**-0.5, attend_current=attend_current)
    theirs = fla.naive_stickbreaking_attn(
        *(fla_layout(x) for x in (q, k, v)), D**-0.5, attend_current
    )[0]
    z = (q.double() @ k.double().mT).abs().amax(dim=(-2, -1)) * D**-0.5  # (B, H)
    steps = torch.arange(1, T + 1, dtype=torch.float64)
    tol = 16 * ref.U32 * steps[:, None] * (1 + z[..., None, None]) * v.abs().max()
    assert torch.all((ours - fla_layout(theirs)).abs().double() <= tol)


def test_comba():
    """Comba: fla's layout ``(B, T, H, d)``, its gate a log-decay per token."""
    fla = naive("comba")
    q, k, v, beta, log_decay = data(15, normalize=True)
    p = torch.nn.functional.normalize(
        torch.randn(B, H, T, D, generator=torch.Generator().manual_seed(15)), dim=-1
    )
    ours = comba(q, k, v, p, beta, decay=log_decay.exp(), scale=D**-0.5)
    theirs = fla.naive_recurrent_comba(
        *(fla_layout(x) for x in (q, k, v, p)), fla_layout(beta), fla_layout(log_decay), D**-0.5
    )[0]
    tol = online_tol(q * D**-0.5, k, v, beta, log_decay.exp())
    assert torch.all((ours - fla_layout(theirs)).norm(dim=-1).double() <= tol)


def test_momentum_delta_rule():
    """The momentum delta rule: fla's layout ``(B, T, H, d)``, log-decays ``log α`` and
    ``log μ``; the error read at ``p``."""
    fla = naive("momentum_delta_rule")
    q, k, v, beta, log_decay = data(16, normalize=True)
    g = torch.Generator().manual_seed(16)
    p = torch.nn.functional.normalize(torch.randn(B, H, T, D, generator=g), dim=-1)
    mu = 0.1 + 0.8 * torch.rand(B, H, T, generator=g)
    eta = 0.2 + 0.8 * torch.rand(B, H, T, generator=g)
    ours = momentum_delta_rule(
        q, k, v, p, beta, eta, momentum=mu, decay=log_decay.exp(), scale=D**-0.5
    )
    qf, kf, vf, pf = (fla_layout(x) for x in (q, k, v, p))
    theirs = fla.recurrent_momentum_delta_rule_ref(
        qf,
        kf,
        vf,
        fla_layout(log_decay),
        fla_layout(mu.log()),
        pf,
        fla_layout(beta),
        fla_layout(eta),
        D**-0.5,
    )[0]
    # the momentum sums 1/(1 − μ) past gradients: the online bound with that factor
    tol = online_tol(q * D**-0.5, k, v, beta * eta, log_decay.exp()) / (1 - float(mu.max()))
    assert torch.all((ours - fla_layout(theirs)).norm(dim=-1).double() <= tol)


def test_ttt_linear():
    """TTT-Linear with its LayerNorm: fla's ``ttt_linear`` (layout ours, ``η`` per token, the
    LayerNorm's ``w, b`` per head, mini-batches of 16; it scales ``q`` in place: a copy goes in)."""
    fla = naive("ttt")
    q, k, v, _, _ = data(17, normalize=True)
    g = torch.Generator().manual_seed(17)
    eta = 0.1 * torch.rand(B, H, T, generator=g)
    w = 0.5 + torch.rand(H, D, generator=g)
    b = 0.1 * torch.randn(H, D, generator=g)
    ours = ttt_linear(
        q, k, v, eta, batch_size=16, scale=D**-0.5, norm=True, norm_weight=w, norm_bias=b
    )
    theirs = fla.ttt_linear(q.clone(), k, v, w, b, eta, D**-0.5, 1e-6, 16, None, None, False)[0]
    # float32 against float32: the rounding of T steps of d-term sums, magnified by the
    # LayerNorms' 1/σ (measured in float64 on our side)
    ref64 = ttt_linear(
        *(x.double() for x in (q, k, v, eta)),
        batch_size=16,
        scale=D**-0.5,
        norm=True,
        norm_weight=w.double(),
        norm_bias=b.double(),
    )
    steps = torch.arange(1, T + 1, dtype=torch.float64)[:, None]
    tol = 64 * ref.U32 * (D + 16) * steps * (1 + ref64.abs())
    assert torch.all((ours - theirs).abs().double() <= tol)


def test_log_linear_attention():
    """Log-linear attention: fla's layout ``(B, T, H, d)``, log-decays ``g`` per token and the
    level scales ``(B, T, H, L)``; its query scale multiplies the output."""
    fla = naive("log_linear_attn")
    q, k, v, _, log_decay = data(18)
    n_levels = 8  # ⌈log₂ 128⌉ + 1
    lam = torch.rand(B, H, T, n_levels, generator=torch.Generator().manual_seed(18))
    ours = log_linear_attention(q, k, v, lam, decay=log_decay.exp(), scale=D**-0.5)
    theirs = fla.naive_log_linear_attn(*(fla_layout(x) for x in (q, k, v, log_decay, lam)), D**-0.5)
    _, bound = ref.heads(vref.level_weighted_sum, *f64(q * D**-0.5, k, v, lam, log_decay.exp()))
    tol = torch.from_numpy(2 * ref.U32 * bound)[..., None]  # both sides within one bound
    assert torch.all((ours - fla_layout(theirs)).abs().double() <= tol)


@pytest.mark.parametrize("name", sorted(FLA_CALLS))
def test_the_benchmark_times_fla_on_the_same_computation(name):
    """Each fla call of the registered layers' timing (``attnreg.bench.registered_fla``) is the
    layer's own computation on its example inputs — the conventions mapped — within twice the
    registry's example bound ``u · growth(T, d_k, d_v) · max(1, max |o|)`` (both sides float32)."""
    entry = REGISTRY[name]
    b, h, t, d_k, d_v = (
        1,
        2,
        16,
        4,
        4,
    )  # d_v = d_k, as the benchmark times them (fla's Mesa needs it)
    args = entry.example.draw(torch.Generator().manual_seed(0), (b, h, t, d_k, d_v), torch.float32)
    ours = entry.function(**args)
    theirs = FLA_CALLS[name](args)()
    theirs = theirs[0] if isinstance(theirs, tuple) else theirs
    theirs = theirs if theirs.shape == ours.shape else fla_layout(theirs)
    bound = ref.U32 * entry.example.growth(t, d_k, d_v) * max(1.0, float(ours.abs().max()))
    assert float((theirs - ours).abs().max()) <= 2 * bound
