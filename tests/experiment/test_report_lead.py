"""What a report leads with: one verdict line per comparison on the primary metric, the
scripted-model warning, how many trials were graded and why the others were not, notes
folded instead of repeated, and costs to significant digits, in Markdown, JSON and HTML."""

from __future__ import annotations

import html
import re

import numpy as np
import pytest

from teamlead.experiment import TrialRecord, build_report, synthetic_records
from teamlead.experiment.reporting.headline import fold_notes, grading_lines, headline, sig
from teamlead.experiment.reporting.html import render_html
from teamlead.experiment.reporting.render import render_markdown
from teamlead.experiment.reporting.report import Report, upgrade_report_json

# Few relabelings and no MDE simulation (only the test of the MDE line needs one): these
# tests are about what the report shows, the statistics are tested elsewhere.
QUICK = {"n_permutations": 200, "mde_simulations": 0}


def _synthetic(rates: dict[str, list[float]], **update: object) -> list[TrialRecord]:
    records = synthetic_records(rates, trials=3, rng=np.random.default_rng(3))
    return [r.model_copy(update=update) for r in records]


def _primary(report: Report) -> list[str]:
    return [headline(c, report.alpha) for c in report.comparisons if c.metric == "parallel"]


def test_a_detected_difference_leads_with_direction_effect_interval_and_p() -> None:
    records = _synthetic({"baseline": [0.2] * 8, "delegation": [0.9] * 8, "terse": [0.9] * 8})
    report = build_report(records, control="baseline", seed=1, **QUICK)
    lines = _primary(report)
    assert len(lines) == 2  # one per compared variant, on the primary metric only
    for line, c in zip(
        lines, [c for c in report.comparisons if c.metric == "parallel"], strict=True
    ):
        assert c.verdict == "better" and c.diff is not None and c.p_adjusted is not None
        assert line.startswith(f"{c.variant} is better than baseline on parallel: ")
        effect = re.search(r"effect \+([0-9.]+) \(95% CI \[([0-9.]+), ([0-9.]+)\]\)", line)
        assert effect is not None, line
        shown = [float(g) for g in effect.groups()]
        assert shown == pytest.approx([c.diff, c.ci_low, c.ci_high], abs=1e-3)
        assert "(Holm)" in line and re.search(r"p (<|=) [0-9.]+", line)
    page = render_html(report, records)
    lead = page.index('id="headline"')
    assert lead < page.index("<h2>Variants</h2>") and lead < page.index('class="rule"')
    for line in lines:
        assert html.escape(line) in page
    assert f"- {lines[0]}" in render_markdown(report)


def test_no_difference_says_so_with_the_mde() -> None:
    records = _synthetic({"baseline": [0.5] * 6, "delegation": [0.5] * 6})
    report = build_report(records, control="baseline", seed=2, n_permutations=200)
    c = next(c for c in report.comparisons if c.metric == "parallel")
    assert c.verdict == "inconclusive" and c.mde is not None
    line = headline(c, report.alpha)
    assert line.startswith("delegation vs baseline on parallel: no detectable difference (")
    mde = re.search(r"the smallest effect this design detects \(MDE\) is ([0-9.]+)\.$", line)
    assert mde is not None and float(mde.group(1)) == pytest.approx(c.mde, abs=1e-3)


def test_a_comparison_without_an_effect_says_why_in_its_line() -> None:
    records = _synthetic({"baseline": [0.5] * 4, "delegation": [0.5] * 4})
    c = build_report(records, control="baseline", seed=2, **QUICK).comparisons[0]
    gone = c.model_copy(update={"diff": None, "ci_low": None, "ci_high": None})
    assert headline(gone.model_copy(update={"mde_note": "no task has trials in both."}), 0.05) == (
        f"delegation vs baseline on {c.metric}: not compared; no task has trials in both."
    )
    worded = gone.model_copy(update={"mde_note": "not compared: every trial failed"})
    assert headline(worded, 0.05).endswith(f"on {c.metric}: not compared: every trial failed.")


def test_the_primary_metric_is_highlighted() -> None:
    records = _synthetic({"baseline": [0.2] * 6, "delegation": [0.9] * 6})
    page = render_html(build_report(records, control="baseline", seed=1, **QUICK), records)
    rows = re.findall(r"<tr( class=\"primary\")?><td>delegation</td><td>([^<]+)</td>", page)
    assert [metric for marked, metric in rows if marked] == ["parallel (primary)"]
    assert len(rows) > 1  # the other metrics' rows are not marked
    assert '<th scope="col" class=primary>parallel rate</th>' in page
    assert page.count('<td class="primary"') == 2  # the column, one cell per variant


def test_costs_keep_significant_digits() -> None:
    records = _synthetic({"baseline": [0.2] * 6, "delegation": [0.9] * 6})
    records = [r.model_copy(update={"cost_usd": 0.00512 + 0.00001 * r.trial}) for r in records]
    report = build_report(records, control="baseline", seed=1, **QUICK)
    cost = report.variants["baseline"].cost_usd
    expected = f"{sig(cost.mean)} [{sig(cost.ci_low)}, {sig(cost.ci_high)}]"
    assert expected.startswith("0.00513 [0.00")  # not 0.005 [0.005, 0.005]
    assert expected in render_html(report, records)
    assert sig(cost.mean) in render_markdown(report)
    assert "0.005 [0.005, 0.005]" not in render_html(report, records)


