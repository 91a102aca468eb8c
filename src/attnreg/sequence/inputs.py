"""Input checks shared by the sequence layers: ``q, k, v`` and the per-token parameters.

``q (B, H, T, d_k)``, ``k (B, H, T, d_k)``, ``v (B, H, T, d_v)``, torch or numpy, float32 or
float64 (integers become float64; float16 / bfloat16 are refused by
:func:`attnreg.core.validation.as_tensor`). A per-token parameter (``beta``, ``decay``) is a
number, a per-head constant ``(H,)``, or one value per token ``(B, H, T)``; it is returned as a
``(B, H, T)`` tensor (a broadcast view) in the common dtype.
"""

from __future__ import annotations

import numpy as np
import torch

from attnreg.core.tasks import result_dtype
from attnreg.core.validation import ArrayLike, as_tensor, check_choice, check_finite

MODES = ("auto", "fused", "chunk", "recurrent")


def _parameter(name: str, value: float | ArrayLike, ndim: tuple[int, ...]) -> torch.Tensor:
    """``value`` checked by :func:`as_tensor`; a plain number (a 0-d array or tensor too) stays
    a 0-d tensor. A bool, a string or ``None`` is refused, naming ``name``."""
    if value is None or isinstance(value, bool | np.bool_ | str | bytes):
        raise ValueError(f"{name}: must be a number or an array of numbers, got {value!r}")
    if isinstance(value, torch.Tensor) and value.dtype == torch.bool:
        raise ValueError(f"{name}: must be numeric, got a bool tensor")
    if isinstance(value, np.ndarray) and value.dtype.kind == "b":
        raise ValueError(f"{name}: must be numeric, got a bool array")
    if isinstance(value, int | float | np.number) or (
        isinstance(value, np.ndarray) and value.ndim == 0
    ):
        value = torch.tensor(float(value), dtype=torch.float64)
    return as_tensor(name, value, ndim=ndim)


