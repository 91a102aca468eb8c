"""The reliability table of quality.md, row by row, for the shared validation module."""

import numpy as np
import pytest
import torch

from attnreg import GD, OLS, OLSTransformer, Ridge, associate
from attnreg.core.tasks import check_tasks
from attnreg.core.validation import as_tensor


def _tasks(n=6, d=3, m=3):
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, d)), rng.normal(size=(n, 1)), rng.normal(size=(m, d))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("which", [0, 1, 2])
def test_nan_inf_names_argument_and_first_index(bad, which):
    args = list(_tasks())
    args[which] = args[which].copy()
    args[which][1, 0] = bad
    args[which][2, 0] = bad
    name = ["x_ctx", "y_ctx", "x_query"][which]
    with pytest.raises(ValueError, match=rf"{name}: contains (NaN|Inf) at index \(1, 0\)"):
        OLS().predict(*args)


def test_shape_mismatch_states_both_shapes():
    x, y, q = _tasks()
    with pytest.raises(ValueError, match=r"\(6, 3\).*\(5, 1\)"):
        OLS().predict(x, y[:5], q)
    with pytest.raises(ValueError, match=r"\(6, 3\).*\(3, 4\)"):
        OLS().predict(x, y, np.zeros((3, 4)))
    with pytest.raises(ValueError, match="2 or 3-D"):
        OLS().predict(x[None, None], y, q)


def test_empty_context_and_zero_features():
    x, y, q = _tasks()
    with pytest.raises(ValueError, match="N = 0"):
        OLS().predict(x[:0], y[:0], q)
    with pytest.raises(ValueError, match="d = 0"):
        OLS().predict(x[:, :0], y, q[:, :0])


@pytest.mark.parametrize("lam", [-1.0, 0.0, float("nan")])
def test_ridge_lambda_must_be_positive(lam):
    with pytest.raises(ValueError, match="lam"):
        Ridge(lam)


def test_negative_ridge_in_construction():
    with pytest.raises(ValueError, match="ridge"):
        OLSTransformer(ridge=-0.1)


@pytest.mark.parametrize("eta", [0.0, -0.5])
def test_eta_must_be_positive(eta):
    with pytest.raises(ValueError, match="eta"):
        GD(eta=eta)


def _constructors():
    """``(parameter, build(value))`` for every numeric parameter of the estimators,
    constructions and memories (imported here, not at collection)."""
    import attnreg
    from attnreg.constructions import VonOswaldSummaryLayer
    from attnreg.memory import (
        DenseAssociativeMemory,
        HebbianMemory,
        ModernHopfield,
        PseudoInverseMemory,
        UniversalHopfieldMemory,
    )

    eye = np.eye(3)
    return {
        "Ridge.lam": ("lam", lambda v: attnreg.Ridge(v)),
        "Mesa.lam": ("lam", lambda v: attnreg.Mesa(v)),
        "OLS.rtol": ("rtol", lambda v: attnreg.OLS(rtol=v)),
        "GD.eta": ("eta", lambda v: attnreg.GD(eta=v)),
        "GD.eta-list": ("eta", lambda v: attnreg.GD(eta=[0.1, v], steps=2)),
        "GD.steps": ("steps", lambda v: attnreg.GD(steps=v)),
        "PreconditionedGD.eta": ("eta", lambda v: attnreg.PreconditionedGD(eye, eta=v)),
        "GDPlusPlus.gamma": ("gamma", lambda v: attnreg.GDPlusPlus(gamma=v)),
        "KernelSmoother.beta": ("beta", lambda v: attnreg.KernelSmoother(beta=v)),
        "OLSTransformer.ridge": ("ridge", lambda v: attnreg.OLSTransformer(ridge=v)),
        "OLSTransformer.rtol": ("rtol", lambda v: attnreg.OLSTransformer(rtol=v)),
        "OLSAttention.ridge": ("ridge", lambda v: attnreg.OLSAttention(ridge=v)),
        "MesaLayer.lam": ("lam", lambda v: attnreg.MesaLayer(v)),
        "LSAStack.gd.eta": ("eta", lambda v: attnreg.LSAStack.gd(3, 1, eta=v)),
        "LSAStack.gd.steps": ("steps", lambda v: attnreg.LSAStack.gd(3, 1, steps=v)),
        "VonOswaldSummaryLayer.eta": ("eta", lambda v: VonOswaldSummaryLayer(3, eta=v)),
        "VonOswaldSummaryLayer.d": ("d", lambda v: VonOswaldSummaryLayer(v)),
        "ModernHopfield.beta": ("beta", lambda v: ModernHopfield(beta=v)),
        "ModernHopfield.max_steps": ("max_steps", lambda v: ModernHopfield(max_steps=v)),
        "ModernHopfield.tol": ("tol", lambda v: ModernHopfield(tol=v)),
        "UniversalHopfieldMemory.beta": ("beta", lambda v: UniversalHopfieldMemory(beta=v)),
        "UniversalHopfieldMemory.power": ("power", lambda v: UniversalHopfieldMemory(power=v)),
        "PseudoInverseMemory.ridge": ("ridge", lambda v: PseudoInverseMemory(ridge=v)),
        "PseudoInverseMemory.memory_budget": (
            "memory_budget",
            lambda v: PseudoInverseMemory(memory_budget=v),
        ),
        "HebbianMemory.max_steps": ("max_steps", lambda v: HebbianMemory(max_steps=v)),
        "DenseAssociativeMemory.power": ("power", lambda v: DenseAssociativeMemory(power=v)),
    }


