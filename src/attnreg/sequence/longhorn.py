"""Longhorn — the implicit (proximal) online least-squares step (Liu et al. 2024) — in its
forms side by side: :func:`longhorn` (the public layer; the full update is the delta rule with
the step ``ε_t``, :mod:`~attnreg.sequence.delta_rule`), the representable order of its terms
(:func:`longhorn_step`, :func:`longhorn_terms`), and its diagonal approximation as a token loop
(:func:`diagonal_longhorn_recurrent`) and block-parallel (:func:`diagonal_chunked`: linear
attention with one decay per key coordinate, ``a_t = 1 − ε_t k_t ⊙ k_t``; the intra-block scores
carry ``e^{G_{tj} − G_{ij}}`` per coordinate)."""

from __future__ import annotations

import torch

from attnreg.core.validation import ArrayLike, check_flag
from attnreg.sequence.checked import Result, checked_result, scaled
from attnreg.sequence.delta_rule import delta_forms
from attnreg.sequence.fused_autograd import fused
from attnreg.sequence.inputs import check_qkv_for, check_scale, per_token
from attnreg.sequence.linear_attention import channel_chunked
from attnreg.sequence.tiling import CHUNK, SEGMENT


def longhorn(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    beta: float | ArrayLike,
    *,
    scale: float = 1.0,
    diagonal: bool = False,
    mode: str = "auto",
) -> torch.Tensor:
    """Longhorn: ``S_t = (I − ε_t k_t k_tᵀ) S_{t−1} + ε_t k_t v_tᵀ``,
    ``ε_t = β_t / (1 + β_t k_tᵀ k_t)``, ``o_t = S_tᵀ q_t`` (``S_0 = 0``).

    Regression: ``W_t = argmin_W ‖W − W_{t−1}‖²_F + β_t ‖W k_t − v_t‖²``: **implicit (proximal)
    online least squares** over linear maps, one exact proximal step per token (Liu et al. 2024,
    "Longhorn: state space models are amortized online learners"). It is the delta rule with
    the step ``ε_t`` (:func:`delta_rule`, so the chunked form is the WY form), stable for every
    ``β_t ≥ 0`` since ``ε_t k_tᵀ k_t < 1``. ``diagonal=True`` is the paper's approximation
    ``I − ε_t k_t k_tᵀ ≈ diag(1 − ε_t k_t ⊙ k_t)`` (linear attention with one decay per key
    coordinate).
    """
    qt, kt, vt, mode = check_qkv_for(mode, q, k, v)
    b = per_token("beta", beta, kt, low=0.0)
    check_flag("diagonal", diagonal)

    def layer(qc: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, sc: float) -> Result:
        keys, step, values = longhorn_terms(b, kc, vc)
        if not diagonal:
            return delta_forms(qc, keys, values, step, None, sc, mode)
        if mode == "fused":
            decay = 1 - step.unsqueeze(-1) * keys * keys
            return fused(qc, keys, values, decay, step, False, sc)
        if mode == "chunk":
            return diagonal_chunked(scaled(qc, sc), keys, values, step), None
        return diagonal_longhorn_recurrent(scaled(qc, sc), keys, values, step)[0], None

    return checked_result(layer, qt, kt, vt, check_scale(scale), "longhorn")


