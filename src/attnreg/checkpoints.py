"""Checkpoint files: a dict of tensors, JSON-like metadata and an optional tree of tensors and
plain values (e.g. an optimizer's ``state_dict``), read back with
``torch.load(weights_only=True)`` (no pickle of arbitrary objects ever runs). A file that is not
an attnreg checkpoint is a ``ValueError`` naming ``checkpoint``.

File layout (version 1): ``{"format", "version", "state": {str: Tensor}, "meta": JSON-like}``,
plus ``"extra"`` (a dict, see :func:`save_checkpoint`) when one was given.

Training checkpoints (:func:`save_train_state`, :func:`load_train_state`; what
:func:`attnreg.training.train` writes and resumes from) are such files with ``meta`` =
``{"kind": "train-state", "step", "finished", "config", "result"}`` and ``extra`` =
``{"optimizer", "scheduler", "torch_rng", "generators", "best_state"}``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

CHECKPOINT_FORMAT = "attnreg-checkpoint"
CHECKPOINT_VERSION = 1
TRAIN_STATE_KIND = "train-state"


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


@dataclass
class TrainState:
    """A training run's state besides its parameters, optimiser, schedule and random streams:
    the optimiser steps done, whether the run has ended, the record of the config fields that
    fix its numbers (JSON-like; a resumed run must have the same), the progress record
    (JSON-like: losses, evaluations, timings) and the best parameters so far (or ``None``)."""

    step: int
    finished: bool
    config: dict[str, Any]
    progress: dict[str, Any]
    best_state: list[torch.Tensor] | None = None


def save_train_state(
    path: str | Path,
    params: dict[str, torch.Tensor],
    state: TrainState,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None,
    generators: list[torch.Generator],
) -> Path:
    """Write a training checkpoint: ``params`` (name → tensor), ``state``, the optimiser's and
    the scheduler's ``state_dict``, the global torch RNG state and the state of every generator
    (atomically, like :func:`save_checkpoint`)."""
    meta = {
        "kind": TRAIN_STATE_KIND,
        "step": state.step,
        "finished": state.finished,
        "config": state.config,
        "result": state.progress,
    }
    extra = {
        "optimizer": optimizer.state_dict(),
        "scheduler": None if scheduler is None else scheduler.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "generators": [g.get_state() for g in generators],
        "best_state": state.best_state,
    }
    return save_checkpoint(path, params, meta, extra)


def load_train_state(
    path: str | Path,
    params: dict[str, torch.Tensor],
    config: dict[str, Any],
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None,
    generators: list[torch.Generator],
) -> TrainState:
    """Restore a training checkpoint written by :func:`save_train_state` into ``params`` (copied
    in place), ``optimizer``, ``scheduler``, the global torch RNG and ``generators``; return the
    rest as a :class:`TrainState`. A ``ValueError`` naming ``checkpoint`` when the file is not a
    training checkpoint, its config record differs from ``config`` (the differing fields are
    named), or its tensors, generators or optimiser state do not fit these."""
    path = str(path)
    ckpt = load_checkpoint(path)
    meta, extra = ckpt.meta, ckpt.extra
    if meta.get("kind") != TRAIN_STATE_KIND or not isinstance(meta.get("result"), dict):
        raise ValueError(
            f"checkpoint: {path!r} is not a training checkpoint (kind {TRAIN_STATE_KIND!r})"
        )
    if meta.get("config") != config:
        theirs = meta.get("config") or {}
        differ = sorted(k for k in set(theirs) | set(config) if theirs.get(k) != config.get(k))
        raise ValueError(
            f"checkpoint: {path!r} is from a run with another config (differs in "
            f"{', '.join(differ)}); refusing to resume it"
        )
    if len(extra.get("generators", [])) != len(generators):
        raise ValueError(
            f"checkpoint: {path!r} holds {len(extra.get('generators', []))} generator states; "
            f"generators has {len(generators)}"
        )
    if sorted(ckpt.state) != sorted(params):
        raise ValueError(
            f"checkpoint: {path!r} holds tensors {sorted(ckpt.state)}; these parameters are "
            f"{sorted(params)}"
        )
    for key, stored in ckpt.state.items():
        if stored.shape != params[key].shape or stored.dtype != params[key].dtype:
            raise ValueError(
                f"checkpoint: {path!r} entry {key!r} is {stored.dtype} {tuple(stored.shape)}; "
                f"the parameter is {params[key].dtype} {tuple(params[key].shape)}"
            )
    with torch.no_grad():
        for key, stored in ckpt.state.items():
            params[key].copy_(stored)
    try:
        optimizer.load_state_dict(extra["optimizer"])
    except (RuntimeError, ValueError, KeyError) as exc:
        raise ValueError(f"checkpoint: {path!r} does not fit this optimizer: {exc}") from exc
    if scheduler is not None:
        scheduler.load_state_dict(extra["scheduler"])
    torch.set_rng_state(extra["torch_rng"])
    for gen, saved in zip(generators, extra["generators"], strict=True):
        gen.set_state(saved)
    best = extra.get("best_state")
    return TrainState(
        step=int(meta["step"]),
        finished=bool(meta["finished"]),
        config=meta["config"],
        progress=meta["result"],
        best_state=None if best is None else list(best),
    )
