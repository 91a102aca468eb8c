"""``python -m attnreg``: the command line."""

from attnreg.cli import run

run()
