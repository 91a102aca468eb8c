"""Trainable attention models (linear, softmax; heads; depth) and their checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from attnreg.checkpoints import load_checkpoint, save_checkpoint
from attnreg.models.lsa import VARIANTS, TrainableLSA, gd_products
from attnreg.models.regressors import AttentionRegression, TrainableOLSTransformer
from attnreg.models.softmax import SoftmaxAttention
from attnreg.models.token import TokenModel

MODELS: dict[str, Any] = {"lsa": TrainableLSA, "softmax": SoftmaxAttention}


def save_model(path: str | Path, model: TokenModel, meta: dict[str, Any] | None = None) -> Path:
    """Save a trainable model's weights and constructor arguments (plus any JSON-like
    ``meta``, e.g. the task setup and training summary) as an attnreg checkpoint."""
    info = {"model": model.kind, "spec": model.spec(), "dtype": str(next(model.parameters()).dtype)}
    info.update(meta or {})
    return save_checkpoint(path, model.state_dict(), info)


def load_model(path: str | Path) -> tuple[TokenModel, dict[str, Any]]:
    """Rebuild a model saved by :func:`save_model` (``torch.load(weights_only=True)``); returns
    ``(model, meta)``. A file that is not an attnreg model checkpoint is a ``ValueError``.

    The model is built in the checkpoint's ``dtype`` (float16 and bfloat16 included) and holds
    the stored tensors bit for bit: a checkpoint whose tensors are in another dtype than its
    ``dtype`` entry (loading would round or silently change them) is a ``ValueError`` naming
    ``checkpoint``, never a silent conversion."""
    ckpt = load_checkpoint(path)
    kind = ckpt.meta.get("model")
    if kind not in MODELS or not isinstance(ckpt.meta.get("spec"), dict):
        raise ValueError(
            f"checkpoint: {str(path)!r} holds no attnreg model (model = {kind!r}; "
            f"valid: {', '.join(MODELS)})"
        )
    name = str(ckpt.meta.get("dtype", "torch.float32"))
    dtype = getattr(torch, name.split(".")[-1], None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"checkpoint: {str(path)!r} has an unknown dtype {name!r}")
    for key, value in ckpt.state.items():
        if value.is_floating_point() and value.dtype != dtype:
            raise ValueError(
                f"checkpoint: {str(path)!r} entry {key!r} is stored in {value.dtype} but the "
                f"checkpoint's dtype is {dtype}; refusing to convert (it would not be the "
                "saved model)"
            )
    try:
        model = MODELS[kind](**ckpt.meta["spec"], dtype=dtype)
        model.load_state_dict(ckpt.state)
    except (TypeError, RuntimeError) as exc:
        raise ValueError(f"checkpoint: {str(path)!r} does not fit model {kind!r}: {exc}") from exc
    loaded = model.state_dict()
    for key, value in ckpt.state.items():
        got = loaded[key]
        same = got.dtype == value.dtype and (
            torch.equal(got, value)
            or (value.is_floating_point() and torch.allclose(got, value, 0, 0, equal_nan=True))
        )
        if not same:
            raise ValueError(
                f"checkpoint: {str(path)!r} entry {key!r} does not load exactly in dtype "
                f"{value.dtype} into model {kind!r}"
            )
    return model, ckpt.meta


__all__ = [
    "MODELS",
    "VARIANTS",
    "AttentionRegression",
    "SoftmaxAttention",
    "TokenModel",
    "TrainableLSA",
    "TrainableOLSTransformer",
    "gd_products",
    "load_model",
    "save_model",
]
