"""``attnreg verify``: the equivalence certificate on the command line."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from attnreg.output import rows_to_json
from attnreg.studies.verify.config import DTYPES, VerifyConfig
from attnreg.studies.verify.run import run


def verify_command(
    seed: int = typer.Option(0, help="Seed of the random tasks (same seed, same numbers)."),
    dtype: str = typer.Option(
        "both", help="Precision to check: float64, float32, or both (tolerances 1e-10 / 1e-4)."
    ),
    json_out: bool = typer.Option(
        False, "--json", help="Print a JSON list of rows instead of the table."
    ),
    tol_scale: float = typer.Option(
        1.0,
        help="Multiply every tolerance by this factor (e.g. 1e-6 to see where the identities "
        "stop holding); the exit status follows.",
    ),
    ridge: float = typer.Option(0.5, help="Ridge λ of the ridge-form constructions (> 0)."),
) -> None:
    """Build every construction (OLS-Transformer, OLS-attention, GD/GD++/preconditioned LSA,
    mesa layer) from random tasks, run its forward pass, and compare with numpy / scikit-learn
    references. Exit status 1 if any row exceeds its tolerance."""
    if dtype not in (*DTYPES, "both"):
        raise typer.BadParameter(
            f"unknown dtype {dtype!r}; valid: float64, float32, both", param_hint="--dtype"
        )
    dtypes = list(DTYPES) if dtype == "both" else [dtype]
    try:
        rows = run(VerifyConfig(seed=seed, dtypes=dtypes, tol_scale=tol_scale, ridge=ridge))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if json_out:
        typer.echo(rows_to_json(rows))
    else:
        table = Table(title=f"attnreg verify (seed {seed})")
        for column in (
            "construction",
            "reference",
            "dtype",
            "shape",
            "max abs err",
            "rel err",
            "tol",
            "pass",
        ):
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(
                row["construction"],
                row["reference"],
                row["dtype"],
                row["shape"],
                f"{row['max_abs_err']:.2e}",
                f"{row['rel_err']:.2e}",
                f"{row['tol']:.1e}",
                "[green]yes[/green]" if row["passed"] else "[red]NO[/red]",
            )
        console = Console()
        console.print(table)
        failed = sum(not r["passed"] for r in rows)
        console.print(f"{len(rows) - failed} passed, {failed} failed")
    if any(not r["passed"] for r in rows):
        raise typer.Exit(code=1)
