"""Experiments end to end: the runner on the real CLI with scripted models, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

from teamlead._cli import main
from teamlead._cli.progress import report_for
from teamlead.experiment.running.runner import run_experiment, trial_order, trial_session_id
from teamlead.experiment.specs.records import read_records
from teamlead.experiment.specs.spec import parse_spec
from teamlead.testing import OfflineClaude, Reply, ScriptedRequest, ScriptedServer
from teamlead.testing.scripts import ProbabilisticFanOut

MARKER = "# Delegation strategy"  # the delegation prompt's first line; baseline has none


def _spec(tasks: int, trials: int, *, concurrency: int = 4, extra: str = "") -> str:
    body = [
        "[experiment]",
        'name = "ab"',
        f"trials = {trials}",
        "seed = 7",
        f"concurrency = {concurrency}",
        'control = "baseline"',
        extra,
        "[[variants]]",
        'name = "baseline"',
        'strategy = "baseline"',
        "[[variants]]",
        'name = "delegation"',
        'strategy = "delegation"',
    ]
    for i in range(tasks):
        body += [
            "[[tasks]]",
            f'id = "task-{i}"',
            f'prompt = "Research question {i}."',
            'rubric = "mentions parts"',
        ]
    return "\n".join(body) + "\n"


def test_trial_order_is_seeded_interleaved_and_complete() -> None:
    spec = parse_spec(_spec(3, 2))
    order = trial_order(spec)
    assert order == trial_order(spec)
    assert len(order) == len(set(order)) == spec.total_trials
    assert [k.trial for k in order[:6]] == [0] * 6  # rounds stay together: balanced when cut short
    assert order[:6] != sorted(order[:6])
    assert (
        trial_session_id(7, order[0])
        == trial_session_id(7, order[0])
        != trial_session_id(8, order[0])
    )


@pytest.mark.cli
def test_runner_records_every_trial_of_the_real_cli_and_reports_them(tmp_path: Path) -> None:
    """2 tasks x 2 trials x 2 variants on the real CLI: the lead fans out only under the
    delegation prompt (p=1 vs 0), so every record's parallel flag is known; the statistics
    on many trials are tested on ``synthetic_records`` (tests/test_experiment_stats.py)."""
    spec = parse_spec(_spec(2, 2, concurrency=4))
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


@pytest.mark.cli
def test_resumable_retries_infrastructure_errors_and_grades(tmp_path: Path) -> None:
    spec = parse_spec(
        _spec(
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


def test_experiment_cli_errors_are_one_line_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    bad = tmp_path / "bad.toml"
    bad.write_text(_spec(1, 1).replace('control = "baseline"', 'control = "nobody"'))
    result = runner.invoke(main, ["experiment", "run", str(bad), "--out", str(tmp_path / "o")])
    assert (
        result.exit_code == 2
        and "control" in result.output
        and len(result.output.strip().splitlines()) == 1
    )
    unknown = tmp_path / "unknown.toml"
    unknown.write_text(
        _spec(1, 1).replace('strategy = "delegation"', 'strategy = "no-such-prompt"')
    )
    result = runner.invoke(main, ["experiment", "run", str(unknown), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "no-such-prompt" in result.output
    zero = tmp_path / "zero.toml"
    zero.write_text(_spec(1, 1).replace("trials = 1", "trials = 0"))
    result = runner.invoke(main, ["experiment", "run", str(zero), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "trials" in result.output
    result = runner.invoke(main, ["experiment", "report", str(tmp_path / "empty")])
    assert result.exit_code == 2 and "no trials.jsonl" in result.output
    good = tmp_path / "good.toml"
    good.write_text(_spec(1, 1))
    args = ["experiment", "run", str(good), "--out", str(tmp_path / "o")]
    env = {"ANTHROPIC_API_KEY": "sk-test-only-not-real"}
    result = runner.invoke(main, [*args, "--session-store", "postgres://db/1"], env=env)
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "a session store is redis://" in result.output
    assert not (tmp_path / "o").exists()  # refused before anything was written


def test_experiment_report_cli_json_and_markdown(tmp_path: Path) -> None:
    import numpy as np

    from teamlead.experiment.specs.records import append_record
    from teamlead.experiment.specs.synthetic import synthetic_records

    # The command's wiring is under test, not the statistics (tests/test_experiment_stats.py):
    # fewer relabelings and MDE simulations, a tenth of the time.
    quick = ["--permutations", "500", "--mde-simulations", "100"]

    out = tmp_path / "out"
    out.mkdir()
    rng = np.random.default_rng(5)
    for record in synthetic_records(
        {"baseline": [0.2] * 6, "delegation": [0.9] * 6}, trials=4, rng=rng
    ):
        append_record(out / "trials.jsonl", record)
    (out / "experiment.json").write_text(json.dumps({"version": 1, "control": "baseline"}))
    runner = CliRunner()
    as_json = runner.invoke(
        main, ["experiment", "report", str(out), "--json", "--no-plots", *quick]
    )
    assert as_json.exit_code == 0, as_json.output
    data = json.loads(as_json.output)
    assert set(data["variants"]) == {"baseline", "delegation"}
    assert "100 experiments" in json.dumps(data)  # the sizes asked for reached the statistics
    assert {
        "variant",
        "control",
        "metric",
        "diff",
        "ci_low",
        "ci_high",
        "p_value",
        "p_adjusted",
        "verdict",
    } <= set(data["comparisons"][0])
    env = {"TEAMLEAD_JSON": "1", "TEAMLEAD_NO_PLOTS": "1", "TEAMLEAD_SEED": "0"}
    env |= {"TEAMLEAD_PERMUTATIONS": "500", "TEAMLEAD_MDE_SIMULATIONS": "100"}
    from_env = runner.invoke(main, ["experiment", "report", str(out)], env=env)
    assert from_env.exit_code == 0 and json.loads(from_env.output) == data
    # TEAMLEAD_OUT names `experiment run`'s directory too: here it is refused, not overwritten
    to_a_dir = runner.invoke(
        main, ["experiment", "report", str(out), *quick], env={"TEAMLEAD_OUT": str(out)}
    )
    assert to_a_dir.exit_code == 2 and "'--out'" in to_a_dir.output
    assert "is a directory" in to_a_dir.output and (out / "trials.jsonl").exists()
    md = runner.invoke(
        main, ["experiment", "report", str(out), "--out", str(tmp_path / "r.md"), *quick]
    )
    assert md.exit_code == 0 and "| delegation | parallel |" in md.output
    assert (tmp_path / "r.md").read_text().startswith("# Experiment report")
    assert list(out.glob("*.png"))


@pytest.mark.cli
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
