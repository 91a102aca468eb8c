"""The ``layers`` study: what each causal sequence layer learns in context (Wang, Shi & Fox
2025, "Test-time regression"), and the memory side of the same regressions (Tang's
regression-as-memory claim).

Modules: :mod:`~attnreg.studies.layers.config` (settings and profiles, a leaf),
:mod:`~attnreg.studies.layers.model` (one trainable causal layer over in-context tokens),
:mod:`~attnreg.studies.layers.curves` (loss against context position),
:mod:`~attnreg.studies.layers.memory` (recall against N/d), :mod:`~attnreg.studies.layers.claims`
(the claims ledger), :mod:`~attnreg.studies.layers.summary`, :mod:`~attnreg.studies.layers.figures`
and :mod:`~attnreg.studies.layers.run` (the runner). This ``__init__`` stays light."""

from attnreg.studies.layers.config import LAYERS, LayersConfig, full_config, quick_config
from attnreg.studies.spec import Extra, StudySpec, comma_list

SPEC = StudySpec(
    name="layers",
    config_class=LayersConfig,
    quick=quick_config,
    full=full_config,
    runner="attnreg.studies.layers.run:run",
    help="What each causal sequence layer learns in context: linear attention, DeltaNet, "
    "Longhorn, Mesa, softmax and local linear attention, the momentum delta rule, TTT-Linear "
    "and DeltaProduct (with --full also Comba, the generalized delta rule, Titans, log-linear, "
    "forgetting and stick-breaking attention), each trained on in-context regression tasks "
    "(clean, and noisy ill-conditioned) and read out at every position; explain names the "
    "estimator each computes (GD, LMS, ridge, kernel smoother, local linear, momentum, "
    "mini-batch and multi-step LMS) with its fitted parameters and R²; and recall of stored "
    "pairs against N/d for correlated keys (linear attention vs DeltaNet vs Mesa).",
    ledger=True,
    title="layers — what each sequence layer learns in context",
    extras=(
        Extra(
            "--layers",
            "layers",
            "Comma-separated layers to train: linear, delta, longhorn, mesa, softmax, "
            "local_linear (the default, scalars learned), or any other registered sequence "
            "layer by name (titans, comba, …; its example's arguments, not learned).",
            comma_list,
        ),
        Extra("--threads", "threads", "Torch intra-op threads (1 is fastest here).", int),
    ),
)

__all__ = ["LAYERS", "SPEC", "LayersConfig", "full_config", "quick_config"]
