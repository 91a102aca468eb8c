"""Inputs at extreme magnitude: the answer of the given problem, or a clear ValueError.

Never silent zeros, Inf or NaN. The ridge family (``Ridge``, ``Mesa``, ``MesaLayer``, the
OLS constructions with ridge, ``PseudoInverseMemory``) answers ridge with the **given** λ at
any magnitude, checked against the same problem solved in 40-digit arithmetic (mpmath: no
float range); where that answer is outside the dtype's normal range the predictor must raise.
The softmax memories are checked against the softmax of exact (mpmath) scores.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import mpmath as mp
import numpy as np
import pytest
import torch

mp.mp.dps = 40
C = 64  # the constant of the contract's tolerances C·u·T (tests/test_contract.py)
N, D = 12, 3


def _ridge_family(lam: float) -> dict[str, Callable[[Any, Any, Any], torch.Tensor]]:
    import attnreg
    from attnreg.memory import PseudoInverseMemory

    return {
        "Ridge": lambda x, y, q: attnreg.Ridge(lam).predict(x, y, q),
        "Mesa": lambda x, y, q: attnreg.Mesa(lam).predict(x, y, q),
        "MesaLayer": lambda x, y, q: attnreg.MesaLayer(lam).predict(x, y, q),
        "OLSTransformer": lambda x, y, q: attnreg.OLSTransformer(ridge=lam).predict(x, y, q),
        "OLSAttention": lambda x, y, q: attnreg.OLSAttention(ridge=lam).predict(x, y, q),
        "OLSAttention-cholesky": lambda x, y, q: attnreg.OLSAttention(
            ridge=lam, method="cholesky"
        ).predict(x, y, q),
        "PseudoInverseMemory": lambda x, y, q: (
            PseudoInverseMemory(ridge=lam).store(x, y).retrieve(q)
        ),
    }


RIDGE_FAMILY = list(_ridge_family(1.0))
F64 = [1e-300, 1e-200, 1e-150, 1e150, 1e200, 1e300]
MIXED = [  # (x, y, x*) scales: queries and context at opposite extremes, tiny X with normal Y
    (1e-300, 1.0, 1.0),
    (1e-150, 1e150, 1e150),
    (1e300, 1e300, 1e-300),
    (1e-300, 1e-300, 1e300),
    (1e200, 1e-200, 1e200),
]
F32 = [1e-30, 1e-20, 1e-15, 1e15, 1e20, 1e30]


def _data(dtype: np.dtype, scales: tuple[float, float, float]) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(3)
    x, y, q = rng.normal(size=(N, D)), rng.normal(size=(N, 1)), rng.normal(size=(2, D))
    return tuple((a * s).astype(dtype) for a, s in zip((x, y, q), scales, strict=True))


def _mp_ridge(x: np.ndarray, y: np.ndarray, q: np.ndarray, lam: float) -> list[mp.mpf]:
    """``x* (XᵀX + λI)⁻¹ XᵀY`` on the given numbers (each float is exactly an mpf)."""
    xm, ym, qm = (mp.matrix(a.astype(np.float64).tolist()) for a in (x, y, q))
    coef = mp.lu_solve(xm.T * xm + mp.mpf(lam) * mp.eye(D), xm.T * ym)
    out = qm * coef
    return [out[i, 0] for i in range(out.rows)]


def _check(name: str, lam: float, x: np.ndarray, y: np.ndarray, q: np.ndarray) -> None:
    info = np.finfo(x.dtype)
    exact = _mp_ridge(x, y, q, lam)
    top = max(abs(v) for v in exact)
    representable = mp.mpf(float(info.tiny)) <= top < mp.mpf(float(info.max))
    predict = _ridge_family(lam)[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rank / conditioning warnings are not the point here
        if not representable:
            with pytest.raises(ValueError, match=r"underflowed|overflowed"):
                predict(torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(q))
            return
        got = predict(torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(q))
    got = got.detach().numpy().astype(np.float64).ravel()
    assert np.all(np.isfinite(got)), got
    err = max(abs(mp.mpf(float(g)) - e) for g, e in zip(got, exact, strict=True)) / top
    # relative error bound of the normal equations (the tied layers add κ(X)), with the
    # condition number of the unscaled design (ridge only lowers it)
    unscaled = x.astype(np.float64) / np.abs(x).max()
    kappa = np.linalg.cond(unscaled)
    assert float(err) <= C * info.eps / 2 * (kappa**2 + kappa), (name, float(err), float(top))


@pytest.mark.parametrize("name", RIDGE_FAMILY)
@pytest.mark.parametrize("lam", [1e-3, 0.5])
@pytest.mark.parametrize("scale", F64, ids=[f"{s:g}" for s in F64])
def test_ridge_family_at_extreme_scale_float64(name: str, lam: float, scale: float) -> None:
    _check(name, lam, *_data(np.float64, (scale, scale, scale)))


@pytest.mark.parametrize("name", RIDGE_FAMILY)
@pytest.mark.parametrize("scales", MIXED, ids=[",".join(f"{s:g}" for s in m) for m in MIXED])
def test_ridge_family_at_mixed_extreme_scales(name: str, scales: tuple[float, ...]) -> None:
    _check(name, 0.1, *_data(np.float64, scales))


@pytest.mark.parametrize("name", RIDGE_FAMILY)
@pytest.mark.parametrize("scale", F32, ids=[f"{s:g}" for s in F32])
def test_ridge_family_at_extreme_scale_float32(name: str, scale: float) -> None:
    _check(name, 0.1, *_data(np.float32, (scale, scale, scale)))


def test_the_ridge_underflow_names_the_cause() -> None:
    import attnreg

    x, y, q = _data(np.float64, (1e-300, 1e-300, 1e-300))
    with pytest.raises(ValueError, match=r"predict: the result underflowed .* ridge .* λ"):
        attnreg.Ridge(1e-3).predict(x, y, q)


def test_a_zero_answer_stays_zero_at_extreme_scale() -> None:
    # Y = 0: the answer is exactly zero at any scale, which is not an underflow
    import attnreg

    x, _, q = _data(np.float64, (1e-300, 1.0, 1e-300))
    out = attnreg.Ridge(1e-3).predict(x, np.zeros((N, 1)), q)
    assert np.all(out.numpy() == 0)
