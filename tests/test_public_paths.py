"""Modules split by idea keep their public import paths: each name moved to a new module is the
same object when imported from the module that held it before."""

from __future__ import annotations

import importlib

import pytest

MOVED = [
    ("attnreg.models.lsa", "attnreg.models.token", ["TokenModel", "LayoutModel"]),
    (
        "attnreg.memory.energy",
        "attnreg.memory.family",
        ["ENERGIES", "family_step", "family_decode", "family_energy"],
    ),
    ("attnreg.memory.energy", "attnreg.memory.whitened", ["whitened_patterns"]),
    (
        "attnreg.training",
        "attnreg.training_config",
        ["SCHEDULES", "TrainConfig", "TrainResult", "generator"],
    ),
    ("attnreg.runs.store", "attnreg.runs.record", ["CellResult", "cell_key", "now"]),
    ("attnreg.explaining", "attnreg.family_fit", ["FAMILIES", "FamilyFit", "agreement"]),
    ("attnreg.explaining", "attnreg.family_fit", ["fit_family"]),
    ("attnreg.estimators", "attnreg.estimators.least_squares", ["OLS", "Ridge", "Predictor"]),
    ("attnreg.estimators", "attnreg.estimators.least_squares", ["ZeroPredictor"]),
    (
        "attnreg.estimators",
        "attnreg.estimators.gradient",
        ["GD", "PreconditionedGD", "GDPlusPlus", "gd_weights", "optimal_preconditioner"],
    ),
    ("attnreg.estimators", "attnreg.estimators.kernel", ["KernelSmoother", "LocalLinear"]),
    ("attnreg.estimators", "attnreg.estimators.online", ["LMS", "Mesa", "causal_ridge"]),
]


@pytest.mark.parametrize(("old", "new", "names"), MOVED)
def test_a_moved_name_is_the_same_object_at_its_old_path(old, new, names):
    before, after = importlib.import_module(old), importlib.import_module(new)
    for name in names:
        assert getattr(before, name) is getattr(after, name), f"{old}.{name}"
        assert name in getattr(before, "__all__", [name]), f"{old}.__all__ lacks {name}"
