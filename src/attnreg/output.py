"""Writing a study's results: tidy rows as CSV/JSON, figures as PNG + SVG."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item") and callable(value.item):
        return _clean(value.item())
    return value


def strict_json(value: Any) -> Any:
    """``value`` with every non-finite float, at any depth of its dicts and lists, as ``None``
    (and numpy/torch scalars as numbers): what strict JSON, which has no NaN, can hold."""
    if isinstance(value, Mapping):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict_json(v) for v in value]
    return _clean(value)


def rows_to_json(rows: Iterable[Mapping[str, Any]]) -> str:
    """A JSON list of objects (NaN/Inf become null, numpy/torch scalars become numbers)."""
    return json.dumps([{k: _clean(v) for k, v in row.items()} for row in rows], indent=2)


def write_csv(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Write tidy rows to ``path`` (columns: the union of keys, in first-seen order)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _clean(v) for k, v in row.items()})
    return path


def new_figure(
    nrows: int = 1,
    ncols: int = 1,
    *,
    figsize: tuple[float, float],
    layout: Literal["constrained", "compressed", "tight"] | None = None,
    **subplots: Any,
) -> tuple[Figure, Any]:
    """A figure and its axes, as ``matplotlib.pyplot.subplots`` gives them (``subplots`` goes
    to :meth:`Figure.subplots`: ``squeeze``, ``sharey``, ``gridspec_kw``, …), but a plain
    :class:`~matplotlib.figure.Figure` that pyplot does not track: making and saving it needs
    no backend and changes none (a notebook keeps its inline backend), and it is freed when
    no longer referenced."""
    from matplotlib.figure import Figure  # matplotlib: only when a figure is made

    fig = Figure(figsize=figsize, layout=layout)
    return fig, fig.subplots(nrows, ncols, **subplots)


def save_figure(fig: Figure, out_dir: str | Path, stem: str) -> list[Path]:
    """Save ``fig`` as ``out_dir/stem.png`` (150 dpi) and ``out_dir/stem.svg``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.png", out / f"{stem}.svg"]
    fig.savefig(paths[0], dpi=150, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight")
    return paths
