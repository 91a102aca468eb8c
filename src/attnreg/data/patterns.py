"""Pattern sets and query corruptions for the associative-memory studies.

Pattern sets (rows are patterns, ``(N, d)``):

* ``binary`` — i.i.d. uniform ±1 entries (the classical Hopfield setting: Hopfield 1982;
  Amit, Gutfreund & Sompolinsky 1985; Krotov & Hopfield 2016; Demircigil et al. 2017);
* ``sphere`` — i.i.d. Gaussian rows rescaled to norm ``√d`` (same norm as a ±1 pattern; the
  continuous setting of Ramsauer et al. 2020);
* ``digits`` — the 1,797 8×8 images shipped with scikit-learn (``load_digits``), pixels scaled
  from 0..16 to [0, 1], ``d = 64`` (the real-image setting of Millidge et al. 2022).

Corruptions (``CORRUPTIONS``): ``clean``; ``flips`` — exactly ``k`` distinct coordinates of each
row have their sign flipped; ``noise`` — i.i.d. Gaussian noise of standard deviation ``σ``
added; ``mask`` — the second half of the coordinates (for digits: the bottom four image rows)
set to a fill value (0).

Every random function takes a ``torch.Generator`` so that the same seed gives the same data.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from attnreg.core.validation import as_tensor, check_choice, check_positive_int

PATTERN_SETS = ("binary", "sphere", "digits")
CORRUPTIONS = ("clean", "flips", "noise", "mask")
DIGITS_SHAPE = (8, 8)


def check_binary(name: str, patterns: torch.Tensor) -> torch.Tensor:
    """Require every entry of ``patterns`` to be exactly +1 or −1 (``ValueError`` naming it)."""
    bad = (patterns != 1) & (patterns != -1)
    if bool(bad.any()):
        index = tuple(int(i) for i in bad.nonzero()[0].tolist())
        raise ValueError(
            f"{name}: must contain only +1/-1 entries; found {float(patterns[index])!r} at "
            f"index {index}"
        )
    return patterns


def random_binary(
    n: int, d: int, gen: torch.Generator, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """``N`` i.i.d. uniform ±1 patterns of dimension ``d`` (shape ``(N, d)``)."""
    check_positive_int("n", n)
    check_positive_int("d", d)
    bits = torch.randint(0, 2, (n, d), generator=gen, dtype=torch.int8)
    return (bits * 2 - 1).to(dtype)


def random_sphere(
    n: int, d: int, gen: torch.Generator, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """``N`` Gaussian patterns rescaled to norm ``√d`` (uniform on the sphere of radius ``√d``)."""
    check_positive_int("n", n)
    check_positive_int("d", d)
    x = torch.randn(n, d, generator=gen, dtype=torch.float64)
    x = x * (math.sqrt(d) / x.norm(dim=1, keepdim=True))
    return x.to(dtype)


def digits_patterns(dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, np.ndarray]:
    """scikit-learn's 1,797 digits (8×8) as ``(1797, 64)`` pixels in [0, 1], and their labels."""
    from sklearn.datasets import load_digits

    data = load_digits()
    return torch.as_tensor(data.data / 16.0).to(dtype), np.asarray(data.target)


def make_patterns(
    kind: str, n: int, d: int, gen: torch.Generator, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """``N`` patterns of the set ``kind`` (``binary``, ``sphere``, ``digits``).

    For ``digits``, ``d`` must be 64 and ``N`` at most 1,797: a random subset without
    replacement is returned.
    """
    check_choice("kind", kind, PATTERN_SETS)
    check_positive_int("n", n)
    if kind == "binary":
        return random_binary(n, d, gen, dtype)
    if kind == "sphere":
        return random_sphere(n, d, gen, dtype)
    images, _ = digits_patterns(dtype)
    if d != images.shape[1]:
        raise ValueError(f"d: digits patterns have d = {images.shape[1]}, got d = {d}")
    if n > images.shape[0]:
        raise ValueError(f"n: only {images.shape[0]} digits images exist, got n = {n}")
    order = torch.randperm(images.shape[0], generator=gen)[:n]
    return images[order]


def flip_bits(patterns: torch.Tensor, k: int, gen: torch.Generator) -> torch.Tensor:
    """Flip the sign of exactly ``k`` distinct, uniformly chosen coordinates of every row."""
    x = as_tensor("patterns", patterns, ndim=(2,))
    d = x.shape[1]
    if isinstance(k, bool) or int(k) != k or not 0 <= int(k) <= d:
        raise ValueError(f"k: must be an integer between 0 and d = {d}, got {k!r}")
    out = x.clone()
    if k == 0:
        return out
    keys = torch.rand(x.shape, generator=gen, dtype=torch.float64).to(x.device)
    idx = keys.argsort(dim=1)[:, : int(k)]
    out.scatter_(1, idx, -out.gather(1, idx))
    return out


def add_noise(patterns: torch.Tensor, sigma: float, gen: torch.Generator) -> torch.Tensor:
    """``x + σ·z`` with ``z`` i.i.d. standard normal."""
    x = as_tensor("patterns", patterns, ndim=(2,))
    if not math.isfinite(sigma) or sigma < 0:
        raise ValueError(f"sigma: must be a finite number >= 0, got {sigma}")
    z = torch.randn(x.shape, generator=gen, dtype=torch.float64).to(x.device, x.dtype)
    return x + sigma * z


def mask_half(patterns: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
    """Set the second half of the coordinates (digits: the bottom four rows) to ``fill``."""
    x = as_tensor("patterns", patterns, ndim=(2,)).clone()
    x[:, x.shape[1] - x.shape[1] // 2 :] = fill
    return x


def corrupt(patterns: torch.Tensor, kind: str, amount: float, gen: torch.Generator) -> torch.Tensor:
    """Apply the corruption ``kind``: ``clean`` (copy), ``flips`` (``amount`` = number of
    flipped coordinates k), ``noise`` (``amount`` = σ), ``mask`` (second half set to 0)."""
    check_choice("kind", kind, CORRUPTIONS)
    if kind == "clean":
        return as_tensor("patterns", patterns, ndim=(2,)).clone()
    if kind == "flips":
        return flip_bits(patterns, int(amount), gen)
    if kind == "noise":
        return add_noise(patterns, float(amount), gen)
    return mask_half(patterns)
