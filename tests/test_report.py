"""The report page: sections, escaping, failed studies, and the page in headless Chromium."""

import base64
import io
import math

import pytest
from chromium import chromium
from PIL import Image
from tiny_depth import TINY_DEPTH

from attnreg.report.build import build_report
from attnreg.report.page import render, section
from attnreg.runs.store import CellResult, ResultsStore
from attnreg.studies.registry import STUDIES


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


# every study, on grids small enough for the suite
TINY = {
    "capacity": {
        "seeds": 1,
        "queries": 50,
        "pinv_d": [4, 8],
        "hebbian_d": [60],
        "hebbian_epsilons": [0.1],
        "dam2_d": [16, 32],
        "dam3_d": [12, 16],
        "dam4_d": [12],
        "softmax_d": [8, 10],
        "sphere_d": [6, 8],
        "grid_random_d": 10,
        "digits_n": [30],
    },
    "compare": {
        "data_modes": ["synthetic", "sine"],
        "variants": ["regression", "softmax"],
        "qk": ["shared"],
        "layernorm": [False],
        "n_train": 40,
        "n_test": 20,
        "d": 3,
        "steps": 20,
        "ols_steps": 20,
        "probe_steps": 20,
        "shift_magnitudes": [0.0, 1.0],
    },
    "icl": {
        "models": ["lsa-1"],
        "steps": 30,
        "eval_tasks": 200,
        "fit_tasks": 200,
        "batch": 128,
        "sweep_tasks": 40,
        "alignment_tasks": 40,
        "explain_tasks": 100,
        "eval_every": 10,
        "input_scales": [1.0, 2.0],
        "teacher_scales": [1.0],
    },
    "depth": dict(TINY_DEPTH),
    "layers": {
        "d": 3,
        "n_ctx": 6,
        "batch": 32,
        "steps": 5,
        "eval_tasks": 64,
        "fit_tasks": 64,
        "explain_tasks": 16,
        "layers": ["linear", "mesa"],
        "tasks": ["clean"],
        "memory_d": 4,
        "memory_ratios": [0.5, 1.0, 2.0],
        "memory_trials": 3,
        "memory_passes": 2,
    },
}


@pytest.fixture(scope="module")
def full_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("full-report")
    page = build_report(out, progress=False, overrides=TINY, workers=2)
    return out, page


def test_every_study_appears_with_its_figures(full_report):
    out, page = full_report
    html = page.read_text()
    with ResultsStore(out / "results.db") as store:
        cells = store.cells()
        assert sorted(c.study for c in cells) == sorted(STUDIES)
        assert all(c.status == "done" for c in cells), [c.error for c in cells]
        for cell in cells:
            assert cell.figures, cell.study
            assert f'id="{cell.study}"' in html
    assert "with seeds = 1" in html  # the re-create command names the overrides


def test_unknown_study_in_overrides_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no-such-study"):
        build_report(tmp_path, overrides={"no-such-study": {}}, progress=False)


def test_bad_override_values_are_refused_before_anything_runs(tmp_path):
    """The audit: a value the config refuses (not only an unknown key) stops the report
    before anything runs; it used to write the page with the study shown as failed."""
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=r"overrides of verify: dtypes: unknown value 'float16'"):
        build_report(out, overrides={"verify": {"dtypes": ["float16"]}}, progress=False)
    with pytest.raises(ValueError, match=r"overrides of icl: lr: must be a finite number > 0"):
        build_report(out, studies=["verify"], overrides={"icl": {"lr": -1.0}}, progress=False)
    assert not out.exists()


def test_bad_arguments_are_refused_before_anything_runs(tmp_path):
    a_file = tmp_path / "page"
    a_file.write_text("a file")
    with pytest.raises(ValueError, match=f"{a_file} is a file"):
        build_report(a_file, studies=["verify"], progress=False)
    with pytest.raises(ValueError, match="out of range"):
        build_report(tmp_path / "out", studies=["verify"], seed=2**63, progress=False)
    with pytest.raises(ValueError, match="workers"):
        build_report(tmp_path / "out", studies=["verify"], workers=-2, progress=False)
    assert not (tmp_path / "out").exists()


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


def _chromium():  # type: ignore[no-untyped-def]
    return chromium()


def png_width(uri: str) -> int:
    """The width in a PNG ``data:`` URI's header (IHDR: bytes 16–19, big-endian)."""
    head, _, data = uri.partition(",")
    assert head == "data:image/png;base64", head[:40]
    raw = base64.b64decode(data)
    assert raw[:8] == b"\x89PNG\r\n\x1a\n" and raw[12:16] == b"IHDR"
    return int.from_bytes(raw[16:20], "big")


