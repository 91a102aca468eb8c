"""Shared pieces of the associative memories: input checks, sign updates, polynomial separation.

Every memory is the Universal Hopfield form ``retrieve(q) = Vᵀ sep(sim(K, q))`` of Millidge et
al. (2022), computed by :func:`attnreg.core.attention` (batched over queries, chunked over
memories, never holding the queries × memories score matrix).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

import numpy as np
import torch
from numpy.polynomial import Polynomial

from attnreg.core.results import check_finite_result
from attnreg.core.retrieval import associate
from attnreg.core.scaling import (
    exponent,
    power_of_two_scale,
    times_power_of_two,
    underflow_error,
    underflowed,
)
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


DISTANCES = ("euclidean", "manhattan")

Retrieval = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float], torch.Tensor]
"""``(queries, keys, values, β) -> Vᵀ sep(β · sim(K, q))``: one memory's retrieval."""


def extreme_scale(x: torch.Tensor) -> torch.Tensor:
    """The power of two (a one-element tensor) that brings a 2-D ``x`` to unit magnitude when
    its magnitude is extreme (:func:`attnreg.core.scaling.power_of_two_scale`), else 1."""
    return power_of_two_scale(x.unsqueeze(0)).reshape(())


def scaled_retrieval(
    retrieve: Retrieval,
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    *,
    similarity: str,
    separation: str,
    beta: float,
    power: int = 1,
    normalize: bool = True,
    key_scale: torch.Tensor | None = None,
    names: str = "queries, keys",
) -> torch.Tensor:
    """``retrieve(queries, keys, values, β)`` at any magnitude, or a ``ValueError``.

    Queries, keys and values of extreme magnitude are divided by powers of two (exact; data of
    ordinary magnitude go to ``retrieve`` as they are), and the scale is folded into what
    depends on it: the scores ``β · sim`` scale by ``2^f`` — ``a·b`` for ``dot`` (queries at
    ``a``, keys at ``b``), ``a/b`` for ``whitened_dot`` (the metric ``(KᵀK)⁺`` scales by
    ``1/b²``; ``keys`` then are the stored keys divided by ``key_scale = b``, the metric built
    from them), ``s`` for the distances (queries and keys divided by one common ``s``). Softmax
    runs with ``β·2^f``; ``max`` and the normalised identity / power weights do not depend on
    the scale or on β, so they are computed with ``β = 1`` at every magnitude (``βⁿ`` would
    overflow a degree-100 power at β = 100 although it cancels); unnormalised ``(β·sim)ⁿ``
    weights multiply the output by ``βⁿ·2^(n·f)``. The values' scale multiplies the output back.

    The softmax of scores beyond the float range (``β·2^f`` past the largest float, e.g. dot
    products of patterns at 1e200) has no floating-point value to compute it from: a
    ``ValueError`` naming the arguments (``names``). So is an output that over- or underflows.
    """
    sq, sk, sv = extreme_scale(queries), extreme_scale(keys), extreme_scale(values)
    stored = torch.ones_like(sk) if key_scale is None else key_scale.reshape(())
    if bool((sq == 1) & (sk == 1) & (sv == 1) & (stored == 1)):
        cancels = separation == "max" or (normalize and separation in ("identity", "power"))
        out = retrieve(queries, keys, values, 1.0 if cancels else beta)
        return check_finite_result(out, "retrieve")
    if similarity in DISTANCES:
        sq = sk = torch.maximum(sq, sk)
    q0, k0, v0 = queries / sq, keys / sk, values / sv
    e_q, e_k = int(exponent(sq)), int(exponent(sk * stored))
    f = {"dot": e_q + e_k, "whitened_dot": e_q - e_k}.get(similarity, e_q)  # distances: s
    shift = int(exponent(sv))
    factor = 1.0
    call_beta = 1.0
    if separation == "softmax":
        call_beta = _scaled_beta(beta, f, queries.dtype, names)
    elif separation in ("identity", "power") and not normalize:
        factor, shift = float(beta) ** power, shift + power * f
    unit = retrieve(q0, k0, v0, call_beta)
    out = times_power_of_two(unit * factor if factor != 1.0 else unit, torch.tensor(shift))
    check_finite_result(out, "retrieve")
    if bool(underflowed(out.unsqueeze(0), unit.unsqueeze(0)).any()):
        raise underflow_error("retrieve", None, out.dtype)
    return out