CONSTRUCTORS = [
    "Ridge.lam", "Mesa.lam", "OLS.rtol", "GD.eta", "GD.eta-list", "GD.steps",
    "PreconditionedGD.eta", "GDPlusPlus.gamma", "KernelSmoother.beta", "OLSTransformer.ridge",
    "OLSTransformer.rtol", "OLSAttention.ridge", "MesaLayer.lam", "LSAStack.gd.eta",
    "LSAStack.gd.steps", "VonOswaldSummaryLayer.eta", "VonOswaldSummaryLayer.d",
    "ModernHopfield.beta", "ModernHopfield.max_steps", "ModernHopfield.tol",
    "UniversalHopfieldMemory.beta", "UniversalHopfieldMemory.power",
    "PseudoInverseMemory.ridge", "PseudoInverseMemory.memory_budget",
    "HebbianMemory.max_steps", "DenseAssociativeMemory.power",
]  # fmt: skip


BAD = {"str": "2", "True": True, "False": False, "None": None, "bytes": b"1", "list": [1.0]}
BAD["complex"] = 1 + 0j


def _valid(which: str, bad: str) -> bool:
    """None is rtol's default; a list is one η (or γ) per step: those pairs are not bad."""
    parameter = which.split(".")[-1].split("-")[0]
    return (bad, parameter) in {("None", "rtol"), ("list", "eta"), ("list", "gamma")}


@pytest.mark.parametrize(
    ("which", "bad"),
    [(w, b) for w in CONSTRUCTORS for b in BAD if not _valid(w, b)],
)
def test_parameters_of_the_wrong_type_are_refused_at_construction(which, bad):
    # a string, a bool (not a number here, although float(True) == 1), None, a list where one
    # number is expected, a complex: a ValueError naming the parameter, not a later TypeError
    name, build = _constructors()[which]
    with pytest.raises(ValueError, match=f"^{name}: "):
        build(BAD[bad])


@pytest.mark.parametrize("which", CONSTRUCTORS)
def test_numbers_of_every_kind_are_accepted_at_construction(which):
    # Python, numpy and 0-d torch numbers are numbers (2 is valid for every parameter here)
    _, build = _constructors()[which]
    for good in (2, 2.0, np.float64(2.0), np.int64(2), torch.tensor(2.0)):
        build(good)


def test_the_listed_constructors_are_every_entry():
    assert sorted(CONSTRUCTORS) == sorted(_constructors())


