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

import base64
import functools
import html
import io
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urljoin, urlparse

import matplotlib
import pytest
from chromium import chromium
from PIL import Image

from attnreg.bench.render import load, render

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
    "tutorials/every-sequence-layer.html",
    "tutorials/what-depth-buys.html",
    "claims.html",
    "mathematics.html",
    "howto.html",
    "api.html",
    "benchmarks.html",
    "design.html",
}
TUTORIALS = {page for page in PAGES if page.startswith("tutorials/")}

# A figure that reached the page as its text repr instead of an image.
FIGURE_AS_TEXT = re.compile(r"<Figure size [\d.]+x[\d.]+ with \d+ Axes>")
# Tutorial code that shows a figure, and code that makes one (a line of code, not a comment).
SHOWS = re.compile(r"^[^#\n]*\b(?:plt\.show\(\)|display\([^)\n]*fig)", re.MULTILINE)
MAKES = re.compile(r"^[^#\n]*\bplt\.(?:subplots|subplot_mosaic|figure)\(", re.MULTILINE)
OUTPUT_IMAGE = re.compile(r"<img\b[^>]*\bsrc=\"data:image/", re.IGNORECASE)

WINDOW = (1366, 900)  # the window the layout checks measure at (CSS pixels)
MIN_LABEL_PX = 9.0  # smallest readable label, in CSS pixels as rendered


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


# At the window size set: every figure image of the notebook outputs (rendered width, natural
# width, its data: URI), and every code block or formula wider than its box whose overflow does
# not scroll (its content is cut off at the right edge).
LAYOUT = """
const done = arguments[arguments.length - 1];
const images = Array.from(document.querySelectorAll(".jp-OutputArea-output img"));
images.forEach(img => { img.loading = "eager"; });
Promise.all(images.map(img => img.decode().catch(() => null))).then(() => {
  const clipped = [];
  for (const el of document.querySelectorAll("pre, pre > code, .arithmatex, .highlight")) {
    const overflow = getComputedStyle(el).overflowX;
    if (el.scrollWidth > el.clientWidth + 1 && overflow !== "auto" && overflow !== "scroll") {
      clipped.push([el.tagName, el.className, el.scrollWidth, el.clientWidth, overflow,
                    el.innerText.slice(0, 60)]);
    }
  }
  done({
    width: window.innerWidth,
    images: images.map(img => [img.getBoundingClientRect().width, img.naturalWidth, img.src]),
    clipped: clipped,
  });
});
"""


def _label_px(rendered: float, natural: int, src: str) -> float:
    """The height in CSS pixels at which a figure's labels appear: matplotlib's label size
    (``font.size`` points, at the figure's dpi read from the PNG) × rendered / natural width."""
    header, _, data = src.partition(",")
    assert header.startswith("data:image/png;base64"), f"not an inline PNG: {header[:40]}"
    dpi = Image.open(io.BytesIO(base64.b64decode(data))).info.get("dpi")
    assert dpi, "a figure PNG without its dpi (pHYs)"
    font_px = float(matplotlib.rcParams["font.size"]) / 72 * float(dpi[0])
    return font_px * rendered / natural


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


def test_figures_legible_and_code_never_clipped(server: str, browser) -> None:  # type: ignore[no-untyped-def]
    """At a 1366-px-wide window: every figure of a tutorial is drawn at a width where its
    labels are at least 9 px high, and no code block or formula on any page is cut off at the
    right edge (wider than its box only when the box scrolls)."""
    driver = browser
    driver.set_script_timeout(60)
    width, height = WINDOW
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
    )
    problems: list[str] = []
    try:
        for page in sorted(PAGES):
            _open(driver, urljoin(server, page))
            layout = driver.execute_async_script(LAYOUT)
            assert layout["width"] == width, layout["width"]
            for i, (rendered, natural, src) in enumerate(layout["images"]):
                label = _label_px(rendered, natural, src)
                if label < MIN_LABEL_PX:
                    problems.append(
                        f"{page}: figure {i + 1} drawn {rendered:.0f} of {natural} px wide: "
                        f"labels {label:.1f} px < {MIN_LABEL_PX} px"
                    )
            problems += [f"{page}: clipped {item}" for item in layout["clipped"]]
            if page in TUTORIALS and not layout["images"]:
                problems.append(f"{page}: no figure found")
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    assert not problems, "\n".join(problems)


