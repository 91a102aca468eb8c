"""``python -m attnreg``: the command line."""

from attnreg.cli import app

app()
