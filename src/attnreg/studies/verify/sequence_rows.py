"""The certificate's rows for the sequence layers of :mod:`attnreg.sequence`.

Each task ``(X, Y, X*)`` of a case (``B`` tasks, ``N`` context rows, ``M`` queries) becomes one
causal sequence of ``T = N + M`` tokens per task (batch ``B``, one head): at a context position
``t ≤ N`` the key and the query are the row ``x_t`` and the value is ``y_t``; at the query
positions the query is a row of ``X*`` and the key and the value are zero. A zero key writes
nothing into the states of linear attention, the delta rule, Longhorn and Mesa, so their
read-out at a query position is the regression fitted to the whole context (decayed by the
gates since), and at a context position the regression fitted to that prefix (the mesa row's
"every prefix"). Softmax and local linear attention give a zero key the weight of the score 0,
and their references see the same tokens.

Keys and queries are the unit rows ``x / ‖x‖`` (DeltaNet's and MesaNet's L2-normalised q and k;
zero-key query positions stay zero), computed in float64 and rounded to the dtype; both the
layer and its reference get the rounded tokens. The layers form key products ``k_iᵀ k_j`` and
``k kᵀ`` in the dtype, which at the extreme scales ``a = 2^±664`` (float32: ``2^±83``) overflow
or vanish whatever the step sizes (``β / a²`` is not a number of the dtype): so, as for the
gradient-descent rows, the scale is carried by the values, ``v = b·y`` with ``b = 2^k``, and
the reference is ``b`` times the one on the unscaled values (every layer is linear in ``v``).

Parameters, drawn per case from their own generator (seeded by the config seed and the case's
index, so the other rows' draws are unchanged) and rounded to the dtype: decays ``α_t ∈
[0.9, 1)``; the delta rule's step ``β_t = c_t / ‖k_t‖²`` with ``c_t ∈ [0.25, 1]`` (normalised
LMS: ``I − β_t k_t k_tᵀ`` has the eigenvalues 1 and ``1 − c_t ∈ [0, 0.75]``, no expansion, so
rounding is not amplified); Longhorn's ``β_t ∈ [0.5, 4]`` (stable for every ``β ≥ 0``); Mesa's
``β_t ∈ [0.5, 1]`` and ``λ_j = mesa_lambda · [0.5, 1.5]`` per key coordinate; softmax and local
linear attention with ``scale = 4`` and the local fit's ridge ``λ = ridge`` (config).

Tolerances are the rounding-error bounds of the references
(:mod:`attnreg.studies.verify.references`): ``|ô_t − o_t| ≤ u · m_t`` with ``u`` the unit
roundoff and ``m_t`` stated per layer (sums of products of length ``d + n_t`` for linear
attention, ``(t + 1)`` non-expansive online steps for the delta rule and Longhorn, ``u · κ`` of
each prefix's solve for Mesa, the scores' rounding and a convex sum for softmax, ``κ²`` of the
local fit); the row's tolerance is ``max(base, u · max_t m_t / max |o|)``. The outputs are
compared at every position; the layers run their default forms (``mode="auto"``: the fused
recurrence on the CPU, Mesa's chunked form).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from attnreg.sequence import (
    comba,
    delta_product,
    delta_rule,
    forgetting_attention,
    generalized_delta_rule,
    linear_attention,
    local_linear_attention,
    log_linear_attention,
    longhorn,
    mesa,
    momentum_delta_rule,
    softmax_attention,
    stick_breaking_attention,
    titans,
    ttt_linear,
)
from attnreg.sequence.log_linear import levels
from attnreg.sequence.registry import REGISTRY, LayerEntry
from attnreg.studies.verify import references as ref
from attnreg.studies.verify.config import (
    DTYPES,
    VerifyConfig,
    round_to,
    smallest_normal,
    unit_roundoff,
)
from attnreg.studies.verify.measure import measure

TTT_BATCH = 4
"""The TTT-Linear row's mini-batch (several per sequence, the last one shorter)."""
SOFTMAX_SCALE = 4.0
"""The score scale of the softmax and local-linear rows (unit keys and queries: scores in
``[−4, 4]``, weights spread over a factor up to ``e⁸``)."""