def _scaled_beta(beta: float, f: int, dtype: torch.dtype, names: str) -> float:
    """``β · 2^f`` for the softmax on rescaled inputs; ``ValueError`` when it overflows (the
    scores do), the smallest normal number when it underflows (every weight is then 1)."""
    info = torch.finfo(dtype)
    mantissa, e = math.frexp(float(beta))
    if e + f > math.frexp(info.max)[1]:
        raise ValueError(
            f"{names}: the softmax scores β·sim(q, k) overflow {str(dtype)[6:]} (β = "
            f"{beta:g} times inputs whose similarities reach about 2^{f}, past the largest "
            f"float {info.max:.3g}); the softmax of such scores cannot be computed in floating "
            "point: scale the patterns and queries down, or lower beta"
        )
    return max(math.ldexp(mantissa, e + f), float(info.tiny))


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


def log_sum_exp(
    states: torch.Tensor,
    patterns: torch.Tensor,
    beta: float,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> torch.Tensor:
    """``log Σ_i exp(β k_iᵀ ξ)`` per state: states ``(M, d)``, patterns ``(N, d)`` → ``(M,)``
    (or ``(B, M, d)``, ``(B, N, d)`` → ``(B, M)``), from two calls of the attention core.

    The ``max`` separation gives each state its best pattern ``k*``, so ``t = β k*ᵀξ`` is its
    largest score. A softmax over the patterns and one reference key whose score is ``t``
    (the states get one more coordinate ``t/β``, the patterns a 0 there, the reference key is
    ``(0, …, 0, 1)``), with values ``(1, 0)`` on the patterns and ``(0, 1)`` on the reference
    key, returns ``a = Z/(Z + eᵗ)`` and ``b = eᵗ/(Z + eᵗ)`` with ``Z = Σ_i exp(β s_i)``, so
    ``log Z = t + log(a/b)``; ``a/b = Σ_i exp(β s_i − t)`` lies in ``[1, N]`` (up to the
    rounding of ``t``), far from under- and overflow. Where ``|t| > 1/eps`` (2^52 in float64)
    the rounding of ``t`` alone exceeds 1 and ``log Z = t + (a number in [0, log N])`` is ``t``
    to within ``log N`` units in its last place: ``t`` is returned. The core streams over the
    patterns (no ``M × N`` score matrix); the padded copy of the patterns is
    ``(N + 1) × (d + 1)``. ``ValueError`` (naming ``states``) when the scores ``β s`` overflow.
    """
    best = associate(states, patterns, patterns, separation="max", memory_budget=memory_budget)
    assert isinstance(best, torch.Tensor)
    top = beta * (states * best).sum(-1, keepdim=True)
    if not bool(torch.isfinite(top).all()):
        raise ValueError(
            f"states: the softmax scores β·kᵀξ overflow {states.dtype} (β = {beta:g}, "
            f"largest |ξ| = {float(states.abs().max()):.3g}); scale the states down"
        )
    reference = torch.zeros_like(patterns[..., :1, :])
    keys = torch.cat([patterns, reference], dim=-2)
    keys = torch.cat([keys, torch.zeros_like(keys[..., :1])], dim=-1)
    keys[..., -1, -1] = 1.0
    values = torch.zeros_like(keys[..., :2])
    values[..., :-1, 0] = 1.0
    values[..., -1, 1] = 1.0
    queries = torch.cat([states, top / beta], dim=-1)
    out = associate(
        queries, keys, values, separation="softmax", beta=beta, memory_budget=memory_budget
    )
    assert isinstance(out, torch.Tensor)
    lse = top[..., 0] + torch.log(out[..., 0] / out[..., 1])
    huge = top[..., 0].abs() * torch.finfo(top.dtype).eps > 1
    return torch.where(huge, top[..., 0], lse)


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
