"""One certificate row, measured: run the layer, compare with its reference, and write the row.

Every row — construction, sequence layer, stack — is the dict of :func:`row`: ``construction``,
``reference``, ``dtype``, ``shape``, ``max_abs_err = max |ŷ − y_ref|``,
``rel_err = max_abs_err / max(max |y_ref|, t)`` with ``t`` the smallest normal number of the
dtype (an absolute error below it is gradual underflow, not a wrong answer), its tolerance
``tol`` and ``passed = rel_err ≤ tol``. The base tolerances on ``rel_err`` are
:class:`~attnreg.studies.verify.config.VerifyConfig`'s (1e-10 in float64, 1e-4 in float32); a
row's own rounding-error bound raises its tolerance to ``max(base, bound) · tol_scale``.

A layer that raises (``ValueError``, or a ``RuntimeError`` from a linear-algebra kernel) or
returns inf/NaN on a shape gets a failed row with infinite error and a ``RuntimeWarning``
naming the exception or the non-finite output (:func:`attempt`, :func:`problem_of`,
:func:`warn_failed`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from attnreg.core.whitening import ConditioningWarning, RankWarning
from attnreg.studies.verify.config import VerifyConfig, smallest_normal


def as_float64(out: Any) -> np.ndarray:
    """A layer's output (a tensor or an array) as a float64 numpy array."""
    if isinstance(out, torch.Tensor):
        out = out.detach().to(torch.float64).numpy()
    return np.asarray(out, dtype=np.float64)


def attempt(run: Callable[[], Any]) -> tuple[list[np.ndarray], Exception | None]:
    """``run()``'s output — one tensor or array, or a list of them — as float64 arrays, with the
    rank and conditioning warnings silenced (the rows measure the answer instead). A
    ``ValueError`` or ``RuntimeError`` (a refusal or a LAPACK failure) is returned, not raised,
    with no arrays."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RankWarning)
            warnings.simplefilter("ignore", ConditioningWarning)
            out = run()
        return [as_float64(o) for o in (out if isinstance(out, list) else [out])], None
    except (ValueError, RuntimeError) as exc:
        return [], exc


def problem_of(got: list[np.ndarray], exc: Exception | None) -> str | None:
    """What went wrong in :func:`attempt` (``None``: a finite output)."""
    if exc is not None:
        return f"raised {type(exc).__name__}: {exc}"
    return None if all(np.all(np.isfinite(a)) for a in got) else "returned inf/NaN"


def warn_failed(construction: str, shape: str, dtype: str, problem: str) -> None:
    """The ``RuntimeWarning`` of a failed row."""
    warnings.warn(
        f"verify: {construction} on {shape} ({dtype}) {problem}", RuntimeWarning, stacklevel=3
    )


def row(
    construction: str,
    reference: str,
    dtype: str,
    shape: str,
    max_abs: float,
    rel: float,
    tol: float,
) -> dict[str, Any]:
    """One row of the certificate (module docstring); it passes when ``rel ≤ tol``."""
    return {
        "construction": construction,
        "reference": reference,
        "dtype": dtype,
        "shape": shape,
        "max_abs_err": max_abs,
        "rel_err": rel,
        "tol": tol,
        "passed": bool(rel <= tol),
    }


def measure(
    spec: tuple[str, str, float],
    build: Callable[[], Any],
    expected: np.ndarray,
    shape: str,
    dtype: str,
    cfg: VerifyConfig,
    below_range: bool = False,
) -> dict[str, Any]:
    """One row: ``build()`` against ``expected``; ``spec`` is (construction, reference, the
    relative error bound), the tolerance ``max(base, bound) · tol_scale``. ``below_range``: the
    exact answer is below the dtype's range, and only a ``ValueError`` saying it underflowed
    passes."""
    construction, reference, bound = spec
    floor = smallest_normal(dtype)
    got, exc = attempt(lambda: as_float64(build()).reshape(expected.shape))
    problem = problem_of(got, exc)
    if below_range and problem is None:
        problem = "returned a value where the answer is below the float range"
    max_abs = float(np.max(np.abs(got[0] - expected))) if problem is None else float("inf")
    if below_range and isinstance(exc, ValueError) and "underflowed" in str(exc):
        problem, max_abs = None, 0.0  # the refusal the contract asks for
    if problem is not None:
        warn_failed(construction, shape, dtype, problem)
    rel = max_abs / max(float(np.max(np.abs(expected))), floor)
    tol = max(cfg.tolerance[dtype], bound) * cfg.tol_scale
    return row(construction, reference, dtype, shape, max_abs, rel, tol)
