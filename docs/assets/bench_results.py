"""MkDocs hook: the results table of ``benchmarks.md``, rendered at build time from the
committed ``benchmarks/results.json`` (``attnreg.bench.render``), so the page cannot disagree
with the file. A missing or malformed file, or a page without its one marked block, fails the
build."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnreg.bench.render import load, splice

PAGE = "benchmarks.md"
RESULTS = Path("benchmarks") / "results.json"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Fill the marked block of ``benchmarks.md`` from the result file; other pages as they are."""
    if page.file.src_uri != PAGE:
        return markdown
    root = Path(config.config_file_path).resolve().parent
    return splice(markdown, load(root / RESULTS))
