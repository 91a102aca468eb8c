"""The report page: sections, escaping, failed studies, and the page in headless Chromium."""

import base64
import io
import shutil

import pytest
from PIL import Image

from attnreg.report.build import build_report
from attnreg.report.page import render, section
from attnreg.runs.store import CellResult, ResultsStore


def _png() -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (40, 20), "blue").save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def _cell(study, status="done", **extra):
    return CellResult(
        study, {"seed": 0, **extra.pop("config", {})}, 0, "0.1.0", status, 0.0, 1.0, **extra
    )


def test_html_in_labels_is_escaped():
    evil = "<script>alert('x')</script>"
    cell = _cell(
        "verify",
        config={"label": evil},
        rows=[{"construction": evil, "passed": True}],
        summary={evil: evil},
        figures=[{"name": "f", "caption": evil, "png": _png()}],
    )
    html = render([section(cell, f"attnreg verify {evil}", table=True)], "r.db", 1)
    assert "<script>" not in html
    assert "&lt;script&gt;" in html


def test_failed_study_is_shown_and_others_still_appear():
    ok = _cell("verify", rows=[{"passed": True}], summary={"certificate": "72 of 72"})
    bad = _cell("capacity", status="failed", error="Traceback: ValueError: boom")
    html = render(
        [section(ok, "attnreg verify", True), section(bad, "attnreg capacity", False)], "r.db", 2
    )
    assert 'id="verify"' in html and 'id="capacity"' in html
    assert "This study failed" in html and "ValueError: boom" in html
    assert "72 of 72" in html


@pytest.fixture(scope="module")
def verify_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    page = build_report(out, studies=["verify"], progress=False)
    return out, page


def test_report_writes_page_and_tidy_results(verify_report):
    out, page = verify_report
    html = page.read_text()
    assert "verify — the equivalence certificate" in html
    assert "data:image/png;base64," in html
    assert (out / "results.csv").stat().st_size > 0
    assert (out / "results.parquet").stat().st_size > 0
    with ResultsStore(out / "results.db") as store:
        assert store.count("done") == 1


def test_report_reuses_stored_cells(verify_report):
    out, _ = verify_report
    with ResultsStore(out / "results.db") as store:
        before = [c.finished for c in store.cells()]
    build_report(out, studies=["verify"], progress=False)
    with ResultsStore(out / "results.db") as store:
        assert [c.finished for c in store.cells()] == before


def _chromium():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=shutil.which("chromedriver") or "/usr/bin/chromedriver")
    return webdriver.Chrome(service=service, options=options)


def test_page_in_headless_chromium(verify_report):
    _, page = verify_report
    driver = _chromium()
    try:
        driver.set_window_size(390, 844)  # a phone
        driver.get(page.as_uri())
        widths = driver.execute_script(
            "return Array.from(document.images).map(i => i.complete ? i.naturalWidth : 0)"
        )
        assert widths and all(w > 0 for w in widths)
        for section_id in ("overview", "verify", "results"):
            assert driver.find_elements("id", section_id), section_id
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
        overflow = driver.execute_script(
            "return document.documentElement.scrollWidth <= window.innerWidth + 1"
        )
        assert overflow, "the page must not scroll sideways on a phone"
    finally:
        driver.quit()
