"""Experiment runs: unique trial session ids, a locked out dir, and absurd values refused."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from claude_agent_sdk import ClaudeAgentOptions
from click.testing import CliRunner

from teamlead._cli import main
from teamlead._history import History
from teamlead.errors import UsageError
from teamlead.experiment.running.outdir import OutDir
from teamlead.experiment.running.runner import run_experiment
from teamlead.experiment.specs.records import read_records
from teamlead.experiment.specs.spec import parse_spec
from teamlead.policy import Policy, SpawnPolicy

from ..records import ab_spec

SPEC = ab_spec(1, 2, concurrency=None, task_id="t", prompt="Question.", rubric="r")


class Answers:
    """A scripted ``query_fn`` answering at once; records each trial's session id."""

    def __init__(self) -> None:
        self.sessions: list[str] = []

    async def __call__(self, *, prompt: str, options: ClaudeAgentOptions) -> AsyncIterator[Any]:
        session = str(options.session_id)
        self.sessions.append(session)
        yield {"type": "system", "subtype": "init", "session_id": session, "cwd": "/"}
        yield {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "result": "answer",
            "session_id": session,
            "num_turns": 1,
            "total_cost_usd": 0.001,
            "api_error_status": None,
        }


def _run(out: Path, answers: Answers) -> Any:
    spec = parse_spec(SPEC)
    policy = Policy(relay=False)  # the scripted query_fn sends no request through a relay
    return anyio.run(lambda: run_experiment(spec, out, query_fn=answers, policy=policy))


def test_trial_session_ids_unique_per_run_stable_per_out_dir(tmp_path: Path) -> None:
    first, second = Answers(), Answers()
    summary_a = _run(tmp_path / "a", first)
    summary_b = _run(tmp_path / "b", second)
    assert (summary_a.ran, summary_a.failed, summary_b.ran, summary_b.failed) == (4, 0, 4, 0)
    assert len(set(first.sessions)) == 4
    assert not set(first.sessions) & set(second.sessions)  # fresh out dirs: fresh sessions
    assert len(read_records(tmp_path / "a" / "trials.jsonl").records) == 4
    # a rerun on the same out dir keeps the run id and still skips every finished trial
    run_id = (tmp_path / "a" / "run.json").read_text()
    again = Answers()
    summary = _run(tmp_path / "a", again)
    assert (summary.ran, summary.skipped, again.sessions) == (0, 4, [])
    assert (tmp_path / "a" / "run.json").read_text() == run_id


def test_a_resumed_run_counts_the_cost_already_spent_against_the_budget(tmp_path: Path) -> None:
    spec = parse_spec(SPEC.replace("trials = 2", "trials = 2\nmax_cost_usd = 0.0015"))
    policy = Policy(relay=False)

    def run() -> Any:
        return anyio.run(lambda: run_experiment(spec, tmp_path, query_fn=Answers(), policy=policy))

    first = run()  # $0.001 a trial: the second one reaches the budget
    assert (first.ran, first.stopped_reason is not None) == (2, True)
    again = run()  # the $0.002 already spent is over the budget: nothing more runs
    assert (again.ran, again.skipped) == (0, 2)
    assert again.stopped_reason is not None and "budget" in again.stopped_reason
    assert len(read_records(tmp_path / "trials.jsonl").records) == 2


