"""Every example in examples/ runs offline: the real CLI against the scripted model server.

The examples are loaded by path (they are scripts, not a package), and their ``main``
is driven with options from :class:`~teamlead.testing.OfflineClaude`. Two tests also run
them as programs, the way their docstrings and examples/README.md say to.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import runpy
import subprocess
import sys
from collections.abc import AsyncIterator
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from claude_agent_sdk import ClaudeAgentOptions, ResultError, ResultMessage
from claude_agent_sdk import query as sdk_query

import teamlead
import teamlead.experiment
from teamlead.testing import OfflineClaude, Reply, ScriptedServer
from teamlead.testing.scripts import FanOut, findings_in

from ..isolated import isolated_env, side_by_side
from .conftest import OfflineFactory

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
RUNNABLE = ["drop_in_query", "client_helper"]  # scripts run with `python examples/NAME.py`


@cache
def load_example(name: str) -> ModuleType:
    """Import ``examples/<name>.py`` by path, under a name that cannot clash."""
    path = EXAMPLES / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"teamlead_example_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def appended_text(options: ClaudeAgentOptions) -> str:
    """What a strategy appended to Claude Code's preset system prompt."""
    prompt = options.system_prompt
    assert isinstance(prompt, dict) and prompt["type"] == "preset"
    return prompt.get("append", "")


def test_every_example_script_is_covered_and_documented() -> None:
    scripts = sorted(p.stem for p in EXAMPLES.glob("*.py"))
    assert scripts == sorted([*RUNNABLE, "offline_test"])  # a new example needs a test here
    readme = (EXAMPLES / "README.md").read_text(encoding="utf-8")
    for name in RUNNABLE:
        assert f"python examples/{name}.py" in readme
    assert "pytest examples/offline_test.py" in readme
    assert "experiment.toml" in readme and "strategy-ab.toml" in readme


