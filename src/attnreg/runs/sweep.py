"""Sweep files: a study, a base config, a grid to cross and seeds, read with ``safe_load``.

```yaml
study: verify            # a study name (attnreg sweep --help lists them)
base: {ridge: 0.5}       # overrides of the study's quick profile
grid:                    # every combination of these lists is one cell per seed
  ridge: [0.1, 1.0]
seeds: [0, 1, 2]          # integers from 0 to 2**63 - 1 (the store's 64-bit INTEGER)
profile: quick           # or full: the defaults the base starts from
figures: false           # store figures (base64 PNG) with each cell
```

Everything is validated before anything runs: every cell's config is built (so an unknown key,
top level, base or grid, a wrong type or a bad value is a ``ValueError`` naming it).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnreg.config import read_config_file
from attnreg.core.validation import check_seed
from attnreg.runs.cells import CellSpec, make_cell

TOP_LEVEL = ("study", "base", "grid", "seeds", "profile", "figures", "name")


@dataclass
class Sweep:
    """A validated sweep: its cells are ready to run."""

    study: str
    cells: list[CellSpec]
    name: str = "sweep"
    figures: bool = False
    grid: dict[str, list[Any]] = field(default_factory=dict)


def parse_sweep(data: Any) -> Sweep:
    """Validate a sweep mapping and expand it into cells (nothing runs)."""
    if not isinstance(data, dict):
        raise ValueError("sweep: expected a mapping with keys " + ", ".join(TOP_LEVEL))
    unknown = sorted(set(data) - set(TOP_LEVEL))
    if unknown:
        raise ValueError(
            f"sweep: unknown key {unknown[0]!r}; valid keys are {', '.join(TOP_LEVEL)}"
        )
    if "study" not in data:
        raise ValueError("sweep: missing key 'study'")
    base = data.get("base") or {}
    grid = data.get("grid") or {}
    seeds = data.get("seeds", [0])
    if not isinstance(base, dict):
        raise ValueError("sweep: 'base' must be a mapping of config keys to values")
    if not isinstance(grid, dict) or any(not isinstance(v, list) or not v for v in grid.values()):
        raise ValueError("sweep: 'grid' must map config keys to non-empty lists")
    if (
        not isinstance(seeds, list)
        or not seeds
        or any(isinstance(s, bool) or not isinstance(s, int) for s in seeds)
    ):
        raise ValueError("sweep: 'seeds' must be a non-empty list of integers")
    for seed in seeds:
        check_seed("sweep: 'seeds'", seed)
    profile = data.get("profile", "quick")
    if profile not in ("quick", "full"):
        raise ValueError(f"sweep: 'profile' must be quick or full, got {profile!r}")
    figures = data.get("figures", False)
    if not isinstance(figures, bool):
        raise ValueError("sweep: 'figures' must be true or false")
    make_cell(str(data["study"]), base, seeds[0], profile)  # the base alone must be valid too
    keys = list(grid)
    cells = []
    for values in itertools.product(*(grid[k] for k in keys)):
        overrides = {**base, **dict(zip(keys, values, strict=True))}
        for seed in seeds:
            cells.append(make_cell(str(data["study"]), overrides, seed, profile))
    return Sweep(str(data["study"]), cells, str(data.get("name", "sweep")), figures, grid)


def load_sweep(path: str | Path) -> Sweep:
    """Read a YAML sweep file (:func:`~attnreg.config.read_config_file`: safe YAML, one-line
    errors) and validate it; every ``ValueError`` starts with ``sweep file`` and the path."""
    data = read_config_file(Path(path), name="sweep file")
    try:
        return parse_sweep(data)
    except ValueError as exc:
        raise ValueError(f"sweep file {str(path)!r}: {exc}") from exc
