"""The ``depth`` study: depth against conditioning — the depth atlas of the fixed-weight
stacks (GD, GD++, preconditioned GD, Newton–Schulz), what trained deep linear-attention layers
compute, and noise with the Bayes-optimal estimator.

Modules: :mod:`~attnreg.studies.depth.config` (a leaf), :mod:`~attnreg.studies.depth.iterates`,
:mod:`~attnreg.studies.depth.trained`, :mod:`~attnreg.studies.depth.noise`,
:mod:`~attnreg.studies.depth.claims` (the claims ledger),
:mod:`~attnreg.studies.depth.summary`, :mod:`~attnreg.studies.depth.figures`,
:mod:`~attnreg.studies.depth.run` (the runner)."""

from attnreg.studies.depth.config import DepthConfig, full_config, quick_config
from attnreg.studies.spec import Extra, StudySpec

SPEC = StudySpec(
    name="depth",
    config_class=DepthConfig,
    quick=quick_config,
    full=full_config,
    runner="attnreg.studies.depth.run:run",
    help="Depth against conditioning: layers each fixed-weight stack (GD, GD++, preconditioned "
    "GD, Newton–Schulz) needs to reach OLS against κ, with fitted slopes; which iterate each "
    "trained linear-attention layer matches; error against context size with label noise "
    "beside OLS, the Bayes-optimal ridge and the closed forms.",
    ledger=True,
    title="depth — what depth buys against conditioning",
    extras=(Extra("--threads", "threads", "Torch intra-op threads (1 is fastest here).", int),),
    json_view="attnreg.studies.depth.run:json_rows",
)

__all__ = ["SPEC", "DepthConfig", "full_config", "quick_config"]
