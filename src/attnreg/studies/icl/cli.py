"""``attnreg icl``: train attention on in-context regression and compare it with GD."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from attnreg.config import config_from_dict, load_config
from attnreg.output import rows_to_json
from attnreg.studies.icl.config import MODEL_SPECS, ICLConfig, full_config
from attnreg.studies.icl.run import json_rows, run


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.5g}"
    return str(value)


def icl_command(
    quick: bool = typer.Option(
        False, "--quick", help="Quick profile (default): a few minutes on 2 CPU cores."
    ),
    full: bool = typer.Option(
        False, "--full", help="Full profile: every model, 5,000 / 10,000 Adam steps."
    ),
    out: Path = typer.Option(
        Path("results/icl"), "--out", help="Directory for rows (CSV/JSON), figures, checkpoints."
    ),
    json_out: bool = typer.Option(
        False,
        "--json",
        help="Print one JSON object per trained model (keys: model, layers, "
        "heads, test_loss, reference, reference_loss, cos_sensitivity, pred_diff, model_diff, "
        "learned_eta, reference_eta, plateau) instead of the table.",
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of tasks and initialisations."),
    device: str = typer.Option("cpu", "--device", help="Torch device (cpu, cuda, mps)."),
    threads: int = typer.Option(
        1, "--threads", help="Torch intra-op threads (1 is fastest for these small batched ops)."
    ),
    models: str = typer.Option(
        "",
        "--models",
        help=f"Comma-separated subset of: {', '.join(MODEL_SPECS)} (default: the profile's).",
    ),
    config: Path | None = typer.Option(
        None,
        "--config",
        help="YAML/JSON file with ICLConfig fields (replaces the profile; --seed, --device, "
        "--threads, --progress and --models still apply).",
    ),
    progress: bool = typer.Option(False, "--progress", help="Show tqdm progress bars."),
) -> None:
    """Train linear / softmax self-attention on the von Oswald et al. (2023) regression tasks
    and measure how close each model is to gradient descent (line-searched GD, GD++, optimal
    preconditioned GD): test loss, sensitivity cosine, learned η, loss against the number of
    context examples, out-of-distribution loss, and an explain() of the trained layer."""
    if quick and full:
        raise typer.BadParameter("choose one of --quick and --full", param_hint="--full")
    changes: dict[str, object] = {
        "seed": seed,
        "device": device,
        "threads": threads,
        "progress": progress,
    }
    if models:
        changes["models"] = [m.strip() for m in models.split(",") if m.strip()]
    try:
        cfg = full_config(**changes) if full else ICLConfig(**changes)  # type: ignore[arg-type]
        if config is not None:
            base = load_config(ICLConfig, config)
            keep = ("seed", "device", "threads", "progress", "models")
            merged = {**base.__dict__, **{k: v for k, v in changes.items() if k in keep}}
            cfg = config_from_dict(ICLConfig, merged)
        result = run(cfg, out)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    result.write(out)
    if json_out:
        typer.echo(rows_to_json(json_rows(result)))
        return
    console = Console()
    table = Table(title=f"attnreg icl (seed {cfg.seed})")
    columns = (
        "model",
        "layers",
        "heads",
        "test_loss",
        "reference",
        "reference_loss",
        "cos_sensitivity",
        "learned_eta",
        "reference_eta",
        "plateau",
    )
    for column in columns:
        table.add_column(column.replace("_", " "), overflow="fold")
    for row in json_rows(result):
        table.add_row(*(_fmt(row[c]) for c in columns))
    console.print(table)
    for key, value in result.summary.items():
        console.print(f"[bold]{key}[/bold]: {value}")
    console.print(f"results in {out}")
    sys.stdout.flush()
