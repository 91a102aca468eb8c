"""Registration of every study's command on the ``attnreg`` app (one line per command)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach each study's command to ``app``."""
    from attnreg.studies.verify.cli import verify_command

    app.command("verify")(verify_command)
    from attnreg.studies.icl.cli import icl_command

    app.command("icl")(icl_command)
    from attnreg.explain_cli import explain_command

    app.command("explain")(explain_command)

    from attnreg.runs.cli import sweep_command

    app.command("sweep")(sweep_command)

    from attnreg.report.cli import report_command

    app.command("report")(report_command)
    from attnreg.studies.compare.cli import compare_command

    app.command("compare")(compare_command)
    from attnreg.bench.cli import bench_command

    app.command("bench")(bench_command)
    from attnreg.studies.capacity.cli import capacity_command

    app.command("capacity")(capacity_command)
