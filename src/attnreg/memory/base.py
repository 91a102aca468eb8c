"""Shared pieces of the associative memories: input checks, sign updates, polynomial separation.

Every memory is the Universal Hopfield form ``retrieve(q) = Vᵀ sep(sim(K, q))`` of Millidge et
al. (2022), computed by :func:`attnreg.core.attention` (batched over queries, chunked over
memories, never holding the queries × memories score matrix).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch
from numpy.polynomial import Polynomial

from attnreg.core.retrieval import associate
from attnreg.core.streamed import DEFAULT_MEMORY_BUDGET
from attnreg.core.validation import as_tensor
from attnreg.data.patterns import check_binary


def check_patterns(
    name: str, patterns: object, *, binary: bool = False, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """Stored patterns as a finite ``(N, d)`` tensor with ``N ≥ 1`` (±1 entries if ``binary``)."""
    x = as_tensor(name, patterns, ndim=(2,), dtype=dtype, allow_empty=True)
    if x.shape[0] == 0:
        raise ValueError(f"{name}: N = 0 patterns; a memory needs at least one (shape {x.shape})")
    if x.shape[1] == 0:
        raise ValueError(f"{name}: d = 0 features (shape {tuple(x.shape)})")
    if binary:
        check_binary(name, x)
    return x


def check_states(
    name: str, states: object, d: int, dtype: torch.dtype, *, binary: bool = False
) -> tuple[torch.Tensor, bool]:
    """Queries / states as ``(M, d)`` in ``dtype``; a 1-D state is accepted (returned flag)."""
    x = as_tensor(name, states, ndim=(1, 2))
    single = x.ndim == 1
    if single:
        x = x.unsqueeze(0)
    if x.shape[1] != d:
        raise ValueError(
            f"{name}: dimension d = {x.shape[1]} does not match the stored patterns' d = {d} "
            f"(shape {tuple(x.shape)})"
        )
    if binary:
        check_binary(name, x)
    return x.to(dtype), single


def sign_update(field: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    """``sign(field)``, keeping the current state where the field is exactly 0."""
    return torch.where(field > 0, 1.0, torch.where(field < 0, -1.0, state)).to(state.dtype)


def polynomial_associate(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    coefficients: list[float] | np.ndarray,
    *,
    similarity: str = "dot",
    scale: float = 1.0,
    offset: float | torch.Tensor = 0.0,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> torch.Tensor:
    """``Σ_μ v_μ P(c + β·sim(q, k_μ))`` for ``P(x) = Σ_p a_p xᵖ`` (``a`` = ``coefficients``,
    ``β`` = ``scale``, ``c`` = ``offset``: a number or one value per query), streamed over the
    memories.

    By the binomial theorem ``P(c + βs) = Σ_j e_j(c) sʲ`` with
    ``e_j(c) = βʲ Σ_{p≥j} a_p C(p, j) c^{p−j}``; each power ``j ≥ 1`` is one :func:`associate`
    call with ``separation="power"`` and the constant term is ``e_0 Σ_μ v_μ``. This gives the
    dense-associative-memory update (Krotov & Hopfield 2016) and the power separation of
    distance similarities (Millidge et al. 2022) without new kernel code.
    """
    a = np.trim_zeros(np.asarray(coefficients, dtype=np.float64), "b")
    c = offset if isinstance(offset, torch.Tensor) else torch.tensor(float(offset))
    c = c.to(queries.device, queries.dtype).reshape(-1, 1)
    out = torch.zeros(queries.shape[0], values.shape[1], dtype=queries.dtype, device=queries.device)
    for j in range(len(a)):
        e_j = sum(
            float(a[p]) * math.comb(p, j) * c ** (p - j) for p in range(j, len(a)) if a[p] != 0
        )
        if not isinstance(e_j, torch.Tensor) or not bool((e_j != 0).any()):
            continue
        e_j = e_j * float(scale) ** j
        if j == 0:
            out = out + e_j * values.sum(0, keepdim=True)
            continue
        term = associate(
            queries,
            keys,
            values,
            similarity=similarity,
            separation="power",
            power=j,
            memory_budget=memory_budget,
        )
        assert isinstance(term, torch.Tensor)
        out = out + e_j * term
    return out


@lru_cache(maxsize=16)
def krotov_hopfield_coefficients(power: int) -> tuple[np.ndarray, np.ndarray]:
    """Coefficients of ``A(o)``, ``B(o)`` with ``h_i = Σ_μ ξ_iᵘ A(oᵘ) + s_i Σ_μ B(oᵘ)``.

    Krotov & Hopfield (2016), F(x) = xⁿ: ``h_i = Σ_μ [F(ξ_iᵘ + aᵘ_i) − F(−ξ_iᵘ + aᵘ_i)]`` with
    ``aᵘ_i = oᵘ − ξ_iᵘ s_i`` and ``oᵘ = ξᵘ·s``. With ``g(a) = F(a+1) − F(a−1)`` and
    ``c = ξ_iᵘ s_i = ±1``: ``ξ_iᵘ g(oᵘ − c) = ξ_iᵘ A(oᵘ) + s_i B(oᵘ)``, where
    ``A = (g(o−1) + g(o+1))/2`` and ``B = (g(o−1) − g(o+1))/2``.
    """
    f = Polynomial([0.0] * power + [1.0])
    g = f(Polynomial([1.0, 1.0])) - f(Polynomial([-1.0, 1.0]))
    g_minus, g_plus = g(Polynomial([-1.0, 1.0])), g(Polynomial([1.0, 1.0]))
    a = ((g_minus + g_plus) / 2).coef
    b = ((g_minus - g_plus) / 2).coef
    return np.trim_zeros(a, "b") if a.any() else a, b
