"""``attnreg explain``: which estimator does a trained attention layer compute?"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from attnreg.output import rows_to_json
from attnreg.studies.explain import CONSTRUCTIONS, ExplainConfig, run


def explain_command(
    checkpoint: Path | None = typer.Argument(
        None, help="A model checkpoint written by `attnreg icl` (results/icl/checkpoints/*.pt)."
    ),
    construction: str | None = typer.Option(
        None,
        "--construction",
        help=f"Explain a construction instead of a checkpoint: {', '.join(CONSTRUCTIONS)}.",
    ),
    tasks: int = typer.Option(2000, "--tasks", help="Number of held-out tasks to fit on."),
    steps: int | None = typer.Option(
        None, "--steps", help="Steps of the iterative families (default: the model's layers)."
    ),
    inputs: str = typer.Option("uniform", "--inputs", help="Task inputs: uniform or gaussian."),
    seed: int = typer.Option(0, "--seed", help="Seed of the held-out tasks."),
    tol: float = typer.Option(
        1e-3,
        "--tol",
        help="Families within this R² of the best count as explaining it; the "
        "simplest of them is named.",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the rows as JSON."),
    out: Path | None = typer.Option(None, "--out", help="Also write explain_rows.csv/json here."),
) -> None:
    """Fit every estimator family (OLS, GD(η), ridge(λ), kernel smoother(β), GD++(η, γ),
    preconditioned GD(Γ)) to the predictions of a trained layer on held-out tasks; report each
    family's best parameter, R² and cosine agreement, and the family that explains it best."""
    try:
        cfg = ExplainConfig(seed=seed, tasks=tasks, steps=steps, tol=tol, inputs=inputs)
        result = run(cfg, str(checkpoint) if checkpoint else None, construction)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if out is not None:
        result.write(out)
    if json_out:
        typer.echo(rows_to_json(result.rows))
        return
    table = Table(title="attnreg explain")
    for column in ("family", "params", "R²", "cosine", "best"):
        table.add_column(column, overflow="fold")
    for row in result.rows:
        table.add_row(
            row["family"],
            row["params"] or "-",
            f"{row['r2']:.6f}",
            f"{row['cosine']:.6f}",
            "[green]yes[/green]" if row["best"] else "",
        )
    console = Console()
    console.print(table)
    for key, value in result.summary.items():
        console.print(f"[bold]{key}[/bold]: {value}")
