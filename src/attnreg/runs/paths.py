"""Checks of output paths, done before anything runs."""

from __future__ import annotations

import os
from pathlib import Path


def folder_problem(path: str | Path) -> str | None:
    """Why ``path`` cannot serve as an output folder (it is created if missing), or ``None``:
    ``"is a file, not a folder"`` or ``"is not a writable folder (reason)"``."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        return "is a file, not a folder"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".attnreg-write-test-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        return f"is not a writable folder ({exc.strerror or exc})"
    return None