def check_qkv(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, *, finite: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Validated ``q, k, v`` in one dtype (the widest of the three), with agreeing shapes;
    ``finite=False`` leaves their finiteness to the caller (:func:`check_qkv_for`)."""
    qt = as_tensor("q", q, ndim=(4,), finite=finite)
    kt = as_tensor("k", k, ndim=(4,), finite=finite)
    vt = as_tensor("v", v, ndim=(4,), finite=finite)
    if qt.shape != kt.shape:
        raise ValueError(
            f"q and k must have the same shape (B, H, T, d_k): q {tuple(qt.shape)}, "
            f"k {tuple(kt.shape)}"
        )
    if vt.shape[:3] != kt.shape[:3]:
        raise ValueError(
            f"v must agree with k on (B, H, T): k {tuple(kt.shape)}, v {tuple(vt.shape)}"
        )
    dtype = result_dtype(qt, kt, vt)
    return qt.to(dtype), kt.to(dtype), vt.to(dtype)


def check_qkv_for(
    mode: str, q: ArrayLike, k: ArrayLike, v: ArrayLike
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, str]:
    """:func:`check_qkv` and the form :func:`choose_mode` picks for a layer with a fused form.
    For the fused form the finiteness of ``q, k, v`` is checked after the kernel, only when its
    output is not finite (:func:`check_finite_qkv`): a NaN or ±Inf entry of ``q``, ``k`` or
    ``v`` always reaches the output of its token (``0 · NaN``, ``0 · Inf`` and ``Inf − Inf``
    are NaN), so a finite output proves finite inputs and three passes over them are saved."""
    qt, kt, vt = check_qkv(q, k, v, finite=False)
    form = choose_mode(mode, kt)
    if form != "fused":
        check_finite_qkv(qt, kt, vt)
    return qt, kt, vt, form


def check_finite_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """A ``ValueError`` naming ``q``, ``k`` or ``v`` and the first NaN/Inf index, if any."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_finite(name, x)


def key_shaped(name: str, value: ArrayLike, like: torch.Tensor) -> torch.Tensor:
    """An input with the keys' shape (``a``, ``b``; Comba's ``p``): a finite ``(B, H, T, d_k)``
    array, ``like``'s shape, in its dtype; otherwise a ``ValueError`` naming ``name``."""
    tensor = as_tensor(name, value, ndim=(4,))
    if tensor.shape != like.shape:
        raise ValueError(
            f"{name}: must have the keys' shape (B, H, T, d_k) = {tuple(like.shape)}, "
            f"got {tuple(tensor.shape)}"
        )
    return tensor.to(like.dtype)


def per_token(
    name: str,
    value: float | ArrayLike,
    like: torch.Tensor,
    *,
    low: float,
    high: float = float("inf"),
    open_low: bool = False,
    channels: bool = False,
) -> torch.Tensor:
    """``value`` as a ``(B, H, T)`` tensor for ``like`` of shape ``(B, H, T, ·)``; every entry
    must lie in ``[low, high]`` (``(low, high]`` with ``open_low``). ``channels``: a
    ``(B, H, T, d_k)`` value (one per key channel, ``like``'s shape) is kept as it is."""
    b, h, t = like.shape[:3]
    wide = _parameter(name, value, (0, 1, 3, 4) if channels else (0, 1, 3))
    tensor = wide.to(like.dtype)
    lost = (wide != 0) & (tensor == 0)
    if bool(lost.any()):
        tiny = float(wide[lost].abs().max())
        raise ValueError(
            f"{name}: {tiny:g} underflows to 0 in {like.dtype} (the inputs' dtype); use "
            f"float64 inputs or a value of at least {torch.finfo(like.dtype).tiny:g}"
        )
    if tensor.ndim == 1 and tensor.shape[0] != h:
        raise ValueError(
            f"{name}: a per-head value must have shape (H,) = ({h},), got {tuple(tensor.shape)}"
        )
    if tensor.ndim == 3 and tuple(tensor.shape) != (b, h, t):
        raise ValueError(
            f"{name}: a per-token value must have shape (B, H, T) = {(b, h, t)}, "
            f"got {tuple(tensor.shape)}"
        )
    if tensor.ndim == 4 and tensor.shape != like.shape:
        raise ValueError(
            f"{name}: a per-channel value must have shape (B, H, T, d_k) = "
            f"{tuple(like.shape)}, got {tuple(tensor.shape)}"
        )
    below = tensor <= low if open_low else tensor < low
    if bool(below.any()) or bool((tensor > high).any()):
        left = "(" if open_low else "["
        raise ValueError(f"{name}: every value must lie in {left}{low:g}, {high:g}]")
    if tensor.ndim == 4:
        return tensor
    if tensor.ndim == 1:
        tensor = tensor.view(1, h, 1)
    return tensor.expand(b, h, t)


def check_lam_values(lam: float | ArrayLike) -> torch.Tensor:
    """The ridge ``λ > 0``, a number or ``(H, d_k)``, checked without a shape to match (e.g. at a
    module's construction): a float64 tensor, every value > 0."""
    tensor = _parameter("lam", lam, (0, 2))
    if bool((tensor <= 0).any()):
        raise ValueError("lam: every value must be > 0 (the ridge keeps each solve well posed)")
    return tensor


def check_lam(lam: float | ArrayLike, like: torch.Tensor) -> torch.Tensor:
    """The ridge ``λ > 0``: a number or one value per head and key coordinate ``(H, d_k)``
    (MesaNet's convention); returned as an ``(H, d_k)`` tensor in ``like``'s dtype."""
    h, d = like.shape[1], like.shape[-1]
    tensor = check_lam_values(lam).to(like.dtype)
    if tensor.ndim == 2 and tuple(tensor.shape) != (h, d):
        raise ValueError(
            f"lam: expected a number or shape (H, d_k) = {(h, d)}, got {tuple(tensor.shape)}"
        )
    if bool((tensor <= 0).any()):
        raise ValueError(f"lam: {lam!r} underflows to 0 in {like.dtype} (the inputs' dtype)")
    return tensor.expand(h, d)


def check_mode(mode: str) -> str:
    """``"auto"``, ``"fused"`` (the compiled token recurrence), ``"chunk"`` (block-parallel
    form) or ``"recurrent"`` (the token-loop reference)."""
    return check_choice("mode", mode, MODES)


FORMS = ("fused", "chunk", "recurrent")
"""Every form a layer may have (``mode`` values besides ``"auto"``)."""


def choose_mode(mode: str, like: torch.Tensor, *, forms: tuple[str, ...] = FORMS) -> str:
    """The form a layer with the forms ``forms`` (its subset of :data:`FORMS`, the token loop
    ``recurrent`` always among them) computes, for ``mode`` and inputs like ``like``:

    ========== ======================== ==========================================
    mode       inputs on the CPU         inputs on an accelerator (e.g. CUDA)
    ========== ======================== ==========================================
    ``auto``   ``fused``; else ``chunk``; ``chunk``; else ``recurrent``
               else ``recurrent``
    ``fused``  ``fused``                 ``ValueError`` (the kernel is CPU code)
    ``chunk``  ``chunk``                 ``chunk``
    ========== ======================== ==========================================

    ``recurrent`` is always itself. A form the layer does not have is a ``ValueError`` naming
    ``mode`` and the layer's forms (Mesa has no fused form: its state update is not diagonal
    plus rank one; most of the 2025 layers have no chunked form yet).
    """
    mode = check_mode(mode)
    cpu = like.device.type == "cpu"
    if mode == "auto":
        if "fused" in forms and cpu:
            return "fused"
        return "chunk" if "chunk" in forms else "recurrent"
    if mode not in forms:
        raise ValueError(
            f"mode: this layer has no {mode} form; its forms are auto, {', '.join(forms)}"
        )
    if mode == "fused" and not cpu:
        raise ValueError(f"mode: 'fused' runs on the CPU only; the inputs are on {like.device}")
    return mode


def check_scale(scale: float) -> float:
    """The query scale: a finite real number (the layers apply no other scaling to the
    queries). A bool, a string, ``None`` or a tensor that requires grad (which a number would
    detach from the graph: scale ``q`` by it instead) is refused, naming ``scale``."""
    if isinstance(scale, torch.Tensor) and scale.requires_grad:
        raise ValueError(
            "scale: a tensor that requires grad would be detached here; multiply q by it and "
            "keep scale=1.0"
        )
    if isinstance(scale, torch.Tensor | np.ndarray) and scale.ndim == 0:
        scale = scale.item()
    if isinstance(scale, bool | np.bool_) or not isinstance(scale, int | float | np.number):
        raise ValueError(f"scale: must be a finite number, got {scale!r}")
    value = float(scale)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"scale: must be a finite number, got {scale!r}")
    return value


def decay_of(
    decay: float | ArrayLike | None, like: torch.Tensor, *, channels: bool = False
) -> torch.Tensor | None:
    """``α_t`` as ``(B, H, T)`` (``None`` without decay), checked in ``(0, 1]``; with
    ``channels`` also ``(B, H, T, d_k)``, one factor per key channel (``S' = Diag(α_t) S``)."""
    if decay is None:
        return None
    return per_token("decay", decay, like, low=0.0, high=1.0, open_low=True, channels=channels)
