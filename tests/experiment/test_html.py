"""The HTML report, rendered in a real headless Chromium (Debian's, driven by Playwright).

The page must be self-contained (no URL in it, no request attempted), show the numbers
the Markdown report shows, sort a table when a header is clicked, open a trial's
drill-down, and escape every piece of text that came from a run.
"""

from __future__ import annotations

import functools
import html
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from teamlead._cli import main
from teamlead.experiment import TrialRecord, TrialWriter, build_report, synthetic_records
from teamlead.experiment.reporting.html import render_html
from teamlead.experiment.reporting.report import Report

if TYPE_CHECKING:
    from playwright.sync_api import Browser

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
HOSTILE = '<script>alert("x")</script><img src="http://example.invalid/x.png">'


def _records() -> list[TrialRecord]:
    records = synthetic_records(
        {"baseline": [0.2] * 8, "delegation": [0.85] * 8},
        trials=3,
        rng=np.random.default_rng(3),
    )
    first = records[0]
    records[0] = first.model_copy(update={"final_text": HOSTILE, "prompt_source": "a&b.md"})
    return records


@pytest.fixture(scope="module")
def page_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("html") / "out"
    with TrialWriter(out / "trials.jsonl") as writer:
        for record in _records():
            writer.append(record)
    (out / "experiment.json").write_text(json.dumps({"version": 1, "control": "baseline"}))
    target = out.parent / "report.html"
    result = CliRunner().invoke(
        main, ["experiment", "report", str(out), "--json", "--html", str(target)]
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["experiment.json", "trials.jsonl"]
    return target


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    """One headless Chromium for the module's page tests (each opens a page of its own)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


def test_the_page_is_self_contained_and_escapes_run_text(page_file: Path) -> None:
    text = page_file.read_text(encoding="utf-8")
    assert HOSTILE not in text
    # No URL anywhere but inside the (escaped, inert) final answer that carried one.
    page_own = text.replace(html.escape(HOSTILE), "")
    assert not re.search(r"(?i)\b(?:https?|ftp|wss?|file):|//[a-z0-9.-]+\.[a-z]{2,}/", page_own)
    assert not re.search(r"(?i)\b(?:src|href)=", page_own)
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in text
    assert "a&amp;b.md" in text
    assert text.count("<script>") == 1  # the sorting script, nothing from a run
    assert "Content-Security-Policy" in text and "default-src 'none'" in text


def test_rendering_the_same_report_is_deterministic() -> None:
    records = _records()
    report = build_report(records, control="baseline", seed=4, n_permutations=500)
    assert render_html(report, records) == render_html(report, records)


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium is not at /usr/bin/chromium")
def test_the_report_renders_sorts_and_drills_down_in_chromium(
    page_file: Path, tmp_path: Path, chromium: Browser
) -> None:
    requests: list[str] = []
    page = chromium.new_page(viewport={"width": 1300, "height": 900})
    try:
        page.on("request", lambda request: requests.append(request.url))
        dialogs: list[str] = []
        page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
        page.goto(page_file.as_uri(), timeout=30_000)
        body = page.inner_text("body")
        assert "Experiment report (control: baseline)" in body
        assert "Verdict rule: a variant is better or worse only when both" in body
        comparisons = page.locator("#comparisons tbody tr")
        assert comparisons.count() == 6
        parallel = comparisons.filter(has_text="parallel").first.inner_text()
        assert "better" in parallel and "(Holm)" in parallel
        assert page.locator("svg").count() >= 2 + 6  # two rate charts, one glyph a row

        # Sorting: clicking "trials" in the per-task table orders by the first column...
        tasks = page.locator("#tasks tbody tr td:first-child")
        original = tasks.all_inner_texts()
        header = page.locator("#tasks thead th").first
        header.click()
        assert header.get_attribute("aria-sort") == "ascending"
        assert tasks.all_inner_texts() == sorted(original)
        header.click()
        assert header.get_attribute("aria-sort") == "descending"
        assert tasks.all_inner_texts() == sorted(original, reverse=True)
        # ...and a numeric column sorts as numbers.
        p_header = page.locator("#comparisons thead th", has_text=re.compile("^p$"))
        p_header.click()
        cells = page.locator("#comparisons tbody tr td:nth-child(7)")
        values = [float(v) for v in cells.evaluate_all("c => c.map(x => x.dataset.sort)")]
        assert values == sorted(values)

        # Drill-down: a trial's final answer is shown as text, never run.
        page.locator("summary", has_text="delegation: 24 trial(s)").click()
        page.locator("summary", has_text="baseline: 24 trial(s)").click()
        hostile = page.locator("pre", has_text="alert(")
        hostile.first.evaluate("e => e.closest('details').open = true")
        assert hostile.first.inner_text() == HOSTILE
        assert dialogs == []

        shot = tmp_path / "experiment-report.png"
        page.screenshot(path=str(shot), full_page=True)
        print(f"screenshot: {shot}")
        assert shot.stat().st_size > 10_000
    finally:
        page.close()
    assert requests == [page_file.as_uri()], requests


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(min_size=1, max_size=60))
def test_any_final_answer_is_escaped(text: str) -> None:
    records = list(_TINY_RECORDS)
    records[0] = records[0].model_copy(update={"final_text": text})
    page = render_html(_tiny_report(), records)
    assert html.escape(text) in page
    body = page.split("<body>", 1)[1]
    assert body.count("<script>") == 1 and body.count("<pre>") == body.count("</pre>") == 4


_TINY_RECORDS = tuple(
    TrialRecord(variant=v, task=f"t{i}", trial=0, status="completed", wall_s=1.0 + i)
    for v in ("a", "b")
    for i in range(2)
)


@functools.cache
def _tiny_report() -> Report:
    """Built once: a report holds no final answer (only the drill-down shows them, from
    the records passed to render_html), so every example can share it."""
    report = build_report(_TINY_RECORDS, control="a", n_permutations=50, mde_simulations=0)
    with_text = [_TINY_RECORDS[0].model_copy(update={"final_text": "x"}), *_TINY_RECORDS[1:]]
    assert build_report(with_text, control="a", n_permutations=50, mde_simulations=0) == report
    return report


SCRIPTED_RUN = Path(__file__).resolve().parents[1] / "fixtures" / "strategy-ab.trials.jsonl"


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium is not at /usr/bin/chromium")
def test_a_scripted_run_leads_with_its_banner_and_verdict_in_chromium(
    tmp_path: Path, chromium: Browser
) -> None:
    """The recorded strategy-ab run (scripted model, primary metric passed): the page opens
    with the scripted-model banner, then the verdict line, then the rest; the primary
    metric stands out; the zero-variance notes are folded."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "trials.jsonl").write_bytes(SCRIPTED_RUN.read_bytes())
    meta = {"version": 1, "control": "baseline", "primary_metric": "passed"}
    (out / "experiment.json").write_text(json.dumps(meta))
    target = tmp_path / "report.html"
    result = CliRunner().invoke(
        main, ["experiment", "report", str(out), "--no-plots", "--html", str(target)]
    )
    assert result.exit_code == 0, result.output
    page = chromium.new_page(viewport={"width": 1300, "height": 900})
    try:
        page.goto(target.as_uri(), timeout=30_000)

        def top(selector: str) -> float:
            box = page.locator(selector).first.bounding_box()
            assert box is not None, selector
            return float(box["y"])

        assert top("h1") < top("#scripted") < top("#headline") < top(".rule")
        assert top("#headline") < top("#variants") < top("#comparisons")
        assert top("#headline") + 60 < 900  # the verdict is on the first screen
        banner = page.locator("#scripted").inner_text()
        assert banner.startswith("Scripted model: every counted trial was answered by")
        verdicts = page.locator("#headline li")
        assert verdicts.count() == 1
        line = " ".join(str(verdicts.first.text_content()).split())
        assert line.startswith("better delegation is better than baseline on passed: 1 vs ")
        assert re.search(r"effect \+0\.\d+ \(95% CI \[0\.\d+, 0\.\d+\]\), p < 0\.0001", line)

        highlighted = "rgb(238, 244, 255)"
        primary = page.locator("#comparisons tbody tr.primary")
        assert primary.count() == 1 and "passed (primary)" in primary.inner_text()
        cell = primary.locator("td").first
        assert cell.evaluate("e => getComputedStyle(e).backgroundColor") == highlighted
        other = page.locator("#comparisons tbody tr:not(.primary) td").first
        assert other.evaluate("e => getComputedStyle(e).backgroundColor") != highlighted
        column = page.locator("#variants th.primary")
        assert column.inner_text() == "passed rate"

        # the MDE notes: each once, under the table, numbered like the marks in its rows
        footnotes = page.locator("#mde-notes li").all_inner_texts()
        assert len(footnotes) == len(set(footnotes)) >= 2, footnotes
        marks = page.locator("#comparisons tbody sup").all_inner_texts()
        numbers = {str(k) for k in range(1, len(footnotes) + 1)}
        assert len(marks) == 8 and set(marks) == numbers and marks[0] == "1"
        assert "simulated:" not in page.locator("#comparisons").inner_text()

        notes = page.locator("#notes > li").all_inner_texts()
        assert len(notes) == len(set(notes))
        assert sum("zero variance" in n for n in notes) <= 2  # folded, not one per metric
        grading = page.locator("#grading").inner_text()
        assert grading == "48 of 48 counted trial(s) graded."

        shot = tmp_path / "scripted-report.png"
        page.screenshot(path=str(shot), full_page=False)
        print(f"screenshot: {shot}")
        assert shot.stat().st_size > 10_000
    finally:
        page.close()
