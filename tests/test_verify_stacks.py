"""`attnreg verify`'s stack rows: GD, GD++, preconditioned GD, Newton–Schulz and the kernel
Richardson stack at several depths, every hidden state against the iteration in numpy — they
pass on every case and dtype, and they fail when one weight of one layer is perturbed (also
where the prediction does not change: the row checks every state, not only the read-out)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from attnreg.constructions import LSAStack, NewtonStack
from attnreg.core.threads import torch_threads
from attnreg.studies.verify import stack_references as sref
from attnreg.studies.verify import stack_rows as sr
from attnreg.studies.verify.cases import CASES, gd_scale, make_task, scale_exponent
from attnreg.studies.verify.config import VerifyConfig

FAMILIES = ("GD,", "GD++,", "preconditioned GD (Γ),", "Newton–Schulz,", "kernel Richardson")


def rows_of(case_label: str, dtype: str, cfg: VerifyConfig) -> list[dict]:
    index, case = next((i, c) for i, c in enumerate(CASES) if c.label.startswith(case_label))
    data = make_task(case, dtype, np.random.default_rng([cfg.seed, index]))
    with torch_threads(1):
        return sr.stack_rows(
            data,
            scale_exponent(case, dtype),
            case.describe(),
            dtype,
            cfg,
            np.random.default_rng([cfg.seed, index, 1]),
        )


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_every_stack_at_every_depth_passes_on_every_case(dtype):
    cfg = VerifyConfig(seed=2)
    for case in CASES:
        rows = rows_of(case.label, dtype, cfg)
        assert len(rows) == len(FAMILIES) * len(sr.DEPTHS)
        for family in FAMILIES:
            mine = [r for r in rows if r["construction"].startswith(f"stack: {family}")]
            assert len(mine) == len(sr.DEPTHS), family
        failed = [(r["construction"], r["rel_err"], r["tol"]) for r in rows if not r["passed"]]
        assert not failed, (case.label, failed)
        base = cfg.tolerance[dtype]
        assert all(base <= r["tol"] <= 1e3 * base for r in rows)


def test_the_certificate_carries_the_stack_rows():
    from attnreg.studies.verify.certificate import certificate

    rows = [
        r
        for r in certificate(VerifyConfig(dtypes=["float64"]))
        if r["construction"][:6] == "stack:"
    ]
    assert len(rows) == len(CASES) * len(FAMILIES) * len(sr.DEPTHS)
    assert all(r["passed"] for r in rows)
    assert "stack: Newton–Schulz, 8 steps = 17 layers (every hidden state)" in {
        r["construction"] for r in rows
    }


def perturb(model, layer: int, head: int, rows: slice, cols: slice, factor: float):
    """Multiply a block of one layer's ``PV`` (a Parameter of the stack) by ``factor``."""
    with torch.no_grad():
        model.pv[layer, head, rows, cols] *= factor
    return model


def test_a_perturbed_gd_layer_fails_its_rows_and_only_those(monkeypatch):
    """``PV``'s y-block of layer 3 scaled by 1 + 1e-7: the 4- and 8-layer GD rows fail (a
    relative change of about 1e-8 against the float64 tolerance 1e-10), the 1- and 2-layer rows,
    which have no layer 3, pass."""
    real = LSAStack.gd

    def gd(d, dy, *args):
        stack = real(d, dy, *args)
        if stack.n_layers > 3:
            perturb(stack, 3, 0, slice(d, d + dy), slice(d, d + dy), 1 + 1e-7)
        return stack

    patched = SimpleNamespace(
        gd=gd,
        gd_plus_plus=LSAStack.gd_plus_plus,
        preconditioned=LSAStack.preconditioned,
    )
    monkeypatch.setattr(sr, "LSAStack", patched)
    rows = rows_of("N>d", "float64", VerifyConfig())
    passed = {
        r["construction"]: r["passed"] for r in rows if r["construction"].startswith("stack: GD,")
    }
    assert passed == {
        "stack: GD, 1 layer (every hidden state)": True,
        "stack: GD, 2 layers (every hidden state)": True,
        "stack: GD, 4 layers (every hidden state)": False,
        "stack: GD, 8 layers (every hidden state)": False,
    }
    others = [r for r in rows if not r["construction"].startswith("stack: GD,")]
    assert all(r["passed"] for r in others)


def test_a_perturbation_invisible_in_the_prediction_still_fails(monkeypatch):
    """The last layer's second head clears the u-slots (``u ← u − U e``); scaling it by
    1 + 1e-6 leaves the prediction (the queries' p-slots) bit for bit unchanged but not the last
    hidden state, so the Newton rows fail — a prediction-only check would pass."""
    real = NewtonStack
    d, dy = 6, 1

    def newton(d, dy, steps, alpha, ridge, dtype):
        stack = real(d, dy, steps, alpha, ridge, dtype)
        u = slice(3 * d + dy, 4 * d + dy)
        return perturb(stack, stack.n_layers - 1, 1, u, u, 1 + 1e-6)

    case = next(c for c in CASES if c.label == "N>d")
    data = make_task(case, "float64", np.random.default_rng(0))
    x = data["x"] / gd_scale(data["x"])
    alpha = sr.newton_start(x)
    clean = real(d, dy, 2, alpha, 0.0).predict(x, data["y"], data["q"])
    bent = newton(d, dy, 2, alpha, 0.0, torch.float64).predict(x, data["y"], data["q"])
    assert torch.equal(clean, bent)
    monkeypatch.setattr(sr, "NewtonStack", newton)
    rows = rows_of("N>d", "float64", VerifyConfig())
    newton_rows = [r for r in rows if "Newton" in r["construction"]]
    assert newton_rows and not any(r["passed"] for r in newton_rows)
    assert all(r["passed"] for r in rows if "Newton" not in r["construction"])


