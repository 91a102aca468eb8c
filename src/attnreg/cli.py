"""The command line: a thin shell over the library (``attnreg --help``)."""

from __future__ import annotations

import sys

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


def run() -> None:
    """The ``attnreg`` entry point: a usage error (unknown option or command, a value of the
    wrong type) is one line on stderr naming the culprit, with exit status 2."""
    try:
        code = app(standalone_mode=False)
    except typer.Abort:
        typer.echo("aborted", err=True)
        code = 130
    except Exception as exc:  # click's usage errors (typer may vendor click: duck-typed)
        if not hasattr(exc, "format_message") or not hasattr(exc, "exit_code"):
            raise
        code = exc.exit_code
        if type(exc).__name__ != "NoArgsIsHelpError":  # that one has printed the help
            ctx = getattr(exc, "ctx", None)
            where = ctx.command_path if ctx is not None else "attnreg"
            message = " ".join(exc.format_message().split())
            typer.echo(f"{where}: {message} (see '{where} --help')", err=True)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    run()