def unit_rows(x: np.ndarray) -> np.ndarray:
    """``x / ‖x‖`` per row (a zero row stays zero)."""
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


def sequence_tokens(data: dict[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    """The tasks as sequences (module docstring): ``q, k (B, T, d)`` and the unscaled values
    ``v (B, T, dy)``, float64 numbers of the dtype."""
    x, y, xq = data["x"], data["y"], data["q"]
    q = round_to(unit_rows(np.concatenate([x, xq], axis=1)), dtype)
    k = np.concatenate([q[:, : x.shape[1]], np.zeros_like(xq)], axis=1)
    v = np.concatenate([y, np.zeros((*xq.shape[:2], y.shape[2]))], axis=1)
    return {"q": q, "k": k, "v": v}


def _parameters(
    tokens: dict[str, np.ndarray], cfg: VerifyConfig, dtype: str, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """The per-token parameters ``(B, T)`` and Mesa's ``λ (d,)``, rounded to the dtype."""
    k = tokens["k"]
    shape = k.shape[:2]
    squares = (k * k).sum(-1)
    c = rng.uniform(0.25, 1.0, shape)
    params = {
        "alpha": rng.uniform(0.9, 1.0, shape),
        "delta_beta": np.divide(c, squares, out=c.copy(), where=squares > 0),
        "longhorn_beta": rng.uniform(0.5, 4.0, shape),
        "mesa_beta": rng.uniform(0.5, 1.0, shape),
        "mesa_lam": cfg.mesa_lambda * rng.uniform(0.5, 1.5, k.shape[2]),
        "channel_alpha": rng.uniform(0.9, 1.0, k.shape),
        "eta": rng.uniform(0.25, 1.0, k.shape),
        "mu": rng.uniform(0.1, 0.5, shape),
        "ttt_lr": rng.uniform(0.25, 1.0, shape) / TTT_BATCH,
        "levels": rng.uniform(0.5, 1.5, (*shape, levels(shape[1]))),
    }
    return {name: round_to(p, dtype) for name, p in params.items()}


Row = tuple[str, str, Callable[[], torch.Tensor], Callable[..., Any]]
"""A row to measure: name, reference's description, the layer's run, the reference per task."""

LAYER_OF_ROW = {
    "sequence: linear attention": "linear_attention",
    "sequence: linear attention, per-token decay (GLA)": "linear_attention",
    "sequence: delta rule (DeltaNet), β = c/‖k‖²": "delta_rule",
    "sequence: gated delta rule (Gated DeltaNet)": "delta_rule",
    "sequence: Longhorn": "longhorn",
    "sequence: Mesa (decayed ridge)": "mesa",
    "sequence: softmax attention": "softmax_attention",
    "sequence: local linear attention": "local_linear_attention",
    "sequence: DeltaProduct (n_h = 2)": "delta_product",
    "sequence: generalized delta rule (RWKV-7 form)": "generalized_delta_rule",
    "sequence: Comba (error read at the previous key)": "comba",
    "sequence: momentum delta rule": "momentum_delta_rule",
    "sequence: Titans (linear memory)": "titans",
    "sequence: TTT-Linear (no LayerNorm)": "ttt_linear",
    "sequence: log-linear attention": "log_linear_attention",
    "sequence: forgetting attention": "forgetting_attention",
    "sequence: stick-breaking attention": "stick_breaking_attention",
}
"""The registered layer (:data:`attnreg.sequence.registry.REGISTRY`) each row certifies."""


REGISTERED_ROW = ("sequence: ", " (registered)")
"""The name of a registered layer's own row (:func:`registered_row`): prefix, layer, suffix."""


def exactness_by_layer(rows: list[dict[str, Any]]) -> dict[str, str]:
    """``attnreg verify``'s sequence rows summed up per registered layer: ``"p of n rows,
    largest error / tolerance r"`` (a layer's rows are those :data:`LAYER_OF_ROW` names and its
    ``(registered)`` row)."""
    found: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        name = r.get("construction", "")
        layer = LAYER_OF_ROW.get(name)
        prefix, suffix = REGISTERED_ROW
        if layer is None and name.startswith(prefix) and name.endswith(suffix):
            layer = name.removeprefix(prefix).removesuffix(suffix)
        if layer is not None:
            found.setdefault(layer, []).append(r)
    return {
        layer: f"{sum(r['passed'] for r in rs)} of {len(rs)} rows, largest error / tolerance "
        f"{max(r['rel_err'] / r['tol'] for r in rs):.2g}"
        for layer, rs in found.items()
    }


def _previous(a: np.ndarray) -> np.ndarray:
    """``a`` shifted one token later along axis 1 (zeros at the first token)."""
    out = np.zeros_like(a)
    out[:, 1:] = a[:, :-1]
    return out


def family_rows(
    q: np.ndarray,
    key: np.ndarray,
    v: np.ndarray,
    p: dict[str, np.ndarray],
    tensor: Callable[[np.ndarray], torch.Tensor],
    k: int,
    dtype: str,
) -> list[Row]:
    """The rows of the layers of 2025 on the same tokens (values scaled by ``2^k``): DeltaProduct
    with two steps per token (the token's pair, then the previous token's), the generalized
    delta rule in RWKV-7's form (``a = −η ⊙ k``, ``b = k``, a gate per channel), Comba read at
    the previous key, the momentum delta rule and Titans (``μ ∈ [0.1, 0.5]``), TTT-Linear
    (mini-batches of :data:`TTT_BATCH`), log-linear attention (level weights in
    ``[0.5, 1.5]``), forgetting attention (``f = α``) and stick-breaking attention. Parameters
    formed here are rounded to ``dtype``, as the drawn ones are."""
    alpha, beta, mu, lr = p["alpha"], p["delta_beta"], p["mu"], p["ttt_lr"]
    ones = np.ones(alpha.shape)
    steps_k = np.stack([key, _previous(key)], axis=2)
    steps_v = np.stack([v, _previous(v)], axis=2)
    steps_beta = np.stack([beta, _previous(beta)], axis=2)
    erase = round_to(-p["eta"] * key, dtype)
    channel = p["channel_alpha"]
    regressor = _previous(key)
    heavy = round_to(
        beta * (1 - mu), dtype
    )  # heavy-ball steps that stay stable: β (1 − μ) ‖k‖² ≤ 1 − μ

    def scaled(a: np.ndarray) -> torch.Tensor:
        return tensor(np.ldexp(a, k))

    return [
        (
            "sequence: DeltaProduct (n_h = 2)",
            "numpy LMS loop, n_h steps per token",
            lambda: delta_product(
                tensor(q), tensor(steps_k), scaled(steps_v), tensor(steps_beta), decay=tensor(alpha)
            ),
            lambda b: ref.lms_steps(q[b], steps_k[b], steps_v[b], steps_beta[b], alpha[b]),
        ),
        (
            "sequence: generalized delta rule (RWKV-7 form)",
            "numpy diagonal-plus-low-rank update loop",
            lambda: generalized_delta_rule(
                tensor(q), tensor(key), scaled(v), tensor(erase), tensor(key), decay=tensor(channel)
            ),
            lambda b: ref.dplr_loop(q[b], key[b], v[b], erase[b], key[b], channel[b]),
        ),
        (
            "sequence: Comba (error read at the previous key)",
            "numpy instrumental-variable LMS loop",
            lambda: comba(
                tensor(q),
                tensor(key),
                scaled(v),
                tensor(regressor),
                tensor(beta),
                decay=tensor(alpha),
            ),
            lambda b: ref.instrumental_lms(q[b], key[b], regressor[b], v[b], beta[b], alpha[b]),
        ),
        (
            "sequence: momentum delta rule",
            "numpy heavy-ball LMS loop",
            lambda: momentum_delta_rule(
                tensor(q),
                tensor(key),
                scaled(v),
                tensor(key),
                tensor(heavy),
                1.0,
                momentum=tensor(mu),
                decay=tensor(alpha),
            ),
            lambda b: ref.momentum_lms(
                q[b], key[b], key[b], v[b], heavy[b], ones[b], mu[b], alpha[b]
            ),
        ),
        (
            "sequence: Titans (linear memory)",
            "numpy heavy-ball LMS loop, β = 1",
            lambda: titans(
                tensor(q),
                tensor(key),
                scaled(v),
                lr=tensor(heavy),
                momentum=tensor(mu),
                decay=tensor(alpha),
            ),
            lambda b: ref.momentum_lms(
                q[b], key[b], key[b], v[b], ones[b], heavy[b], mu[b], alpha[b]
            ),
        ),
        (
            "sequence: TTT-Linear (no LayerNorm)",
            "numpy mini-batch gradient descent, dual-form read-out",
            lambda: ttt_linear(tensor(q), tensor(key), scaled(v), tensor(lr), batch_size=TTT_BATCH),
            lambda b: ref.mini_batch_gd(q[b], key[b], v[b], lr[b], TTT_BATCH),
        ),
        (
            "sequence: log-linear attention",
            "numpy sum over the Fenwick segments",
            lambda: log_linear_attention(
                tensor(q), tensor(key), scaled(v), tensor(p["levels"]), decay=tensor(alpha)
            ),
            lambda b: ref.level_weighted_sum(q[b], key[b], v[b], p["levels"][b], alpha[b]),
        ),
        (
            "sequence: forgetting attention",
            "numpy gated Nadaraya–Watson smoother",
            lambda: forgetting_attention(
                tensor(q), tensor(key), scaled(v), tensor(alpha), scale=SOFTMAX_SCALE
            ),
            lambda b: ref.gated_smoother(q[b], key[b], v[b], alpha[b], SOFTMAX_SCALE),
        ),
        (
            "sequence: stick-breaking attention",
            "numpy stick broken nearest key first",
            lambda: stick_breaking_attention(
                tensor(q), tensor(key), scaled(v), scale=SOFTMAX_SCALE
            ),
            lambda b: ref.stick_breaking(q[b], key[b], v[b], SOFTMAX_SCALE),
        ),
    ]


def registered_row(
    entry: LayerEntry,
    q: np.ndarray,
    key: np.ndarray,
    v: np.ndarray,
    shape: str,
    dtype: str,
    cfg: VerifyConfig,
) -> dict[str, Any]:
    """The row of a registered layer that has no rows of its own: the layer on the case's
    tokens (one head; its other arguments drawn by its :class:`Example`, from a generator
    seeded by the layer, the case and the dtype) against the example's numpy reference on the
    same numbers, within ``u · growth(T, d_k, d_v)`` of ``max |o|``."""
    dt = DTYPES[dtype]
    b, t, d_k = q.shape
    seed = zlib.crc32(f"{entry.name}|{shape}|{dtype}".encode())
    assert entry.example is not None and entry.example.reference is not None
    drawn = entry.example.draw(torch.Generator().manual_seed(seed), (b, 1, t, d_k, v.shape[-1]), dt)
    tokens = {"q": q[:, None], "k": key[:, None], "v": round_to(v, dtype)[:, None]}
    args = drawn | {name: torch.as_tensor(a, dtype=dt) for name, a in tokens.items()}
    numbers = {
        name: a.numpy().astype(np.float64) if isinstance(a, torch.Tensor) else a
        for name, a in args.items()
    }
    expected = entry.example.reference(**numbers)[:, 0]
    bound = unit_roundoff(dtype) * entry.example.growth(t, d_k, v.shape[-1])
    name = entry.name.join(REGISTERED_ROW)
    spec = (name, "its registered numpy reference", bound)
    return measure(spec, _one_head(lambda: entry.function(**args)), expected, shape, dtype, cfg)


def _one_head(run: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
    """``run()``'s output ``(B, 1, T, d_v)`` as ``(B, T, d_v)``."""
    return lambda: run()[:, 0]


def sequence_rows(
    data: dict[str, np.ndarray],
    k: int,
    shape: str,
    dtype: str,
    cfg: VerifyConfig,
    rng: np.random.Generator,
) -> list[dict[str, Any]]:
    """Every sequence layer's row on one case's tasks whose values are scaled by ``2^k``
    (``shape`` names the case): the layer at every position against its reference times
    ``2^k``, within ``max(base, u · max_t m_t / max |o|)`` (module docstring)."""
    tokens = sequence_tokens(data, dtype)
    p = _parameters(tokens, cfg, dtype, rng)
    q, key, v = tokens["q"], tokens["k"], tokens["v"]
    dt = DTYPES[dtype]

    def tensor(a: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(a, dtype=dt).unsqueeze(1)  # (B, 1, T, ·): one head

    qt, kt, vt = tensor(q), tensor(key), tensor(np.ldexp(v, k))
    gate, no_decay = tensor(p["alpha"]), np.ones(q.shape[:2])
    lam_h = torch.as_tensor(p["mesa_lam"], dtype=dt).unsqueeze(0)  # (H, d)
    ridge, scale = cfg.ridge, SOFTMAX_SCALE
    rows: list[Row] = [
        (
            "sequence: linear attention",
            "numpy Σ_{i≤t} (q_tᵀk_i) v_i",
            lambda: linear_attention(qt, kt, vt),
            lambda b: ref.decayed_sum(q[b], key[b], v[b], no_decay[b]),
        ),
        (
            "sequence: linear attention, per-token decay (GLA)",
            "numpy decayed sum Σ γ_{t,i} (q_tᵀk_i) v_i",
            lambda: linear_attention(qt, kt, vt, decay=gate),
            lambda b: ref.decayed_sum(q[b], key[b], v[b], p["alpha"][b]),
        ),
        (
            "sequence: delta rule (DeltaNet), β = c/‖k‖²",
            "numpy LMS loop",
            lambda: delta_rule(qt, kt, vt, tensor(p["delta_beta"])),
            lambda b: ref.lms_loop(q[b], key[b], v[b], p["delta_beta"][b], no_decay[b]),
        ),
        (
            "sequence: gated delta rule (Gated DeltaNet)",
            "numpy LMS loop with weight decay",
            lambda: delta_rule(qt, kt, vt, tensor(p["delta_beta"]), decay=gate),
            lambda b: ref.lms_loop(q[b], key[b], v[b], p["delta_beta"][b], p["alpha"][b]),
        ),
        (
            "sequence: Longhorn",
            "numpy implicit step (normal equations)",
            lambda: longhorn(qt, kt, vt, tensor(p["longhorn_beta"])),
            lambda b: ref.implicit_step_loop(q[b], key[b], v[b], p["longhorn_beta"][b]),
        ),
        (
            "sequence: Mesa (decayed ridge)",
            "numpy lstsq, weighted ridge per prefix",
            lambda: mesa(qt, kt, vt, tensor(p["mesa_beta"]), decay=gate, lam=lam_h),
            lambda b: ref.weighted_ridge_per_prefix(
                q[b], key[b], v[b], p["mesa_beta"][b], p["alpha"][b], p["mesa_lam"]
            ),
        ),
        (
            "sequence: softmax attention",
            "numpy Nadaraya–Watson smoother",
            lambda: softmax_attention(qt, kt, vt, scale=scale),
            lambda b: ref.kernel_smoother(q[b], key[b], v[b], scale),
        ),
        (
            "sequence: local linear attention",
            "numpy lstsq, kernel-weighted local-linear fit",
            lambda: local_linear_attention(qt, kt, vt, lam=ridge, scale=scale),
            lambda b: ref.local_linear_fit(q[b], key[b], v[b], ridge, scale),
        ),
    ]
    rows += family_rows(q, key, v, p, tensor, k, dtype)
    unit, floor = unit_roundoff(dtype), smallest_normal(dtype)
    measured = []
    for name, reference, run, refer in rows:
        parts = [refer(b) for b in range(q.shape[0])]
        expected = np.stack([o for o, _ in parts])
        magnitude = max(float(m.max()) for _, m in parts)
        size = max(float(np.abs(expected).max()), floor)
        spec = (name, reference, unit * magnitude / size)
        measured.append(measure(spec, _one_head(run), np.ldexp(expected, k), shape, dtype, cfg))
    measured += [
        registered_row(entry, q, key, np.ldexp(v, k), shape, dtype, cfg)
        for entry in REGISTRY.values()
        if entry.name not in LAYER_OF_ROW.values()
        and entry.example is not None
        and entry.example.reference is not None
    ]
    return measured