def test_a_stack_that_raises_is_a_failed_row(monkeypatch):
    def refuse(*args):
        raise ValueError("refused")

    monkeypatch.setattr(sr, "NewtonStack", refuse)
    with pytest.warns(RuntimeWarning, match="refused"):
        rows = rows_of("N<d", "float32", VerifyConfig())
    newton_rows = [r for r in rows if "Newton" in r["construction"]]
    assert all(r["rel_err"] == math.inf and not r["passed"] for r in newton_rows)


# ---- the references against closed forms written here ----------------------------------------


def test_gd_states_are_the_closed_form_weights():
    """After l steps of GD with Γ from W_0: W_l by the recursion W ← W + η (C − W S) Γ
    (S = XᵀX/N, C = YᵀX/N); the context slots hold Y − X (W_l − W_0)ᵀ, the queries −X* W_lᵀ."""
    rng = np.random.default_rng(0)
    n, d, dy = 9, 3, 2
    x, y, q = rng.normal(size=(n, d)), rng.normal(size=(n, dy)), rng.normal(size=(4, d))
    w0, gam = rng.normal(size=(dy, d)), np.diag([1.0, 0.5, 0.25])
    etas = [0.3, 0.2, 0.1]
    states = sref.gd_states(x, y, q, etas, w0, gam)
    w = w0.copy()
    s, c = x.T @ x / n, y.T @ x / n
    for step, state in enumerate(states):
        np.testing.assert_allclose(state[:n, d:], y - x @ (w - w0).T, atol=1e-13)
        np.testing.assert_allclose(state[n:, d:], -q @ w.T, atol=1e-13)
        np.testing.assert_array_equal(state[:, :d], np.vstack([x, q]))
        if step < len(etas):
            w = w + etas[step] * (c - w @ s) @ gam


def test_gd_plus_plus_states_end_in_the_token_loop():
    """The per-token GD++ loop of :mod:`references` (γ on the sum) gives the same prediction."""
    from attnreg.studies.verify import references as ref

    rng = np.random.default_rng(1)
    n, d = 8, 3
    x, y, q = rng.normal(size=(n, d)), rng.normal(size=(n, 1)), rng.normal(size=(2, d))
    etas, cs = [0.4, 0.3], [0.2, 0.1]
    states = sref.gd_plus_plus_states(x, y, q, etas, cs)
    want = ref.gd_plus_plus_loop(x, y, q, etas, [c / n for c in cs])
    np.testing.assert_allclose(-states[-1][n:, d:], want, atol=1e-13)


def test_kernel_states_end_in_scikit_learn_kernel_ridge():
    """Many Richardson steps: the context's a-slots are KernelRidge's dual coefficients and the
    queries' p-slots its prediction (scikit-learn, rbf kernel with γ = 1/(2h²))."""
    from sklearn.kernel_ridge import KernelRidge

    rng = np.random.default_rng(3)
    n, d, dy, h, lam = 10, 3, 2, 1.2, 0.7
    x, y, q = rng.normal(size=(n, d)), rng.normal(size=(n, dy)), rng.normal(size=(4, d))
    states = sref.kernel_states(x, y, q, h, lam, 1.0, 400)
    assert len(states) == 2 * 400 + 3
    sl = sref.kernel_slots(d, dy)
    model = KernelRidge(alpha=lam, kernel="rbf", gamma=1 / (2 * h * h)).fit(x, y)
    np.testing.assert_allclose(states[-1][:n, sl["a"]], model.dual_coef_, atol=1e-9)
    np.testing.assert_allclose(states[-1][n + 1 :, sl["p"]], model.predict(q), atol=1e-9)
    assert not states[-1][n:, sl["a"]].any()  # the sink and the queries keep a = 0


def test_newton_states_converge_to_the_pseudo_inverse():
    """With enough steps, M_K = S⁺ (N < d: the pseudo-inverse) and the queries' p-slots are
    the minimum-norm least-squares prediction; u = S M e after a step's first layer."""
    rng = np.random.default_rng(2)
    n, d, dy = 4, 6, 2
    x, y, q = rng.normal(size=(n, d)), rng.normal(size=(n, dy)), rng.normal(size=(3, d))
    s = x.T @ x
    alpha = 1.0 / np.linalg.norm(s @ s)
    steps = 40
    states = sref.newton_states(x, y, q, alpha, 0.0, steps)
    assert len(states) == 2 * steps + 2
    sl = sref.newton_slots(d, dy)
    final = states[-1]
    np.testing.assert_allclose(final[n : n + d, sl["m"]], np.linalg.pinv(s), atol=1e-9)
    beta = np.linalg.lstsq(x, y, rcond=None)[0]
    np.testing.assert_allclose(final[n + d :, sl["p"]], q @ beta, atol=1e-9)
    m1 = states[3][n : n + d, sl["m"]].T
    np.testing.assert_allclose(states[4][n : n + d, sl["u"]], (s @ m1).T, atol=1e-12)
    assert not final[:, sl["u"]].any()
    np.testing.assert_array_equal(final[:n], states[0][:n])  # context tokens never change
