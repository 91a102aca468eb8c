"""Study configs: dataclasses with a default for every field, loadable from YAML or JSON.

An unknown key or a value of the wrong type is an error naming the key; nothing runs. Every
study config checks its values when it is built (its ``__post_init__`` calls
:func:`check_fields`, then its own range checks), so the command line, a sweep file and the
report's overrides are refused the same way, before anything runs. YAML is read with
:func:`read_yaml` (``yaml.safe_load`` rules, plus ``1e-3`` read as a number).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


class _Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that also reads ``1e-3`` / ``2E5`` as floats (YAML 1.2; YAML 1.1
    wants a dot in the mantissa, so ``safe_load`` gives the string ``'1e-3'``)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def read_yaml(text: str) -> Any:
    """Parse YAML ``text`` safely (no Python tags: ``yaml.YAMLError``), numbers in exponent form
    such as ``1e-3`` included."""
    return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: safe


def _check_type(key: str, value: Any, annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            try:
                return _check_type(key, value, arg)
            except ValueError:
                continue
        raise ValueError(f"config key {key!r}: {value!r} is not of type {annotation}")
    if annotation is type(None):
        if value is None:
            return None
        raise ValueError(f"config key {key!r}: expected null, got {value!r}")
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise ValueError(f"config key {key!r}: expected a list, got {value!r}")
        inner = args[0] if args else Any
        items = [_check_type(key, v, inner) for v in value]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ValueError(f"config key {key!r}: expected a mapping, got {value!r}")
        key_type, value_type = args or (Any, Any)
        return {
            _check_type(key, k, key_type): _check_type(f"{key}[{k!r}]", v, value_type)
            for k, v in value.items()
        }
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"config key {key!r}: expected a number, got {value!r}")
        if not math.isfinite(value):
            raise ValueError(f"config key {key!r}: must be a finite number, got {value!r}")
        return float(value)
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"config key {key!r}: expected an integer, got {value!r}")
        return value
    if annotation in (str, bool):
        if not isinstance(value, annotation):
            raise ValueError(f"config key {key!r}: expected {annotation.__name__}, got {value!r}")
        return value
    return value


def config_from_dict(cls: type[T], data: dict[str, Any]) -> T:
    """Build the dataclass ``cls`` from ``data``; an unknown key, a wrong type or a value its
    ``__post_init__`` refuses is a ``ValueError`` naming the key."""
    if not isinstance(data, dict):
        raise ValueError(f"config: expected a mapping of keys to values, got {type(data).__name__}")
    assert dataclasses.is_dataclass(cls)
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - fields)
    if unknown:
        raise ValueError(
            f"config: unknown key {unknown[0]!r} for {cls.__name__}; valid keys are "
            f"{', '.join(sorted(fields))}"
        )
    values = {key: _check_type(key, value, hints[key]) for key, value in data.items()}
    return cls(**values)


def check_fields(config: Any) -> None:
    """Check every field of the dataclass instance ``config`` against its annotation (the
    rules of :func:`config_from_dict`; every float finite, in lists and mappings too), and a
    ``threads`` or ``…workers`` field against the cores this process may use
    (:func:`attnreg.core.threads.check_count`): a ``ValueError`` naming the key. The first
    check of every study config's ``__post_init__``."""
    hints = typing.get_type_hints(type(config))
    for f in dataclasses.fields(config):
        _check_type(f.name, getattr(config, f.name), hints[f.name])
        value = getattr(config, f.name)
        # a study's torch threads and worker processes: at most the usable cores (0: automatic)
        workers = f.name.endswith("workers")
        if (f.name == "threads" or workers) and not (f.name == "workers" and value == 0):
            from attnreg.core.threads import check_count

            check_count(f.name, value, "worker processes" if workers else "threads")


def check_device(name: str, device: str) -> str:
    """A torch device this machine can use: ``cpu``, or ``cuda`` / ``mps`` where available;
    else a ``ValueError`` naming ``name`` and the value."""
    import torch

    try:
        kind = torch.device(device).type
    except RuntimeError as exc:
        raise ValueError(f"{name}: {device!r} is not a torch device ({exc})") from exc
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{name}: {device!r} is not available (this torch has no usable CUDA)")
    if kind == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"{name}: {device!r} is not available (no MPS here)")
    if kind not in ("cpu", "cuda", "mps"):
        raise ValueError(f"{name}: {device!r} is not supported; use cpu, cuda or mps")
    return device


def read_config_file(path: Path, name: str = "--config") -> dict[str, Any]:
    """The mapping in a YAML (:func:`read_yaml`) or JSON (``.json``) file; else a one-line
    ``ValueError`` that starts with ``name`` and the path (missing, not UTF-8 text, malformed,
    or not a mapping)."""
    where = f"{name} {str(path)!r}"
    if not path.is_file():
        raise ValueError(f"{where}: no such file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{where}: not a UTF-8 text file (byte {exc.start}); expected YAML or JSON"
        ) from exc
    try:
        data = json.loads(text) if path.suffix == ".json" else read_yaml(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: invalid JSON ({exc})") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ValueError(f"{where}: invalid YAML{line} ({problem})") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{where}: must hold a mapping of config keys to values")
    return data


def config_to_dict(config: Any) -> dict[str, Any]:
    """A plain, JSON-ready dict of a config dataclass."""
    return dataclasses.asdict(config)