def test_tutorial_figures_are_drawn(site: Path) -> None:
    """No tutorial prints a figure as text (``<Figure size … with … Axes>``: the notebook's
    inline backend was switched off), and each shows at least as many images as its code
    shows figures (``plt.show()``, ``display(fig)``) or makes them (``plt.subplots`` …)."""
    problems = []
    for page in sorted(TUTORIALS):
        built = (site / page).read_text(encoding="utf-8")
        source = (ROOT / "docs" / page).with_suffix(".py").read_text(encoding="utf-8")
        as_text = FIGURE_AS_TEXT.findall(html.unescape(built))
        if as_text:
            problems.append(f"{page}: figures printed as text {as_text[:3]}")
        images = len(OUTPUT_IMAGE.findall(built))
        wanted = max(len(SHOWS.findall(source)), len(MAKES.findall(source)))
        if wanted == 0 or images < wanted:
            problems.append(f"{page}: {images} images for {wanted} figures in its code")
    assert not problems, "\n".join(problems)


def _markdown_cells(line: str) -> list[str]:
    """The cells of a Markdown table row as displayed (``\\|`` is ``|``, ``**`` is bold,
    backticks mark code)."""
    cells = re.split(r"(?<!\\)\|", line)[1:-1]
    shown = [cell.strip().replace("\\|", "|").replace("**", "") for cell in cells]
    return [re.sub(r"`([^`]*)`", r"\1", cell) for cell in shown]


def _html_rows(fragment: str) -> list[list[str]]:
    """The ``<td>`` texts of each table row of an HTML fragment, whitespace collapsed."""
    rows = []
    for row in re.findall(r"<tr>(.*?)</tr>", fragment, re.DOTALL):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.DOTALL)
        if cells:
            rows.append([" ".join(html.unescape(re.sub(r"<[^>]+>", "", c)).split()) for c in cells])
    return rows


def test_benchmarks_page_shows_the_committed_results(site: Path) -> None:
    """The results tables of benchmarks.html (the targets, then every registered layer's
    timing) are the rendering of benchmarks/results.json, cell by cell, with the run's date."""
    doc = load(ROOT / "benchmarks" / "results.json")
    lines = render(doc).splitlines()
    headers = {i - 1 for i, line in enumerate(lines) if line.startswith("|---")}
    expected = [
        _markdown_cells(line)
        for i, line in enumerate(lines)
        if line.startswith("| ") and i not in headers
    ]
    page = (site / "benchmarks.html").read_text(encoding="utf-8")
    start = page.index('id="latest-results"')
    end = page.find("<h2", start)
    section = page[start : end if end > 0 else len(page)]
    assert _html_rows(section) == expected
    assert doc["run"]["date"][:10] in section


def test_no_page_shows_a_warning_from_the_library(site: Path) -> None:
    """A published page never shows a Python warning raised in attnreg's sources
    (``…/attnreg/<module>.py:<line>: SomethingWarning: …``): a study that runs an ill-conditioned
    or rank-deficient case by design says so in its own words and filters the warning."""
    leaked = re.compile(r"attnreg/[\w/]+\.py:\d+: \w*Warning")
    offenders = {}
    for path in sorted(site.rglob("*.html")):
        text = html.unescape(re.sub(r"<[^>]+>", "", path.read_text(encoding="utf-8")))
        hits = leaked.findall(text)
        if hits:
            offenders[str(path.relative_to(site))] = hits[:3]
    assert not offenders, offenders


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


