"""The softmax (modern Hopfield) energy of Ramsauer et al. (2021, eq. 2) in a stable form.

``E(ξ) = −β⁻¹ log Σ_i exp(β k_iᵀξ) + ½ ξᵀξ + β⁻¹ log N + ½ M²``, ``M = max_i ‖k_i‖``.

Summed as written, the four terms cancel: near a stored pattern of largest norm (a retrieved
state) ``E`` is far below ``½‖ξ‖²`` and ``½M²``, and the sum keeps nothing of it below about
``u · M²`` (``u`` the unit roundoff). With ``s_i = k_iᵀξ`` and

``g_i = ½‖ξ‖² + ½M² − s_i = ½‖ξ − k_i‖² + ½(M² − ‖k_i‖²) ≥ 0``

the energy is a log-mean-exp of non-negative numbers, ``E = −β⁻¹ log (1/N) Σ_i exp(−β g_i)``,
and with the best pattern ``k*`` (largest score ``t``, smallest ``g``) and the gaps
``δ_i = t − s_i ≥ 0``:

``E = g* + β⁻¹ D``,  ``g* = ½‖ξ − k*‖² + ½(M − ‖k*‖)(M + ‖k*‖)``,
``D = −log (1/N) Σ_i exp(−β δ_i) ∈ [0, log N]``.

Both terms are non-negative, so nothing cancels between them. ``g*`` comes from the difference
``ξ − k*`` (accurate to its own size; computed at unit scale by a power of two, so it neither
over- nor underflows on the way) and is exactly ``½‖ξ − k*‖²`` when ``k*`` has the largest norm.
``D`` is ``−log1p(mean_i expm1(−β δ_i))`` when the mean weight is at least ½ (near ties, where
``log N − log Σ`` would cancel), else ``log N − log Σ_i exp(−β δ_i)`` (at least ``log 2``). The
gap of ``k*`` is exactly zero: its score minus itself.

What is left is the rounding of the inputs' own numbers: each score, hence each gap, carries
about ``d·u·‖k_i‖‖ξ‖``, which enters ``E`` with pattern ``i``'s softmax weight (nothing for a
single pattern, exact copies, or patterns the softmax does not weigh); and where ``k*`` does not
have the largest norm, ``M² − ‖k*‖²`` carries the rounding of the two norms, about ``d·u·M²``.
"""

from __future__ import annotations

import math

import torch

from attnreg.core.retrieval import associate
from attnreg.core.scaling import row_exponents, times_power_of_two
from attnreg.core.streamed import DEFAULT_MEMORY_BUDGET


def softmax_energy(
    states: torch.Tensor,
    patterns: torch.Tensor,
    beta: float,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> torch.Tensor:
    """``E(ξ)`` of the module docstring per state: states ``(M, d)`` and patterns ``(N, d)``
    give ``(M,)``; ``(B, M, d)`` and ``(B, N, d)`` give ``(B, M)``.

    The scores ``k_iᵀξ`` come from the attention core (dot similarity, identity separation,
    read from its weights), for as many states at a time as fit ``memory_budget`` bytes of
    scores. ``ValueError`` naming ``states`` when the scores ``β·s`` or the energy itself
    overflow.
    """
    batched = states.ndim == 3
    q = states if batched else states.unsqueeze(0)
    k = patterns if batched else patterns.unsqueeze(0)
    b, m, n = q.shape[0], q.shape[1], k.shape[1]
    norms = torch.linalg.vector_norm(k, dim=-1)  # (B, N)
    big_m = norms.amax(-1, keepdim=True)
    chunk = max(1, memory_budget // max(1, b * n * q.element_size() * 3))
    out = [
        _energy(q[:, i : i + chunk], k, norms, big_m, beta, memory_budget)
        for i in range(0, m, chunk)
    ]
    energy = torch.cat(out, dim=1) if out else q.new_zeros(b, 0)
    return energy if batched else energy[0]


def _energy(
    q: torch.Tensor,
    k: torch.Tensor,
    norms: torch.Tensor,
    big_m: torch.Tensor,
    beta: float,
    memory_budget: int,
) -> torch.Tensor:
    """:func:`softmax_energy` of the states ``q`` ``(B, m, d)``; ``norms`` ``(B, N)`` are the
    patterns' norms and ``big_m`` ``(B, 1)`` their largest."""
    values = k.new_zeros(*k.shape[:-1], 1)  # the weights do not depend on them
    _, scores = associate(q, k, values, memory_budget=memory_budget, return_weights=True)
    top, best = scores.max(dim=-1)  # (B, m): t and the index of k*
    if not bool(torch.isfinite(beta * top).all()):
        raise ValueError(
            f"states: the softmax scores β·kᵀξ overflow {q.dtype} (β = {beta:g}, "
            f"largest |ξ| = {float(q.abs().max()):.3g}); scale the states down"
        )
    gaps = beta * (top.unsqueeze(-1) - scores)  # β δ_i ≥ 0, exactly 0 at k*
    mean_m1 = torch.expm1(-gaps).mean(-1)
    total = torch.exp(-gaps).sum(-1)
    spread = math.log(k.shape[1]) - torch.log(total)
    d = torch.where(mean_m1 >= -0.5, -torch.log1p(mean_m1), spread)
    k_best = torch.gather(k, 1, best.unsqueeze(-1).expand(-1, -1, k.shape[-1]))
    r = q - k_best
    e = row_exponents(r)
    unit = times_power_of_two(r, -e)
    half = times_power_of_two(0.5 * (unit * unit).sum(-1, keepdim=True), 2 * e)[..., 0]
    n_best = torch.gather(norms, 1, best)
    g_best = half + 0.5 * (big_m - n_best) * (big_m + n_best)
    energy = g_best + d / beta
    if not bool(torch.isfinite(energy).all()):
        raise ValueError(
            f"states: the energy overflows {q.dtype} at this magnitude (½‖ξ − k*‖² or "
            "½ max‖k_i‖² beyond the float range); scale the states down"
        )
    return energy
