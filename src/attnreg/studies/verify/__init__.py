"""The ``verify`` study: the equivalence certificate of every construction and sequence layer.

Modules: :mod:`~attnreg.studies.verify.config` (settings and profiles, a leaf),
:mod:`~attnreg.studies.verify.references` (the independent numpy / scikit-learn references),
:mod:`~attnreg.studies.verify.certificate` (every row on every case and dtype),
:mod:`~attnreg.studies.verify.cases` (the task shapes and their data),
:mod:`~attnreg.studies.verify.checks` and :mod:`~attnreg.studies.verify.construction_rows` (the
constructions' rows and their tolerances), :mod:`~attnreg.studies.verify.measure` (how a row is
measured), :mod:`~attnreg.studies.verify.sequence_rows` (the sequence layers' rows),
:mod:`~attnreg.studies.verify.stack_rows` and :mod:`~attnreg.studies.verify.stack_references`
(the fixed-weight stacks' rows, every hidden state, and their numpy iterations),
:mod:`~attnreg.studies.verify.figures`, :mod:`~attnreg.studies.verify.run` (the runner). This
``__init__`` stays light: the config and :data:`SPEC`, from which the registry builds
``attnreg verify``, its sweep cells and its report section."""

from attnreg.studies.spec import Extra, StudySpec
from attnreg.studies.verify.config import VerifyConfig, full_config, parse_dtypes, quick_config

SPEC = StudySpec(
    name="verify",
    config_class=VerifyConfig,
    quick=quick_config,
    full=full_config,
    runner="attnreg.studies.verify.run:run",
    help="The equivalence certificate: build every construction (OLS-Transformer, "
    "OLS-attention, GD/GD++/preconditioned LSA, mesa layer) and every sequence layer of "
    "attnreg.sequence from random tasks, including degenerate and extreme-scale designs, run "
    "its forward pass and compare it with numpy / scikit-learn; the fixed-weight stacks (GD, "
    "GD++, preconditioned GD, Newton–Schulz, kernel Richardson) at several depths, every "
    "hidden state against the iteration in numpy. Exit status 1 if any row exceeds its "
    "tolerance.",
    title="verify — the equivalence certificate",
    extras=(
        Extra("--dtype", "dtypes", "Precision to check: float64, float32 or both.", parse_dtypes),
        Extra("--tol-scale", "tol_scale", "Multiply every tolerance by this factor.", float),
        Extra("--ridge", "ridge", "Ridge λ of the ridge-form constructions (> 0).", float),
    ),
    report_table=True,
    ledger=True,
)

__all__ = ["SPEC", "VerifyConfig", "full_config", "quick_config"]
