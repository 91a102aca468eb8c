"""Trainable attention models (linear, softmax; heads; depth) and their checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from attnreg.checkpoints import load_checkpoint, save_checkpoint
from attnreg.models.lsa import VARIANTS, TokenModel, TrainableLSA, gd_products
from attnreg.models.regressors import AttentionRegression, TrainableOLSTransformer
from attnreg.models.softmax import SoftmaxAttention

MODELS: dict[str, Any] = {"lsa": TrainableLSA, "softmax": SoftmaxAttention}


def save_model(path: str | Path, model: TokenModel, meta: dict[str, Any] | None = None) -> Path:
    """Save a trainable model's weights and constructor arguments (plus any JSON-like
    ``meta``, e.g. the task setup and training summary) as an attnreg checkpoint."""
    info = {"model": model.kind, "spec": model.spec(), "dtype": str(next(model.parameters()).dtype)}
    info.update(meta or {})
    return save_checkpoint(path, model.state_dict(), info)


def load_model(path: str | Path) -> tuple[TokenModel, dict[str, Any]]:
    """Rebuild a model saved by :func:`save_model` (``torch.load(weights_only=True)``); returns
    ``(model, meta)``. A file that is not an attnreg model checkpoint is a ``ValueError``."""
    ckpt = load_checkpoint(path)
    kind = ckpt.meta.get("model")
    if kind not in MODELS or not isinstance(ckpt.meta.get("spec"), dict):
        raise ValueError(
            f"checkpoint: {str(path)!r} holds no attnreg model (model = {kind!r}; "
            f"valid: {', '.join(MODELS)})"
        )
    dtype = getattr(torch, str(ckpt.meta.get("dtype", "torch.float32")).split(".")[-1])
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"checkpoint: {str(path)!r} has an unknown dtype")
    try:
        model = MODELS[kind](**ckpt.meta["spec"], dtype=dtype)
        model.load_state_dict(ckpt.state)
    except (TypeError, RuntimeError) as exc:
        raise ValueError(f"checkpoint: {str(path)!r} does not fit model {kind!r}: {exc}") from exc
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
