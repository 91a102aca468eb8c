"""The memory families of the capacity study: how a success rate is measured, and the theory.

A *family* stores ``N`` patterns of dimension ``d`` drawn afresh from a seeded generator, sends
``M`` queries (corrupted copies of uniformly chosen stored patterns), and returns the fraction
recalled. Criteria:

* ±1 patterns — exact recall: the sign of the retrieval equals the stored pattern in every
  coordinate (a tie, ``sign = 0``, is a failure). The Hebbian family at 10 % flips counts a
  query as retrieved when its fixed point has at most ``bit_tolerance`` (5 %) wrong bits — the
  retrieval state of Amit, Gutfreund & Sompolinsky (1985) keeps about 1.6 % errors at 0.138 d;
* continuous patterns — relative squared error ``‖r − x‖² / ‖x‖² ≤ τ``;
* pseudo-inverse (hetero-association) — relative error ``‖r − v‖ / ‖v‖ ≤ 10⁻⁶`` in float64,
  i.e. exact up to round-off.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from attnreg.data.patterns import (
    add_noise,
    digits_patterns,
    flip_bits,
    mask_half,
    random_binary,
    random_sphere,
)
from attnreg.memory import (
    DenseAssociativeMemory,
    HebbianMemory,
    ModernHopfield,
    PseudoInverseMemory,
    UniversalHopfieldMemory,
    dam_capacity_theory,
)
from attnreg.training import generator

SuccessFn = Callable[[int, int, torch.Generator], float]
PINV_TOLERANCE = 1e-6
HEBBIAN_ALPHA = 0.138


@dataclass(frozen=True)
class Family:
    """One curve of the capacity figure: a model on a pattern set with a query corruption."""

    key: str
    model: str
    patterns: str
    query: str
    dims: tuple[int, ...]
    epsilon: float
    success: SuccessFn
    theory: Callable[[int], float]
    rtol: float = 1 / 64
    n_limit: int = 2**22


def cell_generator(seed: int, key: str, d: int, n: int) -> torch.Generator:
    """The generator of one (seed, family, d, N) evaluation: same inputs, same patterns."""
    entropy = [int(seed), zlib.crc32(key.encode()), int(d), int(n)]
    return generator(int(np.random.SeedSequence(entropy).generate_state(1)[0]))


def _targets(n: int, m: int, gen: torch.Generator) -> torch.Tensor:
    return torch.randint(0, n, (m,), generator=gen)


def replicated(
    n: int, queries: int, gen: torch.Generator, body: Callable[[int], torch.Tensor]
) -> float:
    """Success rate over ``queries`` queries spread over ``R = min(128, ⌈queries/N⌉)`` independent
    memories of ``N`` patterns: ``body(m)`` stores a fresh memory, sends ``m`` queries and returns
    their 0/1 outcomes. With few patterns one memory cannot estimate a 1 % failure rate (its
    rate moves in steps of 1/N), so small ``N`` average over several memories."""
    reps = min(128, -(-queries // n))
    per = -(-queries // reps)
    outcomes = torch.cat([body(per).reshape(-1) for _ in range(reps)])
    return float(outcomes.double().mean())


def _exact(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return (torch.sign(out) == target).all(dim=1)


def _relative_sq_error(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((out - target) ** 2).sum(1) / (target**2).sum(1)


def pinv_success(device: str) -> SuccessFn:
    """Hetero-association: Gaussian keys on the sphere → random ±1 values; every stored key is
    queried clean; success = relative error ≤ 10⁻⁶ (float64)."""

    def success(d: int, n: int, gen: torch.Generator) -> float:
        keys = random_sphere(n, d, gen, torch.float64).to(device)
        values = random_binary(n, d, gen, torch.float64).to(device)
        out = PseudoInverseMemory().store(keys, values).retrieve(keys)
        rel = (out - values).norm(dim=1) / values.norm(dim=1)
        return float((rel <= PINV_TOLERANCE).double().mean())

    return success


def hebbian_success(
    queries: int, flip_fraction: float, bit_tolerance: float, dynamics: str, device: str
) -> SuccessFn:
    """±1 patterns, ``round(flip_fraction·d)`` flipped bits, Hebbian dynamics to a fixed point;
    success = at most ``bit_tolerance·d`` wrong bits."""

    def success(d: int, n: int, gen: torch.Generator) -> float:
        def body(m: int) -> torch.Tensor:
            k = random_binary(n, d, gen, torch.float32).to(device)
            target = k[_targets(n, m, gen).to(device)]
            q = flip_bits(target, round(flip_fraction * d), gen)
            s = HebbianMemory(dynamics=dynamics).store(k).retrieve(q, generator=gen)
            return (s != target).double().mean(dim=1) <= bit_tolerance

        return replicated(n, queries, gen, body)

    return success


def dam_success(power: int, queries: int, device: str) -> SuccessFn:
    """±1 patterns, clean queries, one synchronous Krotov–Hopfield update; exact recall."""

    def success(d: int, n: int, gen: torch.Generator) -> float:
        def body(m: int) -> torch.Tensor:
            k = random_binary(n, d, gen, torch.float64).to(device)
            target = k[_targets(n, m, gen).to(device)]
            out = DenseAssociativeMemory(power=power).store(k).retrieve(target, steps=1)
            return _exact(out, target)

        return replicated(n, queries, gen, body)

    return success


def softmax_binary_success(beta: float, flips: int, queries: int, device: str) -> SuccessFn:
    """±1 patterns (float32), ``flips`` flipped bits, one softmax step, sign read-out; exact."""

    def success(d: int, n: int, gen: torch.Generator) -> float:
        def body(m: int) -> torch.Tensor:
            k = random_binary(n, d, gen, torch.float32).to(device)
            target = k[_targets(n, m, gen).to(device)]
            q = flip_bits(target, flips, gen)
            out = ModernHopfield(beta=beta).store(k).retrieve(q, steps=1)
            return _exact(out, target)

        return replicated(n, queries, gen, body)

    return success


def softmax_sphere_success(
    beta: float, sigma: float, tolerance: float, queries: int, device: str
) -> SuccessFn:
    """Sphere patterns (norm √d, float32), Gaussian query noise ``σ`` per coordinate, one
    softmax step; success = relative squared error ≤ ``tolerance``."""

    def success(d: int, n: int, gen: torch.Generator) -> float:
        def body(m: int) -> torch.Tensor:
            k = random_sphere(n, d, gen, torch.float32).to(device)
            target = k[_targets(n, m, gen).to(device)]
            q = add_noise(target, sigma, gen)
            out = ModernHopfield(beta=beta).store(k).retrieve(q, steps=1)
            return _relative_sq_error(out, target) <= tolerance

        return replicated(n, queries, gen, body)

    return success


def uhn_binary_success(
    similarity: str,
    separation: str,
    beta: float,
    power: int,
    flips: int,
    queries: int,
    device: str,
) -> SuccessFn:
    """One Universal Hopfield cell on ±1 patterns: ``flips`` flipped bits, one step, sign
    read-out (unnormalised weights: the sign is scale-free); exact recall."""

    def success(d: int, n: int, gen: torch.Generator) -> float:
        def body(m: int) -> torch.Tensor:
            k = random_binary(n, d, gen, torch.float64).to(device)
            target = k[_targets(n, m, gen).to(device)]
            q = flip_bits(target, flips, gen)
            mem = UniversalHopfieldMemory(
                similarity, separation, beta=beta, power=power, normalize=False
            ).store(k)
            return _exact(mem.retrieve(q), target)

        return replicated(n, queries, gen, body)

    return success


def digits_recall(
    images: torch.Tensor,
    similarity: str,
    separation: str,
    query: str,
    *,
    beta: float,
    power: int,
    sigma: float,
    tolerance: float,
    gen: torch.Generator,
) -> tuple[float, torch.Tensor, torch.Tensor]:
    """Store ``images`` and query each one corrupted (``mask`` or ``noise``); return the recall
    fraction (relative squared error ≤ ``tolerance``), the queries and the retrievals."""
    q = mask_half(images) if query == "mask" else add_noise(images, sigma, gen)
    mem = UniversalHopfieldMemory(similarity, separation, beta=beta, power=power).store(images)
    out = mem.retrieve(q)
    recall = float((_relative_sq_error(out, images) <= tolerance).double().mean())
    return recall, q, out


def load_digits_images(device: str) -> torch.Tensor:
    """The 1,797 digits as float64 ``(1797, 64)`` on ``device``."""
    return digits_patterns(torch.float64)[0].to(device)


def hamming_ball(d: int, k: int) -> int:
    """Number of ±1 vectors within Hamming distance ``k`` of a given one: ``Σ_{h≤k} C(d, h)``."""
    return sum(math.comb(d, h) for h in range(k + 1))


def nearest_pattern_bound(d: int, flips: int, epsilon: float) -> float:
    """Largest ``N`` at which a query ``k`` flips away from its pattern has another stored
    random ±1 pattern at distance ``≤ k`` with probability ``ε``:
    ``1 + ln(1−ε) / ln(1 − V(d,k)/2ᵈ)``, ``V`` the Hamming-ball volume — the capacity of
    nearest-pattern (β → ∞ softmax) retrieval under the per-query criterion. It is
    ``≈ ε 2ᵈ / V(d, k)``: log-linear in ``d``. Requiring *all* patterns to be retrieved squares
    the collision count and gives ``≈ (2ᵈ / V)^{1/2}``, Demircigil et al.'s ``2^{d/2}``."""
    p = hamming_ball(d, flips) / 2.0**d
    if p >= 1:
        return 1.0
    return 1.0 + math.log1p(-epsilon) / math.log1p(-p)


def hebbian_theory(d: int) -> float:
    """Amit, Gutfreund & Sompolinsky (1985): ``0.138 d``."""
    return HEBBIAN_ALPHA * d


def dam_theory(power: int) -> Callable[[int], float]:
    """``d^{n−1} / (2 (2n−3)!! ln d)`` (Krotov & Hopfield 2016)."""
    return lambda d: dam_capacity_theory(d, power)


def no_theory(d: int) -> float:
    """No closed form is used for this family."""
    return math.nan


DIGITS_PANEL_CELLS = (
    "dot/identity",
    "dot/softmax",
    "whitened_dot/softmax",
    "euclidean/softmax",
    "manhattan/softmax",
    "manhattan/max",
)
