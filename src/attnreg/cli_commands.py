"""Registration of every command on the ``attnreg`` app: the studies from the registry (one
command line for all of them, :mod:`attnreg.studies.command`), then explain, sweep, report
and bench."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach every command to ``app``."""
    from attnreg.studies.command import register_studies

    register_studies(app)
    from attnreg.explain_cli import explain_command

    app.command("explain")(explain_command)
    from attnreg.runs.cli import sweep_command

    app.command("sweep")(sweep_command)
    from attnreg.report.cli import report_command

    app.command("report")(report_command)
    from attnreg.bench.cli import bench_command

    app.command("bench")(bench_command)
