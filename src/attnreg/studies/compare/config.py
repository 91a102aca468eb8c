"""The ``compare`` study's settings: the row keys, the cells the figures show, the config
dataclass (which checks its values when built) and its quick and full profiles."""

from __future__ import annotations

from dataclasses import dataclass, field

from attnreg.config import check_device, check_fields
from attnreg.core.validation import (
    check_choice,
    check_nonnegative,
    check_positive,
    check_positive_int,
    check_seed,
)
from attnreg.data.regression import DATA_MODES
from attnreg.models.regressors import QK_MODES, VARIANTS

ROW_KEYS = (
    "data",
    "variant",
    "whitening",
    "qk",
    "layernorm",
    "seed",
    "train_mse",
    "test_mse",
    "cos_to_ridge",
    "hat_distance",
    "wqwk_invcov_corr",
)
# The cells whose matrices the figures show: (variant, whitening, qk, layernorm).
FIGURE_CELLS = (
    ("regression", False, "separate", False),
    ("regression", True, "separate", False),
    ("softmax", False, "separate", False),
    ("whitened", False, "shared", False),
)
SOFTMAX_CELL = ("softmax", False, "separate", False)
"""The figure cell whose trained attention the locality section judges."""


@dataclass
class CompareConfig:
    """Settings of the compare study (every field has a default; quick profile = defaults).

    The further sections (:mod:`attnreg.studies.compare.sections`) are switched by
    ``conventions``, ``density``, ``memories``, ``tang`` and ``locality``. Their sizes:
    ``density_powers`` (the powers ``n`` of the separation ``sⁿ``); ``beta_multipliers`` (the
    softmax inverse temperatures ``β = m/√d`` a validation split chooses from, density and
    tang); ``tang_d``, ``tang_patterns`` (N), ``tang_rhos`` (equicorrelations),
    ``tang_memories`` (memories per cell), ``tang_query_noise`` (query noise per coordinate),
    ``tang_beta`` (softmax β in units of the mean self-similarity) for the correlated-pattern
    retrieval;
    ``tang_dks`` (the key/query widths of the iid part), ``tang_scale_d`` and
    ``tang_scale_rhos`` (the width and equicorrelations of the correlated part),
    ``tang_scale_n_train`` and ``tang_seeds`` (seeds, for the paired standard errors) for the
    √d_k regression. ``icl_d``, ``icl_context`` (N), ``icl_condition`` (κ(Σ)), ``icl_steps``,
    ``icl_batch``, ``icl_lr``, ``icl_seeds`` and ``icl_null`` (random initialisations of the null)
    for the in-context training of ``W_q W_kᵀ`` against ``Σ⁻¹``.

    The checks' thresholds: ridge within ``max_sklearn_gap`` of scikit-learn's ``Ridge`` on
    every row, and trained data-whitened regression-like attention (synthetic, layer norm off)
    at most ``max_whitened_vs_ridge`` × ridge's test MSE in every qk mode.
    """

    data_modes: list[str] = field(default_factory=lambda: list(DATA_MODES))
    variants: list[str] = field(default_factory=lambda: list(VARIANTS))
    whitening: list[bool] = field(default_factory=lambda: [False, True])
    qk: list[str] = field(default_factory=lambda: list(QK_MODES))
    layernorm: list[bool] = field(default_factory=lambda: [False, True])
    seed: int = 0
    seeds: int = 1
    ridge: float = 1e-3
    n_train: int = 200
    n_test: int = 200
    d: int = 8
    condition: float = 100.0
    noise: float = 0.5
    steps: int = 600
    lr: float = 0.02
    eval_every: int = 10
    patience: int = 15
    validation_fraction: float = 0.2
    init_scale: float = 0.5
    device: str = "cpu"
    threads: int = 1
    probe_steps: int = 1500
    ols_transformer: bool = True
    ols_steps: int = 1000
    ols_lr: float = 0.01
    shift_magnitudes: list[float] = field(default_factory=lambda: [0.0, 0.5, 1.0, 2.0, 4.0])
    max_sklearn_gap: float = 1e-8
    max_whitened_vs_ridge: float = 1.05
    # The further sections (sections.py), each with its on/off switch and sizes.
    conventions: bool = True
    density: bool = True
    density_powers: list[int] = field(default_factory=lambda: [2, 3, 4])
    beta_multipliers: list[float] = field(default_factory=lambda: [2.0**k for k in range(-6, 7)])
    memories: bool = True
    tang: bool = True
    tang_d: int = 16
    tang_patterns: list[int] = field(default_factory=lambda: [8, 16, 32])
    tang_rhos: list[float] = field(
        default_factory=lambda: [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95]
    )
    tang_memories: int = 200
    tang_query_noise: float = 0.1
    tang_beta: float = 16.0
    tang_scale_d: int = 8
    tang_scale_n_train: int = 400
    tang_dks: list[int] = field(default_factory=lambda: [4, 16, 64, 256])
    tang_scale_rhos: list[float] = field(default_factory=lambda: [0.0, 0.5, 0.9, 0.95])
    tang_seeds: int = 5
    locality: bool = True
    # Tang's open question W_q W_kᵀ vs S⁻¹, trained in context (in_context.py).
    in_context: bool = True
    icl_d: int = 6
    icl_context: int = 40
    icl_condition: float = 10.0
    icl_steps: int = 400
    icl_batch: int = 64
    icl_lr: float = 0.05
    icl_seeds: int = 3
    icl_null: int = 200

    @property
    def seed_list(self) -> list[int]:
        """The seeds run: ``seed, seed + 1, …, seed + seeds − 1``."""
        return list(range(self.seed, self.seed + self.seeds))

    def __post_init__(self) -> None:
        """Refuse a bad value with a ``ValueError`` naming the key (and the value)."""
        check_fields(self)
        check_seed("seed", self.seed)
        check_device("device", self.device)
        for mode in self.data_modes:
            check_choice("data_modes", mode, DATA_MODES)
        for variant in self.variants:
            check_choice("variants", variant, VARIANTS)
        for qk in self.qk:
            check_choice("qk", qk, QK_MODES)
        for name in ("data_modes", "variants", "whitening", "qk", "layernorm"):
            if not getattr(self, name):
                raise ValueError(f"{name}: must list at least one value")
        self._check_training()
        self._check_sections()

    def _check_training(self) -> None:
        for name in (
            "seeds",
            "n_test",
            "d",
            "steps",
            "eval_every",
            "patience",
            "ols_steps",
            "probe_steps",
            "threads",
        ):
            check_positive_int(name, getattr(self, name))
        if self.n_train < 2:
            raise ValueError(f"n_train: must be an integer >= 2, got {self.n_train}")
        for name in (
            "ridge",
            "lr",
            "ols_lr",
            "init_scale",
            "max_sklearn_gap",
            "max_whitened_vs_ridge",
        ):
            check_positive(name, getattr(self, name))
        check_nonnegative("noise", self.noise)
        if not self.condition >= 1:
            raise ValueError(f"condition: must be a finite number >= 1, got {self.condition}")
        for shift in self.shift_magnitudes:
            check_nonnegative("shift_magnitudes", shift)
        if not 0 < self.validation_fraction < 1:
            raise ValueError(
                f"validation_fraction: must be in (0, 1), got {self.validation_fraction}"
            )

    def _check_sections(self) -> None:
        for name in (
            "density_powers",
            "beta_multipliers",
            "tang_patterns",
            "tang_rhos",
            "tang_dks",
        ):
            if not getattr(self, name):
                raise ValueError(f"{name}: must list at least one value")
        for power in self.density_powers:
            if isinstance(power, bool) or int(power) != power or power < 2:
                raise ValueError(f"density_powers: each must be an integer >= 2, got {power!r}")
        for beta in self.beta_multipliers:
            check_positive("beta_multipliers", beta)
        for n in self.tang_patterns:
            check_positive_int("tang_patterns", n)
        for name, rhos in (
            ("tang_rhos", self.tang_rhos),
            ("tang_scale_rhos", self.tang_scale_rhos),
        ):
            for rho in rhos:
                if not 0 <= rho < 1:
                    raise ValueError(f"{name}: must be in [0, 1), got {rho}")
        for name in ("icl_d", "icl_context", "icl_steps", "icl_batch", "icl_seeds", "icl_null"):
            check_positive_int(name, getattr(self, name))
        check_positive("icl_lr", self.icl_lr)
        if not 1 <= self.icl_condition < float("inf"):
            raise ValueError(
                f"icl_condition: must be a finite number >= 1, got {self.icl_condition}"
            )
        check_positive_int("tang_d", self.tang_d)
        check_positive_int("tang_memories", self.tang_memories)
        check_positive_int("tang_scale_d", self.tang_scale_d)
        check_positive_int("tang_scale_n_train", self.tang_scale_n_train)
        check_nonnegative("tang_query_noise", self.tang_query_noise)
        check_positive("tang_beta", self.tang_beta)
        for dk in self.tang_dks:
            check_positive_int("tang_dks", dk)
        if len(self.tang_scale_rhos) < 2:
            raise ValueError("tang_scale_rhos: needs at least two values (a slope in ρ)")
        if isinstance(self.tang_seeds, bool) or self.tang_seeds < 2:
            raise ValueError(
                f"tang_seeds: must be an integer >= 2 (paired standard errors), got "
                f"{self.tang_seeds!r}"
            )
        if isinstance(self.tang_scale_n_train, bool) or self.tang_scale_n_train < 2:
            raise ValueError(
                f"tang_scale_n_train: must be an integer >= 2, got {self.tang_scale_n_train!r}"
            )


def quick_config(seed: int = 0, device: str = "cpu") -> CompareConfig:
    """The ``--quick`` profile: one seed, N = 200, ≤ 600 Adam steps per cell, 1000 for the
    OLS-Transformer (a minute or two on 2 cores)."""
    return CompareConfig(seed=seed, device=device)


def full_config(seed: int = 0, device: str = "cpu") -> CompareConfig:
    """The ``--full`` profile: three seeds, N = 500, up to 3000 steps per cell."""
    return CompareConfig(
        seed=seed,
        seeds=3,
        n_train=500,
        n_test=500,
        steps=3000,
        patience=30,
        probe_steps=6000,
        ols_steps=5000,
        shift_magnitudes=[0.0, 0.25, 0.5, 1.0, 2.0, 3.0, 4.0],
        tang_memories=1000,
        tang_rhos=[0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95],
        device=device,
    )
