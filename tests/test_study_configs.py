"""Every study config checks its values when it is built (``__post_init__``), the same way in
every study: a ``ValueError`` naming the key, whether the value comes from Python, the command
line, a sweep file or the report's overrides."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from attnreg.config import check_fields, config_from_dict, config_to_dict
from attnreg.studies.registry import STUDIES

UNAVAILABLE = "mps" if torch.cuda.is_available() else "cuda"  # a device this machine lacks


@pytest.mark.parametrize("study", list(STUDIES))
@pytest.mark.parametrize("profile", ["quick", "full"])
def test_every_profile_is_a_valid_config_and_round_trips(study, profile):
    spec = STUDIES[study]
    config = spec.profile(profile)
    assert isinstance(config, spec.config_class)
    again = config_from_dict(spec.config_class, config_to_dict(config))
    assert again == config


@pytest.mark.parametrize("study", list(STUDIES))
def test_every_config_checks_types_seed_and_finiteness_itself(study):
    """Built directly in Python (not through ``config_from_dict``), a config still refuses a
    wrong type, a negative seed and an infinite float, naming the key."""
    cls = STUDIES[study].config_class
    with pytest.raises(ValueError, match=r"seed"):
        cls(seed=-1)
    with pytest.raises(ValueError, match=r"seed"):
        cls(seed="0")
    floats = [f.name for f in dataclasses.fields(cls) if f.type in (float, "float")]
    assert floats, study
    for name in floats:
        for bad in (math.inf, -math.inf, math.nan):
            with pytest.raises(ValueError, match=name):
                cls(**{name: bad})


@pytest.mark.parametrize("study", ["compare", "icl", "capacity"])
def test_an_unavailable_device_is_refused_when_the_config_is_built(study):
    cls = STUDIES[study].config_class
    with pytest.raises(ValueError, match=rf"device: {UNAVAILABLE!r}"):
        cls(device=UNAVAILABLE)
    with pytest.raises(ValueError, match="device: 'tpu9'"):
        cls(device="tpu9")


@pytest.mark.parametrize(
    ("study", "changes", "needle"),
    [
        ("verify", {"ridge": -1.0}, "ridge: must be a finite number > 0, got -1.0"),
        ("verify", {"ridge": 0.0}, "ridge"),
        ("verify", {"mesa_lambda": 0.0}, "mesa_lambda"),
        ("verify", {"dtypes": ["float16"]}, "dtypes: unknown value 'float16'"),
        ("verify", {"dtypes": []}, "dtypes"),
        ("verify", {"tolerance": {"float64": 1e-9}}, "tolerance: no entry for dtype 'float32'"),
        ("verify", {"tolerance": {"float64": 1e-9, "float32": "x"}}, "tolerance['float32']"),
        ("verify", {"tolerance": {"float64": 1e-9, "float32": math.inf}}, "tolerance['float32']"),
        ("verify", {"tolerance": {"float64": 0.0, "float32": 1e-4}}, "tolerance['float64']"),
        ("verify", {"tolerance": [1e-9]}, "tolerance"),
        ("compare", {"n_train": 1}, "n_train"),
        ("compare", {"condition": 0.5}, "condition"),
        ("compare", {"noise": -0.1}, "noise"),
        ("compare", {"variants": ["nope"]}, "variants: unknown value 'nope'"),
        ("compare", {"shift_magnitudes": [0.0, -1.0]}, "shift_magnitudes"),
        ("compare", {"eval_every": 0}, "eval_every"),
        ("icl", {"models": []}, "models"),
        ("icl", {"models": ["lsa-9"]}, "models: unknown value 'lsa-9'"),
        ("icl", {"schedule": "linear"}, "schedule: unknown value 'linear'"),
        ("icl", {"lr": 0.0}, "lr"),
        ("icl", {"clip": -1.0}, "clip"),
        ("icl", {"gaussian_condition": 0.5}, "gaussian_condition"),
        ("icl", {"min_sensitivity_cosine": 1.5}, "min_sensitivity_cosine"),
        ("icl", {"input_scales": [1.0, 0.0]}, "input_scales"),
        ("icl", {"eval_every": 0}, "eval_every"),
        ("capacity", {"epsilon": 1.0}, "epsilon"),
        ("capacity", {"hebbian_epsilons": [0.1, 0.0]}, "hebbian_epsilons"),
        ("capacity", {"hebbian_flip_fraction": 1.0}, "hebbian_flip_fraction"),
        ("capacity", {"hebbian_dynamics": "random"}, "hebbian_dynamics"),
        ("capacity", {"sphere_sigma": -0.1}, "sphere_sigma"),
        ("capacity", {"workers": -1}, "workers"),
        ("capacity", {"digits_n": [2000]}, "digits_n"),
        ("capacity", {"ols_energy_cases": [[8, 16]]}, "ols_energy_cases"),
        ("capacity", {"min_softmax_growth_r2": 1.5}, "min_softmax_growth_r2"),
        ("capacity", {"softmax_flips": 9, "softmax_d": [8, 10]}, "softmax_flips"),
        ("depth", {"kappas": [0.5]}, "kappas: each must be a finite number >= 1"),
        ("depth", {"eps": [1.0]}, "eps: each must lie in (0, 1)"),
        ("depth", {"train_layers": []}, "train_layers"),
        ("depth", {"noise_n_ctx": [0]}, "noise_n_ctx"),
        ("depth", {"sigma": -0.1}, "sigma"),
        ("depth", {"threads": 0}, "threads"),
    ],
)
def test_bad_values_are_refused_naming_the_key(study, changes, needle):
    spec = STUDIES[study]
    with pytest.raises(ValueError) as direct:
        spec.config_class(**changes)
    assert needle in str(direct.value)
    values = {**config_to_dict(spec.profile("quick")), **changes}
    with pytest.raises(ValueError) as loaded:
        config_from_dict(spec.config_class, values)
    assert needle in str(loaded.value)


def test_check_fields_names_the_key_of_a_nested_value():
    @dataclasses.dataclass
    class Toy:
        table: dict[str, float]
        values: list[float]

    check_fields(Toy({"a": 1.0}, [1, 2.5]))
    with pytest.raises(ValueError, match=r"table\['a'\]\W+ expected a number, got 'x'"):
        check_fields(Toy({"a": "x"}, []))
    with pytest.raises(ValueError, match=r"'values': must be a finite number, got nan"):
        check_fields(Toy({}, [1.0, math.nan]))


def test_icl_schedules_are_the_training_loops():
    from attnreg.studies.icl.config import SCHEDULES
    from attnreg.training import SCHEDULES as TRAINING_SCHEDULES

    assert SCHEDULES == TRAINING_SCHEDULES