def test_page_in_headless_chromium(full_report):
    out, page = full_report
    with ResultsStore(out / "results.db") as store:
        stored = sum(len(c.figures) for c in store.cells())
    driver = _chromium()
    try:
        driver.set_window_size(390, 844)  # a phone
        driver.get(page.as_uri())
        images = driver.execute_script(
            "return Array.from(document.images)"
            ".map(i => [i.complete ? i.naturalWidth : 0, i.getAttribute('src')])"
        )
        # every stored figure is on the page, and the browser decoded each at its own width
        # (before: any positive width passed, so a page that lost figures passed too)
        assert stored > 0 and len(images) == stored, (len(images), stored)
        assert [w for w, _ in images] == [png_width(src) for _, src in images]
        for section_id in ("overview", *STUDIES, "results"):
            assert driver.find_elements("id", section_id), section_id
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
        overflow = driver.execute_script(
            "return document.documentElement.scrollWidth <= window.innerWidth + 1"
        )
        assert overflow, "the page must not scroll sideways on a phone"
    finally:
        driver.quit()


def _expected_verdict(claim):
    """A ledger row's verdict recomputed from its kind, regime, values and threshold."""
    untestable = claim["why"].startswith("Not testable")
    if claim["kind"] == "open question":
        return "not testable" if untestable else "open question"
    finite = [v for v in claim["values"].values() if math.isfinite(v)]
    if untestable or not finite or claim["threshold"] is None:
        return "not testable"
    judged = [v for c, v in claim["values"].items() if c not in claim.get("regime_unmet", [])]
    if claim["regime_met"] is False or not judged:
        return "no verdict: reduced scale"
    limit = claim["threshold"]
    ok = [math.isfinite(v) and (v <= limit if claim["op"] == "<=" else v >= limit) for v in judged]
    if all(ok):
        return "conditional" if ", on condition: " in claim["why"] else "holds"
    return "partial" if any(ok) else "does not hold"


def test_the_first_section_is_the_claims_ledger_with_verdicts_from_the_numbers(full_report):
    """The page opens with the ledger; every stored claim's verdict — with the committed
    full-scale verdicts read in, as the page shows them — is what its numbers give against its
    threshold (recomputed here, the cases below a regime left out), and each appears in the
    ledger with its verdict, its reason and its colour class."""
    import re

    from markupsafe import escape

    from attnreg.stored import claim_rows
    from attnreg.studies.ledger import LEDGER_KEY, verdict_class

    out, page = full_report
    text = page.read_text()
    sections = re.findall(r'<section id="([^"]+)"', text)
    assert sections[0] == "claims", sections[:3]
    ledger = text[text.index('<section id="claims">') : text.index("</section>")]
    with ResultsStore(out / "results.db") as store:
        cells = list(store.cells())
    with_claims = set()
    for cell in cells:
        if cell.summary.get(LEDGER_KEY) is None:
            continue
        with_claims.add(cell.study)
        for claim in claim_rows(cell):
            assert claim["verdict"] == _expected_verdict(claim), claim
            assert str(escape(claim["why"])) in ledger, claim["why"]
            assert str(escape(claim["verdict_text"])) in ledger, claim["verdict_text"]
            assert f'class="{verdict_class(claim["verdict"])}"' in ledger
    assert with_claims == {name for name, spec in STUDIES.items() if spec.ledger}


LEDGER_JSON_KEYS = {
    "source",
    "quote",
    "where",
    "kind",
    "paper_regime",
    "run_regime",
    "measurement",
    "values",
    "threshold",
    "threshold_origin",
    "verdict",
}