def _ledger_rows(fragment: str) -> list[tuple[str, str, str]]:
    """``(class, icon, verdict text)`` of each coloured ledger row of an HTML fragment."""
    found = re.findall(
        r'<tr class="(verdict-[a-z-]+)"[^>]*>.*?<strong[^>]*>\s*(\S+) ([^<.]+)\.?</strong>',
        fragment,
        re.DOTALL,
    )
    return [(cls, html.unescape(icon), html.unescape(text).strip()) for cls, icon, text in found]


def _verdict_of(text: str) -> str:
    """The verdict a shown verdict text names (``partial 2 of 3`` → ``partial``)."""
    from attnreg.studies.ledger import PARTIAL, VERDICTS

    return PARTIAL if text.startswith(PARTIAL + " ") else text if text in VERDICTS else "?"


def _after_h1(text: str) -> str:
    """The page's article after its first heading."""
    return text[text.index("</h1>") :]


def test_the_claims_page_opens_with_its_totals_and_coloured_rows(site: Path) -> None:
    """The site's ledger page opens with its totals (nothing but the title before them), then
    one table: a row per claim of every study that lists claims, each with its verdict's class,
    icon and colour (:func:`~attnreg.studies.ledger.verdict_class`), the totals those of the
    rows; the code that computes it is not shown."""
    from attnreg.studies.ledger import ICONS, totals_text, verdict_class
    from attnreg.studies.registry import STUDIES

    text = (site / "claims.html").read_text(encoding="utf-8")
    article = _after_h1(text)
    head = article[: article.index('class="ledger-totals"')]
    assert "<p>" not in head and "<pre" not in head, "the ledger must open with its totals"
    total = re.search(r'class="ledger-totals"><strong>(.*?)</strong>', article)
    assert total, "no totals"
    table = article[article.index('<table class="ledger">') : article.index("</table>")]
    rows = _ledger_rows(table)
    assert rows, "no ledger rows"
    for cls, icon, shown in rows:
        verdict = _verdict_of(shown)
        assert cls == verdict_class(verdict), (cls, shown)
        assert icon == ICONS[verdict], (icon, shown)
    assert html.unescape(total.group(1)) == totals_text(
        [{"verdict": _verdict_of(v)} for *_, v in rows]
    )
    studies = {name for name, spec in STUDIES.items() if spec.ledger}
    shown_studies = set(re.findall(r'<span class="ledger-muted">([a-z]+)</span></td>', table))
    assert shown_studies == studies, shown_studies ^ studies
    for source in ("Tan &amp; Yuchen Zhao", "Tang", "wojiao-yc", "von Oswald", "Ramsauer"):
        assert source in table, source
    assert "highlight-ipynb" not in article, "the claims page's code cell must be folded away"


def test_verdict_colours_of_the_site_are_the_ledgers() -> None:
    """``docs/assets/extra.css`` gives each verdict's class the colour of
    :data:`~attnreg.studies.ledger.VERDICT_CSS`."""
    from attnreg.studies.ledger import VERDICT_CSS, verdict_class

    css = (ROOT / "docs" / "assets" / "extra.css").read_text(encoding="utf-8")
    for verdict, colour in VERDICT_CSS.items():
        rule = f".md-typeset .{verdict_class(verdict)} {{ --verdict: {colour}; }}"
        assert rule in css, rule


# The computed colours of the ledger rows (left border of the first cell, the verdict's text).
ROW_COLOURS = """
return Array.from(document.querySelectorAll("tr[class^='verdict-']")).map(tr => [
  tr.className,
  getComputedStyle(tr.querySelector("td")).borderLeftColor,
  getComputedStyle(tr.querySelector("strong")).color,
]);
"""
TABLE_FITS = """
return Array.from(document.querySelectorAll(".ledger-wrap, .admonition table")).map(
  el => [el.scrollWidth, el.clientWidth]);
"""


