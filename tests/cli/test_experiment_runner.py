"""The experiment runner on the real CLI, against scripted models: every trial recorded
and reported, infrastructure errors retried and graded, a variant's spawn limits enforced
(the runner's order and the ``experiment`` command's errors and report are checked in
tests/experiment/test_runner.py)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from teamlead._cli.progress import report_for
from teamlead.experiment.running.runner import run_experiment
from teamlead.experiment.specs.records import read_records
from teamlead.experiment.specs.spec import parse_spec
from teamlead.testing import OfflineClaude, Reply, ScriptedRequest, ScriptedServer
from teamlead.testing.scripts import ProbabilisticFanOut

from ..records import ab_spec

pytestmark = pytest.mark.cli

MARKER = "# Delegation strategy"  # the delegation prompt's first line; baseline has none


def test_runner_records_every_trial_of_the_real_cli_and_reports_them(tmp_path: Path) -> None:
    """2 tasks x 2 trials x 2 variants on the real CLI: the lead fans out only under the
    delegation prompt (p=1 vs 0), so every record's parallel flag is known; the statistics
    on many trials are tested on ``synthetic_records`` (tests/experiment/test_stats.py)."""
    spec = parse_spec(ab_spec(2, 2, concurrency=4))
    script = ProbabilisticFanOut(marker=MARKER, p_marked=1.0, p_plain=0.0, seed=11, delay=0.1)
    with ScriptedServer(script) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        summary = anyio.run(
            lambda: run_experiment(spec, tmp_path / "out", base_options=claude.options())
        )
    assert (summary.ran, summary.failed) == (8, 0)
    records = read_records(tmp_path / "out" / "trials.jsonl").records
    assert sorted((r.variant, r.task, r.trial) for r in records) == sorted(
        (v, f"task-{i}", n) for v in ("baseline", "delegation") for i in range(2) for n in range(2)
    )
    for record in records:
        assert record.status == "completed", record
        assert record.prompt_sha256 and record.cli_version and record.sdk_version
        assert record.teamlead_version
        assert record.scripted_model is True  # its answers came from the scripted server
        assert record.parallel == (record.variant == "delegation"), record
        if record.parallel:
            assert record.max_agent_calls_per_message >= 2
            assert record.time_to_first_agent_s is not None and record.time_to_first_agent_s >= 0
    report, _, _ = report_for(tmp_path / "out", control="baseline", seed=1, json_=True, plots=False)
    data = report.to_json()
    rates = {name: v["parallel_rate"]["estimate"] for name, v in data["variants"].items()}
    assert rates == {"baseline": 0.0, "delegation": 1.0}
    parallel = next(c for c in data["comparisons"] if c["metric"] == "parallel")
    assert parallel["variant"] == "delegation" and parallel["diff"] == 1.0


def test_resumable_retries_infrastructure_errors_and_grades(tmp_path: Path) -> None:
    spec = parse_spec(
        ab_spec(
            2,
            1,
            concurrency=2,
            extra='grader = { rubric = "Task: {task}\\nRubric: {rubric}\\nAnswer: {answer}" }',
        )
    )
    failed_once: set[str] = set()
    base = ProbabilisticFanOut(marker=MARKER, seed=3, delay=0.1)

    def script(req: ScriptedRequest) -> Reply:
        # the first attempt of one trial hits an overloaded API that no retry gets past
        # (the relay would hold a plain 529): an infrastructure error
        first_try = req.role == "lead" and not failed_once and not req.tool_uses_sent
        if first_try and "question 1" in req.first_user_text and MARKER in req.system:
            failed_once.add(req.session_id or "")
            return Reply.error(529, should_retry=False)
        return base(req)

    out = tmp_path / "out"
    with ScriptedServer(script) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        errors: list[str] = []
        first = anyio.run(
            lambda: run_experiment(
                spec,
                out,
                base_options=claude.options(),
                on_progress=lambda p: errors.extend(p.grader_errors),
            )
        )
        assert not errors, errors
        assert (first.ran, first.retried, first.failed) == (4, 1, 0)
        records = read_records(out / "trials.jsonl").records
        retried = [r for r in records if r.retried]
        assert len(retried) == 1 and retried[0].attempts == 2 and retried[0].variant == "delegation"
        assert [(r.grade, (r.grader_cost_usd or 0) > 0) for r in records] == [(0.8, True)] * 4
        assert all(r.grader_error is None for r in records)
        # a corrupt line is reported and skipped; the rerun skips every finished key
        with (out / "trials.jsonl").open("a") as fh:
            fh.write("{not json\n")
        seen: list[tuple[int, int, int]] = []
        again = anyio.run(
            lambda: run_experiment(
                spec,
                out,
                base_options=claude.options(),
                on_progress=lambda p: seen.append((p.total, p.done, p.skipped)),
            )
        )
    assert (again.ran, again.skipped) == (0, 4)
    assert seen == [(4, 0, 4)]  # a bar shows 4/4 at once, not 0/4
    read = read_records(out / "trials.jsonl")
    assert len(read.records) == 4 and len(read.warnings) == 1


def test_a_variants_spawn_limits_are_enforced_and_stated_in_its_prompt(tmp_path: Path) -> None:
    """Two delegation arms, one with ``spawn = { max_concurrent_agents = 2 }``: the lead of
    every trial sends 3 Agent calls in one message; in the capped arm at most 2 subagents
    are ever in flight and its prompt says 2, in the other all 3 run at once."""
    spec = parse_spec(
        "\n".join(
            [
                "[experiment]",
                'name = "caps"',
                "trials = 1",
                "concurrency = 1",  # one trial at a time: overlaps are within a trial
                'control = "free"',
                "[[variants]]",
                'name = "free"',
                'strategy = "delegation"',
                "[[variants]]",
                'name = "capped"',
                'strategy = "delegation"',
                "spawn = { max_concurrent_agents = 2 }",
                "[[tasks]]",
                'id = "t"',
                'prompt = "Research the three parts."',
            ]
        )
    )
    script = ProbabilisticFanOut(marker=MARKER, p_marked=1.0, k=3, delay=0.6)
    with ScriptedServer(script) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        summary = anyio.run(
            lambda: run_experiment(spec, tmp_path / "out", base_options=claude.options())
        )
        recorded = server.recorded()
    assert (summary.ran, summary.failed) == (2, 0)
    stated = {}
    for rec in recorded:
        if rec.request.role == "lead" and MARKER in rec.request.system:
            stated[rec.request.session_id] = (
                "At most 2 agents running at once" in rec.request.system,
                "At most 4 agents running at once" in rec.request.system,
            )
    assert sorted(stated.values()) == [(False, True), (True, False)]
    overlaps = {}
    for session, (capped, _) in stated.items():
        subagents = [r for r in server.recorded("subagent") if r.request.session_id == session]
        assert len(subagents) >= 3, (capped, len(subagents))
        overlaps[capped] = server.max_concurrent("subagent", session_id=session)
    assert overlaps == {True: 2, False: 3}
    records = read_records(tmp_path / "out" / "trials.jsonl").records
    assert {r.variant: r.agent_calls for r in records} == {"free": 3, "capped": 3}
