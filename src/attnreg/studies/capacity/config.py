"""The ``capacity`` study's settings: the config dataclass (which checks its values when built)
and its quick and full profiles."""

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


@dataclass
class CapacityConfig:
    """Settings of ``attnreg capacity`` (defaults: the quick profile). ``workers``: processes
    for the ``N_max(d)`` curves (0: one per torch intra-op thread, so a report cell given one
    thread stays in its process); the numbers do not depend on it. ``min_softmax_growth_r2``:
    the check that softmax's ``log2 N_max`` is linear in ``d`` needs at least this R².
    ``grid_power``: the degree of the grid's power separation; ``digits_power_degrees``: the
    degrees of the power separation measured on digits at the first ``digits_n``."""

    seed: int = 0
    seeds: int = 3
    epsilon: float = 0.01
    queries: int = 500
    device: str = "cpu"
    pinv_d: list[int] = field(default_factory=lambda: [8, 16, 32, 64, 128])
    hebbian_d: list[int] = field(default_factory=lambda: [100, 200, 400])
    hebbian_flip_fraction: float = 0.1
    hebbian_bit_tolerance: float = 0.05
    hebbian_epsilons: list[float] = field(default_factory=lambda: [0.01, 0.1, 0.5])
    hebbian_dynamics: str = "synchronous"
    dam2_d: list[int] = field(default_factory=lambda: [32, 64, 128, 256, 512])
    dam3_d: list[int] = field(default_factory=lambda: [16, 32, 48, 64, 96])
    dam4_d: list[int] = field(default_factory=lambda: [16, 24, 32, 48, 64])
    softmax_d: list[int] = field(default_factory=lambda: [8, 10, 12, 14, 16, 18, 20, 22, 24])
    softmax_beta: float = 1.0
    softmax_flips: int = 1
    sphere_d: list[int] = field(default_factory=lambda: [8, 12, 16, 20])
    sphere_sigma: float = 0.1
    sphere_tolerance: float = 0.01
    grid_beta: float = 100.0
    grid_power: int = 3
    digits_power_degrees: list[int] = field(default_factory=lambda: [3, 10, 30, 100])
    grid_random_d: int = 24
    grid_random_flip_fraction: float = 0.1
    digits_n: list[int] = field(default_factory=lambda: [100, 1000])
    digits_sigma: float = 0.3
    digits_tolerance: float = 0.02
    n_limit: int = 2**22
    workers: int = 0
    min_softmax_growth_r2: float = 0.95
    energy_quadratic_d: list[int] = field(default_factory=lambda: [16, 32, 64, 128])
    energy_power3_d: list[int] = field(default_factory=lambda: [16, 24, 32, 48, 64])
    energy_power4_d: list[int] = field(default_factory=lambda: [12, 16, 20, 24, 32])
    energy_softmax_d: list[int] = field(default_factory=lambda: [10, 12, 14, 16, 18, 20, 22, 24])
    energy_softmax_beta: float = 1.0
    energy_flips: int = 1
    energy_check_d: int = 16
    energy_check_n: list[int] = field(default_factory=lambda: [8, 64])
    energy_check_steps: int = 3
    energy_check_queries: int = 64
    max_energy_increase: float = 1e-10
    max_cccp_shortfall: float = 1e-10
    ols_energy_cases: list[list[int]] = field(
        default_factory=lambda: [[64, 8], [256, 16], [1024, 32]]
    )
    max_ols_error_over_bound: float = 1.0
    cost_queries: int = 256
    cost_repeats: int = 5

    def __post_init__(self) -> None:
        """Refuse a bad value with a ``ValueError`` naming the key (and the value)."""
        check_fields(self)
        check_seed("seed", self.seed)
        check_device("device", self.device)
        self._check_counts()
        self._check_thresholds()
        self._check_dimensions()

    def _check_counts(self) -> None:
        for name in (
            "seeds",
            "queries",
            "n_limit",
            "grid_power",
            "softmax_flips",
            "grid_random_d",
            "energy_flips",
            "energy_check_d",
            "energy_check_steps",
            "energy_check_queries",
            "cost_queries",
            "cost_repeats",
        ):
            check_positive_int(name, getattr(self, name))
        if self.workers < 0:
            raise ValueError(f"workers: must be an integer >= 0 (0: automatic), got {self.workers}")
        for n in self.energy_check_n:
            check_positive_int("energy_check_n", n)
        for n in self.digits_power_degrees:
            check_positive_int("digits_power_degrees", n)
        for case in self.ols_energy_cases:
            if len(case) != 2 or not all(v > 0 for v in case):
                raise ValueError(
                    f"ols_energy_cases: every case must be [N, d] integers, got {case!r}"
                )
            if case[0] <= case[1]:
                raise ValueError(f"ols_energy_cases: every case needs N > d, got {case!r}")
        for n in self.digits_n:
            if not 1 <= n <= 1797:
                raise ValueError(f"digits_n: every N must lie in 1..1797, got {n}")

    def _check_thresholds(self) -> None:
        for name in (
            "softmax_beta",
            "grid_beta",
            "sphere_tolerance",
            "digits_tolerance",
            "min_softmax_growth_r2",
            "energy_softmax_beta",
            "max_energy_increase",
            "max_cccp_shortfall",
            "max_ols_error_over_bound",
        ):
            check_positive(name, getattr(self, name))
        for name in ("sphere_sigma", "digits_sigma"):
            check_nonnegative(name, getattr(self, name))
        for name, values in (
            ("epsilon", [self.epsilon]),
            ("hebbian_epsilons", self.hebbian_epsilons),
        ):
            for eps in values:
                if not 0 < eps < 1:
                    raise ValueError(f"{name}: must lie in (0, 1), got {eps}")
        for name in ("hebbian_flip_fraction", "hebbian_bit_tolerance", "grid_random_flip_fraction"):
            value = getattr(self, name)
            if not 0 <= value < 1:
                raise ValueError(f"{name}: must lie in [0, 1), got {value}")
        if self.min_softmax_growth_r2 > 1:
            raise ValueError(
                f"min_softmax_growth_r2: an R² is at most 1, got {self.min_softmax_growth_r2}"
            )
        check_choice("hebbian_dynamics", self.hebbian_dynamics, ("synchronous", "asynchronous"))

    def _check_dimensions(self) -> None:
        for name in (
            "pinv_d",
            "hebbian_d",
            "dam2_d",
            "dam3_d",
            "dam4_d",
            "softmax_d",
            "sphere_d",
            "energy_quadratic_d",
            "energy_power3_d",
            "energy_power4_d",
            "energy_softmax_d",
        ):
            for d in getattr(self, name):
                check_positive_int(name, d)
        energy_dims = [
            self.energy_check_d,
            *self.energy_quadratic_d,
            *self.energy_power3_d,
            *self.energy_power4_d,
            *self.energy_softmax_d,
        ]
        if self.energy_flips > min(energy_dims):
            raise ValueError(f"energy_flips: more flips than dimensions ({self.energy_flips})")
        if self.softmax_d and self.softmax_flips > min(self.softmax_d):
            raise ValueError(f"softmax_flips: more flips than dimensions ({self.softmax_flips})")


def quick_config() -> CapacityConfig:
    """The ``--quick`` profile (the defaults): the P5 workload of ``attnreg bench``, ≤ 120 s on
    2 cores."""
    return CapacityConfig()


def full_config() -> CapacityConfig:
    """The ``--full`` profile: more seeds and queries, larger d for every family."""
    return CapacityConfig(
        seeds=5,
        queries=1000,
        pinv_d=[8, 16, 32, 64, 128, 256],
        hebbian_d=[100, 200, 400, 800],
        dam2_d=[32, 64, 128, 256, 512, 1024],
        dam3_d=[16, 32, 48, 64, 96, 128],
        dam4_d=[16, 24, 32, 48, 64, 96],
        softmax_d=[8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32],
        sphere_d=[8, 12, 16, 20, 24],
        grid_random_d=32,
        digits_n=[100, 300, 1000, 1797],
        energy_quadratic_d=[16, 32, 64, 128, 256],
        energy_power3_d=[16, 24, 32, 48, 64, 96],
        energy_power4_d=[12, 16, 20, 24, 32, 48],
        energy_softmax_d=[10, 12, 14, 16, 18, 20, 22, 24, 26],
    )
