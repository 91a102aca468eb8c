"""The command line: a thin shell over the library (``attnreg --help``)."""

from __future__ import annotations

import typer

from attnreg import __version__

app = typer.Typer(
    name="attnreg",
    help="Attention and classical statistics, executable: check the identities, train attention "
    "layers, measure memory capacity, and make the figures.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"attnreg {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """attnreg — run the attention ↔ regression ↔ associative-memory identities."""


# Sub-commands: each study module defines a typer command function; register it here.
from attnreg.cli_commands import register  # noqa: E402

register(app)


if __name__ == "__main__":
    app()