def test_out_dir_locked_against_a_second_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with OutDir(out) as run_id:
        in_use = f"in use by another `experiment run` .pid {os.getpid()}"
        with pytest.raises(UsageError, match=in_use):
            _run(out, Answers())
        spec = tmp_path / "spec.toml"
        spec.write_text(SPEC)
        env = {"ANTHROPIC_API_KEY": "sk-test-only-not-real"}
        args = ["experiment", "run", str(spec), "--out", str(out), "-q"]
        result = CliRunner().invoke(main, args, env=env)
        assert result.exit_code == 2, result.output
        assert len(result.output.strip().splitlines()) == 1 and "in use" in result.output
    with OutDir(out) as again:  # released: the next run gets it, with the same run id
        assert again == run_id


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "1e308", "-inf"])
def test_ask_deadline_must_be_finite(value: str) -> None:
    result = CliRunner().invoke(main, ["ask", "hi", "--deadline", value])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "--deadline" in result.output


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--stagger", "nan"), ("--stagger", "inf"), ("--wrap-up-reserve", "inf")],
)
def test_spawn_gate_times_must_be_finite(flag: str, value: str) -> None:
    result = CliRunner().invoke(main, ["ask", "hi", flag, value])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and flag in result.output


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ("deadline_s = 1e308", "deadline_s"),
        ("deadline_s = inf", "deadline_s"),
        ("deadline_s = nan", "deadline_s"),
        ("max_cost_usd = inf", "max_cost_usd"),
        ("check_timeout_s = inf", "check_timeout_s"),
        ("setup_timeout_s = 1e308", "setup_timeout_s"),
        ("concurrency = 100000", "concurrency"),
    ],
)
def test_spec_absurd_values_are_usage_errors(line: str, field: str) -> None:
    with pytest.raises(UsageError, match=field):
        parse_spec(SPEC.replace('control = "baseline"', f'control = "baseline"\n{line}'))


def test_policy_refuses_infinite_and_absurd_limits() -> None:
    for bad in ({"deadline_s": float("inf")}, {"wait_s": float("nan")}, {"deadline_s": 1e308}):
        with pytest.raises(ValueError):
            Policy(**bad)
    for spawn in ({"stagger_s": float("nan")}, {"wrap_up_reserve_s": float("inf")}):
        with pytest.raises(ValueError):
            SpawnPolicy(**spawn)


def test_trials_have_an_upper_bound() -> None:
    with pytest.raises(UsageError, match="trials"):
        parse_spec(SPEC.replace("trials = 2", "trials = 1000000000"))
    assert parse_spec(SPEC.replace("trials = 2", "trials = 10000")).experiment.trials == 10_000


def test_prompt_files_must_be_regular_and_capped(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["prompts", "show", "/dev/zero"])
    assert result.exit_code == 2 and "not a regular file" in result.output
    fifo = tmp_path / "p.md"
    os.mkfifo(fifo)
    result = runner.invoke(main, ["prompts", "show", str(fifo)])  # must not block
    assert result.exit_code == 2 and "not a regular file" in result.output
    big = tmp_path / "big.md"
    big.write_bytes(b"x" * (1024 * 1024 + 1))
    result = runner.invoke(main, ["prompts", "show", str(big)])
    assert result.exit_code == 2 and "over 1024 KiB" in result.output


def test_an_unwritable_out_dir_is_one_line_exit_2(tmp_path: Path) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    blocker = tmp_path / "file"
    blocker.write_text("")
    runner = CliRunner()
    env = {"ANTHROPIC_API_KEY": "sk-test-only-not-real"}
    result = runner.invoke(
        main, ["experiment", "run", str(spec), "--out", str(blocker / "out")], env=env
    )
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and "--out" in result.output
    (tmp_path / "trials").mkdir()
    result = runner.invoke(
        main,
        ["experiment", "report", str(tmp_path / "trials"), "--out", str(blocker / "r.md")],
    )
    assert "Traceback" not in result.output


def test_inbox_show_with_a_bad_team_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path))
    for team in ("../x", "/etc", "a/../../b"):
        result = CliRunner().invoke(main, ["inbox", "show", "--team", team])
        assert result.exit_code == 2, result.output
        assert len(result.output.strip().splitlines()) == 1


def test_each_trials_run_is_kept_in_the_history_named_by_its_arm_and_trial(
    tmp_path: Path,
) -> None:
    _run(tmp_path / "a", Answers())
    name = parse_spec(SPEC).experiment.name
    trials = read_records(tmp_path / "a" / "trials.jsonl").records
    labels = sorted(str(r.label) for r in History().records())
    assert labels == sorted(
        f"experiment {name}: {t.variant} · {t.task} · trial {t.trial}" for t in trials
    )
    assert len(set(labels)) == 4
