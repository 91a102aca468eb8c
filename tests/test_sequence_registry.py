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
from attnreg.sequence.examples import plain
from attnreg.sequence.registry import (
    REGISTRY,
    Example,
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
    for entry in REGISTRY.values():
        for ref in entry.fla:
            assert f"`{ref.path}: {ref.function}`" in family_table()
    exact = family_table({"delta_rule": "12 of 12 rows"}).splitlines()
    assert "exact" in exact[0] and len(exact) == len(table)
    assert sum("12 of 12 rows" in line for line in exact) == 1


def test_verify_rows_sum_up_per_layer():
    from attnreg.studies.verify.sequence_rows import exactness_by_layer

    rows = [
        {"construction": "sequence: linear attention", "passed": True, "rel_err": 1.0, "tol": 4.0},
        {"construction": "sequence: linear attention, per-token decay (GLA)"}
        | {"passed": False, "rel_err": 3.0, "tol": 2.0},
        {"construction": "sequence: toy (registered)", "passed": True, "rel_err": 0, "tol": 1},
        {"construction": "OLS", "passed": True, "rel_err": 0, "tol": 1},
    ]
    got = exactness_by_layer(rows)
    assert got == {
        "linear_attention": "1 of 2 rows, largest error / tolerance 1.5",
        "toy": "1 of 1 rows, largest error / tolerance 0",
    }


def check_example(entry: LayerEntry) -> None:
    """``entry`` on its example in float64 and float32: the contract's shape ``(B, H, T, d_v)``
    and dtype, finite, every form within ``u · growth(T, d_k, d_v) · max(1, max |o|)`` of its
    token loop (``"recurrent"``, where it has one), and the example's numpy reference (where
    given) within the same bound."""
    assert entry.example is not None, f"{entry.name} has no example"
    b, h, t, d_k, d_v = 2, 3, 37, 5, 4
    for dtype in (torch.float64, torch.float32):
        args = entry.example.draw(torch.Generator().manual_seed(0), (b, h, t, d_k, d_v), dtype)
        outs = {}
        for form in entry.forms:
            mode = {"mode": form} if len(entry.forms) > 1 else {}
            outs[form] = entry.function(**args, **mode)
        loop = outs.get("recurrent", outs[entry.forms[0]])
        assert loop.shape == (b, h, t, d_v) and loop.dtype == dtype, entry.name
        assert torch.isfinite(loop).all(), entry.name
        unit = torch.finfo(dtype).eps / 2
        bound = unit * entry.example.growth(t, d_k, d_v) * max(1.0, float(loop.abs().max()))
        for form, out in outs.items():
            assert float((out - loop).abs().max()) <= bound, (entry.name, form, dtype)
        if entry.example.reference is not None:
            numbers = {
                n: a.numpy().astype(np.float64) if isinstance(a, torch.Tensor) else a
                for n, a in args.items()
            }
            want = entry.example.reference(**numbers)
            assert np.abs(loop.numpy() - want).max() <= bound, (entry.name, dtype)


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_registered_layer_runs_its_example_in_every_form(name):
    check_example(REGISTRY[name])


def running_mean(q, k, v):
    """The toy layer: ``o_t = (1/t) Σ_{i≤t} v_i``, the Nadaraya–Watson smoother with a constant
    kernel (``q``, ``k`` unused)."""
    return torch.cumsum(v, dim=2) / torch.arange(1, v.shape[2] + 1, dtype=v.dtype)[:, None]


def running_mean_loop(q, k, v):
    """The toy layer in numpy, token by token."""
    out = np.zeros_like(v)
    for t in range(v.shape[2]):
        out[:, :, t] = v[:, :, : t + 1].sum(axis=2) / (t + 1)
    return out


TOY = LayerEntry(
    "toy_layer",
    running_mean,
    ("recurrent",),
    (Reading("toy_layer", "1/t", "constant", "the mean", "Σ_{i≤t} ‖v_i − b‖²", "a test"),),
    example=Example(plain, running_mean_loop),
)


def test_a_registered_toy_layer_reaches_the_table_tests_verify_bench_and_the_layers_study():
    """One registry entry (the layer's one file is this test's two functions) reaches the
    five places that iterate the registry; unregistered, it is gone; a second entry of one name
    is refused."""
    from attnreg.bench.registered import registered_seconds
    from attnreg.bench.registered_fla import FLA_CALLS
    from attnreg.studies.layers.config import LayersConfig
    from attnreg.studies.layers.model import InContextLayer
    from attnreg.studies.verify.cases import CASES, make_task
    from attnreg.studies.verify.config import VerifyConfig
    from attnreg.studies.verify.sequence_rows import sequence_rows

    register(TOY)
    try:
        assert "`toy_layer`" in family_table()  # docs
        check_example(TOY)  # tests
        rng = np.random.default_rng(0)
        case = CASES[0]
        task = make_task(case, "float64", rng)
        rows = sequence_rows(task, 0, case.describe(), "float64", VerifyConfig(), rng)
        toy_rows = [r for r in rows if r["construction"] == "sequence: toy_layer (registered)"]
        assert len(toy_rows) == 1 and toy_rows[0]["passed"]  # verify
        timed = registered_seconds(1, 16, 4, 1)  # bench
        assert set(timed) == {e.name for e in REGISTRY.values()}
        assert timed["toy_layer"]["shape"] == "B=1, H=1, T=16, d_k=d_v=4, float32"
        # fla's reference timed beside each layer that has one (every call runs)
        assert {n for n, r in timed.items() if r["fla_seconds"] is not None} == set(FLA_CALLS)
        LayersConfig(layers=["toy_layer"])  # the layers study
        model = InContextLayer("toy_layer", 3, 0.1, 0)
        x, y = torch.randn(2, 6, 3), torch.randn(2, 6, 1)
        want = running_mean_loop(None, None, y[:, None, :5].numpy())[:, 0]
        assert np.allclose(model(x, y).detach().numpy(), want, rtol=0, atol=1e-6)
        with pytest.raises(ValueError, match="already registered"):
            register(TOY)
    finally:
        unregister("toy_layer")
    assert "toy_layer" not in family_table()
    with pytest.raises(ValueError, match="layers"):
        LayersConfig(layers=["toy_layer"])


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
