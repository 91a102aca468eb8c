"""Registration of every study's command on the ``attnreg`` app (one line per command)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach each study's command to ``app``."""
    from attnreg.studies.verify_cli import verify_command

    app.command("verify")(verify_command)

    from attnreg.runs.cli import sweep_command

    app.command("sweep")(sweep_command)

    from attnreg.report.cli import report_command

    app.command("report")(report_command)
