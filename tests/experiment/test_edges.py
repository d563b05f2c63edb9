"""The report at the edges of its statistics (issue #24 and the plot crash of issue #23).

Each case goes through :func:`build_report` and the formats a user reads (Markdown, JSON,
HTML, the PNG plots), not only through the helpers. The simulation checks behind the
methods (coverage, false positives, power at the MDE, family-wise error) are in
``tests/experiment/test_calibration.py``, marked ``slow``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from teamlead._cli import main
from teamlead.experiment import (
    Comparison,
    Report,
    TrialRecord,
    build_report,
    render_json,
    render_markdown,
    write_report,
)
from teamlead.experiment.reporting.html import render_html
from teamlead.experiment.reporting.report import upgrade_report_json, why_lines
from teamlead.experiment.specs.records import append_record
from teamlead.experiment.stats.rates import ICC_PRIOR

from ..records import trial_record

# Fewer relabelings and MDE simulations than the defaults: the same code, a tenth the time.
QUICK: dict[str, Any] = {"n_permutations": 500, "mde_simulations": 100}


def _record(variant: str, task: str, trial: int, *, parallel: bool, **kw: object) -> TrialRecord:
    return trial_record(
        variant, task, trial, parallel=parallel, **{"tokens": 1000 + 10 * trial, **kw}
    )


def _rates(rates: dict[str, list[list[int]]], **kw: object) -> list[TrialRecord]:
    """Records whose ``parallel`` outcomes are ``rates[variant][task]`` (a list of 0/1)."""
    return [
        _record(variant, f"t{i}", j, parallel=bool(outcome), **kw)
        for variant, tasks in rates.items()
        for i, outcomes in enumerate(tasks)
        for j, outcome in enumerate(outcomes)
    ]


def _row(report: Report, metric: str, variant: str | None = None) -> Comparison:
    return next(
        c
        for c in report.comparisons
        if c.metric == metric and (variant is None or c.variant == variant)
    )


def _every_format(
    report: Report, records: list[TrialRecord], folder: Path, *, plots: bool = False
) -> dict[str, str]:
    """Markdown, JSON (strict), HTML and, with ``plots``, the PNGs (matplotlib on)."""
    written = write_report(folder, report, plots=plots)
    assert not plots or any(p.suffix == ".png" and p.stat().st_size > 1000 for p in written)
    return {
        "markdown": render_markdown(report),
        "json": json.dumps(json.loads(render_json(report)), allow_nan=False),
        "html": render_html(report, records),
    }


# -- 1. skewed means ----------------------------------------------------------------------------
def test_times_costs_and_tokens_get_the_geometric_mean_interval_and_say_so() -> None:
    rng = np.random.default_rng(3)
    records = [
        _record(
            arm,
            f"t{i}",
            j,
            parallel=False,
            wall_s=float(scale * rng.lognormal(0, 1.0)),
            cost_usd=float(scale * rng.lognormal(-4, 1.0)),
        )
        for i, scale in enumerate([5, 20, 60, 200, 900])
        for arm in ("a", "b")
        for j in range(4)
    ]
    report = build_report(records, control="a", **QUICK)
    wall = report.variants["a"].wall_s
    assert wall.interval_of == "geometric mean" and wall.geo_mean is not None
    assert wall.ci_low is not None and wall.ci_high is not None
    assert wall.ci_low < wall.geo_mean < wall.ci_high
    assert report.variants["a"].agent_calls.interval_of == "mean"
    text = render_markdown(report)
    assert "geometric mean" in text and "geo [" in text
    assert any("geometric mean" in line for line in report.to_json()["methods"])
    cost = _row(report, "cost_usd")
    assert cost.estimand == "ratio of geometric means"


def test_a_zero_cost_falls_back_to_the_arithmetic_mean_with_a_note() -> None:
    records = [
        _record(arm, f"t{i}", j, parallel=False, cost_usd=0.0 if (i, j) == (0, 0) else 0.02)
        for i in range(4)
        for arm in ("a", "b")
        for j in range(3)
    ]
    report = build_report(records, control="a", **QUICK)
    cost = report.variants["a"].cost_usd
    assert cost.interval_of == "mean" and cost.note and "geometric mean is undefined" in cost.note
    assert ("a cost_usd", cost.note) in why_lines(report)
    assert _row(report, "cost_usd").estimand == "ratio of means"


# -- 2. rate intervals at extreme rates ---------------------------------------------------------
def test_a_rate_of_zero_gets_an_interval_widened_by_the_icc_prior() -> None:
    records = _rates({"a": [[0] * 4] * 10, "b": [[0, 0, 0, 1]] * 10})
    rate = build_report(records, control="a", **QUICK).variants["a"].parallel_rate
    # No variation: the raw ICC is undefined, the prior stands in (not 0, so deff > 1).
    assert rate.icc == pytest.approx(ICC_PRIOR)
    assert rate.design_effect == pytest.approx(1 + 3 * ICC_PRIOR)
    assert rate.estimate == 0.0 and rate.ci_low == 0.0
    assert rate.ci_high is not None and 0.1 < rate.ci_high < 0.3


def test_one_task_has_no_rate_interval_and_says_why_everywhere(tmp_path: Path) -> None:
    records = _rates({"a": [[0, 1, 0, 0]], "b": [[1, 1, 0, 1]]})
    report = build_report(records, control="a", **QUICK)
    rate = report.variants["a"].parallel_rate
    assert rate.estimate == 0.25 and rate.ci_low is None and rate.ci_high is None
    assert rate.note is not None and rate.note.startswith("one task: no interval")
    formats = _every_format(report, records, tmp_path)
    assert "a parallel: one task: no interval" in formats["markdown"]
    assert "a parallel: one task: no interval" in formats["html"]
    assert json.loads(formats["json"])["variants"]["a"]["parallel_rate"]["note"] == rate.note


# -- 3, 4. the MDE over plausible control rates, with a direction -------------------------------
def test_a_zero_control_prints_a_detectable_rise_and_no_drop() -> None:
    records = _rates({"a": [[0] * 4] * 10, "b": [[0] * 4] * 10})
    report = build_report(records, control="a", **QUICK)
    parallel = _row(report, "parallel")
    assert parallel.mde_direction == "rise" and parallel.mde is not None
    # The point estimate 0 as the truth gave 0.18; the plausible rates above 0 need more.
    assert 0.19 < parallel.mde < 0.4
    assert (parallel.mde_text or "").startswith("detectable rise of ")
    assert "no drop can be detected: the control's rate is 0" in (parallel.mde_text or "")
    text = render_markdown(report)
    assert "(detectable rise of " in text and "no drop can be detected" in text


def test_a_control_near_one_cannot_rise_and_the_report_says_so(tmp_path: Path) -> None:
    high = [[1, 1, 1, 1]] * 8 + [[1, 1, 1, 0]] * 2  # 0.95
    records = _rates({"a": high, "b": high})
    report = build_report(records, control="a", **QUICK)
    parallel = _row(report, "parallel")
    # Higher is better, but no rise from 0.95 is detectable: the drop is printed instead.
    assert parallel.mde_direction == "drop" and parallel.mde_rise is None
    assert parallel.reasons == {}
    assert (parallel.mde_text or "").startswith(
        "no rise can be detected: the control's rate is 0.95"
    )
    formats = _every_format(report, records, tmp_path)
    for name in ("markdown", "html"):
        assert "no rise can be detected" in formats[name], name
    assert "(detectable drop of " in formats["markdown"]
    assert "rise none, drop " in formats["markdown"]


def test_all_ones_gives_a_drop_with_its_direction() -> None:
    records = _rates({"a": [[1] * 4] * 10, "b": [[1] * 4] * 10})
    parallel = _row(build_report(records, control="a", **QUICK), "parallel")
    assert parallel.mde_direction == "drop" and parallel.mde is not None
    assert "no rise can be detected: the control's rate is 1, so nothing is above it" in (
        parallel.mde_text or ""
    )


# -- 5. zero-width intervals and too few tasks --------------------------------------------------
def test_two_tasks_never_give_a_verdict_however_small_p_is() -> None:
    records = _rates({"a": [[0] * 4] * 2, "b": [[1] * 4] * 2})
    report = build_report(records, control="a", **QUICK)
    parallel = _row(report, "parallel")
    assert parallel.p_value is not None and parallel.p_value < 0.01
    assert parallel.verdict == "inconclusive"
    assert (parallel.explanation or "").startswith(
        "only 2 compared tasks: a verdict needs at least 3"
    )
    assert "only 2 compared tasks" in render_markdown(report)


def test_a_zero_width_interval_decides_no_verdict() -> None:
    records = _rates({"a": [[0] * 4] * 10, "b": [[1] * 4] * 10})
    report = build_report(records, control="a", **QUICK)
    parallel = _row(report, "parallel")
    assert parallel.ci_low == parallel.ci_high == 1.0
    assert parallel.verdict == "inconclusive"
    assert (parallel.explanation or "").startswith("zero variance")


def test_round_off_does_not_hide_a_zero_width_interval() -> None:
    # 1/3 - 0 and 3/6 - 1/6 differ by 1e-16: equal effects, an interval ~1e-16 wide.
    records = _rates(
        {
            "a": [[0, 0, 0], [1, 0, 0, 0, 0, 0]] * 3,
            "b": [[1, 0, 0], [1, 1, 1, 0, 0, 0]] * 3,
        }
    )
    report = build_report(records, control="a", **QUICK)
    parallel = _row(report, "parallel")
    assert parallel.ci_low != parallel.ci_high
    assert parallel.verdict == "inconclusive"
    assert any("parallel: zero variance" in note for note in report.notes), report.notes


# -- 6. a ratio that is the same on every task --------------------------------------------------
def _halved(noise: float) -> list[TrialRecord]:
    rng = np.random.default_rng(6)
    return [
        _record(
            arm,
            f"t{i}",
            j,
            parallel=False,
            wall_s=float(scale * (0.5 if arm == "b" else 1.0) * rng.lognormal(0, noise)),
        )
        for i, scale in enumerate([30, 60, 90, 120, 900])
        for arm in ("a", "b")
        for j in range(4)
    ]


def test_a_ratio_the_same_on_every_task_is_not_n_a() -> None:
    report = build_report(_halved(0.0), control="a", **QUICK)
    wall = _row(report, "wall_s")
    assert wall.diff == pytest.approx(0.5)
    assert wall.ci_low == pytest.approx(0.5) and wall.ci_high == pytest.approx(0.5)
    # Exactly 0.5 on every trial: no spread observed, so no verdict, and it says why.
    assert wall.verdict == "inconclusive" and (wall.explanation or "").startswith("zero variance")
    assert "ci" not in wall.reasons


def test_a_noisy_ratio_the_same_on_every_task_is_bounded_and_called() -> None:
    report = build_report(_halved(0.3), control="a", **QUICK)
    wall = _row(report, "wall_s")
    assert wall.ci_low is not None and wall.ci_high is not None
    assert 0.3 < wall.ci_low < 0.5 < wall.ci_high < 1
    assert wall.verdict == "better" and wall.explanation is None
    # No row says "p < 0.0001" beside an MDE note that no effect can reach p < 0.05.
    assert wall.mde is not None and "does not get" not in (wall.mde_text or "")


# -- 7. a variant whose trials all failed as infrastructure -------------------------------------
def test_an_all_infrastructure_variant_is_listed_as_not_compared(tmp_path: Path) -> None:
    records = _rates({"a": [[0, 1, 0, 0]] * 4, "b": [[1, 1, 0, 1]] * 4})
    records += [
        _record("c", f"t{i}", j, parallel=False, status="failed", error_class="infrastructure")
        for i in range(4)
        for j in range(4)
    ]
    report = build_report(records, control="a", **QUICK)
    assert list(report.variants) == ["a", "b", "c"]
    c = report.variants["c"]
    assert (c.trials, c.excluded) == (0, 16)
    assert c.not_compared == "not compared: all trials failed as infrastructure"
    rows = [r for r in report.comparisons if r.variant == "c"]
    assert rows and {r.verdict for r in rows} == {"not compared"}
    assert len(rows) == len([r for r in report.comparisons if r.variant == "b"])
    formats = _every_format(report, records, tmp_path, plots=True)  # an empty variant plots
    assert "c: not compared: all trials failed as infrastructure" in formats["markdown"]
    assert "| c | all |" in formats["markdown"]
    assert "**not compared**: all trials failed as infrastructure" in formats["markdown"]
    assert "not compared: all trials failed as infrastructure" in formats["html"]
    data = json.loads(formats["json"])
    assert data["variants"]["c"]["not_compared"] == c.not_compared
    assert {r["verdict"] for r in data["comparisons"] if r["variant"] == "c"} == {"not compared"}
    # The other comparisons are adjusted among themselves, as if c did not exist.
    assert _row(report, "parallel", "b").verdict != "not compared"


# -- every n/a has its reason, in every format --------------------------------------------------
@pytest.mark.parametrize(
    "rates",
    [
        {"a": [[0, 1, 0, 0]], "b": [[1, 1, 0, 1]]},  # one task
        {"a": [[0] * 4] * 2, "b": [[1] * 4] * 2},  # two tasks
        {"a": [[1] * 4] * 5, "b": [[1] * 4] * 5},  # all ones
    ],
    ids=["one-task", "two-tasks", "all-ones"],
)
def test_every_n_a_has_a_one_line_reason(rates: dict[str, list[list[int]]]) -> None:
    records = _rates(rates)
    report = build_report(records, control="a", **QUICK)
    fields = {"diff": "diff", "ci": "ci_low", "p_value": "p_value", "p_adjusted": "p_adjusted"}
    for c in report.comparisons:
        for reason_key, attribute in fields.items():
            if getattr(c, attribute) is None:
                assert reason_key in c.reasons, (c.metric, reason_key)
        if c.mde is None:
            assert c.reasons.get("mde"), c.metric
    for name, summary in report.variants.items():
        for key in ("parallel_rate", "delegated_rate"):
            rate = getattr(summary, key)
            if rate.ci_low is None:
                assert rate.note, (name, key)
        for key in ("wall_s", "agent_calls", "cost_usd", "tokens"):
            mean = getattr(summary, key)
            if mean.ci_low is None:
                assert mean.note, (name, key)
    markdown, page = render_markdown(report), render_html(report, records)
    assert why_lines(report), "the case has no n/a: it checks nothing"
    for subject, line in why_lines(report):
        assert f"- {subject}: {line}." in markdown
        assert line.replace("'", "&#x27;") in page


# -- issue 23: rates of 0 and 1 in every format, matplotlib on ----------------------------------
def test_rates_of_zero_and_one_render_in_every_format(tmp_path: Path) -> None:
    records = _rates({"never": [[0] * 3] * 4, "always": [[1] * 3] * 4})
    report = build_report(records, control="never", **QUICK)
    always = report.variants["always"].parallel_rate
    assert always.ci_high == 1.0 and always.ci_low is not None and always.ci_low <= 1.0
    never = report.variants["never"].parallel_rate
    assert never.ci_low == 0.0
    formats = _every_format(report, records, tmp_path, plots=True)
    assert "| always |" in formats["markdown"] and "<svg" in formats["html"]
    assert json.loads(formats["json"])["variants"]["always"]["parallel_rate"]["estimate"] == 1.0


def test_the_report_command_writes_html_and_plots_at_a_rate_of_one(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for record in _rates({"never": [[0] * 2] * 3, "always": [[1] * 2] * 3}):
        append_record(out / "trials.jsonl", record)
    page = tmp_path / "report.html"
    result = CliRunner().invoke(
        main, ["experiment", "report", str(out), "--control", "never", "--html", str(page)]
    )
    assert result.exit_code == 0, result.output
    assert page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert (out / "parallel.png").stat().st_size > 1000
    assert "always" in (out / "report.md").read_text(encoding="utf-8")


# -- older report.json files ---------------------------------------------------------------------
def test_a_version_2_report_json_is_read_as_version_3() -> None:
    old = {
        "version": 2,
        "control": "a",
        "variants": {
            "a": {
                "trials": 4,
                "excluded": 0,
                "parallel_rate": {"estimate": 0.5, "ci_low": 0.2, "ci_high": 0.8},
                "wall_s": {"mean": 3.0, "median": 3.0, "ci_low": 2.0, "ci_high": 4.0},
            }
        },
        "comparisons": [{"variant": "b", "control": "a", "metric": "wall_s", "mde": 1.3}],
        "tasks": {},
        "flaky_tasks": [],
        "notes": [],
    }
    new = upgrade_report_json(old)
    assert new["version"] == 4 and new["methods"] == []
    comparison = new["comparisons"][0]
    assert comparison["mde"] == 1.3 and comparison["mde_direction"] is None
    assert comparison["reasons"] == {} and comparison["estimand"] is None
    variant = new["variants"]["a"]
    assert variant["not_compared"] is None and variant["parallel_rate"]["note"] is None
    assert variant["workflow_agents"] is None  # version 4 added it
    assert variant["wall_s"]["interval_of"] == "mean" and variant["wall_s"]["geo_mean"] is None
    assert math.isclose(variant["wall_s"]["ci_low"], 2.0)