# -- drop_in_query.py -------------------------------------------------------------------------
@pytest.mark.cli
@pytest.mark.anyio
async def test_drop_in_query_resumes_when_every_synthesis_turn_fails(
    offline: OfflineFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    example = load_example("drop_in_query")
    server, claude = offline(FanOut.of(3, delays=[0.2, 0.4, 0.6], synthesis_fault=Reply.error(529)))

    options = claude.options(example.app_options())
    done = await example.main(options, prompt="Investigate three parts.")

    assert isinstance(done, ResultMessage)
    assert not done.is_error, done
    # every synthesis turn of the CLI failed: only teamlead's resume could write the answer
    assert sorted(findings_in(done.result or "")) == ["agent-1", "agent-2", "agent-3"]
    resumed = [
        r for r in server.recorded("lead") if "<teamlead-results" in r.request.last_user_text
    ]
    assert len(resumed) == 1
    # the delegation strategy reached the model, on top of Claude Code's own prompt
    expected = teamlead.apply_strategy(example.app_options(), teamlead.load_strategy("delegation"))
    first = server.recorded("lead")[0].request
    assert appended_text(expected) in first.system
    assert "Agent" in first.tools
    out = capsys.readouterr().out
    for n in (1, 2, 3):
        assert f"[agent] started: agent-{n}" in out
    turns = [line for line in out.splitlines() if line.startswith("[lead] turn ended")]
    assert turns[0] == "[lead] turn ended (ok)"  # the dispatch
    # the CLI's own synthesis turn failed (529): its result was not the last, the resumed
    # turn's answer was
    assert turns[-1] == "[lead] turn ended (ok)"
    assert done.result and done.result in out


# -- client_helper.py -------------------------------------------------------------------------
@pytest.mark.cli
@pytest.mark.anyio
async def test_client_helper_reads_past_the_first_result(
    offline: OfflineFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    example = load_example("client_helper")
    server, claude = offline(FanOut.of(2, delays=[1.5, 0.8]))

    options = claude.options(example.app_options())
    done = await example.main(options, prompt="Investigate both parts.")

    assert isinstance(done, teamlead.Finished)
    assert done.status == "completed", done.reasons
    assert sorted(findings_in(done.result or "")) == ["agent-1", "agent-2"]
    out = capsys.readouterr().out
    assert "[lead] delegated: agent-1" in out and "[lead] delegated: agent-2" in out
    # receive_response() would have stopped at the first: the lead's "dispatched" turn
    assert out.count("[lead] turn ended (ok)") >= 2
    assert "status: completed" in out


def test_client_helper_sets_the_cli_wait_ceiling_from_its_policy() -> None:
    example = load_example("client_helper")
    options = teamlead.prepare_options(example.app_options(), example.POLICY)
    ceiling_ms = int(example.POLICY.deadline_s * 1000)
    assert options.env["CLAUDE_CODE_PRINT_BG_WAIT_CEILING_MS"] == str(ceiling_ms)


# -- offline_test.py --------------------------------------------------------------------------
@pytest.mark.cli
def test_offline_test_example_passes(tmp_path: Path) -> None:
    load_example("offline_test").test_app_uses_every_finding(tmp_path)


@pytest.mark.cli
def test_offline_test_example_catches_an_app_on_the_plain_sdk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example's assertion has teeth: a careful plain-SDK app still fails it.

    The app keeps the last *successful* result and survives the error result that ends
    the stream; with every synthesis turn failing, that is the lead's "dispatched" turn.
    """

    async def last_good_result_app(question: str, options: ClaudeAgentOptions) -> str:
        last = ""
        messages: AsyncIterator[Any] = sdk_query(prompt=question, options=options)
        try:
            async for message in messages:
                if isinstance(message, ResultMessage) and not message.is_error:
                    last = message.result or ""
        except ResultError:  # the stream's final result was an API error
            pass
        answers.append(last)
        return last

    answers: list[str] = []

    example = load_example("offline_test")
    monkeypatch.setattr(example, "answer", last_good_result_app)
    with pytest.raises(AssertionError):
        example.test_app_uses_every_finding(tmp_path)
    assert len(answers) == 1 and findings_in(answers[0]) == []  # it failed for the findings


@pytest.mark.slow  # a second pytest process collects the example
def test_offline_test_example_is_collected_by_pytest() -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "examples/offline_test.py",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "examples/offline_test.py::test_app_uses_every_finding" in run.stdout
    assert "1 test collected" in run.stdout


# -- the scripts as programs ------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ProgramRun:
    """One example run as a program, and what its lead was asked first."""

    run: subprocess.CompletedProcess[str]
    asked: str | None


def _run_program(name: str, root: Path) -> ProgramRun:
    """``ANTHROPIC_BASE_URL=<scripted server> python examples/NAME.py``, as the README shows."""
    script = FanOut.of(2, delays=[0.3, 0.6], synthesis_fault=Reply.error(529), synthesis_faults=1)
    with (
        ScriptedServer(script) as server,
        OfflineClaude(server.base_url, state_dir=root / "s") as claude,
    ):
        run = subprocess.run(
            [sys.executable, str(EXAMPLES / f"{name}.py")],
            cwd=claude.cwd,
            env={**isolated_env(root), **claude.env},
            capture_output=True,
            text=True,
            timeout=90,
        )
        leads = server.recorded("lead")
    return ProgramRun(run, leads[0].request.first_user_text if leads else None)


@pytest.fixture(scope="module")
def program_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ProgramRun]:
    """Each runnable example as a program, side by side: each its own process, state and
    scripted model."""
    return side_by_side(_run_program, RUNNABLE, tmp_path_factory)


@pytest.mark.cli
@pytest.mark.parametrize("name", RUNNABLE)
def test_example_runs_as_a_program_against_a_scripted_gateway(
    name: str, program_runs: dict[str, ProgramRun]
) -> None:
    """``ANTHROPIC_BASE_URL=<scripted server> python examples/NAME.py``, as the README shows."""
    run = program_runs[name].run
    assert run.returncode == 0, run.stdout + run.stderr
    done = {"drop_in_query": "answer (ok", "client_helper": "status: completed"}
    assert done[name] in run.stdout
    final = run.stdout.rsplit("\n\n", 1)[-1]
    assert sorted(findings_in(final)) == ["agent-1", "agent-2"]
    # the script's own prompt is what the lead was asked
    assert program_runs[name].asked == load_example(name).PROMPT


@pytest.mark.parametrize("name", RUNNABLE)
def test_example_without_an_api_key_says_so_in_one_line(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "ANTHROPIC_API_KEY" not in os.environ  # removed by the conftest
    with pytest.raises(SystemExit) as info:
        runpy.run_path(str(EXAMPLES / f"{name}.py"), run_name="__main__")
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"{name}: set ANTHROPIC_API_KEY to run this example\n"


# -- experiment.toml, strategy-ab.toml ---------------------------------------------------------
@pytest.mark.parametrize("name", ["experiment.toml", "strategy-ab.toml"])
def test_sample_experiment_spec_loads_against_the_shipped_prompts(name: str) -> None:
    checked: list[str] = []

    def strategy_exists(name: str) -> bool:
        checked.append(name)
        return bool(teamlead.load_strategy(name))  # raises UsageError for a bad prompt file

    spec = teamlead.experiment.load_spec(EXAMPLES / name, strategy_exists=strategy_exists)

    assert checked == [v.strategy for v in spec.variants]
    assert spec.control.name == spec.experiment.control
    assert spec.total_trials == len(spec.variants) * len(spec.tasks) * spec.experiment.trials
    assert len(set(spec.trial_keys())) == spec.total_trials
    for variant in spec.variants:
        strategy = teamlead.load_strategy(variant.strategy)
        options = teamlead.apply_strategy(ClaudeAgentOptions(), strategy)
        # a variant's options are real ClaudeAgentOptions fields
        options = dataclasses.replace(options, **variant.options)
        assert isinstance(options.system_prompt, dict)
        assert options.system_prompt["type"] == "preset"
        if variant is spec.control:
            assert strategy.render() == ""  # the control only gets Claude Code's own prompt
        else:
            assert strategy.render() in appended_text(options)
    if spec.experiment.grader is not None:
        task = spec.tasks[0]
        grader = spec.experiment.grader
        text = grader.render(task=task.prompt, rubric=task.rubric, answer="ANSWER-X")
        assert task.prompt in text and "ANSWER-X" in text
