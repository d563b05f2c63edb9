"""The offline A/B that finds a real difference: ``examples/strategy-ab.toml`` against the
``strategy-ab`` scripted scenario, whose lead follows the strategy prompt it is given.

The records in ``tests/fixtures/strategy-ab.trials.jsonl`` are one full run of the shipped
spec (48 trials, real CLI, scripted model, prompt paths made relative); the statistics are
tested on them, and the figures the docs quote from that run are its report's. A trimmed
copy of the spec runs for real in tests/cli/test_experiment_strategy_ab.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from claude_agent_sdk import ClaudeAgentOptions

import teamlead
from teamlead.experiment import build_report, load_spec, read_records
from teamlead.experiment.reporting.render import render_markdown
from teamlead.testing import ScriptedRequest
from teamlead.testing.scripts import StrategyReview, scenario

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "strategy-ab.toml"
RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "strategy-ab.trials.jsonl"
DOCS_PAGE = ROOT / "docs" / "experiments.md"


def _system(strategy: str) -> str:
    options = teamlead.apply_strategy(ClaudeAgentOptions(), teamlead.load_strategy(strategy))
    prompt = options.system_prompt
    assert isinstance(prompt, dict)
    return str(prompt.get("append", ""))


@pytest.mark.parametrize(
    ("strategy", "delegates"), [("delegation", True), ("parallel-first", True), ("baseline", False)]
)
def test_the_scripted_lead_reads_its_strategy_from_the_system_prompt(
    strategy: str, delegates: bool
) -> None:
    request = ScriptedRequest(
        index=0, body={}, system=_system(strategy), messages=[], tools=("Agent",),
        session_id="s", role="lead", agent=None, stream=True, model="m",
    )  # fmt: skip
    assert StrategyReview.delegates(request) is delegates
    assert StrategyReview.parts("Review it. Parts: cache, db.") == ["cache", "db"]
    assert StrategyReview.parts("Review it.") == ["part-1", "part-2", "part-3"]
    assert isinstance(scenario("strategy-ab"), StrategyReview)


def test_the_recorded_run_finds_a_significant_difference_and_says_the_model_is_scripted() -> None:
    read = read_records(RECORDS)
    assert read.warnings == [] and len(read.records) == load_spec(SPEC).total_trials == 48
    for r in read.records:
        assert r.status == "completed" and r.scripted_model is True and r.grade is not None
        if r.variant == "delegation":  # one message of Agent calls, one per part; the check passes
            assert r.parallel and r.agent_calls == r.max_agent_calls_per_message >= 2
            assert r.passed is True and r.grade == 1.0
        else:  # searched itself, one part per message, and sometimes ran out
            assert not r.delegated and r.passed is (r.grade == 1.0)
    baseline_passed = [r.passed for r in read.records if r.variant == "baseline"]
    assert 0 < sum(baseline_passed) < len(baseline_passed)

    report = build_report(read.records, control="baseline", primary="passed", seed=0)
    passed = next(c for c in report.comparisons if c.metric == "passed")
    assert passed.correction == "holm" and passed.tasks == 6
    assert passed.verdict == "better" and passed.p_adjusted is not None
    assert passed.p_adjusted < 0.05 and passed.ci_low is not None and passed.ci_low > 0
    text = render_markdown(report)
    assert "delegation is better than baseline on passed:" in text
    assert "Scripted model: every counted trial was answered by teamlead's scripted" in text
    assert "- 48 of 48 counted trial(s) graded." in text


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_the_docs_quote_the_recorded_runs_own_figures() -> None:
    section = DOCS_PAGE.read_text(encoding="utf-8").split(
        "## An offline A/B that finds a difference", 1
    )[1]
    section = section.split("\n## ", 1)[0]
    assert "tests/fixtures/strategy-ab.trials.jsonl" in section
    report = build_report(read_records(RECORDS).records, control="baseline", primary="passed")
    verdict = section.split("```\n", 2)[2].split("```", 1)[0]  # the block after the bash one
    assert _flat(verdict) in _flat(render_markdown(report))
    by_metric = {c.metric: c for c in report.comparisons}
    for metric in ("wall_s", "cost_usd"):
        comparison = by_metric[metric]
        assert comparison.verdict == "worse" and comparison.diff is not None
        assert f"({comparison.diff:.3f}x)" in section, metric
    grade = by_metric["grade"].control_value
    assert grade is not None and f"1 vs {grade:.3f}" in _flat(section)
