"""One input-validation module, used by every data-taking function of attnreg.

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
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch

from attnreg.core.scaling import underflow_error, underflowed, unit_scale

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


def result_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """The widest floating dtype among ``tensors`` (float64 wins over float32)."""
    dtypes = [t.dtype for t in tensors]
    return torch.float64 if torch.float64 in dtypes else dtypes[0]


def check_tasks(
    x_ctx: ArrayLike,
    y_ctx: ArrayLike,
    x_query: ArrayLike,
    *,
    dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple[int, ...]]:
    """Validate the one signature ``predict(x_ctx, y_ctx, x_query)`` and batch it.

    Accepts unbatched ``(N, d), (N,) | (N, dy), (M, d)`` or batched ``(B, N, d), (B, N, dy),
    (B, M, d)``. Returns float tensors of shape ``(B, N, d), (B, N, dy), (B, M, d)`` in a common
    dtype, and the output shape the caller should reshape predictions ``(B, M, dy)`` to.
    """
    xc = as_tensor("x_ctx", x_ctx, ndim=(2, 3), allow_empty=True)
    yc = as_tensor("y_ctx", y_ctx, ndim=(1, 2, 3), allow_empty=True)
    xq = as_tensor("x_query", x_query, ndim=(2, 3), allow_empty=True)
    if xc.ndim != xq.ndim:
        raise ValueError(
            f"x_ctx and x_query must both be batched or both unbatched: "
            f"x_ctx shape {tuple(xc.shape)}, x_query shape {tuple(xq.shape)}"
        )
    shapes = {"x_ctx": tuple(xc.shape), "y_ctx": tuple(yc.shape), "x_query": tuple(xq.shape)}
    batched = xc.ndim == 3
    vector_y = yc.ndim == xc.ndim - 1
    if not vector_y and yc.ndim != xc.ndim:
        raise ValueError(
            f"y_ctx rank does not fit x_ctx: x_ctx shape {tuple(xc.shape)}, "
            f"y_ctx shape {tuple(yc.shape)}"
        )
    if vector_y:
        yc = yc.unsqueeze(-1)
    if not batched:
        xc, yc, xq = xc.unsqueeze(0), yc.unsqueeze(0), xq.unsqueeze(0)
    if xc.shape[0] == 0:
        raise ValueError(f"x_ctx: empty batch (B = 0 tasks), shape {shapes['x_ctx']}")
    if xc.shape[1] == 0:
        raise ValueError(f"x_ctx: empty context (N = 0), shape {shapes['x_ctx']}")
    if xc.shape[2] == 0:
        raise ValueError(f"x_ctx: zero features (d = 0), shape {shapes['x_ctx']}")
    if yc.shape[-1] == 0:
        raise ValueError(f"y_ctx: zero targets (dy = 0), shape {shapes['y_ctx']}")
    if yc.shape[:2] != xc.shape[:2]:
        raise ValueError(
            f"x_ctx and y_ctx disagree on (batch, N): x_ctx shape {shapes['x_ctx']}, "
            f"y_ctx shape {shapes['y_ctx']}"
        )
    if xq.shape[0] != xc.shape[0] or xq.shape[2] != xc.shape[2]:
        raise ValueError(
            f"x_query does not fit x_ctx (batch and d must agree): x_ctx shape "
            f"{shapes['x_ctx']}, x_query shape {shapes['x_query']}"
        )
    common = dtype or result_dtype(xc, yc, xq)
    xc, yc, xq = xc.to(common), yc.to(common), xq.to(common)
    m = xq.shape[1]
    out_shape: tuple[int, ...] = (m,) if vector_y else (m, yc.shape[-1])
    if batched:
        out_shape = (xc.shape[0], *out_shape)
    return xc, yc, xq, out_shape


def check_model_tasks(
    x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike, d: int, dy: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple[int, ...]]:
    """:func:`check_tasks` for a model built for ``d`` features and ``dy`` targets: a
    ``ValueError`` stating both shapes and the model's widths when they do not fit."""
    xc, yc, xq, shape = check_tasks(x_ctx, y_ctx, x_query)
    if xc.shape[2] != d or yc.shape[2] != dy:
        raise ValueError(
            f"x_ctx/y_ctx shapes {tuple(xc.shape)}/{tuple(yc.shape)} do not fit this model "
            f"(d = {d}, dy = {dy})"
        )
    return xc, yc, xq, shape


def check_finite_result(
    out: torch.Tensor, name: str = "predict", largest: torch.Tensor | None = None
) -> torch.Tensor:
    """Return ``out`` if every entry is finite; else a ``ValueError``: the inputs were finite
    (they are checked on entry), so the computation overflowed at this input scale.
    ``largest``: the largest ``|out|`` per task (NaN where a task has a NaN), when the
    computation produced it (a fused kernel does, while writing ``out``): then ``out`` is not
    read again."""
    if largest is not None:
        finite = bool(torch.isfinite(largest).all())
    else:
        finite = not out.numel() or math.isfinite(float(out.detach().sum()))
    if not finite:
        if not bool(torch.isfinite(out).all()):
            raise ValueError(
                f"{name}: the result overflowed (inf/NaN) although the inputs are finite: the "
                "inputs or parameters are too large for this computation in "
                f"{str(out.dtype).removeprefix('torch.')}; rescale the inputs"
            )
    return out


def check_underflow(
    out: torch.Tensor,
    compute: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    x_ctx: torch.Tensor,
    y_ctx: torch.Tensor,
    x_query: torch.Tensor,
    name: str = "predict",
    cause: str = "the inputs are too small for this computation",
) -> torch.Tensor:
    """Return ``out`` (``(B, M, dy)``) unless a task's answer underflowed; else ``ValueError``
    naming ``name`` and ``cause`` and asking to rescale the inputs.

    A task underflowed when every entry of its answer is zero or subnormal while ``compute``
    (the same prediction, on checked batched tensors) on its inputs rescaled by powers of two to
    unit magnitude has a normal entry: the answer is not zero, it is below the floating range
    at this input scale (e.g. one GD step, ``(η/N) x* XᵀY``, is of order ``s³`` for inputs of
    magnitude ``s = 1e-300``). A genuinely zero answer (``y = 0``, queries orthogonal to the
    context) is zero at unit scale too and is returned. ``compute`` runs only when some task's
    answer is entirely zero or subnormal. Sequence-layer inputs ``(B, H, T, d)`` are rescaled
    per batch element and head, and a task is a batch element.
    """
    if out.numel() == 0:
        return out
    tiny = torch.finfo(out.dtype).tiny
    # the largest magnitude of each task's answer (amax of |out|: 4x faster than comparing
    # every |entry| with tiny, 8x faster than vector_norm(ord=inf), measured at P8's size)
    largest = out.detach().flatten(1).abs().amax(dim=1)
    if not bool((largest < tiny).any()):
        return out
    with torch.no_grad():
        unit = compute(
            x_ctx / unit_scale(x_ctx), y_ctx / unit_scale(y_ctx), x_query / unit_scale(x_query)
        )
    bad = underflowed(out, unit)
    if bool(bad.any()):
        raise underflow_error(name, int(bad.nonzero()[0, 0]), out.dtype, cause)
    return out


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
