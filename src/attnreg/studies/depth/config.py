"""The ``depth`` study's settings: the config dataclass (checks its values when built) and its
quick and full profiles. A leaf: no torch, no other study module."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from attnreg.config import check_fields
from attnreg.core.validation import (
    check_choice,
    check_nonnegative,
    check_positive,
    check_positive_int,
    check_seed,
)

PARTS = ("atlas", "trained", "noise", "noiseless", "mixed")
"""The ``depth`` study's parts, in the order they run."""


@dataclass
class DepthConfig:
    """``attnreg depth`` settings (every field has a default: the quick profile).

    * The atlas (:mod:`attnreg.depth`): ``atlas_d``, ``kappas``, ``atlas_n_ctx``, ``eps``,
      ``cap``, ``atlas_queries``, ``atlas_noise``.
    * Trained deep layers: linear attention stacks of every depth in ``train_layers`` trained
      on Gaussian inputs with ``κ(Σ)`` in ``train_kappas`` and ``N`` in ``train_n_ctx``
      (``train_d`` features), ``steps`` Adam steps of ``batch`` tasks at rate ``lr``; each
      layer matched against ``max_iterates`` iterates of GD, preconditioned GD and
      Newton–Schulz on ``eval_tasks`` tasks. ``train_residual`` (default true: the residual
      stream, von Oswald et al.'s architecture) and ``train_layernorm`` (default false: a
      pre-attention LayerNorm in every layer) switch the trained stacks' architecture;
      ``train_rotation`` (default false) gives each task its own random rotation of ``Σ`` (Fu
      et al.'s data); ``train_grow`` (default false) trains the depths in increasing order,
      each stack starting from the one before, its added layers' value side at zero (the
      identity; ``TrainableLSA.grow_from``), trained at ``train_grow_lr`` (Adam's first steps
      move every weight by about the rate: at ``lr`` a grown 8-layer stack left the 4-layer
      stack's basin and overflowed within 9 steps); ``train_dtype`` (default float32) is the
      trained stacks' dtype.
      The deepest stack is also matched by Fu et al.'s metric (cosine of the
      error vectors against Newton's iterates 0–23 and GD's to 1024 steps), with
      ``fu_bootstrap`` bootstrap replicates over the evaluation tasks for its error bars; the
      deepest stack of each cell is trained ``fu_seeds`` times (seed 0 is the stack the other
      rows use), each seed matched on its own: the spread over seeds.
    * Noise: ``w ~ N(0, tau² I)``, ``x ~ N(0, I)`` in ``noise_d`` dimensions, label noise
      ``sigma``; stacks of every depth in ``bayes_layers`` and width (heads) in ``bayes_heads``
      (and the curve's ``noise_layers``-layer stack) trained over the context sizes
      ``noise_n_ctx`` (Akyürek et al. 2022); a ``noiseless_layers``-layer stack trained on
      noiseless tasks in ``noiseless_d`` dimensions over ``noiseless_n_ctx`` (Garg et al.
      2022); stacks of every depth in ``mixed_layers``, ``mixed_seeds`` seeds each, trained at
      ``mixed_n_ctx`` (more than ``noise_d``: σ̂² is estimated from the context) with
      ``σ ~ U(0, σ_max)`` per task for each σ_max in ``sigma_maxes`` (Vladymyrov et al. 2024);
      ``noise_steps`` steps each (the mixed-noise stacks: ``mixed_steps`` Adam steps of
      ``mixed_batch`` tasks at rate ``mixed_lr`` from weights of scale ``mixed_init_scale``, in
      ``mixed_dtype``, parametrised as ``mixed_variant`` — ``"full"`` products, or ``"diag"``,
      Vladymyrov et al.'s diagonal attention in its four scalars per layer; ``mixed_workers``
      processes train them side by side, the same numbers as one; with ``mixed_grow`` each
      deeper stack starts from the shallower stack of its σ_max and seed, its added layers'
      value side at zero — the identity — and trains at ``mixed_grow_lr``); curves from
      ``curve_tasks`` tasks. ``noise_layernorm``: a
      pre-attention LayerNorm in every layer of the curve's and the noiseless stacks (the full
      profile's 8- and 12-layer stacks: without it a linear-attention stack is cubic per layer
      in its tokens and overflows at small k); never in the mixed-noise stacks (Vladymyrov et
      al.'s have none).
    * ``parts``: which of the study's parts run (``PARTS``: ``"atlas"``, ``"trained"``,
      ``"noise"`` — the curves and the depth × width grid —, ``"noiseless"``, ``"mixed"``;
      default all). A part left out adds no rows, tables, checks, claims or figure: a
      full-scale run of one claim's regime (``--set parts='["mixed"]'``) costs only that part.
    * Checks: the median over (N, ε) of Newton's measured / theory slope within
      ``[min_newton_slope_ratio, max_newton_slope_ratio]``; the deepest trained stack's loss at
      most ``max_depth_loss_ratio`` × the one-layer stack's; the measured noiseless min-norm
      curve within ``max_curve_z`` standard errors of ``(d − k)/d`` at every ``k < d``.
    """

    seed: int = 0
    threads: int = 1
    parts: list[str] = field(default_factory=lambda: list(PARTS))
    atlas_d: int = 8
    kappas: list[float] = field(default_factory=lambda: [1.0, 10.0, 1e2, 1e3, 1e4])
    atlas_n_ctx: list[int] = field(default_factory=lambda: [4, 8, 32])
    eps: list[float] = field(default_factory=lambda: [1e-2, 1e-6, 1e-12])
    cap: int = 300
    atlas_queries: int = 16
    atlas_noise: float = 0.1
    train_d: int = 10
    train_layers: list[int] = field(default_factory=lambda: [1, 2, 4])
    train_kappas: list[float] = field(default_factory=lambda: [1.0, 10.0])
    train_n_ctx: list[int] = field(default_factory=lambda: [20])
    train_residual: bool = True
    train_layernorm: bool = False
    train_rotation: bool = False
    train_grow: bool = False
    train_grow_lr: float = 3e-4
    train_dtype: str = "float32"
    fu_bootstrap: int = 100
    fu_seeds: int = 1
    steps: int = 500
    batch: int = 256
    lr: float = 1e-2
    init_scale: float = 0.05
    eval_tasks: int = 1000
    max_iterates: int = 12
    noise_d: int = 5
    noise_n_ctx: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 5, 6, 8, 10, 15, 20])
    noise_layers: int = 3
    bayes_layers: list[int] = field(default_factory=lambda: [1, 3])
    bayes_heads: list[int] = field(default_factory=lambda: [1, 2])
    noiseless_d: int = 5
    noiseless_n_ctx: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 5, 6, 8, 10])
    noiseless_layers: int = 3
    noise_layernorm: bool = False
    sigma: float = 0.5
    tau: float = 1.0
    sigma_maxes: list[float] = field(default_factory=lambda: [1.0])
    mixed_layers: list[int] = field(default_factory=lambda: [3])
    mixed_seeds: int = 1
    mixed_n_ctx: int = 10
    mixed_variant: str = "full"
    mixed_dtype: str = "float32"
    mixed_steps: int = 600
    mixed_batch: int = 256
    mixed_lr: float = 1e-2
    mixed_init_scale: float = 0.05
    mixed_workers: int = 1
    mixed_grow: bool = False
    mixed_grow_lr: float = 2e-4
    noise_steps: int = 600
    curve_tasks: int = 2000
    min_newton_slope_ratio: float = 0.5
    max_newton_slope_ratio: float = 2.0
    max_depth_loss_ratio: float = 1.0
    max_curve_z: float = 5.0

    def __post_init__(self) -> None:
        """Refuse a bad value with a ``ValueError`` naming the key (and the value)."""
        check_fields(self)
        check_seed("seed", self.seed)
        if not self.parts:
            raise ValueError(f"parts: must list at least one of {', '.join(PARTS)}")
        for part in self.parts:
            check_choice("parts", part, PARTS)
        for name in (
            "threads",
            "atlas_d",
            "cap",
            "atlas_queries",
            "train_d",
            "steps",
            "batch",
            "eval_tasks",
            "max_iterates",
            "fu_bootstrap",
            "fu_seeds",
            "noise_d",
            "noise_layers",
            "noiseless_d",
            "noiseless_layers",
            "mixed_seeds",
            "mixed_n_ctx",
            "mixed_steps",
            "mixed_batch",
            "mixed_workers",
            "noise_steps",
            "curve_tasks",
        ):
            check_positive_int(name, getattr(self, name))
        for name in (
            "atlas_n_ctx",
            "train_layers",
            "train_n_ctx",
            "noise_n_ctx",
            "bayes_layers",
            "bayes_heads",
            "noiseless_n_ctx",
            "mixed_layers",
        ):
            values = getattr(self, name)
            if not values:
                raise ValueError(f"{name}: must list at least one value")
            for v in values:
                check_positive_int(name, v)
        for name in ("kappas", "train_kappas"):
            values = getattr(self, name)
            if not values:
                raise ValueError(f"{name}: must list at least one value")
            for k in values:
                if not (math.isfinite(k) and k >= 1):
                    raise ValueError(f"{name}: each must be a finite number >= 1, got {k}")
        if not self.eps:
            raise ValueError("eps: must list at least one value")
        for e in self.eps:
            if not 0 < e < 1:
                raise ValueError(f"eps: each must lie in (0, 1), got {e}")
        check_choice("mixed_variant", self.mixed_variant, ("full", "diag"))
        check_choice("mixed_dtype", self.mixed_dtype, ("float32", "float64"))
        check_choice("train_dtype", self.train_dtype, ("float32", "float64"))
        for name in (
            "lr",
            "mixed_lr",
            "mixed_grow_lr",
            "train_grow_lr",
            "tau",
            "min_newton_slope_ratio",
            "max_newton_slope_ratio",
            "max_depth_loss_ratio",
            "max_curve_z",
        ):
            check_positive(name, getattr(self, name))
        for name in ("atlas_noise", "init_scale", "mixed_init_scale", "sigma"):
            check_nonnegative(name, getattr(self, name))
        if not self.sigma_maxes:
            raise ValueError("sigma_maxes: must list at least one value")
        for s in self.sigma_maxes:
            check_positive("sigma_maxes", s)
        if self.mixed_n_ctx <= self.noise_d:
            raise ValueError(
                f"mixed_n_ctx: must exceed noise_d ({self.noise_d}) to estimate σ̂² from the "
                f"context, got {self.mixed_n_ctx}"
            )