def test_integers_are_promoted_to_float64_exactly():
    x = np.arange(12).reshape(6, 2)
    t = as_tensor("x", x)
    assert t.dtype == torch.float64
    np.testing.assert_array_equal(t.numpy(), x.astype(np.float64))
    with pytest.raises(ValueError, match="2\\*\\*53"):
        as_tensor("x", np.array([2**60, 1]))


UNSIGNED = ["uint8", "uint16", "uint32", "uint64"]


@pytest.mark.parametrize("library", ["numpy", "torch"])
@pytest.mark.parametrize("kind", UNSIGNED)
def test_unsigned_patterns_are_read_as_float64(kind, library):
    # every unsigned width (torch has no min/max kernels past uint8) is promoted exactly; one
    # modern Hopfield step is Xᵀ softmax(X q), computed here with scipy
    from scipy.special import softmax

    from attnreg.memory import ModernHopfield

    rng = np.random.default_rng(5)
    x, q = rng.integers(0, 4, size=(6, 3)), rng.integers(0, 4, size=(2, 3))
    cast = (
        (lambda a: a.astype(kind))
        if library == "numpy"
        else (lambda a: torch.from_numpy(a).to(getattr(torch, kind)))
    )
    t = as_tensor("x", cast(x))
    assert t.dtype == torch.float64
    np.testing.assert_array_equal(t.numpy(), x.astype(np.float64))
    got = ModernHopfield().store(cast(x)).retrieve(cast(q)).numpy()
    expected = softmax(q @ x.T.astype(float), axis=1) @ x
    magnitude = (1 + np.abs(q @ x.T).max()) * np.abs(x).max()  # u·|score| per weight
    np.testing.assert_allclose(got, expected, rtol=0, atol=64 * 2.0**-53 * magnitude)
    big = np.array([[2**60, 1]], dtype=np.uint64)
    with pytest.raises(ValueError, match="patterns: integer values of magnitude >= 2\\*\\*53"):
        ModernHopfield().store(
            big if library == "numpy" else torch.from_numpy(big.astype(np.int64)).to(torch.uint64)
        )


@pytest.mark.parametrize("dtype", [np.float16])
def test_float16_numpy_refused(dtype):
    x, y, q = _tasks()
    with pytest.raises(ValueError, match="x_ctx: float16"):
        OLS().predict(x.astype(dtype), y, q)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_tensors_refused(dtype):
    with pytest.raises(ValueError, match=r"queries: .*float16"):
        associate(torch.zeros(2, 3, dtype=dtype), torch.zeros(4, 3), torch.zeros(4, 1))


def test_unknown_names_list_the_valid_ones():
    q = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="valid names are dot, scaled_dot"):
        associate(q, q, q, similarity="cosine")
    with pytest.raises(ValueError, match="valid names are identity, softmax, power, max"):
        associate(q, q, q, separation="sparsemax")
    with pytest.raises(ValueError, match=r"covariance: .*gram, mean"):
        OLSTransformer(covariance="biased")


def test_mixed_dtypes_promote_to_float64_and_keep_output_shape():
    x, y, q = _tasks()
    xc, yc, xq, shape = check_tasks(x.astype(np.float32), y[:, 0], q)
    assert xc.dtype == yc.dtype == xq.dtype == torch.float64
    assert shape == (3,)
    assert OLS().predict(x, y[:, 0], q).shape == (3,)


def test_seeds_are_checked_where_they_enter():
    from attnreg.models import SoftmaxAttention, TrainableLSA
    from attnreg.models.regressors import AttentionRegression
    from attnreg.training import TrainConfig, generator

    for make in (
        lambda s: TrainableLSA(3, seed=s),
        lambda s: SoftmaxAttention(3, seed=s),
        lambda s: AttentionRegression(3, seed=s),
        lambda s: TrainConfig(seed=s),
        generator,
    ):
        for bad in (-1, 2**63, 1.5, "3", True):
            with pytest.raises(ValueError, match=r"seed: must be an integer in \[0, 2\*\*63\)"):
                make(bad)
        make(2**63 - 1)
