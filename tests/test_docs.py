"""The documentation site in a real browser.

The site is built once per test session with ``mkdocs build --strict`` into a temporary folder
(the tutorials are executed; a cell that raises fails the build), or, when the environment
variable ``ATTNREG_DOCS_SITE`` names an already-built site (``.ci/run`` builds ``site/`` just
before pytest and sets it to ``site``), that folder is used as it is. A relative path is taken
from the repository root.

The site is then served on 127.0.0.1 and every page is opened in headless Chromium (selenium,
with Debian's ``chromium`` and ``chromium-driver``; a missing browser is a failure, not a skip).
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urljoin, urlparse

import pytest
from chromium import chromium

ROOT = Path(__file__).resolve().parent.parent
BUILD_TIMEOUT = 900  # seconds; the build (tutorials included) is meant to take ≤ 6 minutes

# Every page of the navigation (mkdocs.yml), as built with use_directory_urls: false.
PAGES = {
    "index.html",
    "one-form.html",
    "tutorials/attention-and-regression.html",
    "tutorials/ols-transformer.html",
    "tutorials/gd-in-context.html",
    "tutorials/everything-is-matter.html",
    "tutorials/memory-capacity.html",
    "tutorials/bring-your-own-attention.html",
    "claims.html",
    "mathematics.html",
    "howto.html",
    "api.html",
    "benchmarks.html",
    "design.html",
}
TUTORIALS = {page for page in PAGES if page.startswith("tutorials/")}


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built site: ``$ATTNREG_DOCS_SITE`` if set, else a fresh strict build."""
    given = os.environ.get("ATTNREG_DOCS_SITE")
    if given:
        path = Path(given)
        path = path if path.is_absolute() else ROOT / path
        assert (path / "index.html").is_file(), (
            f"ATTNREG_DOCS_SITE={given}: no index.html in {path}"
        )
        return path
    out = tmp_path_factory.mktemp("docs") / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    return out


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="session")
def server(site: Path) -> Iterator[str]:
    """The site served over HTTP on 127.0.0.1 (a free port), from a background thread."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()


def _chromium():  # type: ignore[no-untyped-def]
    return chromium()


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    driver = _chromium()
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


# Wait for every image (lazy ones made eager) to load or fail; return each one's naturalWidth.
IMAGE_WIDTHS = """
const done = arguments[arguments.length - 1];
const images = Array.from(document.images);
images.forEach(img => { img.loading = "eager"; });
Promise.all(images.map(img => img.decode().catch(() => null))).then(
  () => done(images.map(img => [img.currentSrc.slice(0, 80), img.naturalWidth])));
"""

# The same-origin links in the navigation (the sidebar and the tabs, whatever the layout).
NAV_LINKS = """
return Array.from(document.querySelectorAll("nav.md-nav a.md-nav__link[href], .md-tabs a[href]"))
  .map(a => a.href);
"""

# Every resource the page loaded (scripts, styles, images, fetches): none may be remote.
RESOURCES = """
return performance.getEntriesByType("resource").map(r => r.name);
"""

# Output areas of the executed notebook cells: text or an image each.
OUTPUTS = """
return Array.from(document.querySelectorAll(".jp-OutputArea-output")).map(el => ({
  text: el.innerText.trim().length,
  images: el.querySelectorAll("img, svg").length,
}));
"""


def _page_of(url: str, base: str) -> str | None:
    """The site-relative page a link points at (fragment dropped), or None if off-site."""
    if not url.startswith(base):
        return None
    path = urlparse(url).path[len(urlparse(base).path) :]
    return path or "index.html"


def _open(driver, url: str) -> None:  # type: ignore[no-untyped-def]
    driver.get(url)
    driver.execute_script("return document.readyState")  # get() waits for the load event


def test_every_page_in_headless_chromium(server: str, browser) -> None:  # type: ignore[no-untyped-def]
    """Every page is reached from the navigation and opens with no console error, every image
    loaded, nothing fetched from outside 127.0.0.1, and (tutorials) computed outputs."""
    driver = browser
    driver.set_script_timeout(30)
    origin = server.rstrip("/")
    seen: set[str] = set()
    queue = ["index.html"]
    problems: list[str] = []
    while queue:
        page = queue.pop(0)
        if page in seen:
            continue
        seen.add(page)
        _open(driver, urljoin(server, page))
        errors = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        if errors:
            problems.append(f"{page}: console errors {errors}")
        widths = driver.execute_async_script(IMAGE_WIDTHS)
        broken = [src for src, width in widths if width <= 0]
        if broken:
            problems.append(f"{page}: images not loaded {broken}")
        remote = [
            name
            for name in driver.execute_script(RESOURCES)
            if not (name.startswith(origin) or name.startswith(("data:", "blob:")))
        ]
        if remote:
            problems.append(f"{page}: fetched from outside the site {remote}")
        if page in TUTORIALS:
            outputs = driver.execute_script(OUTPUTS)
            if not outputs:
                problems.append(f"{page}: no computed output")
            empty = [i for i, o in enumerate(outputs) if not (o["text"] or o["images"])]
            if empty:
                problems.append(f"{page}: empty output areas (cells {empty})")
        for link in driver.execute_script(NAV_LINKS):
            target = _page_of(link, server)
            if target is not None and target not in seen:
                queue.append(target)
    assert not problems, "\n".join(problems)
    assert seen >= PAGES, f"pages not reachable from the navigation: {sorted(PAGES - seen)}"
    extra = seen - PAGES
    assert not extra, f"navigation reaches pages this test does not know: {sorted(extra)}"


def test_built_pages_reference_no_remote_script_style_or_font(site: Path) -> None:
    """No page asks the browser to fetch a script, style sheet, font or image from outside."""
    fetched = re.compile(
        r"""<(?:script|img|iframe|source)\b[^>]*\bsrc\s*=\s*["']?(https?:)?//"""
        r"""|<link\b[^>]*\bhref\s*=\s*["']?(https?:)?//"""
        r"""|@import\s+(?:url\()?\s*["']?(https?:)?//"""
        r"""|url\(\s*["']?(https?:)?//""",
        re.IGNORECASE,
    )
    offenders = {}
    for path in sorted(site.rglob("*")):
        if path.suffix not in {".html", ".css"}:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        hits = [m.group(0)[:120] for m in fetched.finditer(text)]
        if hits:
            offenders[str(path.relative_to(site))] = hits[:3]
    assert not offenders, offenders
    pages = {str(p.relative_to(site)) for p in site.rglob("*.html")} - {"404.html"}
    assert pages == PAGES, f"built pages differ from the navigation: {sorted(pages ^ PAGES)}"


def test_the_claims_page_shows_every_source_with_computed_verdicts(site: Path) -> None:
    """The site's ledger page: a box per study with claims, every source named, and verdicts
    among the four kinds (computed when the page is built)."""
    text = (site / "claims.html").read_text(encoding="utf-8")
    assert text.count('class="admonition note"') >= 4
    for source in ("Tan &amp; Zhao", "Goulet Coulombe", "von Oswald", "Tang", "Ramsauer"):
        assert source in text, source
    assert "does not hold" in text and "holds with a condition" in text
