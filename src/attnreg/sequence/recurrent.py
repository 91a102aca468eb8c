"""Token-by-token references: each layer's recurrence written as it is defined, one step per
token (the chunked forms of :mod:`attnreg.sequence.chunked` are tested against these).

Inputs are validated tensors ``q, k (B, H, T, d_k)``, ``v (B, H, T, d_v)`` and per-token
parameters ``(B, H, T)`` (``decay=None``: no decay). With ``states=True`` every state is kept and
returned too, stacked along the token axis (``(B, H, T, d_k, d_v)``): the modules read and edit
them through their hook points.
"""

from __future__ import annotations

import torch


def linear_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    decay: torch.Tensor | None,
    *,
    states: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``S_t = α_t S_{t−1} + k_t v_tᵀ``, ``o_t = S_tᵀ q_t`` from ``S_0 = 0``."""
    return _state_loop(q, k, v, decay, None, states)


def delta_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    decay: torch.Tensor | None,
    *,
    states: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``S' = α_t S_{t−1}``, ``S_t = S' + k_t (β_t (v_t − S'ᵀ k_t))ᵀ``, ``o_t = S_tᵀ q_t``."""
    return _state_loop(q, k, v, decay, beta, states)


def diagonal_longhorn_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    eps: torch.Tensor,
    *,
    states: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Longhorn's diagonal approximation: ``S_t = diag(1 − ε_t k_t ⊙ k_t) S_{t−1} + ε_t k_t v_tᵀ``
    (``I − ε_t k_t k_tᵀ`` replaced by its diagonal): linear attention with the keys ``ε_t k_t``
    and one decay per state row."""
    k_eps = eps.unsqueeze(-1) * k
    return _state_loop(q, k_eps, v, 1 - k_eps * k, None, states)


def _state_loop(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    decay: torch.Tensor | None,
    beta: torch.Tensor | None,
    keep: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The token loop of the linear-state layers: ``S' = a_t ⊙ S_{t−1}`` (``decay`` one factor
    per token ``(B, H, T)``, one per state row ``(B, H, T, d_k)``, or ``None``: no decay),
    ``S_t = S' + k_t u_tᵀ`` with ``u_t = v_t`` (``beta=None``: linear attention) or
    ``u_t = β_t (v_t − S'ᵀ k_t)`` (the delta rule), ``o_t = S_tᵀ q_t``, from ``S_0 = 0``;
    ``keep`` also returns every ``S_t``."""
    b, h, t_len, d_k = k.shape
    s = k.new_zeros(b, h, d_k, v.shape[-1])
    factors = None if decay is None else decay.unsqueeze(-1)
    if factors is not None and factors.ndim == 4:
        factors = factors.unsqueeze(-1)
    outs, kept = [], []
    for t in range(t_len):
        if factors is not None:
            s = factors[:, :, t] * s
        key, u = k[:, :, t], v[:, :, t]
        if beta is not None:
            u = beta[:, :, t, None] * (u - torch.einsum("bhk,bhkv->bhv", key, s))
        s = s + key[..., None] * u[..., None, :]
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, :, t], s))
        if keep:
            kept.append(s)
    return torch.stack(outs, dim=2), torch.stack(kept, dim=2) if keep else None


def mesa_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    decay: torch.Tensor | None,
    lam: torch.Tensor,
    *,
    states: bool = False,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
    """``H^{kk}_t = α_t H^{kk}_{t−1} + β_t k_t k_tᵀ``,
    ``H^{kv}_t = α_t H^{kv}_{t−1} + β_t k_t v_tᵀ``, ``o_t = H^{kv}_tᵀ (H^{kk}_t + Λ)⁻¹ q_t`` with
    ``Λ = diag(lam)`` (``lam (H, d_k)``); one LU solve per token.
    ``states=True`` also returns ``(H^{kk}, H^{kv})``, each stacked over t."""
    b, h, t_len, d_k = k.shape
    reg = torch.diag_embed(lam)  # (H, d_k, d_k)
    kk = k.new_zeros(b, h, d_k, d_k)
    kv = k.new_zeros(b, h, d_k, v.shape[-1])
    outs, kept_kk, kept_kv = [], [], []
    for t in range(t_len):
        if decay is not None:
            kk, kv = decay[:, :, t, None, None] * kk, decay[:, :, t, None, None] * kv
        key = beta[:, :, t, None] * k[:, :, t]
        kk = kk + key[..., None] * k[:, :, t, None, :]
        kv = kv + key[..., None] * v[:, :, t, None, :]
        outs.append(ridge_readout(kk, kv, q[:, :, t], reg))
        if states:
            kept_kk.append(kk)
            kept_kv.append(kv)
    out = torch.stack(outs, dim=2)
    return out, (torch.stack(kept_kk, 2), torch.stack(kept_kv, 2)) if states else None


def state_readout(states: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``o_t = S_tᵀ q_t`` for stacked states ``(B, H, T, d_k, d_v)`` and ``q (B, H, T, d_k)``."""
    return torch.einsum("bhtkv,bhtk->bhtv", states, q)


def ridge_readout(
    kk: torch.Tensor, kv: torch.Tensor, q: torch.Tensor, reg: torch.Tensor
) -> torch.Tensor:
    """``H^{kv}ᵀ (H^{kk} + Λ)⁻¹ q`` by an LU solve, for ``kk (…, d_k, d_k)``, ``kv (…, d_k, d_v)``,
    ``q (…, d_k)`` and ``reg = Λ`` broadcastable to ``kk``; a singular system is a
    ``ValueError`` naming ``lam`` (:func:`solve_ridge`)."""
    x = solve_ridge(kk + reg, q.unsqueeze(-1))
    return (kv.mT @ x).squeeze(-1)


def solve_ridge(systems: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
    """``(H^{kk}_t + Λ)⁻¹ rhs`` by LU with partial pivoting (``torch.linalg.solve`` batching).

    ``H^{kk}_t`` has rank at most ``min(t, d_k)``: in the directions the keys do not span only
    ``Λ`` keeps the system invertible. A ``Λ`` below the rounding of ``H^{kk}_t`` (e.g.
    ``lam=1e-17`` against unit keys, ``T < d_k``) leaves it singular in floating point: that is a
    ``ValueError`` naming ``lam`` (too small for the rank of the keys), never a raw
    ``torch.linalg.LinAlgError``."""
    x, info = torch.linalg.solve_ex(systems, rhs)
    if bool((info != 0).any()):
        raise ValueError(
            "lam: the ridge system H^{kk}_t + diag(lam) is singular in "
            f"{str(systems.dtype).removeprefix('torch.')}: lam is too small for the rank of the "
            "keys (fewer tokens than d_k, or dependent keys, leave directions that only lam "
            "covers); use a larger lam"
        )
    return x
