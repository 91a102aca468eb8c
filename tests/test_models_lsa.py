"""Trainable LSA / softmax models against explicit per-token loops written here."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnreg.constructions import LSAStack
from attnreg.models import SoftmaxAttention, TokenModel, TrainableLSA, gd_products


def _tasks(b: int = 3, n: int = 7, m: int = 2, d: int = 4, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-0.5, 0.5, (b, n, d))
    w = rng.normal(size=(b, 1, d))
    q = rng.uniform(-0.5, 0.5, (b, m, d))
    return x, x @ w.transpose(0, 2, 1), q


def _loop_lsa(
    kq: np.ndarray,
    pv: np.ndarray,
    x,
    y,
    q,
    softmax: bool = False,
    residual: bool = True,
    norms: list[tuple[np.ndarray, np.ndarray]] | None = None,
) -> np.ndarray:
    """e_j ← e_j + Σ_h PV_h Σ_i a_h(i, j) n_i with a = n_iᵀ KQ_h n_j / N (linear) or the
    softmax over i of n_iᵀ KQ_h n_j, ``n = e`` or, with ``norms`` (a LayerNorm's scale and
    shift per layer), ``n = (e − mean e)/√(var e + 1e-5) · scale + shift``; without
    ``residual`` the update replaces e_j. Layers (L, H, D, D); prediction = −y-entry of
    queries."""
    b, n, _d = x.shape
    out = np.zeros((b, q.shape[1], 1))
    for t in range(b):
        tokens = [np.concatenate([x[t, i], y[t, i]]) for i in range(n)]
        tokens += [np.concatenate([q[t, j], [0.0]]) for j in range(q.shape[1])]
        for layer in range(kq.shape[0]):
            normed = tokens
            if norms is not None:
                scale, shift = norms[layer]
                normed = [
                    (e - e.mean()) / np.sqrt(((e - e.mean()) ** 2).mean() + 1e-5) * scale + shift
                    for e in tokens
                ]
            new = []
            for e_j, n_j in zip(tokens, normed, strict=True):
                upd = np.zeros_like(e_j)
                for h in range(kq.shape[1]):
                    scores = np.array([normed[i] @ kq[layer, h] @ n_j for i in range(n)])
                    a = (
                        np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
                        if softmax
                        else scores / n
                    )
                    upd += pv[layer, h] @ sum(a[i] * normed[i] for i in range(n))
                new.append(e_j + upd if residual else upd)
            tokens = new
        out[t, :, 0] = [-tokens[n + j][-1] for j in range(q.shape[1])]
    return out


@pytest.mark.parametrize("layers,heads", [(1, 1), (1, 3), (3, 2)])
def test_lsa_forward_equals_the_token_loop(layers: int, heads: int) -> None:
    x, y, q = _tasks()
    model = TrainableLSA(4, layers=layers, heads=heads, init_scale=0.4, seed=1, dtype=torch.float64)
    kq = np.stack([model.key_query(i).detach().numpy() for i in range(layers)])
    pv = np.stack([model.value_projection(i).detach().numpy() for i in range(layers)])
    got = model.predict(x, y, q).numpy()
    assert np.allclose(got, _loop_lsa(kq, pv, x, y, q), atol=1e-12)


@pytest.mark.parametrize(("residual", "layernorm"), [(False, False), (True, True), (False, True)])
def test_residual_and_layernorm_switches_equal_the_token_loop(residual, layernorm) -> None:
    """Without the residual stream each layer's output is its update; with the pre-attention
    LayerNorm (scale and shift set away from 1 and 0 here) the update is computed from the
    normalised tokens. ``predict`` (whose last layer updates only the queries) and the read-out
    of the last hidden state both equal the loop."""
    x, y, q = _tasks()
    layers = 3
    model = TrainableLSA(
        4,
        layers=layers,
        heads=2,
        init_scale=0.4,
        seed=2,
        dtype=torch.float64,
        residual=residual,
        layernorm=layernorm,
    )
    norms = None
    if layernorm:
        rng = np.random.default_rng(3)
        norms = [(rng.uniform(0.5, 1.5, 5), rng.normal(0, 0.2, 5)) for _ in range(layers)]
        with torch.no_grad():
            for ln, (scale, shift) in zip(model.norms, norms, strict=True):
                ln.weight.copy_(torch.from_numpy(scale))
                ln.bias.copy_(torch.from_numpy(shift))
    kq = np.stack([model.key_query(i).detach().numpy() for i in range(layers)])
    pv = np.stack([model.value_projection(i).detach().numpy() for i in range(layers)])
    want = _loop_lsa(kq, pv, x, y, q, residual=residual, norms=norms)
    assert np.allclose(model.predict(x, y, q).numpy(), want, atol=1e-12)
    assert np.allclose(model.depth_predictions(x, y, q)[-1].numpy(), want, atol=1e-12)
    assert model.spec()["residual"] is residual and model.spec()["layernorm"] is layernorm


def test_the_switches_survive_a_checkpoint(tmp_path) -> None:
    from attnreg.models import load_model, save_model

    x, y, q = _tasks()
    model = TrainableLSA(4, layers=2, init_scale=0.4, residual=False, layernorm=True)
    with torch.no_grad():
        model.norms[1].bias.fill_(0.25)
    loaded, _ = load_model(save_model(tmp_path / "m.pt", model))
    assert isinstance(loaded, TrainableLSA) and not loaded.residual and loaded.layernorm
    assert torch.equal(loaded.predict(x, y, q), model.predict(x, y, q))


def test_the_switches_refuse_non_flags_and_default_to_von_oswald() -> None:
    with pytest.raises(ValueError, match="residual"):
        TrainableLSA(3, residual="no")
    with pytest.raises(ValueError, match="layernorm"):
        TrainableLSA(3, layernorm=1)
    model = TrainableLSA(3)
    assert model.residual and model.norms is None
    assert model.spec()["residual"] is True and model.spec()["layernorm"] is False


def test_recurrent_and_gdpp_and_factored_structure() -> None:
    x, y, q = _tasks()
    rec = TrainableLSA(
        4, layers=2, recurrent=True, variant="gdpp", init_scale=0.4, dtype=torch.float64
    )
    kq = rec.key_query(0).detach().numpy()
    pv = rec.value_projection(0).detach().numpy()
    assert np.all(kq[:, 4:, :] == 0) and np.all(kq[:, :, 4:] == 0)
    assert np.all(pv[:, 4:, :4] == 0) and np.all(pv[:, :4, 4:] == 0)
    both = np.stack([kq, kq]), np.stack([pv, pv])
    assert np.allclose(rec.predict(x, y, q).numpy(), _loop_lsa(*both, x, y, q), atol=1e-12)
    fac = TrainableLSA(4, variant="factored", init_scale=0.5, dtype=torch.float64)
    assert torch.allclose(fac.key_query(0)[0], fac.w_k[0, 0].T @ fac.w_q[0, 0])
    assert torch.allclose(fac.value_projection(0)[0], fac.proj[0, 0] @ fac.w_v[0, 0])


def test_softmax_forward_equals_the_token_loop() -> None:
    x, y, q = _tasks(seed=4)
    model = SoftmaxAttention(4, heads=2, layers=2, init_scale=0.8, seed=2, dtype=torch.float64)
    kq = np.stack([model.key_query(i).detach().numpy() for i in range(2)])
    pv = np.stack([model.value_projection(i).detach().numpy() for i in range(2)])
    got = model.predict(x, y, q).numpy()
    assert np.allclose(got, _loop_lsa(kq, pv, x, y, q, softmax=True), atol=1e-12)


@pytest.mark.parametrize("softmax", [False, True])
def test_fast_prediction_and_the_generic_one_both_equal_the_token_loop(softmax: bool) -> None:
    """The layout models' fast ``forward_predict`` (last layer: the queries' y-columns only)
    and :class:`TokenModel`'s generic one (every layer through ``forward``, then ``readout``)
    both give the token loop's numbers."""
    x, y, q = _tasks(seed=5)
    cls = SoftmaxAttention if softmax else TrainableLSA
    model = cls(4, heads=2, layers=3, init_scale=0.6, seed=3, dtype=torch.float64)
    kq = np.stack([model.key_query(i).detach().numpy() for i in range(3)])
    pv = np.stack([model.value_projection(i).detach().numpy() for i in range(3)])
    want = _loop_lsa(kq, pv, x, y, q, softmax=softmax)
    xc, yc, xq = (torch.from_numpy(a) for a in (x, y, q))
    with torch.no_grad():
        fast = model.forward_predict(xc, yc, xq).numpy()
        generic = TokenModel.forward_predict(model, xc, yc, xq).numpy()
    assert type(model).forward_predict is not TokenModel.forward_predict
    assert np.allclose(fast, want, atol=1e-12)
    assert np.allclose(generic, want, atol=1e-12)


