"""The layer registry (``attnreg.sequence.registry``): every public layer is in it, every fla
reference it names exists in the installed ``fla-core`` and is exercised by
``test_sequence_fla.py``, and the docs' family table is generated from it (a toy layer,
registered, shows up in the table; unregistered, it is gone)."""

import inspect
from pathlib import Path

import numpy as np
import pytest
import torch
from test_sequence_fla import naive

import attnreg.sequence as seq
from attnreg.sequence.registry import (
    REGISTRY,
    LayerEntry,
    Reading,
    family_table,
    register,
    unregister,
)

FLA_TESTS = (Path(__file__).parent / "test_sequence_fla.py").read_text(encoding="utf-8")


def test_every_public_layer_function_and_module_is_registered():
    functions = {n for n in seq.__all__ if inspect.isfunction(getattr(seq, n))}
    assert functions == set(REGISTRY)
    modules = {e.module.__name__ for e in REGISTRY.values() if e.module is not None}
    classes = {n for n in seq.__all__ if inspect.isclass(getattr(seq, n))} - {"SequenceLayer"}
    assert modules == classes
    for name, entry in REGISTRY.items():
        assert entry.function is getattr(seq, name)


@pytest.mark.parametrize(
    "reference",
    [r for e in REGISTRY.values() for r in e.fla],
    ids=lambda r: f"{r.path}:{r.function}",
)
def test_every_registered_fla_reference_exists_and_is_tested(reference):
    assert callable(getattr(naive(reference.path), reference.function))
    assert f"fla.{reference.function}(" in FLA_TESTS, f"no conformance test calls {reference}"


def test_the_family_table_has_one_row_per_reading_and_states_own_readings():
    table = family_table().splitlines()
    readings = [r for e in REGISTRY.values() for r in e.readings]
    assert len(table) == 2 + len(readings)
    for line, reading in zip(table[2:], readings, strict=True):
        assert reading.source in line and reading.function_class in line
        assert ("attnreg's reading" in line) == reading.own


def test_a_registered_toy_layer_reaches_the_table_and_a_second_entry_is_refused():
    def toy(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return v

    entry = LayerEntry(
        "toy_layer",
        toy,
        ("recurrent",),
        (Reading("toy_layer", "δ_{t,i}", "constant", "copy", "‖v_t − b‖²", "a test"),),
    )
    register(entry)
    try:
        assert "`toy_layer`" in family_table()
        with pytest.raises(ValueError, match="already registered"):
            register(entry)
    finally:
        unregister("toy_layer")
    assert "toy_layer" not in family_table()


def test_verify_certifies_every_registered_layer():
    """``attnreg verify``'s sequence rows on one case name a registered layer each, and every
    registered layer has a row (the full certificate, every shape and dtype, passing, is
    ``test_verify.py``'s)."""
    from attnreg.studies.verify.cases import CASES, make_task
    from attnreg.studies.verify.config import VerifyConfig
    from attnreg.studies.verify.sequence_rows import LAYER_OF_ROW, sequence_rows

    rng = np.random.default_rng(0)
    case = CASES[0]
    rows = sequence_rows(
        make_task(case, "float64", rng), 0, case.describe(), "float64", VerifyConfig(), rng
    )
    names = {r["construction"] for r in rows}
    assert names == set(LAYER_OF_ROW)
    assert set(LAYER_OF_ROW.values()) == set(REGISTRY)
    assert all(r["passed"] for r in rows)
