"""``attnreg explain``: which estimator does a trained attention layer compute?"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import typer
from rich.console import Console
from rich.table import Table

from attnreg.explain import explain
from attnreg.output import rows_to_json
from attnreg.studies.common import StudyResult

CONSTRUCTIONS = ("gd", "ols-transformer")


@dataclass
class ExplainConfig:
    """``attnreg explain`` settings: the held-out tasks and the fitting."""

    seed: int = 0
    tasks: int = 2000
    d: int = 10
    n_ctx: int = 10
    inputs: str = "uniform"
    noise_std: float = 0.0
    steps: int | None = None
    tol: float = 1e-3
    eta: float = 1.0
    threads: int = 1


def run(
    cfg: ExplainConfig | None = None,
    checkpoint: str | None = None,
    construction: str | None = None,
) -> StudyResult:
    """Explain a trained model (``checkpoint``, saved by :func:`attnreg.models.save_model`) or a
    construction (``"gd"``: the von Oswald GD layer with ``eta``; ``"ols-transformer"``) on
    ``cfg.tasks`` held-out tasks. Returns a :class:`StudyResult` whose summary names the best
    family."""
    from attnreg.constructions import LSAStack, OLSTransformer
    from attnreg.core.threads import torch_threads
    from attnreg.data.tasks import TaskSampler
    from attnreg.models import load_model
    from attnreg.training import generator

    cfg = cfg or ExplainConfig()
    if (checkpoint is None) == (construction is None):
        raise ValueError("checkpoint: give exactly one of a checkpoint file or a construction")
    d, n_ctx, steps = cfg.d, cfg.n_ctx, cfg.steps
    covariance: Any = None
    predictor: Any
    if checkpoint is not None:
        model, meta = load_model(checkpoint)
        d = model.d
        n_ctx = int(meta.get("n_ctx", n_ctx))
        steps = steps or model.n_layers
        label = f"checkpoint {checkpoint} ({meta.get('name', model.kind)})"
        predictor = model
        if isinstance(meta.get("covariance"), list):  # trained on Gaussian inputs: same Σ
            covariance = meta["covariance"]
    else:
        if construction not in CONSTRUCTIONS:
            raise ValueError(
                f"construction: unknown value {construction!r}; valid names are "
                f"{', '.join(CONSTRUCTIONS)}"
            )
        predictor = LSAStack.gd(d, 1, cfg.eta) if construction == "gd" else OLSTransformer()
        label = f"construction {construction}"
    steps = steps or 1
    inputs = "gaussian" if covariance is not None else cfg.inputs
    sampler = TaskSampler(
        d=d, n_ctx=n_ctx, inputs=inputs, covariance=covariance, noise_std=cfg.noise_std
    )
    tasks = sampler.sample(cfg.tasks, generator(7 * 10**6 + cfg.seed), torch.float64)
    with torch_threads(cfg.threads), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex = explain(predictor, tasks, steps=steps, tol=cfg.tol)
    rows = [{"target": label, **r} for r in ex.rows()]
    best = ex.fit(ex.best)
    params = ", ".join(f"{k} = {v:.4g}" for k, v in best.params.items() if isinstance(v, float))
    summary = {
        "best family": f"{label}: {ex.best}"
        + (f" ({params})" if params else "")
        + f"; R² {best.r2:.6f}, cosine {best.cosine:.6f} on {cfg.tasks} held-out tasks "
        f"({steps} step(s) for the iterative families)",
    }
    return StudyResult("explain", asdict(cfg), rows, [], summary)


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
