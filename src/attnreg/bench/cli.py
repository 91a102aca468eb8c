"""``attnreg bench`` on the command line."""

from __future__ import annotations

import time

import typer
from rich.console import Console
from rich.table import Table

from attnreg.bench import TARGETS, parse_ids, run_benchmarks
from attnreg.bench.render import bench_json
from attnreg.core.threads import check_count


def bench_command(
    only: list[str] = typer.Option(
        None,
        "--only",
        help="Run only these targets: repeat the option or give a comma list "
        f"(--only P1,P2). Valid: {', '.join(TARGETS)}. Default: all.",
    ),
    json_out: bool = typer.Option(
        False,
        "--json",
        help="Print one JSON object (stdout; progress goes to stderr): 'run' (date in UTC, "
        "machine, threads, matmul rate, torch version, targets run, seconds) and 'targets', a "
        "list of objects with the keys id, workload, value, unit, target, passed, reference, "
        "details. Render it into tables with python -m attnreg.bench.render.",
    ),
    repeat: int = typer.Option(
        5,
        min=1,
        help="Timed rounds per workload after one warm-up round; workload and references "
        "alternate within each round and the medians are compared.",
    ),
    threads: int = typer.Option(
        None,
        min=1,
        help="torch intra-op threads for the whole run (default: the cores this process may "
        "use, from its CPU affinity). Reported in every row.",
    ),
    smoke: bool = typer.Option(
        False,
        "--smoke",
        help="Tiny sizes and short study runs, to check that the command works (seconds; the "
        "numbers and pass/fail mean nothing).",
    ),
    progress: bool = typer.Option(
        True, help="Show which target is running and its elapsed time (on stderr)."
    ),
) -> None:
    """Measure the performance targets P1–P9 in one run.

    P1 batched OLS through the constructed OLS-Transformer vs lstsq / Cholesky / scikit-learn;
    P2 softmax retrieval (200k memories) as a fraction of the fp32 matmul rate, peak memory;
    P3 linear / whitened attention over 1e6 tokens: time slope in N, peak memory;
    P4 one-layer LSA trained to GD; P5 capacity quick profile; P6 `attnreg report` quick;
    P7 softmax kernel smoother (1e6 keys, d=8, dy=1) vs SDPA with zero-padded values, memory;
    P8 causal sequence layers (T=8192) vs flash-linear-attention's references, memory;
    P9 DeltaNet training step (forward + backward), fused vs autograd through the chunked form.
    The fp32 matmul rate (torch 2048²) is measured first. Exit status 1 if any target fails.
    """
    try:
        ids = parse_ids(only)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--only") from exc
    if threads is not None:
        try:
            check_count("threads", threads)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--threads") from exc
    err = Console(stderr=True)
    start = time.perf_counter()
    last = [start]

    def tick(label: str) -> None:
        now = time.perf_counter()
        if progress:
            err.print(f"[dim]{now - start:7.1f} s[/dim]  running {label} …")
        last[0] = now

    results, context = run_benchmarks(
        ids, repeat=repeat, threads=threads, smoke=smoke, progress=tick
    )
    rows = [r.row() for r in results]
    if json_out:
        run = {**context, "only": ids, "seconds": time.perf_counter() - start}
        typer.echo(bench_json(run, rows))
    else:
        table = Table(
            title=f"attnreg bench — {context['threads']} threads, fp32 matmul "
            f"{context['matmul_gflops']:.1f} GFLOP/s (measured first)"
        )
        for column in ("id", "value", "unit", "target", "pass", "workload"):
            table.add_column(column, overflow="fold")
        for row in rows:
            value = "n/a" if row["value"] is None else f"{row['value']:.3g}"
            ok = "[green]yes[/green]" if row["passed"] else "[red]NO[/red]"
            table.add_row(row["id"], value, row["unit"], row["target"], ok, row["workload"])
        console = Console()
        console.print(table)
        for row in rows:
            if "error" in row["details"]:
                console.print(f"{row['id']}: {row['details']['error']}")
    if progress:
        err.print(f"[dim]{time.perf_counter() - start:7.1f} s[/dim]  done")
    if not all(r.passed for r in results):
        raise typer.Exit(code=1)
