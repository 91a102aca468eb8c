"""The ``icl`` study: trained linear transformers learn gradient descent (von Oswald et al.
2023).

Modules: :mod:`~attnreg.studies.icl.config` (settings and profiles, a leaf),
:mod:`~attnreg.studies.icl.references`, :mod:`~attnreg.studies.icl.train`,
:mod:`~attnreg.studies.icl.sweeps`, :mod:`~attnreg.studies.icl.metrics`,
:mod:`~attnreg.studies.icl.figures`, :mod:`~attnreg.studies.icl.run` (the runner). This
``__init__`` stays light: the config and :data:`SPEC`, from which the registry builds
``attnreg icl``, its sweep cells and its report section."""

from attnreg.studies.icl.config import MODEL_SPECS, ICLConfig, ModelSpec, full_config, quick_config
from attnreg.studies.spec import Extra, StudySpec, comma_list

SPEC = StudySpec(
    name="icl",
    config_class=ICLConfig,
    quick=quick_config,
    full=full_config,
    runner="attnreg.studies.icl.run:run",
    help="Linear and softmax self-attention trained on in-context regression tasks (von Oswald "
    "et al. 2023) and compared with line-searched GD, GD++, preconditioned GD, OLS and ridge: "
    "losses, alignment, learned η, context-size and out-of-distribution sweeps.",
    title="icl — trained linear attention learns gradient descent",
    extras=(
        Extra("--models", "models", "Comma-separated subset of the models to train.", comma_list),
        Extra("--threads", "threads", "Torch intra-op threads (1 is fastest here).", int),
    ),
    json_view="attnreg.studies.icl.run:json_rows",
    ledger=True,
)

__all__ = ["MODEL_SPECS", "SPEC", "ICLConfig", "ModelSpec", "full_config", "quick_config"]
