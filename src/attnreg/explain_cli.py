"""``attnreg explain``: which estimator does a trained attention layer compute?

Every user error (a bad option value, a checkpoint that cannot be read, an ``--out`` that is
not a writable folder) is one line on stderr and exit status 2, like the study commands."""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import typer
from rich.console import Console
from rich.table import Table

from attnreg.core.threads import check_count
from attnreg.core.validation import (
    check_choice,
    check_nonnegative,
    check_positive,
    check_positive_int,
    check_seed,
)
from attnreg.data.tasks import INPUTS
from attnreg.explaining import explain
from attnreg.output import rows_to_json
from attnreg.studies.command import fail
from attnreg.studies.common import StudyResult

CONSTRUCTIONS = ("gd", "ols-transformer")
WORKING_COPIES = 16
"""Peak memory of the fit, in copies of the task tensors (float64 ``(N + 1) × (d + 1)`` per
task): measured 4–5 (311 MB → 337 MB of peak RSS from 2,000 to 8,000 tasks at d = N = 10),
with a margin for the families that hold ``d × d`` or ``N × N`` per task."""


def check_task_memory(tasks: int, d: int, n_ctx: int) -> None:
    """Refuse, naming ``tasks``, a fit whose tasks would not fit in the memory available now
    (``psutil.virtual_memory().available``), before anything is allocated."""
    import psutil

    per_task = 8 * (n_ctx + 1) * (d + 1) * WORKING_COPIES + 8 * (d * d + n_ctx * n_ctx)
    need, have = tasks * per_task, psutil.virtual_memory().available
    if need > have:
        raise ValueError(
            f"tasks: {tasks} tasks of d = {d}, N = {n_ctx} need about {need / 2**30:.3g} GiB "
            f"to fit; {have / 2**30:.3g} GiB is available (at most about "
            f"{have // per_task} tasks here)"
        )


@dataclass
class ExplainConfig:
    """``attnreg explain`` settings: the held-out tasks and the fitting (validated: a
    ``ValueError`` naming the field)."""

    seed: int = 0
    tasks: int = 2000
    d: int = 10
    n_ctx: int = 10
    inputs: str = "uniform"
    noise_std: float = 0.0
    steps: int | None = None
    tol: float = 1e-3
    min_r2: float = 0.5
    eta: float = 1.0
    threads: int = 1

    def __post_init__(self) -> None:
        check_seed("seed", self.seed)
        if isinstance(self.tasks, bool) or int(self.tasks) != self.tasks or self.tasks < 2:
            raise ValueError(
                f"tasks: must be an integer >= 2 (half the tasks to fit, half held out to "
                f"score), got {self.tasks!r}"
            )
        check_positive_int("d", self.d)
        check_positive_int("n_ctx", self.n_ctx)
        check_choice("inputs", self.inputs, INPUTS)
        check_nonnegative("noise_std", self.noise_std)
        if self.steps is not None:
            check_positive_int("steps", self.steps)
        check_nonnegative("tol", self.tol)
        check_positive("eta", self.eta)
        check_count("threads", self.threads)


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
        steps = model.n_layers if steps is None else steps
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
    steps = 1 if steps is None else steps
    check_task_memory(cfg.tasks, d, n_ctx)
    inputs = "gaussian" if covariance is not None else cfg.inputs
    sampler = TaskSampler(
        d=d, n_ctx=n_ctx, inputs=inputs, covariance=covariance, noise_std=cfg.noise_std
    )
    tasks = sampler.sample(cfg.tasks, generator(7 * 10**6 + cfg.seed), torch.float64)
    with torch_threads(cfg.threads), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex = explain(predictor, tasks, steps=steps, tol=cfg.tol, min_r2=cfg.min_r2)
    rows = [{"target": label, **r} for r in ex.rows()]
    where = (
        f"on the held-out half of {cfg.tasks} tasks ({steps} step(s) for the iterative families)"
    )
    if ex.best is None:
        return StudyResult(
            "explain", asdict(cfg), rows, [], {"best family": f"{label}: {ex.verdict()} {where}"}
        )
    best = ex.fit(ex.best)
    params = ", ".join(f"{k} = {v:.4g}" for k, v in best.params.items() if isinstance(v, float))
    summary = {
        "best family": f"{label}: {ex.best}"
        + (f" ({params})" if params else "")
        + f"; R² {best.r2:.6f}, cosine {best.cosine:.6f} {where}",
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
    tasks: int = typer.Option(
        2000, "--tasks", help="Number of tasks (>= 2): half to fit on, half held out to score."
    ),
    steps: int | None = typer.Option(
        None,
        "--steps",
        help="Steps (>= 1) of the iterative families (default: the model's layers; 1 for a "
        "construction).",
    ),
    inputs: str = typer.Option("uniform", "--inputs", help=f"Task inputs: {' or '.join(INPUTS)}."),
    seed: int = typer.Option(0, "--seed", help="Seed of the tasks, in [0, 2**63)."),
    tol: float = typer.Option(
        1e-3,
        "--tol",
        help="Families within this R² of the best count as explaining it; the "
        "simplest of them is named.",
    ),
    min_r2: float = typer.Option(
        0.5,
        "--min-r2",
        help="If the best held-out R² is below this, no family explains the layer (also when "
        "its outputs have zero variance: R² is then undefined).",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the rows as JSON."),
    out: Path | None = typer.Option(
        None, "--out", help="Also write explain_rows.csv/json and explain_summary.json here."
    ),
) -> None:
    """Fit every estimator family (OLS, GD(η), ridge(λ), kernel smoother(β), LMS(β),
    GD++(η, γ), local linear(β, λ), momentum LMS(β, μ), mini-batch LMS(η, b), multi-step
    LMS(β, s), preconditioned GD(Γ)) to the predictions of a trained layer
    on held-out tasks; report each family's best parameter, R² and cosine agreement, and the
    family that explains it best (or that none does)."""
    try:
        cfg = ExplainConfig(
            seed=seed, tasks=tasks, steps=steps, tol=tol, min_r2=min_r2, inputs=inputs
        )
    except ValueError as exc:
        fail(str(exc))
    if out is not None:  # before the fitting: a bad folder fails at once
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            fail(f"--out {str(out)!r}: cannot create the folder ({exc.strerror})")
    try:
        result = run(cfg, str(checkpoint) if checkpoint else None, construction)
    except ValueError as exc:
        fail(str(exc))
    if out is not None:
        try:
            result.write(out)
        except OSError as exc:
            fail(f"--out {str(out)!r}: cannot write the results ({exc.strerror})")
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
            "undefined" if math.isnan(row["r2"]) else f"{row['r2']:.6f}",
            f"{row['cosine']:.6f}",
            "[green]yes[/green]" if row["best"] else "",
        )
    console = Console()
    console.print(table)
    for key, value in result.summary.items():
        console.print(f"[bold]{key}[/bold]: {value}")
