"""The associate() kernel against loops written here, and chunked against unchunked."""

import itertools

import numpy as np
import pytest
import torch

from attnreg import associate


def _loop_reference(q, k, v, similarity, separation, beta, power, metric):
    out = np.zeros((q.shape[0], v.shape[1]))
    for a, qa in enumerate(q):
        s = np.zeros(k.shape[0])
        for i, ki in enumerate(k):
            if similarity == "dot":
                s[i] = qa @ ki
            elif similarity == "scaled_dot":
                s[i] = qa @ ki / np.sqrt(len(qa))
            elif similarity == "whitened_dot":
                s[i] = qa @ metric @ ki
            elif similarity == "euclidean":
                s[i] = -np.sqrt(np.sum((qa - ki) ** 2))
            else:
                s[i] = -np.sum(np.abs(qa - ki))
        s = beta * s
        if separation == "identity":
            w = s
        elif separation == "softmax":
            w = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
        elif separation == "power":
            w = s**power
        elif separation == "signed_power":
            w = np.sign(s) * np.abs(s) ** power
        else:
            w = np.eye(len(s))[np.argmax(s)]
        out[a] = w @ v
    return out


SIMS = ["dot", "scaled_dot", "whitened_dot", "euclidean", "manhattan"]
SEPS = ["identity", "softmax", "power", "max", "signed_power"]


@pytest.mark.parametrize(("similarity", "separation"), list(itertools.product(SIMS, SEPS)))
def test_every_similarity_and_separation_matches_a_loop(similarity, separation):
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(5, 4)), rng.normal(size=(9, 4)), rng.normal(size=(9, 2))
    metric = rng.normal(size=(4, 4))
    metric = metric @ metric.T
    beta, power = 0.7, 3
    expected = _loop_reference(q, k, v, similarity, separation, beta, power, metric)
    got = associate(
        torch.from_numpy(q),
        torch.from_numpy(k),
        torch.from_numpy(v),
        similarity=similarity,
        separation=separation,
        beta=beta,
        power=power,
        metric=torch.from_numpy(metric),
    )
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("separation", SEPS)
@pytest.mark.parametrize("similarity", ["dot", "euclidean", "manhattan"])
def test_chunked_equals_unchunked(similarity, separation):
    rng = np.random.default_rng(1)
    q = torch.from_numpy(rng.normal(size=(3, 50, 6)))
    k = torch.from_numpy(rng.normal(size=(3, 333, 6)))
    v = torch.from_numpy(rng.normal(size=(3, 333, 4)))
    kwargs = {"similarity": similarity, "separation": separation, "beta": 2.0, "normalize": True}
    whole, weights = associate(q, k, v, return_weights=True, **kwargs)
    tiny_budget = associate(q, k, v, memory_budget=3 * 8 * 3 * 7 * 11, **kwargs)
    np.testing.assert_allclose(tiny_budget.numpy(), whole.numpy(), rtol=1e-10, atol=1e-12)
    assert weights.shape == (3, 50, 333)


@pytest.mark.parametrize("power", [2, 3])
def test_normalised_polynomial_weights_divide_by_the_absolute_sum(power):
    """Universal Hopfield's normalised polynomial ``sᵖ / Σ_j |s_j|ᵖ``: ``signed_power`` with
    ``normalize`` divides by ``Σ_j |sign(s_j)|s_j|ᵖ|``; for odd p that is the polynomial itself,
    for even p it is ``power`` with ``normalize``."""
    rng = np.random.default_rng(4)
    q, k, v = rng.normal(size=(5, 4)), rng.normal(size=(9, 4)), rng.normal(size=(9, 2))
    s = q @ k.T
    signed = np.sign(s) * np.abs(s) ** power
    expected_signed = signed / np.abs(signed).sum(1, keepdims=True) @ v
    polynomial = s**power / (np.abs(s) ** power).sum(1, keepdims=True) @ v
    args = (torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v))
    got = associate(*args, separation="signed_power", power=power, normalize=True)
    np.testing.assert_allclose(got.numpy(), expected_signed, rtol=1e-12, atol=1e-13)
    sep = "signed_power" if power % 2 else "power"
    got = associate(*args, separation=sep, power=power, normalize=True)
    np.testing.assert_allclose(got.numpy(), polynomial, rtol=1e-12, atol=1e-13)


