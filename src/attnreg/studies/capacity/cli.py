"""``attnreg capacity``: associative-memory capacity from linear to exponential."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import typer
import yaml
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from attnreg.config import config_from_dict
from attnreg.output import rows_to_json
from attnreg.studies.capacity.config import CapacityConfig, full_config, quick_config
from attnreg.studies.capacity.run import json_rows, run
from attnreg.studies.capacity.sweeps import task_count
from attnreg.studies.common import StudyResult


def capacity_command(
    quick: bool = typer.Option(
        False,
        "--quick",
        help="Quick profile (the default): d up to 24 for softmax, 3 seeds; "
        "1-2 minutes on 2 CPU cores.",
    ),
    full: bool = typer.Option(
        False,
        "--full",
        help="Full profile: larger d (softmax up to d = 32, i.e. millions of "
        "memories; Hebbian up to d = 800), 5 seeds, 1000 queries per evaluation; tens of minutes.",
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        help="Directory for the figures (PNG + SVG) and the rows "
        "(capacity_rows.csv, capacity_rows.json).",
    ),
    json_out: bool = typer.Option(
        False,
        "--json",
        help="Print the capacity rows as a JSON list of objects with the keys "
        "model, patterns, query, d, n_max, n_max_theory, epsilon, seeds (instead of tables).",
    ),
    seed: int = typer.Option(
        0,
        "--seed",
        help="First seed; seeds seed .. seed+S-1 are used (same config and seed, same numbers).",
    ),
    seeds: int | None = typer.Option(
        None, "--seeds", help="Number of seeds S averaged over (default: the profile's)."
    ),
    epsilon: float | None = typer.Option(
        None,
        "--epsilon",
        help="Allowed failure rate: N_max is the largest N whose recall "
        "success rate is >= 1 - epsilon (default 0.01).",
    ),
    device: str = typer.Option("cpu", "--device", help="Torch device (cpu, cuda, mps)."),
    config_file: Path | None = typer.Option(
        None,
        "--config",
        help="YAML/JSON file of CapacityConfig fields overriding the profile "
        "(unknown keys are an error).",
    ),
    workers: int | None = typer.Option(
        None,
        "--workers",
        help="Processes for the N_max(d) curves (default: one per torch thread, i.e. the "
        "cores; 1: in this process). The numbers do not depend on it.",
    ),
    no_progress: bool = typer.Option(False, "--no-progress", help="Hide the progress bar."),
) -> None:
    """Measure the capacity N_max(d) of associative memories — pseudo-inverse (regression),
    Hebbian Hopfield, dense associative memories F(x) = x^n, softmax modern Hopfield — by a
    doubling-then-bisection search, with theory curves; and run the Universal Hopfield grid
    (similarity x separation) on scikit-learn's digits and on random patterns."""
    if quick and full:
        raise typer.BadParameter("choose one of --quick and --full", param_hint="--quick")
    base = full_config() if full else quick_config()
    try:
        data: dict[str, Any] = {}
        if config_file is not None:
            text = config_file.read_text()
            data = json.loads(text) if config_file.suffix == ".json" else yaml.safe_load(text)
        config = config_from_dict(CapacityConfig, {**dataclasses.asdict(base), **(data or {})})
        config.seed, config.device = seed, device
        if seeds is not None:
            config.seeds = seeds
        if epsilon is not None:
            config.epsilon = epsilon
        if workers is not None:
            config.workers = workers
        result = _run(config, out, show=not (json_out or no_progress))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if out is not None:
        result.write(out)
    if json_out:
        typer.echo(rows_to_json(json_rows(result)))
        return
    console = Console()
    table = Table(title=f"attnreg capacity (seed {config.seed}, {config.seeds} seeds)")
    for column in ("model", "patterns", "query", "d", "N_max", "theory", "eps"):
        table.add_column(column)
    for row in json_rows(result):
        table.add_row(
            row["model"],
            row["patterns"],
            row["query"],
            str(row["d"]),
            f"{row['n_max']:.4g}",
            f"{row['n_max_theory']:.4g}",
            f"{row['epsilon']:g}",
        )
    console.print(table)
    for question, answer in result.summary.items():
        console.print(f"[bold]{question}[/bold]: {answer}")
    if out is not None:
        console.print(f"figures and rows written to {out}")


def _run(config: CapacityConfig, out: Path | None, show: bool) -> StudyResult:
    if not show:
        return run(config, None if out is None else str(out))
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task("capacity", total=task_count(config))

        def tick(label: str) -> None:
            bar.update(task, advance=1, description=label)

        return run(config, None if out is None else str(out), tick)
