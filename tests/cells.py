"""A stored cell for the results-store tests."""

from attnreg.runs.store import CellResult


def cell(seed=0, status="done", value=1.0, config=None, finished=12.5):
    """A ``verify`` cell started at 10.0 with one row ``{"metric": "err", "value": value}``;
    a failed one carries an error."""
    return CellResult(
        "verify",
        config or {"ridge": 0.5, "seed": seed},
        seed,
        "0.1.0",
        status,
        10.0,
        finished,
        rows=[{"metric": "err", "value": value}],
        summary={"q": "a"},
        error=None if status == "done" else "boom",
    )
