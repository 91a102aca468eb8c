"""``attnreg compare``: attention variants against ridge regression on the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
import yaml
from rich.console import Console
from rich.table import Table

from attnreg.config import config_from_dict, config_to_dict
from attnreg.output import rows_to_json
from attnreg.studies.compare.config import CompareConfig, full_config, quick_config
from attnreg.studies.compare.run import run


def compare_command(
    quick: bool = typer.Option(
        False,
        "--quick",
        help="Quick profile (the default): one seed, N = 200 training rows, at most 600 Adam "
        "steps per cell; a few minutes at most on 2 CPU cores.",
    ),
    full: bool = typer.Option(
        False,
        "--full",
        help="Full profile: three seeds (SEED, SEED+1, SEED+2), N = 500, up to 3000 steps per "
        "cell, 5000 for the OLS-Transformer.",
    ),
    out: Path = typer.Option(
        Path("results/compare"),
        "--out",
        help="Directory for the figures (PNG + SVG), compare_rows.csv/json, "
        "compare_training.csv, the OLS-Transformer tables and compare_summary.json.",
    ),
    json_out: bool = typer.Option(
        False,
        "--json",
        help="Print the rows as a JSON list of objects (keys: data, variant, whitening, qk, "
        "layernorm, seed, train_mse, test_mse, cos_to_ridge, hat_distance, wqwk_invcov_corr; "
        "baseline rows have variant 'ridge' / 'ols') instead of the table and summary.",
    ),
    seed: int = typer.Option(
        0,
        "--seed",
        help="Seed of the data, the initial weights and the splits (same seed, same numbers).",
    ),
    device: str = typer.Option(
        "cpu", "--device", help="torch device to train on (cpu, cuda, mps, ...)."
    ),
    config_file: Path | None = typer.Option(
        None,
        "--config",
        help="YAML or JSON file of CompareConfig fields (e.g. data_modes, variants, steps); "
        "they override the profile. An unknown key is an error.",
    ),
    progress: bool = typer.Option(
        True, "--progress/--no-progress", help="Show a progress bar on stderr."
    ),
) -> None:
    """Train softmax, regression-like (no softmax) and whitened attention regressors with every
    switch (data whitening, shared/separate/single W_q W_kᵀ, layer norm) on synthetic linear,
    diabetes and sine data, compare them with ridge (λ = 1e-3) and OLS, train the OLS-Transformer
    from a random start, and write the figures, tables and the answered open questions."""
    if quick and full:
        raise typer.BadParameter("choose one of --quick and --full", param_hint="--full")
    try:
        cfg = full_config(seed, device) if full else quick_config(seed, device)
        if config_file is not None:
            cfg = config_from_dict(CompareConfig, config_to_dict(cfg) | _read(config_file))
        result = run(cfg, out_dir=out, progress=progress)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if json_out:
        typer.echo(rows_to_json(result.rows))
        return
    console = Console()
    table = Table(title=f"attnreg compare ({'full' if full else 'quick'}, seed {seed})")
    for column in ("data", "variant", "whitening", "qk", "ln", "test MSE", "cos ridge", "corr"):
        table.add_column(column)
    for row in result.rows:
        table.add_row(
            row["data"],
            row["variant"],
            str(row["whitening"]),
            str(row["qk"]),
            str(row["layernorm"]),
            f"{row['test_mse']:.4f}",
            f"{row['cos_to_ridge']:.3f}",
            f"{row['wqwk_invcov_corr']:.3f}",
        )
    console.print(table)
    for question, answer in result.summary.items():
        console.print(f"[bold]{question}[/bold]: {answer}")
    console.print(f"figures and tables in {out}")


def _read(path: Path) -> dict[str, Any]:
    """The mapping in a YAML (``safe_load``) or JSON config file."""
    if not path.is_file():
        raise ValueError(f"config: no such file {str(path)!r}")
    text = path.read_text()
    data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"config: {str(path)!r} must hold a mapping of keys to values")
    return data
