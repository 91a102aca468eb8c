"""MkDocs hook: one results store per build, shared by every page that needs a study's result.

At the start of each build (``on_config``) a fresh temporary folder is made and the environment
variable ``ATTNREG_RESULTS_STORE`` set to a store inside it; the notebook kernels the pages run
in inherit it, so the first page that needs a study's quick profile runs it and stores it
(:func:`attnreg.stored.study_cell`), and every later page reads it. The folder is removed when
the build ends (or fails), so no build reads another's numbers.

The home page opens with the ledger's totals: its marker ``<!-- ledger-totals -->`` is
replaced by them (``on_page_markdown``). It is the first page built, so it runs every study
that lists claims, in parallel worker processes, into the store the later pages read.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from attnreg.stored import ENVIRONMENT

HOME = "index.md"
MARKER = "<!-- ledger-totals -->"

_FOLDERS: list[Path] = []


def _clean() -> None:
    while _FOLDERS:
        shutil.rmtree(_FOLDERS.pop(), ignore_errors=True)
    os.environ.pop(ENVIRONMENT, None)


def on_config(config: Any) -> Any:
    """A fresh store for this build."""
    _clean()
    folder = Path(tempfile.mkdtemp(prefix="attnreg-docs-results-"))
    _FOLDERS.append(folder)
    os.environ[ENVIRONMENT] = str(folder / "results.db")
    return config


def on_post_build(config: Any) -> None:
    _clean()


def on_build_error(error: Exception) -> None:
    _clean()


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """The home page's marker replaced by the totals of the claims ledger, computed from the
    studies' results (run into this build's store if no page has run them yet)."""
    if page.file.src_uri != HOME:
        return markdown
    if markdown.count(MARKER) != 1:
        raise ValueError(f"{HOME}: expected the marker {MARKER} exactly once")
    from attnreg.stored import claim_rows, run_missing, study_cell
    from attnreg.studies.ledger import totals_text
    from attnreg.studies.registry import STUDIES

    studies = [name for name, spec in STUDIES.items() if spec.ledger]
    run_missing(studies)
    rows = [row for name in studies for row in claim_rows(study_cell(name))]
    return markdown.replace(MARKER, totals_text(rows))
