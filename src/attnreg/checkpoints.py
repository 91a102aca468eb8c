"""Checkpoints: a dict of tensors plus JSON-like metadata, read back with
``torch.load(weights_only=True)`` (no pickle of arbitrary objects ever runs). A file that is not
an attnreg checkpoint is a ``ValueError`` naming ``checkpoint``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

CHECKPOINT_FORMAT = "attnreg-checkpoint"
CHECKPOINT_VERSION = 1


def _check_meta(meta: Any, path: str) -> None:
    ok = isinstance(meta, dict | list | str | int | float | bool) or meta is None
    if not ok:
        raise ValueError(f"meta: value at {path!r} is not JSON-like ({type(meta).__name__})")
    if isinstance(meta, dict):
        for key, value in meta.items():
            if not isinstance(key, str):
                raise ValueError(f"meta: key {key!r} at {path!r} is not a string")
            _check_meta(value, f"{path}.{key}")
    elif isinstance(meta, list):
        for i, value in enumerate(meta):
            _check_meta(value, f"{path}[{i}]")


@dataclass
class Checkpoint:
    """A loaded checkpoint: ``state`` (name → tensor) and ``meta`` (JSON-like dict)."""

    state: dict[str, torch.Tensor]
    meta: dict[str, Any]


def save_checkpoint(
    path: str | Path, state: dict[str, torch.Tensor], meta: dict[str, Any] | None = None
) -> Path:
    """Write ``state`` (tensors, e.g. ``model.state_dict()``) and ``meta`` (plain JSON-like
    values: what model, its constructor arguments, training summary) to ``path``; the file is
    readable with ``torch.load(weights_only=True)``. Written atomically (temp file + rename)."""
    path = Path(path)
    for key, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"state: {key!r} is not a tensor ({type(value).__name__})")
    meta = dict(meta or {})
    _check_meta(meta, "meta")
    payload = {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "state": {k: v.detach().cpu().clone() for k, v in state.items()},
        "meta": meta,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    tmp.replace(path)
    return path


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> Checkpoint:
    """Read a checkpoint written by :func:`save_checkpoint` with ``torch.load(weights_only=True)``.

    Raises ``ValueError`` naming ``checkpoint`` if the file is missing, unreadable, or not an
    attnreg checkpoint (no arbitrary pickle is ever executed).
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"checkpoint: no such file {str(path)!r}")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:
        raise ValueError(
            f"checkpoint: {str(path)!r} is not an attnreg checkpoint (torch.load with "
            f"weights_only=True refused it: {type(exc).__name__})"
        ) from exc
    if (
        not isinstance(payload, dict)
        or payload.get("format") != CHECKPOINT_FORMAT
        or not isinstance(payload.get("state"), dict)
        or not isinstance(payload.get("meta"), dict)
    ):
        raise ValueError(f"checkpoint: {str(path)!r} is not an attnreg checkpoint")
    if payload.get("version") != CHECKPOINT_VERSION:
        raise ValueError(
            f"checkpoint: {str(path)!r} has format version {payload.get('version')!r}; "
            f"this attnreg reads version {CHECKPOINT_VERSION}"
        )
    state = payload["state"]
    for key, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"checkpoint: {str(path)!r} entry {key!r} is not a tensor")
    return Checkpoint(state=state, meta=payload["meta"])
