"""The ``layers`` study's settings: which causal layers it trains, on which tasks, the memory
experiment's grid, the check thresholds, and the quick and full profiles (a leaf module)."""

from __future__ import annotations

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

# the trained layers, by the name the study uses, and what each is (attnreg.sequence)
LAYERS = {
    "linear": "linear attention",
    "delta": "DeltaNet (delta rule, learned β)",
    "longhorn": "Longhorn (implicit online step, learned β)",
    "mesa": "Mesa (causal ridge, learned λ)",
    "softmax": "softmax attention",
    "local_linear": "local linear attention (learned λ)",
    "momentum": "momentum delta rule (heavy-ball LMS, learned β and μ)",
    "minibatch": "TTT-Linear (mini-batch LMS in batches of 4, learned η)",
    "multistep": "DeltaProduct (two LMS steps per pair, learned β)",
}
REGISTERED_DEFAULTS = (
    "comba",
    "generalized_delta_rule",
    "titans",
    "log_linear_attention",
    "forgetting_attention",
    "stick_breaking_attention",
)
"""The registered layers the full profile trains beside :data:`LAYERS` (at their examples'
arguments): with them every layer of the 2025 family is trained once."""
TASK_KINDS = ("clean", "noisy")


def layer_choices() -> dict[str, str]:
    """What ``layers`` may name: :data:`LAYERS` (the default), then every other registered
    sequence layer (``attnreg.studies.layers.model.registered_layers``; imported here, on
    use, because the registry imports every layer)."""
    from attnreg.studies.layers.model import registered_layers

    return LAYERS | registered_layers()


@dataclass
class LayersConfig:
    """``attnreg layers`` settings (every field has a default: the quick profile).

    In-context regression (``y = wᵀx``, ``w ~ N(0, I)``, ``d`` inputs, ``n_ctx`` context pairs):
    ``"clean"`` tasks are icl's (``x ~ U(−0.5, 0.5)^d``, no noise); ``"noisy"`` tasks have
    Gaussian inputs with a covariance of condition number ``condition`` (the same trace) and
    label noise ``noise_std``. Each layer of ``layers`` is trained for ``steps`` Adam steps on
    fresh batches of ``batch`` tasks (``layers``: keys of :data:`LAYERS`, or the name of any
    other registered sequence layer, :func:`layer_choices`; default every key of
    :data:`LAYERS`, and in the full profile :data:`REGISTERED_DEFAULTS` too). Memory:
    ``memory_d``-dimensional unit keys with pairwise correlation ρ ∈ ``memory_rhos``,
    ``N = r·memory_d`` pairs for r ∈ ``memory_ratios``, ``memory_trials`` draws each; a pair
    is recalled when its relative squared error is at most ``recall_eps``. The multi-pass
    DeltaNet writes the pairs until its largest relative residual is at most ``memory_tol``, it
    reaches no new lowest in ``memory_stall`` passes, or ``memory_passes`` passes (the cap).
    Checks: Mesa's largest relative squared error at ``N ≤ d`` at most ``max_mesa_error``; each
    of the study's own trained layers' (:data:`LAYERS`) best family's held-out R² at least
    ``min_r2`` (clean tasks)."""

    seed: int = 0
    d: int = 5
    n_ctx: int = 20
    batch: int = 256
    steps: int = 250
    lr: float = 1e-2
    clip: float = 10.0
    init_noise: float = 0.1
    eval_tasks: int = 2000
    fit_tasks: int = 2000
    explain_tasks: int = 400
    layers: list[str] = field(default_factory=lambda: list(LAYERS))
    tasks: list[str] = field(default_factory=lambda: list(TASK_KINDS))
    noise_std: float = 0.25
    condition: float = 100.0
    memory_d: int = 16
    memory_ratios: list[float] = field(
        default_factory=lambda: [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0]
    )
    memory_rhos: list[float] = field(default_factory=lambda: [0.0, 0.5, 0.9])
    memory_trials: int = 20
    memory_passes: int = 500
    memory_tol: float = 1e-6
    memory_stall: int = 20
    memory_lam: float = 1e-10
    recall_eps: float = 0.01
    threads: int = 1
    max_mesa_error: float = 1e-6
    min_r2: float = 0.9

    def __post_init__(self) -> None:
        """Refuse a bad value with a ``ValueError`` naming the key (and the value)."""
        check_fields(self)
        check_seed("seed", self.seed)
        for name in (
            "d",
            "n_ctx",
            "batch",
            "steps",
            "eval_tasks",
            "fit_tasks",
            "explain_tasks",
            "memory_d",
            "memory_trials",
            "memory_passes",
            "memory_stall",
            "threads",
        ):
            check_positive_int(name, getattr(self, name))
        if self.n_ctx < 2:
            raise ValueError(f"n_ctx: need at least 2 context pairs, got {self.n_ctx}")
        if self.explain_tasks < 2:
            raise ValueError("explain_tasks: need at least 2 (half to fit, half to score)")
        for name, choices in (("layers", LAYERS), ("tasks", TASK_KINDS)):
            values = getattr(self, name)
            if not values:
                raise ValueError(f"{name}: must list at least one")
            for value in values:
                if name == "layers" and value not in LAYERS:
                    choices = layer_choices()
                check_choice(name, value, choices)
        for name in (
            "lr",
            "clip",
            "condition",
            "memory_lam",
            "memory_tol",
            "memory_stall",
            "recall_eps",
            "max_mesa_error",
        ):
            check_positive(name, getattr(self, name))
        if self.condition < 1:
            raise ValueError(f"condition: must be >= 1, got {self.condition}")
        for name in ("init_noise", "noise_std"):
            check_nonnegative(name, getattr(self, name))
        if not self.memory_ratios:
            raise ValueError("memory_ratios: must list at least one")
        for r in self.memory_ratios:
            check_positive("memory_ratios", r)
        if not self.memory_rhos:
            raise ValueError("memory_rhos: must list at least one")
        for rho in self.memory_rhos:
            if not 0 <= rho < 1:
                raise ValueError(f"memory_rhos: every correlation must lie in [0, 1), got {rho}")
        if not self.min_r2 <= 1:
            raise ValueError(f"min_r2: R² is at most 1, got {self.min_r2}")


def quick_config(**changes: Any) -> LayersConfig:
    """The quick profile (well under a minute of CPU time on one thread)."""
    return LayersConfig(**changes)


def full_config(**changes: Any) -> LayersConfig:
    """The full profile: larger d and context, longer training, more tasks and trials, and the
    registered layers of :data:`REGISTERED_DEFAULTS` trained beside the study's own."""
    base: dict[str, Any] = {
        "layers": [*LAYERS, *REGISTERED_DEFAULTS],
        "d": 10,
        "n_ctx": 40,
        "batch": 1024,
        "steps": 2000,
        "lr": 3e-3,
        "eval_tasks": 10000,
        "fit_tasks": 10000,
        "explain_tasks": 2000,
        "memory_d": 32,
        "memory_ratios": [0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0],
        "memory_trials": 100,
        "memory_passes": 2000,
    }
    base.update(changes)
    return LayersConfig(**base)