def quick_config(**changes: Any) -> DepthConfig:
    """The quick profile (about 45 s of CPU on one core)."""
    return DepthConfig(**changes)


def full_config(**changes: Any) -> DepthConfig:
    """The full profile (the published scale): the atlas to 5000 layers over four context
    sizes; Fu et al.'s regime for the trained stacks — stacks of 1, 4 and 8 layers
    (pre-attention LayerNorm, as GPT-2's: without it an 8-layer linear-attention stack diverges
    in training), d = 10, N = 2d = 20, κ ∈ {1, 100} with a random rotation of Σ per task, 10000
    steps of 1024 tasks (the trained stacks: about 0.25 s of CPU per step for both cells on one
    thread, timed from runs of 100 and 300 steps, so about 45 minutes); ``d = 10`` for the
    noise curves; the noise claims' regimes: Garg et al.'s (a 12-layer stack on noiseless
    tasks, ``d = 20``, k to 2d), Akyürek et al.'s grid of depths and widths, and Vladymyrov et
    al.'s (stacks of 3, 5 and 7 layers, ``D = 10``, ``N = 20``, σ_max ∈ {1, 3, 5}, 3 seeds: the
    paper's diagonal attention (DIAG, its four scalars ω per layer) in float64, 20000 Adam
    steps of 256 tasks at rate 5e-4 from ω = 0, in two worker processes where there are two
    cores: about 40 minutes on two).
    One part alone: ``--set parts='["mixed"]'``.

    Fu et al.'s stacks without LayerNorm, grown 1 → 4 → 8 layers (``--set train_grow=true
    --set train_layernorm=false``, 2000 steps, one seed; probes of 2026-11-29): at ``lr`` =
    3e-3 in float32 the grown 4-layer stack at κ = 1 reached loss 0.147 (GD after 4 steps:
    0.58) but the 8-layer stack grown from it overflowed within 9 steps, and at
    ``train_grow_lr`` = 3e-4 within 59; in float64 (``train_dtype``) at ``train_grow_lr`` =
    1e-3 the 8-layer stack reached 0.44 at κ = 1 (GD after 8 steps: 0.23) and diverged at
    κ = 100. So no recipe here reaches ``fu_regime`` yet.

    The mixed-noise recipe, measured on 2026-11-29. Single runs (σ_max = 3 and 5, 7 layers,
    one seed each): float32 stacks (full products or DIAG) diverge within a few hundred steps at
    every rate tried (1e-2 to 1e-4) — a task with a large label energy ``(1/N) Σ y_i²`` makes the
    ``ω_yy`` term cubic in ``y`` and overflows float32, which ends a run — while float64 DIAG
    stacks trained through: adjusted loss 0.0061 against TunedRR's 0.0063 (σ_max = 3, rate 1e-3)
    and 0.0131 against 0.0134 (σ_max = 5, rate 5e-4) after 20000 steps of 256 tasks. The whole
    mixed part with these settings (27 stacks; 38 minutes on the two cores of an Intel Xeon on
    2026-12-04, the rows those of a 64-minute run of 2026-11-29) meets the regime in three of
    its six cells at depth ≥ 5 — σ_max = 3 at 5 layers, σ_max = 5 at 5 and 7 —, where the
    trained stacks trail TunedRR by 8.7, 3.2 and 3.6 paired standard errors (adjusted losses
    0.027, 0.021 and 0.013 against 0.0083, 0.0087 and 0.0087): the committed record
    (``attnreg/studies/full_scale/depth.json``) judges those cells and names the other three as
    below the regime — at σ_max = 1 the 5-layer stacks have not converged after 20000 steps and
    stay above ConstRR, and a 7-layer stack overflows on a seed or a test task at σ_max = 1 and
    3. Growing the stacks (``--set mixed_grow=true``: each deeper stack
    starts from the shallower one of its σ_max and seed, its new layers at zero, and trains at
    ``mixed_grow_lr`` = 2e-4; 70 minutes on two cores, 2026-11-29) brings the σ_max = 1 stacks
    of 7 layers to a plateau (adjusted loss 0.0027, still above ConstRR's 0.0014 and TunedRR's
    0.00022) but not the 3- and 5-layer ones; at σ_max = 3 the grown 5- and 7-layer stacks
    explode on a few of the 20000 test tasks (mean adjusted losses
    2e11 and 4e111: a trained DIAG stack is a polynomial of high degree in the task's data, and
    a rare task with a large label energy sends it off), and at σ_max = 5 the grown stacks trail
    the stacks trained from zero (0.032 and 0.038 against 0.021 and 0.013).
    """
    from attnreg.core.threads import usable_cores  # here: the config module stays torch-free

    base: dict[str, Any] = {
        "atlas_n_ctx": [4, 8, 16, 64],
        "cap": 5000,
        "train_d": 10,
        "train_layers": [1, 4, 8],
        "train_kappas": [1.0, 100.0],
        "train_n_ctx": [20],
        "train_layernorm": True,
        "train_rotation": True,
        "steps": 10000,
        "batch": 1024,
        "lr": 3e-3,
        "eval_tasks": 2000,
        "max_iterates": 24,
        "fu_bootstrap": 200,
        "noise_d": 10,
        "noise_n_ctx": [1, 2, 4, 6, 8, 10, 12, 15, 20, 30, 40],
        "noise_layers": 5,
        "bayes_layers": [1, 2, 3, 5, 8],
        "bayes_heads": [1, 2, 4],
        "noiseless_d": 20,
        "noiseless_n_ctx": [1, 5, 10, 15, 18, 20, 22, 25, 30, 40],
        "noiseless_layers": 12,
        "noise_layernorm": True,
        "sigma_maxes": [1.0, 3.0, 5.0],
        "mixed_layers": [3, 5, 7],
        "mixed_seeds": 3,
        "mixed_n_ctx": 20,
        "mixed_variant": "diag",
        "mixed_dtype": "float64",
        "mixed_steps": 20000,
        "mixed_batch": 256,
        "mixed_lr": 5e-4,
        "mixed_init_scale": 0.0,
        "mixed_workers": min(2, usable_cores()),
        "noise_steps": 4000,
        "curve_tasks": 20000,
    }
    base.update(changes)
    return DepthConfig(**base)