def test_gd_products_are_one_gd_step_and_eta_is_read_back() -> None:
    x, y, q = _tasks(n=9)
    eta = 0.8
    kq, pv = gd_products(4, 1, eta)
    model = TrainableLSA.from_products(kq, pv)
    # explicit GD step from W0 = 0 on L(W) = (1/2N) Σ (W x_i − y_i)²
    n = x.shape[1]
    w1 = np.stack([eta * (y[b].T @ x[b]) / n for b in range(len(x))])
    expected = np.einsum("bmd,bkd->bmk", q, w1)
    assert np.allclose(model.predict(x, y, q).numpy(), expected, atol=1e-12)
    assert model.learned_eta() == pytest.approx(eta, rel=1e-12)
    # the construction of attnreg.constructions is the same module: same predictions
    assert np.allclose(LSAStack.gd(4, 1, eta).predict(x, y, q).numpy(), expected, atol=1e-12)
    # only the products are identifiable: (s·PV, KQ/s) reads the same η
    scaled = TrainableLSA.from_products(kq / 3.0, pv * 3.0)
    assert scaled.learned_eta() == pytest.approx(eta, rel=1e-12)
    kq_n, pv_n = scaled.normalised_products()
    assert torch.allclose(kq_n[0], kq) and torch.allclose(pv_n[0], pv)