def test_repeated_notes_are_folded_into_one() -> None:
    # every trial of both arms has the same cost, tokens and calls: one zero-variance note
    # per variant and metric, which the page shows once with its cases
    records = _synthetic({"baseline": [0.0] * 4, "delegation": [1.0] * 4})
    records = [
        r.model_copy(
            update={"cost_usd": 0.01, "input_tokens": 100, "output_tokens": 10, "wall_s": 5.0}
        )
        for r in records
    ]
    report = build_report(records, control="baseline", seed=1, **QUICK)
    zero = [n for n in report.notes if "zero variance; the interval has zero width" in n]
    assert len(zero) >= 4, report.notes
    page = render_html(report, records)
    assert page.count("zero variance; the interval has zero width") == 1
    assert f"({len(zero)} cases)" in page
    folded = fold_notes(report.notes)
    assert len(folded) < len(report.notes)
    subjects = next(s for text, s in folded if text.startswith("zero variance; the interval"))
    assert "baseline cost_usd (every trial 0.01)" in subjects
    markdown = render_markdown(report)
    assert markdown.count("zero variance; the interval has zero width") == 1


def test_grading_says_how_many_were_graded_and_why_not() -> None:
    records = _synthetic({"baseline": [0.2] * 4, "delegation": [0.9] * 4}, grade=0.8)
    no_score = "the grader's reply has no 'SCORE: <0-10>' line: 'Scripted side reply.'"
    for i in range(5):
        records[i] = records[i].model_copy(update={"grade": None, "grader_error": no_score})
    records[5] = records[5].model_copy(
        update={"grade": None, "grader_error": "APIConnectionError: Connection error."}
    )
    report = build_report(records, control="baseline", seed=1, **QUICK)
    assert report.grading is not None
    assert (report.grading.trials, report.grading.graded) == (24, 18)
    assert report.grading.not_graded == {no_score: 5, "APIConnectionError: Connection error.": 1}
    markdown = render_markdown(report)
    assert "## Grading\n\n- 18 of 24 counted trial(s) graded.\n- 5 not graded: the grader's" in (
        markdown
    )
    assert report.to_json()["grading"] == {
        "trials": 24,
        "graded": 18,
        "not_graded": {no_score: 5, "APIConnectionError: Connection error.": 1},
    }
    page = render_html(report, records)
    assert '<p id="grading">18 of 24 counted trial(s) graded.</p>' in page
    assert html.escape(f"5 not graded: {no_score}") in page
    # a real model's replies without a score differ: the most frequent reasons are shown
    for i in range(6, 14):
        reply = f"the grader's reply has no 'SCORE: <0-10>' line: 'reply {i}'"
        records[i] = records[i].model_copy(update={"grade": None, "grader_error": reply})
    many = build_report(records, control="baseline", seed=1, **QUICK)
    lines = grading_lines(many.grading)
    assert lines[0] == "10 of 24 counted trial(s) graded." and len(lines) == 1 + 5 + 1
    assert lines[1] == f"5 not graded: {no_score}"
    assert lines[-1] == (
        "5 not graded for 5 other reason(s); each trial's is its grader_error in trials.jsonl"
    )
    # without a grader there is no section at all
    plain = build_report(_synthetic({"a": [0.2] * 4, "b": [0.9] * 4}), control="a", **QUICK)
    assert plain.grading is None and "## Grading" not in render_markdown(plain)


def test_a_scripted_model_is_flagged_and_older_records_are_not() -> None:
    records = _synthetic({"baseline": [0.2] * 4, "delegation": [0.9] * 4}, scripted_model=True)
    report = build_report(records, control="baseline", seed=1, **QUICK)
    assert (report.trials, report.scripted_trials) == (24, 24)
    page = render_html(report, records)
    banner = re.search(r'<p class="banner" id="scripted" role="note">([^<]+)</p>', page)
    assert banner is not None and banner.group(1).startswith(
        "Scripted model: every counted trial was answered by teamlead&#x27;s scripted model"
    )
    assert page.index('id="scripted"') < page.index('id="headline"')
    assert render_markdown(report).splitlines()[2].startswith("> **Scripted model: every")
    assert report.to_json()["scripted_trials"] == 24
    half = records[:12] + [r.model_copy(update={"scripted_model": False}) for r in records[12:]]
    assert "12 of 24 counted trials were" in render_markdown(
        build_report(half, control="baseline", seed=1, **QUICK)
    )
    older = [r.model_copy(update={"scripted_model": None}) for r in records]
    old_report = build_report(older, control="baseline", seed=1, **QUICK)
    assert old_report.scripted_trials == 0
    assert 'id="scripted"' not in render_html(old_report, older)
    assert "Scripted model" not in render_markdown(old_report)


def test_older_report_files_read_without_the_new_keys() -> None:
    old = {"version": 2, "variants": {}, "comparisons": [], "tasks": {}, "flaky_tasks": []}
    upgraded = upgrade_report_json(old)
    assert (upgraded["trials"], upgraded["scripted_trials"], upgraded["grading"]) == (
        None,
        None,
        None,
    )


def test_records_written_before_grading_errors_and_scripted_flags_still_read() -> None:
    line = (
        '{"version": 1, "variant": "a", "task": "t", "trial": 0, "status": "completed", '
        '"wall_s": 1.0, "grade": null, "grader_cost_usd": 0.001}'
    )
    record = TrialRecord.model_validate_json(line)
    assert (record.grader_error, record.scripted_model) == (None, None)
