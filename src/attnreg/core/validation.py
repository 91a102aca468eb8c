"""Input validation: array conversion (:func:`as_tensor`) and scalar checks, used by every
data-taking function of attnreg (the task signature's checks are in :mod:`attnreg.core.tasks`,
the result policy in :mod:`attnreg.core.results` and :mod:`attnreg.core.scaling`).

The rules:

* NaN or Inf anywhere -> ``ValueError`` naming the argument and the first bad index.
* Shapes that do not agree -> ``ValueError`` stating both shapes.
* Empty context (N = 0) or d = 0 -> ``ValueError``.
* Integer and boolean inputs are promoted to float64 explicitly (exact below 2**53, checked:
  a magnitude of 2**53 or more is refused, whatever the integer type — numpy or torch, signed
  or unsigned, uint8 to uint64); float16 / bfloat16 / complex inputs are refused: attnreg
  never computes silently in a precision that cannot hold the identities it checks.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch

_EXACT_INT_LIMIT = 2**53
_REFUSED = {torch.float16: "float16", torch.bfloat16: "bfloat16"}
# torch has few kernels for unsigned tensors (no min/max for uint16/32/64): they are read
# through numpy, as numpy's unsigned arrays are
_UNSIGNED = (torch.uint8, torch.uint16, torch.uint32, torch.uint64)

ArrayLike = Any  # numpy arrays, torch tensors, nested lists


def as_tensor(
    name: str,
    value: ArrayLike,
    *,
    ndim: Sequence[int] | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
    allow_empty: bool = False,
    finite: bool = True,
) -> torch.Tensor:
    """Convert ``value`` to a finite floating tensor, or raise a ``ValueError`` naming ``name``.

    Integers/booleans become float64 (refused if any magnitude reaches 2**53, where float64 is
    no longer exact); float16/bfloat16/complex are refused. ``dtype`` casts afterwards. Unsigned
    torch tensors (uint8 … uint64) are read as numpy's unsigned arrays are, and stay on their
    device. ``finite=False``: the caller checks finiteness itself (:func:`check_finite`).
    """
    if isinstance(value, torch.Tensor) and value.dtype in _UNSIGNED:
        device = value.device if device is None else device
        value = value.cpu().numpy()
    if isinstance(value, torch.Tensor):
        tensor = value
    else:
        try:
            array = np.asarray(value)
        except Exception as exc:  # pragma: no cover - numpy's own message is kept
            raise ValueError(f"{name}: cannot be read as an array ({exc})") from exc
        if array.dtype == object:
            raise ValueError(f"{name}: must be a numeric array, got dtype=object")
        if array.dtype.kind == "f" and array.dtype.itemsize == 2:
            raise ValueError(
                f"{name}: float16 input is refused (too imprecise for these identities); "
                "convert to float32 or float64"
            )
        if array.dtype.kind in "US":
            raise ValueError(f"{name}: must be numeric, got strings (dtype={array.dtype})")
        if array.dtype.kind == "u" and array.size and int(array.max()) >= _EXACT_INT_LIMIT:
            raise ValueError(
                f"{name}: integer values of magnitude >= 2**53 cannot be represented exactly "
                "in float64; rescale them first"
            )
        if array.dtype.kind in "bu":  # torch has few kernels for bool / unsigned tensors
            array = array.astype(np.float64)
        tensor = torch.from_numpy(np.ascontiguousarray(array))
    if tensor.dtype in _REFUSED:
        raise ValueError(
            f"{name}: {_REFUSED[tensor.dtype]} input is refused (too imprecise for these "
            "identities); convert to float32 or float64"
        )
    if tensor.is_complex():
        raise ValueError(f"{name}: complex input is not supported (dtype={tensor.dtype})")
    if not tensor.is_floating_point():
        # min/max rather than abs: abs is not defined for bool and unsigned tensors
        if tensor.dtype != torch.bool and tensor.numel():
            low, high = int(tensor.min()), int(tensor.max())
            if max(-low, high) >= _EXACT_INT_LIMIT:
                raise ValueError(
                    f"{name}: integer values of magnitude >= 2**53 cannot be represented "
                    "exactly in float64; rescale them first"
                )
        tensor = tensor.to(torch.float64)
    if dtype is not None:
        tensor = tensor.to(dtype)
    if device is not None:
        tensor = tensor.to(device)
    if ndim is not None and tensor.ndim not in ndim:
        allowed = " or ".join(str(n) for n in ndim)
        raise ValueError(f"{name}: expected a {allowed}-D array, got shape {tuple(tensor.shape)}")
    if not allow_empty and tensor.numel() == 0:
        raise ValueError(f"{name}: is empty (shape {tuple(tensor.shape)})")
    if finite:
        check_finite(name, tensor)
    return tensor


def check_finite(name: str, tensor: torch.Tensor) -> None:
    """Raise ``ValueError`` naming ``name`` and the first NaN/Inf index, if there is one."""
    if tensor.is_floating_point():
        # one reduction first: a NaN or ±Inf anywhere makes the sum NaN or ±Inf, so a finite
        # sum proves every element finite; the element scan below runs only when the sum is
        # not finite (a bad element, or a finite overflow of the sum)
        if tensor.numel() == 0 or math.isfinite(float(tensor.detach().sum())):
            return
        bad = ~torch.isfinite(tensor)
        if bool(bad.any()):
            index = tuple(int(i) for i in bad.nonzero()[0].tolist())
            kind = "NaN" if bool(torch.isnan(tensor[index])) else "Inf"
            raise ValueError(f"{name}: contains {kind} at index {index}")


def _real(name: str, value: object, requirement: str) -> float:
    """``value`` as a float if it is a real number: a Python or numpy number, or a one-element
    real tensor / array. A bool or a string is not a number here: ``ValueError`` naming
    ``name`` (``float("1")`` and ``float(True)`` would otherwise pass silently)."""
    if isinstance(value, torch.Tensor):
        number = value.numel() == 1 and value.dtype != torch.bool and not value.is_complex()
    elif isinstance(value, np.ndarray):
        number = value.size == 1 and value.dtype.kind in "iuf"
    else:
        number = isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_)
    if not number:
        raise ValueError(
            f"{name}: must be {requirement}, got {value!r} ({type(value).__name__}; booleans "
            "and strings are not numbers here)"
        )
    scalar = value.item() if isinstance(value, torch.Tensor | np.ndarray) else value
    try:
        return float(scalar)  # type: ignore[arg-type]
    except OverflowError:  # an integer past the float range
        return math.inf


def _zero_dim(value: object) -> bool:
    return isinstance(value, torch.Tensor | np.ndarray) and value.ndim == 0


def check_positive(name: str, value: float) -> float:
    """Require a finite real ``value > 0`` (not a bool, not a string)."""
    value = _real(name, value, "a finite number > 0")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}: must be a finite number > 0, got {value}")
    return value


def check_nonnegative(name: str, value: float) -> float:
    """Require a finite real ``value >= 0`` (not a bool, not a string)."""
    value = _real(name, value, "a finite number >= 0")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name}: must be a finite number >= 0, got {value}")
    return value


def check_positive_int(name: str, value: int) -> int:
    """Require an integer ``value >= 1`` (an integral float such as ``2.0`` is accepted; a bool
    or a string is not)."""
    number = _real(name, value, "an integer >= 1")
    if not math.isfinite(number) or int(value) != value or int(value) < 1:
        raise ValueError(f"{name}: must be an integer >= 1, got {value!r}")
    return int(value)


def check_flag(name: str, value: bool) -> bool:
    """Require a bool (``True``/``False``, or numpy's): ``"no"`` or ``0`` is not a flag."""
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"{name}: must be True or False, got {value!r} ({type(value).__name__})")
    return bool(value)


