"""Checkpoints: a dict of tensors, JSON-like metadata and an optional tree of tensors and plain
values (e.g. an optimizer's ``state_dict``), read back with ``torch.load(weights_only=True)`` (no
pickle of arbitrary objects ever runs). A file that is not an attnreg checkpoint is a
``ValueError`` naming ``checkpoint``.

File layout (version 1): ``{"format", "version", "state": {str: Tensor}, "meta": JSON-like}``,
plus ``"extra"`` (a dict, see :func:`save_checkpoint`) when one was given."""

from __future__ import annotations

from dataclasses import dataclass, field
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


def _check_tree(value: Any, path: str) -> Any:
    """``value`` with its tensors detached and on the CPU, or ``ValueError`` naming ``path`` if
    it holds anything but dicts (str/int keys), lists, tuples, tensors, str, int, float, bool
    and None: what ``torch.load(weights_only=True)`` reads back."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str | int) or isinstance(key, bool):
                raise ValueError(f"extra: key {key!r} at {path!r} is not a string or an int")
            out[key] = _check_tree(item, f"{path}.{key}")
        return out
    if isinstance(value, list | tuple):
        items = [_check_tree(item, f"{path}[{i}]") for i, item in enumerate(value)]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    raise ValueError(
        f"extra: value at {path!r} is a {type(value).__name__} (allowed: dict, list, tuple, "
        "tensor, str, int, float, bool, None)"
    )


@dataclass
class Checkpoint:
    """A loaded checkpoint: ``state`` (name → tensor), ``meta`` (JSON-like dict) and ``extra``
    (the tree given to :func:`save_checkpoint`; ``{}`` when none was)."""

    state: dict[str, torch.Tensor]
    meta: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)


def save_checkpoint(
    path: str | Path,
    state: dict[str, torch.Tensor],
    meta: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write ``state`` (tensors, e.g. ``model.state_dict()``), ``meta`` (plain JSON-like
    values: what model, its constructor arguments, training summary) and ``extra`` to ``path``;
    the file is readable with ``torch.load(weights_only=True)``. Written atomically (temp file
    + rename), so a process killed while writing leaves the previous checkpoint intact.

    ``extra`` is a dict whose values nest dicts (string or int keys), lists, tuples, tensors and
    str/int/float/bool/None, such as ``optimizer.state_dict()`` or ``torch.get_rng_state()``;
    it is read back as saved (tensors on the CPU), types included. Anything else is a
    ``ValueError`` naming ``state``, ``meta`` or ``extra``.
    """
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
    if extra is not None:
        if not isinstance(extra, dict):
            raise ValueError(f"extra: expected a dict, got {type(extra).__name__}")
        payload["extra"] = _check_tree(extra, "extra")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    tmp.replace(path)
    return path


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> Checkpoint:
    """Read a checkpoint written by :func:`save_checkpoint` with ``torch.load(weights_only=True)``
    (``state``, ``meta`` and ``extra``; files without ``extra`` read it as ``{}``).

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
    extra = payload.get("extra", {})
    if not isinstance(extra, dict):
        raise ValueError(f"checkpoint: {str(path)!r} has an 'extra' entry that is not a dict")
    return Checkpoint(state=state, meta=payload["meta"], extra=extra)
