"""Study configs: dataclasses with a default for every field, loadable from YAML or JSON.

An unknown key or a value of the wrong type is an error naming the key; nothing runs.
YAML is read with ``yaml.safe_load`` only.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


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
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"config key {key!r}: expected a number, got {value!r}")
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
    """Build the dataclass ``cls`` from ``data``; an unknown key or a wrong type is a ValueError."""
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


def load_config(cls: type[T], path: str | Path) -> T:
    """Read a YAML (``safe_load``) or JSON file into the config dataclass ``cls``."""
    text = Path(path).read_text()
    data = json.loads(text) if str(path).endswith(".json") else yaml.safe_load(text)
    return config_from_dict(cls, data or {})


def config_to_dict(config: Any) -> dict[str, Any]:
    """A plain, JSON-ready dict of a config dataclass."""
    return dataclasses.asdict(config)