def test_attention_is_recorded_by_name() -> None:
    x, y, q = _tasks()
    model = TrainableLSA(4, layers=2, heads=2, dtype=torch.float64)
    plain = model.predict(x, y, q)
    hooked, cache = model.run_with_cache(x, y, q)
    assert {"layers.0.hook_scores", "layers.1.hook_weights", "layers.1.hook_output"} <= set(cache)
    assert cache["layers.0.hook_scores"].shape == (3, 2, 9, 7)  # (B, H, T, N)
    assert cache["layers.1.hook_scores"].shape == (3, 2, 2, 7)  # the last layer: queries only
    torch.testing.assert_close(hooked, plain)  # the explicit path gives the same predictions
    # layer 0's scores of head h: e_jᵀ KQ_hᵀ e_i / N over the tokens, by a loop
    kq = model.key_query(0).detach().numpy()
    queries = np.concatenate([q, 0 * q[..., :1]], -1)
    tokens = np.concatenate([np.concatenate([x, y], -1), queries], 1)
    for h in range(2):
        want = np.einsum("btd,ed,bne->btn", tokens, kq[h], tokens[:, :7]) / 7
        np.testing.assert_allclose(cache["layers.0.hook_scores"][:, h].numpy(), want, atol=1e-12)
    sm = SoftmaxAttention(4, dtype=torch.float64)
    _, cache = sm.run_with_cache(x, y, q)
    w = cache["layers.0.hook_weights"]
    assert torch.allclose(w.sum(-1), torch.ones_like(w.sum(-1)))


def test_bad_input() -> None:
    x, y, q = _tasks()
    model = TrainableLSA(4)
    with pytest.raises(ValueError, match="x_ctx"):
        model.predict(x[:, :0], y[:, :0], q)  # N = 0
    with pytest.raises(ValueError, match="do not fit this model"):
        TrainableLSA(5).predict(x, y, q)
    with pytest.raises(ValueError, match="x_query"):
        model.predict(x, y, q[..., :3])
    with pytest.raises(ValueError, match="variant"):
        TrainableLSA(4, variant="mlp")
    with pytest.raises(ValueError, match="layers"):
        TrainableLSA(4, layers=0)