def test_linear_path_equals_explicit_qk_then_v():
    rng = np.random.default_rng(2)
    q, k, v = (torch.from_numpy(rng.normal(size=s)) for s in [(2, 7, 3), (2, 40, 3), (2, 40, 5)])
    qn, kn, vn = q.numpy(), k.numpy(), v.numpy()
    expected = np.einsum("bmn,bnv->bmv", qn @ kn.transpose(0, 2, 1), vn)
    # componentwise forward-error bound of the two products, in either association:
    # |fl(QKᵀV) − QKᵀV| ≤ γ_{d+N} |Q||K|ᵀ|V| with γ_n ≈ n·u; both sides carry such an error
    unit = np.finfo(np.float64).eps / 2
    bound = (
        2
        * (3 + 40)
        * unit
        * np.einsum("bmn,bnv->bmv", np.abs(qn) @ np.abs(kn).transpose(0, 2, 1), np.abs(vn))
    )
    err = np.abs(associate(q, k, v).numpy() - expected)
    assert np.all(err <= bound), float((err / bound).max())


def test_whitened_dot_defaults_to_pinv_of_keys():
    rng = np.random.default_rng(3)
    k = rng.normal(size=(20, 4))
    q, v = rng.normal(size=(3, 4)), rng.normal(size=(20, 1))
    s = k.T @ k
    expected = q @ np.linalg.pinv(s) @ k.T @ v
    got = associate(
        torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), similarity="whitened_dot"
    )
    # normwise forward-error bound of a solve with S = KᵀK, on both sides (ours and numpy's):
    # |err| ≤ c·u·κ(S)·‖q‖‖S⁻¹‖‖K‖‖v‖, c = 2·8·(N + d); the answer can cancel, so no rtol
    unit = np.finfo(np.float64).eps / 2
    scale = (
        np.linalg.norm(q, axis=1, keepdims=True)
        * np.linalg.norm(np.linalg.pinv(s), 2)
        * np.linalg.norm(k, 2)
        * np.linalg.norm(v, 2)
    )
    bound = 2 * 8 * (20 + 4) * unit * np.linalg.cond(s) * scale
    err = np.abs(got.numpy() - expected)
    assert np.all(err <= bound), float((err / bound).max())