SEED_LIMIT = 2**63


def check_seed(name: str, value: int) -> int:
    """Require an integer seed in ``[0, 2**63)`` (what ``torch.Generator.manual_seed`` and a
    SQLite INTEGER both hold)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{name}: must be an integer in [0, 2**63), got {value!r}")
    if not 0 <= int(value) < SEED_LIMIT:
        raise ValueError(
            f"{name}: must be an integer in [0, 2**63), got {int(value)}: out of range (seeds go "
            f"from 0 to 2**63 - 1 = {SEED_LIMIT - 1}; the results store keeps them as 64-bit "
            "integers)"
        )
    return int(value)


def check_choice(name: str, value: str, choices: Iterable[str]) -> str:
    """Require ``value`` to be one of ``choices``; the error lists the valid names."""
    options = list(choices)
    if value not in options:
        raise ValueError(f"{name}: unknown value {value!r}; valid names are {', '.join(options)}")
    return value


def per_step(name: str, value: float | Sequence[float], steps: int) -> list[float]:
    """One value per step: a scalar is repeated ``steps`` times; a sequence has that length.
    Every value is a real number (not a bool, not a string: ``ValueError`` naming ``name``)."""
    steps = check_positive_int("steps", steps)
    if isinstance(value, str | bytes) or not isinstance(value, Iterable) or _zero_dim(value):
        values = [_real(name, value, "a number or one number per step")] * steps
    else:
        values = [_real(name, v, "a number or one number per step") for v in value]
    if len(values) != steps:
        raise ValueError(f"{name}: expected {steps} values (one per step), got {len(values)}")
    return values
