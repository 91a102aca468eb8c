"""Checks shared by the CLI tests."""


def one_line_error(result, *needles) -> None:
    """A user error: exit status 2, no traceback, one non-blank line of output holding every
    one of ``needles``."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