def test_softmax_streaming_is_stable_for_large_scores():
    from scipy.special import softmax

    k = torch.randn(1000, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    q = k[:3] * 200.0  # scores in the thousands: a naive exp overflows
    out = associate(q, k, k, separation="softmax", memory_budget=4096)
    qn, kn = q.numpy(), k.numpy()
    weights = softmax(qn @ kn.T, axis=1)
    expected = weights @ kn
    assert torch.isfinite(out).all()
    # a score's absolute error (≤ d·u·|q|·|k|) is a relative error of its weight after exp;
    # the sum of N weighted values adds N·u: |err| ≤ 2·(2·δs + 2·N·u)·(w @ |K|), both sides
    unit = np.finfo(np.float64).eps / 2
    score_error = 8 * unit * (np.abs(qn) @ np.abs(kn).T).max(axis=1, keepdims=True)
    bound = 2 * (2 * score_error + 2 * 1000 * unit) * (weights @ np.abs(kn))
    err = np.abs(out.numpy() - expected)
    assert np.all(err <= bound), float((err / bound).max())


def test_mismatched_shapes_are_named():
    with pytest.raises(ValueError, match=r"keys .* and values"):
        associate(torch.zeros(2, 3), torch.zeros(4, 3), torch.zeros(5, 1))
    with pytest.raises(ValueError, match=r"queries .* and keys"):
        associate(torch.zeros(2, 3), torch.zeros(4, 2), torch.zeros(4, 1))


@pytest.mark.parametrize(
    ("separation", "paths"),
    [("identity", ["explicit", "linear", "streamed"]), ("power", ["explicit", "streamed"])],
)
def test_context_mean_divides_the_weights_on_every_path(separation, paths):
    """``mean=True``: the weights ``sep(q M kᵀ)`` divided by N (for power ``sᵖ / N``, not
    ``(s / N)ᵖ``), on each path that accepts the separation, with and without a hook."""
    from attnreg.core.attention import Attention

    rng = np.random.default_rng(11)
    q, k, v = (torch.from_numpy(rng.normal(size=s)) for s in [(2, 4, 3), (2, 9, 3), (2, 9, 2)])
    metric = torch.from_numpy(rng.normal(size=(3, 3)))
    qn, kn, vn, mn = q.numpy(), k.numpy(), v.numpy(), metric.numpy()
    p = 1 if separation == "identity" else 3
    scores = qn @ mn @ kn.transpose(0, 2, 1)
    expected = scores**p / 9 @ vn
    # componentwise bounds γ_n (|Q||M||K|ᵀ)ᵖ |V| / N, doubled for the reference's own rounding
    unit = np.finfo(np.float64).eps / 2
    abs_scores = np.abs(qn) @ np.abs(mn) @ np.abs(kn).transpose(0, 2, 1)
    out_bound = 2 * 20 * p * unit * (abs_scores**p / 9 @ np.abs(vn))
    core = Attention("dot", separation, power=3)
    for path in paths:
        got = core(q, k, v, metric=metric, mean=True, path=path).numpy()
        assert np.all(np.abs(got - expected) <= out_bound), path
    seen = []
    handle = core.hook_weights.register_forward_hook(lambda m, i, o: seen.append(o))
    hooked = core(q, k, v, metric=metric, mean=True).numpy()
    handle.remove()
    assert np.all(np.abs(seen[0].numpy() - scores**p / 9) <= 2 * 8 * p * unit * abs_scores**p / 9)
    assert np.all(np.abs(hooked - expected) <= out_bound)
    with pytest.raises(ValueError, match="mean: a context mean needs identity, power"):
        Attention("dot", "softmax")(q, k, v, mean=True)
    with pytest.raises(ValueError, match="mean: normalize already divides"):
        Attention("dot", separation, normalize=True)(q, k, v, mean=True)


@pytest.mark.parametrize("similarity", ["dot", "scaled_dot"])
@pytest.mark.parametrize("separation", ["softmax", "identity"])
def test_a_tensor_beta_stays_in_the_graph_and_equals_the_float(similarity, separation):
    """A learned temperature: the output equals the float-β output, and dβ matches a central
    finite difference of a loop written here."""
    from attnreg.core.attention import Attention

    g = torch.Generator().manual_seed(3)
    q, k = torch.randn(2, 4, 5, generator=g, dtype=torch.float64), None
    k = torch.randn(2, 7, 5, generator=g, dtype=torch.float64)
    v = torch.randn(2, 7, 3, generator=g, dtype=torch.float64)
    core = Attention(similarity, separation)
    beta = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    out = core(q, k, v, beta=beta)
    assert torch.allclose(out, core(q, k, v, beta=0.7), rtol=0, atol=1e-13)
    out.sum().backward()

    def loop(b: float) -> float:
        total = 0.0
        scale = b / np.sqrt(5) if similarity == "scaled_dot" else b
        for t in range(2):
            s = scale * q[t].numpy() @ k[t].numpy().T
            if separation == "softmax":
                s = np.exp(s - s.max(1, keepdims=True))
                s = s / s.sum(1, keepdims=True)
            total += float((s @ v[t].numpy()).sum())
        return total

    h = 1e-6
    numeric = (loop(0.7 + h) - loop(0.7 - h)) / (2 * h)
    assert beta.grad is not None
    assert abs(float(beta.grad) - numeric) <= 1e-6 * max(1.0, abs(numeric))


def test_a_tensor_beta_needs_one_element_and_a_bilinear_similarity():
    from attnreg.core.attention import Attention

    q = torch.randn(1, 2, 3)
    with pytest.raises(ValueError, match="beta: a tensor β must have one element"):
        Attention("dot", "softmax")(q, q, q, beta=torch.ones(2))
    with pytest.raises(ValueError, match="beta: a tensor β needs a bilinear similarity"):
        Attention("euclidean", "softmax")(q, q, q, beta=torch.tensor(1.0))


def test_kept_cores_carry_no_hook_and_give_a_fresh_cores_numbers():
    """associate() keeps its cores: a call with ``return_weights`` (also one that raises) must
    leave no hook behind, and later calls give the numbers of a newly built core, bit for bit."""
    from attnreg.core.attention import Attention
    from attnreg.core.retrieval import _core

    rng = np.random.default_rng(5)
    q, k, v = (torch.from_numpy(rng.normal(size=s)) for s in [(3, 4), (9, 4), (9, 2)])
    out, weights = associate(q, k, v, return_weights=True)
    qn, kn, vn = q.numpy(), k.numpy(), v.numpy()
    unit = np.finfo(np.float64).eps / 2  # both sides round: 2 γ_n |Q||K|ᵀ(|V|) bounds
    s_bound = 2 * 4 * unit * np.abs(qn) @ np.abs(kn).T
    assert np.all(np.abs(weights.numpy() - qn @ kn.T) <= s_bound)
    o_bound = 2 * (4 + 9) * unit * np.abs(qn) @ np.abs(kn).T @ np.abs(vn)
    assert np.all(np.abs(out.numpy() - qn @ kn.T @ vn) <= o_bound)
    with pytest.raises(RuntimeError):  # a metric of the wrong width fails inside the forward
        associate(q, k, v, similarity="whitened_dot", metric=torch.eye(3), return_weights=True)
    for similarity in ("dot", "whitened_dot"):
        core = _core(similarity, "identity", 1.0, 2, False, 256 * 2**20)
        assert core is _core(similarity, "identity", 1.0, 2, False, 256 * 2**20)
        assert not any(point.active for point in (core.hook_scores, core.hook_weights))
    fresh = Attention("dot", "identity")(q[None], k[None], v[None])[0]
    assert torch.equal(associate(q, k, v), fresh)  # the linear path, not the explicit one


def test_kept_cores_still_check_their_arguments():
    q = torch.zeros(2, 3)
    associate(q, q, q, separation="power", power=1)
    with pytest.raises(ValueError, match="power: must be an integer"):
        associate(q, q, q, separation="power", power=True)
    with pytest.raises(ValueError, match="beta"):
        associate(q, q, q, beta=-1.0)
    assert torch.equal(associate(q, q, q, beta=np.array(2.0)), associate(q, q, q, beta=2.0))


@pytest.mark.parametrize("similarity", ["dot", "euclidean"])
@pytest.mark.parametrize("separation", ["identity", "power", "softmax"])
def test_an_offset_shifts_each_querys_scores_before_separation(similarity, separation):
    """``sep(β · sim + c_q)`` against the loop, streamed over many key blocks and on the
    explicit path, within the core's bounds with ``R`` from absolute values (the scores'
    ``A = |β| |q||k|ᵀ + |c|`` for dot, ``|β| ‖q − k‖ + |c|`` for the distance)."""
    rng = np.random.default_rng(11)
    q, k = rng.standard_normal((5, 3)), rng.standard_normal((23, 3))
    v, c, beta, p = rng.standard_normal((23, 2)), rng.uniform(4, 6, 5), 0.7, 3
    if similarity == "dot":
        sims, absolute = q @ k.T, np.abs(q) @ np.abs(k).T
    else:
        sims = -np.linalg.norm(q[:, None] - k[None], axis=-1)
        absolute = -sims
    s = beta * sims + c[:, None]
    a = beta * absolute + c[:, None]
    gamma = (2 * 3 + 23 + 2) * 2.0**-53 / (1 - (2 * 3 + 23 + 2) * 2.0**-53)
    if separation == "identity":
        ref, bound = s @ v, 2 * gamma * a @ np.abs(v)
    elif separation == "power":
        w = s**p
        mass = w.sum(1, keepdims=True)
        ref = w @ v / mass
        condition = 1 + np.abs(w).sum(1, keepdims=True) / np.abs(mass)
        bound = 2 * p * gamma * ((a * s ** (p - 1)) @ np.abs(v)) / np.abs(mass) * condition
    else:
        w = np.exp(s - s.max(1, keepdims=True))
        w = w / w.sum(1, keepdims=True)
        ref = w @ v
        bound = 2 * (gamma + 2 * gamma * a.max(1, keepdims=True)) * (w @ np.abs(v))
    kwargs = {
        "similarity": similarity,
        "separation": separation,
        "beta": beta,
        "power": p,
        "normalize": separation == "power",
        "offset": c,
    }
    outs = [associate(q, k, v, memory_budget=budget, **kwargs) for budget in (256, 2**20)]
    outs.append(associate(q, k, v, return_weights=True, **kwargs)[0])  # the explicit path
    for out in outs:
        assert np.all(np.abs(out.numpy() - ref) <= bound), np.abs(out.numpy() - ref) / bound


def test_an_offset_needs_one_shift_per_query_and_the_streamed_or_explicit_path():
    from attnreg.core import Attention

    q, k = np.ones((4, 3)), np.ones((6, 3))
    with pytest.raises(ValueError, match=r"offset: one shift per query, shape \(4,\)"):
        associate(q, k, k, offset=np.ones(3))
    core = Attention("dot", "identity")
    t = torch.ones(1, 4, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="no offset"):
        core(t, t, t, offset=torch.ones(1, 4, 1, dtype=torch.float64), path="linear")