def _rgb(colour: str) -> str:
    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgb({r}, {g}, {b})"


@pytest.mark.parametrize("page", ["claims.html", *sorted(TUTORIALS)])
def test_ledger_rows_in_their_colours_at_1366_px(server: str, browser, page: str) -> None:  # type: ignore[no-untyped-def]
    """In Chromium at 1366 px: every ledger row (the claims page's table, a tutorial's box) is
    drawn with its verdict's colour (left border and verdict text), and no ledger table is
    wider than the page."""
    from attnreg.studies.ledger import VERDICT_CSS, verdict_class

    colours = {verdict_class(v): _rgb(c) for v, c in VERDICT_CSS.items()}
    driver = browser
    width, height = WINDOW
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
    )
    try:
        _open(driver, urljoin(server, page))
        rows = driver.execute_script(ROW_COLOURS)
        fits = driver.execute_script(TABLE_FITS)
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    if page == "tutorials/bring-your-own-attention.html":
        assert not rows
        return
    assert rows, f"{page}: no ledger rows"
    for cls, border, text in rows:
        assert border == colours[cls] and text == colours[cls], (page, cls, border, text)
    wide = [f for f in fits if f[0] > f[1] + 1]
    assert not wide, f"{page}: a ledger table wider than its box {wide}"


@pytest.mark.parametrize("page", ["index.html", *sorted(TUTORIALS)])
def test_each_page_opens_with_its_conclusion_and_a_link_to_the_ledger(
    site: Path, page: str
) -> None:
    """The home page and every tutorial open with a box ("In short": the conclusion, the totals
    of the claims it tests where it reads them) linking to the claims ledger; nothing but the
    title comes before it."""
    text = _after_h1((site / page).read_text(encoding="utf-8"))
    marker = "ledger-opening" if page in TUTORIALS else 'class="admonition abstract"'
    assert marker in text, page
    head = text[: text.index(marker)]
    assert "<p>" not in head and "<pre" not in head, f"{page}: something before its conclusion"
    box = text[text.index(marker) : text.index("</div>", text.index(marker))]
    link = "../claims.html" if page in TUTORIALS else "claims.html"
    assert f'href="{link}"' in box, page
    if page == "index.html":
        assert re.search(r"\d+ claims: \d+ ", html.unescape(box)), "no totals on the home page"


VERDICT_ASSERT = re.compile(
    r"^\s*assert\b[^\n]*(?:verdict|contradicted\(|\"holds\"|does not hold|not testable)",
    re.MULTILINE,
)


def test_no_tutorial_asserts_a_verdicts_direction() -> None:
    """A tutorial asserts its measurements' validity and prints the verdict computed from them;
    no ``assert`` line is about a verdict."""
    found = {}
    for path in sorted((ROOT / "docs").rglob("*.py")):
        hits = VERDICT_ASSERT.findall(path.read_text(encoding="utf-8"))
        if hits:
            found[str(path.relative_to(ROOT))] = hits
    assert not found, found


# every tutorial but the one about writing your own attention tests claims of a source
SOURCE_TUTORIALS = TUTORIALS - {"tutorials/bring-your-own-attention.html"}


@pytest.mark.parametrize("page", sorted(SOURCE_TUTORIALS))
def test_each_source_tutorial_shows_its_ledger_box(site: Path, page: str) -> None:
    """A tutorial about a source shows that source's ledger rows (a box of claims with their
    computed verdicts, each row in its verdict's class and with its icon)."""
    from attnreg.studies.ledger import ICONS, verdict_class

    text = (site / page).read_text(encoding="utf-8")
    assert 'class="admonition note"' in text, page
    box = text[text.index('class="admonition note"') :]
    rows = _ledger_rows(box[: box.index("</table>")])
    assert rows, page
    for cls, icon, shown in rows:
        verdict = _verdict_of(shown)
        assert cls == verdict_class(verdict) and icon == ICONS[verdict], (page, cls, shown)