def _two_heads(case: str, eta: float, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Two heads ``(1, 2, D, D)`` that together are one GD step of size ``eta``.

    ``equal``: each head carries η/2 of the GD construction. ``unequal``: 0.3 η and 0.7 η,
    with different scale factorisations ``(KQ·s, PV/s)``, s = 4 and −0.5. ``cross``: each head
    also routes ``x_i → y`` values through a ``y → x`` key-query row (``PV[y, x] = ±p uᵀ``,
    ``KQ[y, x] = ±k uᵀ``), which adds ``−p k u uᵀ`` to its step; its ``KQ[x, x] = I + c u uᵀ``
    with ``c = 2pk/η`` cancels that, and the opposite signs of the heads cancel the ``y_i²``
    and ``x``-only terms: the layer is GD exactly, while ``mean diag KQ[x, x]`` alone reads
    ``η (1 + c/d)``."""
    width = d + 1
    kq, pv = np.zeros((1, 2, width, width)), np.zeros((1, 2, width, width))
    if case in ("equal", "unequal"):
        shares, scales = ((0.5, 0.5), (1.0, 1.0)) if case == "equal" else ((0.3, 0.7), (4.0, -0.5))
        for h, (share, s) in enumerate(zip(shares, scales, strict=True)):
            kq[0, h, :d, :d] = s * np.eye(d)
            pv[0, h, d, d] = -share * eta / s
        return kq, pv
    u = np.arange(1.0, d + 1) / np.linalg.norm(np.arange(1.0, d + 1))
    p, k = 1.5, 2.0
    c = 2 * p * k / eta
    for h, sign in enumerate((1.0, -1.0)):
        kq[0, h, :d, :d] = np.eye(d) + c * np.outer(u, u)
        kq[0, h, d, :d] = sign * k * u
        pv[0, h, d, :d] = sign * p * u
        pv[0, h, d, d] = -eta / 2
    return kq, pv


@pytest.mark.parametrize("case", ["equal", "unequal", "cross"])
def test_two_head_learned_eta_is_the_eta_of_the_gd_step_they_make(case: str) -> None:
    """The η read from a 2-head layer equals the η of the GD step its predictions are, the
    step fitted in numpy: ``η_np = ⟨ŷ, g⟩/⟨g, g⟩`` with ``g = (1/N) Σ_i y_i x_iᵀ x_q`` (the GD
    step from ``W0 = 0`` at η = 1) and ``ŷ`` from the numpy token loop."""
    d, eta, u64 = 4, 0.8, 2.0**-53
    x, y, q = _tasks(b=4, n=9, m=3, d=d, seed=7)
    kq, pv = _two_heads(case, eta, d)
    pred = _loop_lsa(kq, pv, x, y, q)
    size = np.abs(_loop_lsa(np.abs(kq), np.abs(pv), np.abs(x), np.abs(y), np.abs(q)))
    g = np.einsum("bnk,bnd,bmd->bmk", y, x, q) / x.shape[1]
    eta_np = float((pred * g).sum() / (g * g).sum())
    # the layer is the GD step: |ŷ − η g| within the rounding of the loop (64 u · magnitude)
    assert np.all(np.abs(pred - eta * g) <= 64 * u64 * size)
    model = TrainableLSA.from_products(torch.tensor(kq), torch.tensor(pv))
    a, b = np.abs(kq[0]), np.abs(pv[0])  # Γ's terms on absolute values bound its rounding
    magnitude = (b[:, d:, d:] * a[:, :d, :d] + b[:, d:, :d].transpose(0, 2, 1) @ a[:, d:, :d]).sum(
        0
    )
    eta_bound = 64 * u64 * float(magnitude.max())
    fit_bound = 64 * u64 * float(np.linalg.norm(size) / np.linalg.norm(g))
    assert abs(model.learned_eta() - eta) <= eta_bound
    assert abs(model.learned_eta() - eta_np) <= eta_bound + fit_bound
    np.testing.assert_allclose(model.step_matrix().numpy(), eta * np.eye(d), rtol=0, atol=eta_bound)
