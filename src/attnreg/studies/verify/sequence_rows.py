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

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from attnreg.sequence import (
    delta_rule,
    linear_attention,
    local_linear_attention,
    longhorn,
    mesa,
    softmax_attention,
)
from attnreg.studies.verify import references as ref
from attnreg.studies.verify.config import (
    DTYPES,
    VerifyConfig,
    round_to,
    smallest_normal,
    unit_roundoff,
)
from attnreg.studies.verify.measure import measure

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
    }
    return {name: round_to(p, dtype) for name, p in params.items()}


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
    rows: list[tuple[str, str, Callable[[], torch.Tensor], Callable[..., Any]]] = [
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
    unit, floor = unit_roundoff(dtype), smallest_normal(dtype)
    measured = []
    for name, reference, run, refer in rows:
        parts = [refer(b) for b in range(q.shape[0])]
        expected = np.stack([o for o, _ in parts])
        magnitude = max(float(m.max()) for _, m in parts)
        size = max(float(np.abs(expected).max()), floor)
        spec = (name, reference, unit * magnitude / size)
        measured.append(measure(spec, _one_head(run), np.ldexp(expected, k), shape, dtype, cfg))
    return measured