def longhorn_step(beta: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``ε_t = β_t / (1 + β_t k_tᵀ k_t)`` (``(B, H, T)``): the step of the implicit update; where
    ``β_t k_tᵀ k_t`` overflows, the same value as ``1 / (1/β_t + k_tᵀ k_t)``. For keys beyond
    ``HUGE_KEY`` ``k_tᵀ k_t`` nears overflow and ``ε_t`` underflow: see :func:`longhorn_terms`."""
    squares = (k * k).sum(-1)
    denominator = 1 + beta * squares
    eps = beta / denominator
    overflow = torch.isinf(denominator)
    if bool(overflow.any()):
        eps = torch.where(overflow, 1 / (1 / beta + squares), eps)
    return eps


HUGE_KEY = 2.0**256  # beyond it ‖k‖² nears the float64 range and ε = O(1/‖k‖²) underflows


def longhorn_terms(
    beta: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per token ``(k'_t, γ_t, v'_t)`` with ``γ_t k'_t k'_tᵀ = ε_t k_t k_tᵀ`` and
    ``γ_t k'_t v'_tᵀ = ε_t k_t v_tᵀ``: Longhorn's update written as a delta-rule step (and its
    diagonal as decayed linear attention) in a representable order.

    Keys of magnitude at most ``HUGE_KEY``: ``(k_t, ε_t, v_t)`` (:func:`longhorn_step`). Beyond:
    the unit key ``k'_t = k_t / ‖k_t‖``, ``v'_t = v_t / ‖k_t‖`` and
    ``γ_t = ε_t ‖k_t‖² = 1 / (1 + 1/(β_t ‖k_t‖²))`` (in ``[0, 1)``), with ``‖k_t‖`` computed from
    ``k_t / 2^e`` (``2^e ≥ max |k_t|``): neither ``‖k_t‖²`` (which overflows for ``k ~ 1e200``)
    nor ``ε_t`` (which underflows) is formed."""
    _, e = torch.frexp(k.detach().abs().amax(-1))
    power = torch.ldexp(torch.ones_like(beta), e)  # 2^e ≥ max |k_t| per token
    big = power > HUGE_KEY
    if not bool(big.any()):
        return k, longhorn_step(beta, k), v
    # ε of the other tokens; the huge keys are zeroed there so that no branch holds inf or NaN
    eps = longhorn_step(beta, torch.where(big.unsqueeze(-1), torch.zeros_like(k), k))
    unit = k / power.unsqueeze(-1)
    n = torch.linalg.vector_norm(unit, dim=-1)  # in [1/2, √d_k]: no over- or underflow
    ones = torch.ones_like(n)
    n = torch.where(big, n, ones)
    norm = power * n  # ‖k_t‖
    safe = torch.where(big, beta, ones)  # no inf in the branch not taken (its gradient is 0·inf)
    gamma = 1 / (1 + (1 / (safe * norm)) / norm)
    keys = torch.where(big.unsqueeze(-1), unit / n.unsqueeze(-1), k)
    values = torch.where(big.unsqueeze(-1), v / power.unsqueeze(-1) / n.unsqueeze(-1), v)
    return keys, torch.where(big, gamma, eps), values


def diagonal_longhorn_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    eps: torch.Tensor,
    *,
    states: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Longhorn's diagonal approximation, token by token: ``S_t = diag(1 − ε_t k_t ⊙ k_t)
    S_{t−1} + ε_t k_t v_tᵀ`` (``I − ε_t k_t k_tᵀ`` replaced by its diagonal), ``o_t = S_tᵀ q_t``,
    from ``S_0 = 0``. With ``states=True`` every ``S_t`` is returned too, stacked along the
    token axis (``(B, H, T, d_k, d_v)``: the modules' state hooks read them)."""
    s = k.new_zeros(*k.shape[:2], k.shape[-1], v.shape[-1])
    outs, kept = [], []
    for t in range(k.shape[2]):
        key, step = k[:, :, t], eps[:, :, t, None]
        s = (1 - step * key * key)[..., None] * s + (step * key)[..., None] * v[:, :, t, None, :]
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, :, t], s))
        if states:
            kept.append(s)
    return torch.stack(outs, dim=2), torch.stack(kept, dim=2) if states else None


def diagonal_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    eps: torch.Tensor,
    chunk: int = CHUNK,
    segment: int = SEGMENT,
) -> torch.Tensor:
    """Longhorn's diagonal approximation ``S_t = diag(a_t) S_{t−1} + ε_t k_t v_tᵀ``,
    ``a_t = 1 − ε_t k_t ⊙ k_t``, ``o_t = S_tᵀ q_t``: linear attention with one decay per key
    coordinate and the keys ``ε_t k_t`` (:func:`attnreg.sequence.linear_attention.channel_chunked`,
    the log-decays ``log1p(−ε_t k_t ⊙ k_t)``)."""
    k_eps = k * eps.unsqueeze(-1)
    return channel_chunked(q, k_eps, v, torch.log1p(-k_eps * k), chunk, segment)