def test_report_writes_ledger_json_matching_the_page(full_report):
    """``ledger.json`` beside ``index.html``: strict JSON (no NaN or Infinity), one object per
    stored claim with the issue's keys, its totals those of its rows, and the page's ledger
    opens with the same totals and shows one coloured row per claim, as many of each verdict as
    the file counts."""
    import json
    import re

    from markupsafe import escape

    from attnreg.studies.ledger import LEDGER_KEY, VERDICTS, totals, totals_text, verdict_class

    def no_constant(name: str) -> None:
        raise AssertionError(f"ledger.json is not strict JSON: it holds {name}")

    out, page = full_report
    data = json.loads((out / "ledger.json").read_text(encoding="utf-8"), parse_constant=no_constant)
    claims = data["claims"]
    with ResultsStore(out / "results.db") as store:
        stored = [
            (cell.study, claim)
            for cell in store.cells()
            for claim in (cell.summary.get(LEDGER_KEY) or {}).get("claims", [])
        ]
    assert claims and len(claims) == len(stored)
    assert sorted((c["study"], c["quote"]) for c in claims) == sorted(
        (s, c["quote"]) for s, c in stored
    )
    for claim in claims:
        missing = LEDGER_JSON_KEYS - set(claim)
        assert not missing, (missing, claim["quote"])
        assert claim["verdict"] in VERDICTS
        assert claim["kind"] in ("identity", "empirical", "remark", "open question")
        assert isinstance(claim["values"], dict)
        assert (claim["threshold"] is None) == (claim["threshold_origin"] is None)
    assert data["totals"] == totals(claims)
    assert sum(data["totals"].values()) == len(claims)
    text = page.read_text()
    ledger = text[text.index('<section id="claims">') : text.index("</section>")]
    assert str(escape(totals_text(claims))) in ledger
    assert ledger.index(str(escape(totals_text(claims)))) < ledger.index("<table")
    shown = re.findall(r'<tr class="(verdict-[a-z-]+)"', ledger)
    assert len(shown) == len(claims)
    for verdict, n in data["totals"].items():
        assert shown.count(verdict_class(verdict)) == n, verdict


def test_no_summary_paragraph_exceeds_sixty_words(full_report):
    """A summary is a short lead and tables: no prose paragraph over 60 words, in every study
    of the registry."""
    from attnreg.studies.answers import paragraphs
    from attnreg.studies.ledger import LEDGER_KEY

    out, _ = full_report
    with ResultsStore(out / "results.db") as store:
        cells = list(store.cells())
        assert {c.study for c in cells} == set(STUDIES)
        for cell in cells:
            summary = {k: v for k, v in cell.summary.items() if k != LEDGER_KEY}
            for text in paragraphs(summary):
                assert len(text.split()) <= 60, (cell.study, text)


def test_pages_of_a_build_share_one_store(tmp_path, monkeypatch):
    """``attnreg.stored``: the first call runs a study's cell and stores it, every later one
    (another page, another process) reads it; the store is the one the environment names."""
    from attnreg import stored
    from attnreg.runs.cells import make_cell

    path = tmp_path / "build" / "results.db"
    monkeypatch.setenv(stored.ENVIRONMENT, str(path))
    monkeypatch.setattr(
        stored, "_cell", lambda study, profile, seed: make_cell(study, TINY[study], seed, profile)
    )
    assert stored.store_path() == path
    assert stored.run_missing(["layers"]) == ["layers"]
    first = stored.study_cell("layers")
    assert stored.run_missing(["layers"]) == []
    again = stored.study_cell("layers")
    assert (again.started, again.finished) == (first.started, first.finished)
    with ResultsStore(path) as store:
        assert store.count("done") == 1
    rows = stored.claim_rows(first)
    assert rows and all("verdict" in r and "why" in r for r in rows)
    monkeypatch.delenv(stored.ENVIRONMENT)
    assert stored.store_path() != path  # no store named: one private to this process


def test_site_ledger_html_opens_with_totals_and_escapes():
    """The site's ledger table (``attnreg.report.ledger_html``): the totals first, one row per
    claim in its verdict's class with its icon, every text escaped; the opening box links to the
    ledger."""
    from attnreg.report.ledger_html import ledger_page, opening
    from attnreg.studies.ledger import EMPIRICAL, Claim, Quote, totals_text
    from attnreg.studies.sources import TANG
    from attnreg.thresholds import Threshold

    evil = "<script>x</script>"
    claims = [
        Claim(Quote(TANG, evil, "§ 1"), EMPIRICAL, "error", {"a": 0.1}, Threshold("<=", 1.0, "o")),
        Claim(
            Quote(TANG, "b", "§ 2"),
            EMPIRICAL,
            "error",
            {"a": 2.0, "b": 0.5},
            Threshold("<=", 1.0, "o"),
        ),
    ]
    rows = [{"study": "compare"} | c.row() for c in claims]
    page = ledger_page(rows)
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert page.index(totals_text(rows)) < page.index("<table")
    assert page.count('<tr class="verdict-holds">') == 1
    assert page.count('<tr class="verdict-partial">') == 1
    assert "✔ holds" in page and "◑ partial 1 of 2" in page
    box = opening("A lead.", rows, "../claims.html")
    assert 'href="../claims.html"' in box and totals_text(rows) in box
