"""Every path of the attention core against numpy, with and without read-only hooks.

``Attention.forward`` is run over similarity × separation × normalize × mean × layout (3-D and
4-D with a head axis, with and without ``W_O``, heads sharing one token stream by a stride-0
expand) × ``mask_self`` × (no hook, a read-only hook on each hook point) × (the chosen path,
each forced path). Every call either equals the numpy reference written here within an error
bound, or raises a ``ValueError`` naming the argument that cannot be honoured.

The bound is componentwise (Higham 2002, §3.5): each weight carries an error of at most
``F · u · W̄`` with ``u`` the unit roundoff, ``W̄`` the weight computed from absolute values and
``F`` a small multiple of the summed lengths (times p for powers, plus ``d · max |β s|`` for
softmax); the output carries ``F u W̄ |V| |W_O|`` plus the rounding of the products; with
``normalize`` the bound is divided by the weights' mass and multiplied by its condition
``Σ|w| / |Σw|``. Both the core and the reference round, so the bound is doubled.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from attnreg.core import PATHS, SEPARATIONS, SIMILARITIES, Attention, choose_path

U = np.finfo(np.float64).eps / 2
BILINEAR = ("dot", "scaled_dot", "whitened_dot")
B, H, M, N, D, DV, DO = 2, 2, 3, 4, 3, 3, 2
BETA, POWER = 0.7, 3
LAYOUTS = ("3d", "3d+w_o", "4d", "4d+w_o", "4d-shared", "4d-shared+w_o")
HOOKS = (None, "hook_q", "hook_k", "hook_v", "hook_scores", "hook_weights", "hook_output")
MEAN_SEPARATIONS = ("identity", "power", "signed_power")


def _tensors(layout: str, similarity: str, mask_self: bool, seed: int) -> dict:
    """Queries, keys, values, metric and ``W_O`` of one layout, as float64 tensors."""
    rng = np.random.default_rng(seed)

    def t(*shape: int) -> torch.Tensor:
        return torch.from_numpy(rng.normal(size=shape))

    shared = layout.startswith("4d-shared")
    if layout.startswith("3d"):
        q, k, v = t(B, M, D), t(B, N, D), t(B, N, DV)
    elif shared:  # every head sees the same tokens: a stride-0 head axis
        q, k, v = (
            x.unsqueeze(1).expand(B, H, *x.shape[1:]) for x in (t(B, M, D), t(B, N, D), t(B, N, DV))
        )
    else:
        q, k, v = t(B, H, M, D), t(B, H, N, D), t(B, H, N, DV)
    if mask_self:
        q = k
    metric = None
    if similarity in BILINEAR:
        if layout == "3d" and similarity != "whitened_dot":
            metric = None
        elif layout == "3d+w_o":
            metric = t(B, D, D)  # per task
        elif layout in ("4d", "4d-shared+w_o"):
            metric = t(H, D, D)  # per head
        else:
            metric = t(D, D)
    w_o = None
    if layout.endswith("+w_o"):
        w_o = t(DV, DO) if layout.startswith("3d") else t(H, DV, DO)
    return {"q": q, "k": k, "v": v, "metric": metric, "w_o": w_o}


def _reference(case: dict, similarity: str, separation: str, normalize: bool, mean: bool):
    """The output and its error bound, in numpy: scores, separation, weights, ``W V W_O``."""
    q, k, v = (case[x].numpy() for x in "qkv")
    metric = None if case["metric"] is None else case["metric"].numpy()
    w_o = None if case["w_o"] is None else case["w_o"].numpy()
    d, n = q.shape[-1], k.shape[-2]
    if similarity in BILINEAR:
        qm = q if metric is None else q @ metric
        qa = np.abs(q) if metric is None else np.abs(q) @ np.abs(metric)
        s = qm @ np.swapaxes(k, -1, -2)
        s_abs = qa @ np.abs(np.swapaxes(k, -1, -2))
        if similarity == "scaled_dot":
            s, s_abs = s / np.sqrt(d), s_abs / np.sqrt(d)
    else:
        diff = q[..., :, None, :] - k[..., None, :, :]
        if similarity == "euclidean":
            s = -np.sqrt((diff**2).sum(-1))
        else:
            s = -np.abs(diff).sum(-1)
        s_abs = np.abs(s)  # a sum of non-negative terms: relative error γ_{d+3}
    s, s_abs = BETA * s, BETA * s_abs
    if case["mask_self"]:
        eye = np.eye(n, dtype=bool)
        s = np.where(eye, 0.0 if separation in MEAN_SEPARATIONS else -np.inf, s)
        s_abs = np.where(eye, 0.0, s_abs)
    length = 2 * d + n + v.shape[-1] + (0 if w_o is None else w_o.shape[0]) + 4
    if separation == "identity":
        w, w_abs, factor = s, s_abs, np.full((*s.shape[:-1], 1), length)
    elif separation in ("power", "signed_power"):
        w = s**POWER if separation == "power" else np.sign(s) * np.abs(s) ** POWER
        w_abs, factor = s_abs**POWER, np.full((*s.shape[:-1], 1), POWER * length)
    elif separation == "softmax":
        e = np.exp(s - s.max(-1, keepdims=True))
        w = e / e.sum(-1, keepdims=True)
        finite = np.where(np.isfinite(s), s_abs, 0.0)
        w_abs, factor = w, length + 2 * (d + 3) * finite.max(-1, keepdims=True)
    else:
        top = np.sort(np.where(np.isfinite(s), s, -np.inf), -1)
        gap = top[..., -1] - top[..., -2]
        # the precondition of "max is exact": no two scores tie within their rounding
        assert np.all(gap > 1e3 * (d + 3) * U * s_abs.max(-1)), "near tie in the test data"
        w = (s == s.max(-1, keepdims=True)).astype(float)
        w_abs, factor = w, np.full((*s.shape[:-1], 1), length)
    err = factor * U * w_abs  # componentwise bound on each weight's error
    if normalize and separation in MEAN_SEPARATIONS:
        mass = (np.abs(w) if separation == "signed_power" else w).sum(-1, keepdims=True)
        abs_mass = np.abs(w).sum(-1, keepdims=True)
        mass_err = err.sum(-1, keepdims=True) + n * U * abs_mass
        err = err / np.abs(mass) + np.abs(w) * mass_err / mass**2
        w = w / mass
    if mean:
        w, err = w / n, err / n
    out = w @ v
    bound = err @ np.abs(v) + length * U * (np.abs(w) @ np.abs(v))
    if w_o is not None:
        out, bound = out @ w_o, bound @ np.abs(w_o)
    if out.ndim == 4:
        out, bound = out.sum(1), bound.sum(1)
    return out, 2 * bound, w


def _read_only(seen: dict, name: str):
    def hook(_module, _inputs, output):
        seen[name] = output.detach().clone()

    return hook


def _invalid(similarity, separation, normalize, mean, mask_self, hook, path) -> str | None:
    """The argument a call must refuse, if any (the rules of the module docstring)."""
    if mean and separation not in MEAN_SEPARATIONS:
        return "mean"
    if mean and normalize:
        return "mean"
    if path is None or path == "explicit":
        return None
    if mask_self or hook in ("hook_scores", "hook_weights"):
        return "path"
    bilinear = similarity in BILINEAR
    if path == "linear" and not (bilinear and separation == "identity" and not normalize):
        return "path"
    if path == "fused" and not (bilinear and separation == "softmax"):
        return "path"
    return None


@pytest.mark.parametrize("separation", SEPARATIONS)
@pytest.mark.parametrize("similarity", SIMILARITIES)
def test_every_path_with_every_hook_equals_numpy(similarity, separation):
    checked = 0
    for normalize, mean, layout, mask_self in itertools.product(
        (False, True), (False, True), LAYOUTS, (False, True)
    ):
        case = _tensors(layout, similarity, mask_self, seed=len(layout) + 7 * mask_self)
        case["mask_self"] = mask_self
        core = Attention(similarity, separation, beta=BETA, power=POWER, normalize=normalize)
        expected = bound = weights = None
        for hook, path in itertools.product(HOOKS, (None, *PATHS)):
            seen: dict[str, torch.Tensor] = {}
            handle = None if hook is None else getattr(core, hook)
            handle = (
                None if handle is None else handle.register_forward_hook(_read_only(seen, hook))
            )
            args = (case["q"], case["k"], case["v"])
            kwargs = {"metric": case["metric"], "w_o": case["w_o"], "mean": mean}
            kwargs |= {"mask_self": mask_self, "path": path}
            try:
                refused = _invalid(similarity, separation, normalize, mean, mask_self, hook, path)
                label = (normalize, mean, layout, mask_self, hook, path)
                if refused is not None:
                    with pytest.raises(ValueError, match=rf"^{refused}: "):
                        core(*args, **kwargs)
                    continue
                got = core(*args, **kwargs).numpy()
            finally:
                if handle is not None:
                    handle.remove()
            if expected is None:
                expected, bound, weights = _reference(case, similarity, separation, normalize, mean)
            assert got.shape == expected.shape, label
            err = np.abs(got - expected)
            assert np.all(err <= bound), (label, float(np.max(err / np.maximum(bound, 1e-300))))
            if hook == "hook_weights":  # the cached weights are the ones that made the output
                _check_made_by(seen[hook].numpy(), weights, case, got)
            checked += 1
    assert checked > 0


def _check_made_by(cached, weights, case, got):
    """``Σ_h cached · V · W_O`` is the output (up to the products' rounding), and the cached
    weights equal the reference weights."""
    v = case["v"].numpy()
    w_o = None if case["w_o"] is None else case["w_o"].numpy()
    out, bound = cached @ v, np.abs(cached) @ np.abs(v)
    if w_o is not None:
        out, bound = out @ w_o, bound @ np.abs(w_o)
    if out.ndim == 4:
        out, bound = out.sum(1), bound.sum(1)
    assert np.all(np.abs(out - got) <= 2 * (N + DV + DO + 2) * U * bound)
    assert cached.shape == np.broadcast_shapes(cached.shape, weights.shape)


@pytest.mark.parametrize("similarity", SIMILARITIES)
@pytest.mark.parametrize("separation", SEPARATIONS)
@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("mask_self", [False, True])
@pytest.mark.parametrize("hooked", [False, True])
def test_choose_path_follows_its_table(similarity, separation, normalize, mask_self, hooked):
    bilinear = similarity in BILINEAR
    if mask_self or hooked:
        expected = "explicit"
    elif bilinear and separation == "identity" and not normalize:
        expected = "linear"
    elif bilinear and separation == "softmax":
        expected = "fused"
    else:
        expected = "streamed"
    flags = {"normalize": normalize, "mask_self": mask_self, "hooked": hooked}
    assert choose_path(similarity, separation, **flags) == expected
    assert choose_path(similarity, separation, **flags, path="explicit") == "explicit"
    for path in ("linear", "fused", "streamed"):
        accepts = not (mask_self or hooked) and (
            path == "streamed"
            or (path == "linear" and bilinear and separation == "identity" and not normalize)
            or (path == "fused" and bilinear and separation == "softmax")
        )
        if accepts:
            assert choose_path(similarity, separation, **flags, path=path) == path
        else:
            with pytest.raises(ValueError, match=rf"^path: '{path}'"):
                choose_path(similarity, separation, **flags, path=path)
    with pytest.raises(ValueError, match=r"^path: "):
        choose_path(similarity, separation, **flags, path="flash")


def test_a_metric_is_refused_by_the_distances():
    q = torch.randn(1, 2, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"^metric: only a bilinear similarity"):
        Attention("euclidean", "softmax")(q, q, q, metric=torch.eye(3, dtype=torch.float64))


@pytest.mark.parametrize("separation", ["identity", "softmax", "power", "signed_power"])
def test_a_tensor_beta_gives_the_same_number_on_every_path(separation):
    rng = np.random.default_rng(5)
    q, k, v = (torch.from_numpy(rng.normal(size=s)) for s in [(2, 3, 4), (2, 6, 4), (2, 6, 2)])
    metric = torch.from_numpy(rng.normal(size=(4, 4)))
    core = Attention("scaled_dot", separation, power=3)
    beta = torch.tensor(0.4, dtype=torch.float64)
    s = 0.4 * (q.numpy() @ metric.numpy() @ k.numpy().transpose(0, 2, 1)) / 2.0
    if separation == "softmax":
        w = np.exp(s - s.max(-1, keepdims=True))
        w = w / w.sum(-1, keepdims=True)
    elif separation == "identity":
        w = s
    else:
        w = np.sign(s) * np.abs(s) ** 3 if separation == "signed_power" else s**3
    expected = w @ v.numpy()
    qa, ma, ka = (np.abs(x.numpy()) for x in (q, metric, k))
    abs_s = 0.4 * (qa @ ma @ ka.transpose(0, 2, 1)) / 2.0
    magnitude = w if separation == "softmax" else abs_s ** (1 if separation == "identity" else 3)
    bound = 2 * 3 * 30 * U * (1 + abs_s.max()) * (np.abs(magnitude) @ np.abs(v.numpy()))
    paths = {"identity": ("linear",), "softmax": ("fused",)}.get(separation, ())
    for path in (None, "explicit", "streamed", *paths):
        got = core(q, k, v, metric=metric, beta=beta, path=path).numpy()
        assert np.all(np.abs(got - expected) <= bound), path


def _overflowing_tokens(seed: int, heads: bool):
    """Tokens ``[x, y]`` with targets ``y`` at 1e300 (so ``Kᵀ V`` overflows) and a metric whose
    zero row and column ignore ``y``: the linear path must move the metric to the key side."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(2, 6, 3))
    y = 1e300 * rng.uniform(0.5, 1.0, size=(2, 6, 1))
    tokens = np.concatenate([x, y], -1)
    queries = np.concatenate([rng.normal(size=(2, 2, 3)), np.zeros((2, 2, 1))], -1)
    metric = np.zeros((H, 4, 4) if heads else (4, 4))
    metric[..., :3, :3] = rng.normal(size=(H, 3, 3) if heads else (3, 3)) * 0.1
    return queries, tokens, metric


def test_the_overflow_fallback_gives_the_plain_formula():
    queries, tokens, metric = _overflowing_tokens(6, heads=False)
    q, k = torch.from_numpy(queries), torch.from_numpy(tokens)
    assert not torch.isfinite(k.mT @ k).all()  # the state Kᵀ V overflows
    got = Attention("dot", "identity")(q, k, k, metric=torch.from_numpy(metric), mean=True)
    scores = queries @ (metric @ tokens.transpose(0, 2, 1)) / 6
    expected = scores @ tokens
    abs_scores = np.abs(queries) @ (np.abs(metric) @ np.abs(tokens).transpose(0, 2, 1)) / 6
    bound = 2 * 20 * U * (abs_scores @ np.abs(tokens))
    assert np.all(np.isfinite(got.numpy()))
    assert np.all(np.abs(got.numpy() - expected) <= bound)


@pytest.mark.parametrize("narrow", [False, True])
def test_shared_heads_and_overflow_give_the_plain_formula(narrow):
    """Heads sharing one token stream (a stride-0 ``expand``) with per-head metrics: the state
    is formed once for all heads; with targets at 1e300 the metric moves to the key side."""
    queries, tokens, metric = _overflowing_tokens(7, heads=True)
    rng = np.random.default_rng(8)
    w_o = rng.normal(size=(H, 4, 1)) if narrow else rng.normal(size=(H, 4, 4))
    q4 = torch.from_numpy(queries).unsqueeze(1).expand(2, H, 2, 4)
    k4 = torch.from_numpy(tokens).unsqueeze(1).expand(2, H, 6, 4)
    assert k4.stride(1) == 0
    got = Attention("dot", "identity")(
        q4, k4, k4, metric=torch.from_numpy(metric), w_o=torch.from_numpy(w_o)
    ).numpy()
    expected = sum(
        queries @ (metric[h] @ tokens.transpose(0, 2, 1)) @ tokens @ w_o[h] for h in range(H)
    )
    bound = sum(
        np.abs(queries)
        @ (np.abs(metric[h]) @ np.abs(tokens).transpose(0, 2, 1))
        @ np.abs(tokens)
        @ np.abs(w_o[h])
        for h in range(H)
    )
    assert np.all(np.isfinite(got))
    assert np.all(np.abs(got - expected) <= 2 * 30 * U * bound)
