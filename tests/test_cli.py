"""The `teamlead` command line: parsing and errors (CliRunner), and real runs (subprocess)."""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import psutil
import pytest
from click.testing import CliRunner

from teamlead._cli import main
from teamlead.events import EVENT_VERSION
from teamlead.testing import OfflineClaude, Reply, ScriptedRequest, ScriptedServer
from teamlead.testing.scripts import FanOut, findings_in
from teamlead.testing.teammate import create_team

from .conftest import cli_processes
from .isolated import isolated_env, run_to_the_end, side_by_side
from .polling import poll

TEAMLEAD = [sys.executable, "-m", "teamlead"]


def _invoke(*args: str, env: dict[str, str] | None = None, input: str | None = None) -> Any:
    return CliRunner().invoke(main, list(args), env=env, input=input)


# -- parsing and errors ------------------------------------------------------------------
def test_version_and_help() -> None:
    assert "teamlead, version" in _invoke("--version").output
    result = _invoke("ask", "--help")
    assert (
        result.exit_code == 0 and "--max-resumes" in result.output and "--strategy" in result.output
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ask", "  "], "the prompt is empty"),
        (["ask", "hi", "--strategy", "no-such-strategy"], "no-such-strategy"),
        (["ask", "hi", "--strategy", "./nope.md"], "strategy file not found: ./nope.md"),
        (["ask", "hi", "--json", "--quiet"], "cannot be combined"),
        (["ask", "hi", "--cwd", "/definitely/not/here"], "not a directory"),
        (["inbox", "show"], "exactly one of --session"),
        (["prompts", "show", "nope"], "nope"),
        (["serve-scripted", "--scenario", "nope"], "unknown scenario"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = _invoke(*args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["ask", "hi", "--wrap-up-reserve", "99999"], None),
        (["ask", "hi", "--deadline", "60", "--wrap-up-reserve", "60"], None),
        (["resume", "some-session", "--wrap-up-reserve", "1800"], None),
        (["ask", "hi"], {"TEAMLEAD_WRAP_UP_RESERVE": "99999"}),
    ],
    ids=["longer", "equal", "resume", "env"],
)
def test_a_wrap_up_reserve_not_shorter_than_the_deadline_is_one_usage_line_at_the_start(
    args: list[str], env: dict[str, str] | None
) -> None:
    result = _invoke(*args, env=env)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, lines
    assert "--wrap-up-reserve" in lines[0] and "--deadline" in lines[0], lines
    assert "give a reserve under the deadline" in lines[0]  # the fix


def test_a_wrap_up_reserve_under_the_deadline_is_taken() -> None:
    result = _invoke("ask", "hi", "--deadline", "60", "--wrap-up-reserve", "59")
    assert "--wrap-up-reserve" not in result.output  # on to the next check: model access
    assert result.exit_code == 1 and "no model access" in result.output


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["ask", "Fix it.", "--json"], {}, True),
        (["ask", "--json", "Fix it."], {}, True),
        (["resume", "a-session", "--json"], {}, True),
        (["ask", "Fix it."], {"TEAMLEAD_JSON": "1"}, True),
        (["ask", "Fix it."], {"TEAMLEAD_JSON": "0"}, False),
        (["ask", "Fix it."], {}, False),
        (["ask", "--", "--json"], {}, False),  # the prompt "--json"
        (["relay", "--json"], {}, False),
        (["--version"], {}, False),
    ],
)
def test_a_stop_at_startup_reads_whether_ndjson_was_asked_as_click_would(
    args: list[str], env: dict[str, str], expected: bool
) -> None:
    from teamlead._cli.startup import wants_ndjson

    assert wants_ndjson(args, env) is expected


def test_a_missing_strategy_file_names_the_built_in_strategies_and_the_nearest() -> None:
    result = _invoke("ask", "hi", "--strategy", "delegaton.md")
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("teamlead: error: strategy file not found: delegaton.md; ")
    assert "baseline, delegation, parallel-first" in line
    assert line.endswith("(did you mean 'delegation'?)")
    nothing_near = _invoke("ask", "hi", "--strategy", "nope.md").output
    assert "baseline, delegation, parallel-first" in nothing_near
    assert "did you mean" not in nothing_near


def test_resume_defaults_to_the_strategy_ask_defaults_to() -> None:
    from teamlead._cli.ask import ask, resume

    def default(command: click.Command) -> object:
        return next(p.default for p in command.params if p.name == "strategy")

    assert default(resume) == default(ask) == "delegation"


def test_bad_option_values_are_click_usage_errors() -> None:
    result = _invoke("ask", "hi", "--max-resumes", "-1")
    assert result.exit_code == 2 and "--max-resumes" in result.output


def test_missing_model_access_is_one_clear_line() -> None:
    result = _invoke("ask", "hello")
    assert result.exit_code == 1
    assert result.output.strip().startswith("teamlead: error: no model access configured")
    assert "teamlead demo" in result.output and len(result.output.strip().splitlines()) == 1


def test_a_config_dir_the_cli_cannot_write_is_refused_before_the_run(tmp_path: Path) -> None:
    """The CLI would run the first turn there, then no resume could find the conversation:
    refused up front, in one line that says what is wrong and how to fix it."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    config = blocker / "claude"  # under a regular file: it can never be made
    env = {"CLAUDE_CONFIG_DIR": str(config), "ANTHROPIC_API_KEY": "sk-ant-test"}
    result = _invoke("ask", "hello", env=env)
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output
    assert lines[0].startswith(f"teamlead: error: the Claude config dir {config} ")
    assert "cannot be created or written" in lines[0] and "teamlead resume" not in lines[0]
    assert "set CLAUDE_CONFIG_DIR to a directory you can write" in lines[0]


def test_options_read_teamlead_env_vars() -> None:
    # each bad value can only have come from its variable, and is a usage error (exit 2)
    result = _invoke("ask", "hi", env={"TEAMLEAD_STRATEGY": "not-a-strategy-from-env"})
    assert result.exit_code == 2, result.output
    assert "unknown strategy 'not-a-strategy-from-env'" in result.output
    result = _invoke("ask", "hi", env={"TEAMLEAD_MAX_RESUMES": "-4"})
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--max-resumes': -4 is not in the range" in result.output


def _commands(command: click.Command, path: str) -> list[tuple[str, click.Command]]:
    found = [(path, command)]
    if isinstance(command, click.Group):
        context = click.Context(command, info_name=path.split()[-1])
        for name in sorted(command.list_commands(context)):  # loaded lazily by the group
            sub = command.get_command(context, name)
            assert sub is not None, name
            found += _commands(sub, f"{path} {name}")
    return found


def test_every_option_reads_its_teamlead_variable() -> None:
    checked = []
    for path, command in _commands(main, "teamlead"):
        for param in command.params:
            if not isinstance(param, click.Option) or param.name in ("help", "version"):
                continue
            flag = next(o for o in param.opts if o.startswith("--"))
            expected = "TEAMLEAD_" + flag[2:].upper().replace("-", "_")
            assert param.envvar == expected, f"{path} {flag}: envvar {param.envvar!r}"
            checked.append(f"{path} {flag}")
    # the walk reaches every group, including the options that once read no variable
    assert {
        "teamlead ask --max-resumes",
        "teamlead inbox show --json",
        "teamlead experiment report --no-plots",
        "teamlead serve-scripted --concurrency-limit",
        "teamlead prompts show --max-agents-per-turn",
    } <= set(checked)


def test_exit_codes_are_defined_once() -> None:
    import teamlead

    root = Path(teamlead.__file__).parent
    defining = set()
    for source in root.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else []
            if isinstance(node, ast.AnnAssign):
                targets = [node.target]
            if any(isinstance(t, ast.Name) and t.id.startswith("EXIT_") for t in targets):
                defining.add(source.relative_to(root).as_posix())
    assert defining == {"_cli/exitcodes.py"}


def test_prompt_from_stdin(tmp_path: Path) -> None:
    result = _invoke("ask", "-", input="   \n")
    assert result.exit_code == 2 and "empty" in result.output


def test_prompts_list_and_show_fill_placeholders() -> None:
    listing = _invoke("prompts", "list")
    assert listing.exit_code == 0
    assert {"baseline", "delegation", "parallel-first"} <= {
        line.split()[0] for line in listing.output.splitlines()
    }
    shown = _invoke("prompts", "show", "delegation", "--max-concurrent-agents", "7")
    assert (
        shown.exit_code == 0
        and "7" in shown.output
        and "{max_concurrent_agents}" not in shown.output
    )
    assert "adds nothing" in _invoke("prompts", "show", "baseline").output


def test_inbox_show_reads_without_changing(tmp_path: Path) -> None:
    config = Path(os.environ["CLAUDE_CONFIG_DIR"])
    team = create_team(config, "abcdef12-0000-0000-0000-000000000000", members=["researcher"])
    inbox = config / "teams" / team / "inboxes" / "team-lead.json"
    inbox.write_text(
        json.dumps([{"from": "researcher", "text": "plain note", "timestamp": "t1"}, {"bad": 1}])
    )
    before = inbox.read_bytes()
    result = _invoke("inbox", "show", "--session", "abcdef12-0000-0000-0000-000000000000")
    assert result.exit_code == 0, result.output
    assert (
        "researcher" in result.output
        and "plain note" in result.output
        and "1 invalid" in result.output
    )
    as_json = json.loads(_invoke("inbox", "show", "--team", team, "--json").output)
    assert as_json["members"] == ["team-lead", "researcher"] and len(as_json["messages"]) == 1
    assert list(as_json) == [
        "version",
        "team",
        "lead_session_id",
        "members",
        "inbox",
        "status",
        "messages",
        "warnings",
    ]
    from_env = _invoke("inbox", "show", "--team", team, env={"TEAMLEAD_JSON": "1"})
    assert json.loads(from_env.output) == as_json
    assert inbox.read_bytes() == before
    missing = _invoke("inbox", "show", "--team", "nobody")
    assert missing.exit_code == 2 and "no team" in missing.output


def test_resume_of_a_missing_session_is_a_usage_error() -> None:
    result = _invoke("resume", "0000-not-a-session")
    assert result.exit_code == 2 and "no session 0000-not-a-session" in result.output


# -- real runs ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class AskRun:
    """One `teamlead ask` as a user runs it, and the first system prompt its lead got."""

    proc: subprocess.CompletedProcess[str]
    lead_system: str | None


def _team_creating(fan: FanOut, config_dir: Path) -> Callable[[ScriptedRequest], Reply]:
    """``fan``, and a team with a teammate who never reports, made on the lead's first turn."""

    def script(req: ScriptedRequest) -> Reply:
        if req.role == "lead" and not req.tool_uses_sent:
            create_team(config_dir, req.session_id or "", members=["silent-reviewer"])
        return fan(req)

    return script


def _broken_cli(root: Path) -> str:
    broken = root / "claude"
    broken.write_text("#!/bin/sh\necho 'claude: cannot start here' >&2\nexit 7\n")
    broken.chmod(0o755)
    return str(broken)


def _two_of_three_fail() -> Callable[[ScriptedRequest], Reply]:
    """Three agents, of which only the first answers (the others' requests get a 400), and
    a lead whose synthesis turns fail until teamlead resumes it."""
    fan = FanOut.of(3, delays=0.2, synthesis_fault=Reply.error(529))

    def script(req: ScriptedRequest) -> Reply:
        if req.role == "subagent" and req.agent_description != "agent-1":
            return Reply.error(400)
        return fan(req)

    return script


#: The asks the real-run tests below read: a script (given the run's CLI config dir and
#: root) and the arguments.
ASKS: dict[str, tuple[Callable[[Path, Path], Any], Callable[[Path], list[str]]]] = {
    "completed": (
        lambda config, root: FanOut.of(2, delays=[0.3, 0.5]),
        lambda root: ["Investigate both parts."],
    ),
    "json": (
        lambda config, root: FanOut.of(2, delays=0.3, synthesis_fault=Reply.error(529)),
        lambda root: ["Investigate.", "--json"],
    ),
    "failed": (
        # a 400 is not transient: the failed resume is final at once, no backoff between tries
        lambda config, root: FanOut.of(
            1, delays=0.2, synthesis_fault=Reply.error(400), fail_resumes=True
        ),
        lambda root: ["Investigate.", "--max-resumes", "1"],
    ),
    "partial": (
        lambda config, root: _team_creating(FanOut.of(1, delays=0.2), config),
        lambda root: ["Investigate.", "--wait", "1", "--quiet"],
    ),
    "delegation": (
        lambda config, root: lambda req: Reply.text("done"),
        lambda root: ["Say done.", "--strategy", "delegation"],
    ),
    "baseline": (
        lambda config, root: lambda req: Reply.text("done"),
        lambda root: ["Say done.", "--strategy", "baseline"],
    ),
    "two of three fail": (
        lambda config, root: _two_of_three_fail(),
        lambda root: ["Investigate.", "--wait", "2"],
    ),
    "cli fails": (
        lambda config, root: FanOut.of(1),
        lambda root: ["Investigate.", "--cli-path", _broken_cli(root), "--quiet"],
    ),
}


def _asked(name: str, root: Path) -> AskRun:
    make_script, make_args = ASKS[name]
    holder: list[Callable[[ScriptedRequest], Reply]] = []
    with ScriptedServer(lambda req: holder[0](req)) as server:
        claude = OfflineClaude(server.base_url, state_dir=root / "s")
        holder.append(make_script(claude.config_dir, root))
        proc = run_to_the_end(
            [*TEAMLEAD, "ask", *make_args(root)],
            env={**isolated_env(root), **claude.env},
            cwd=claude.cwd,
            timeout=90,
        )
        leads = server.recorded("lead")
    return AskRun(proc, leads[0].request.system if leads else None)


@pytest.fixture(scope="module")
def asks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, AskRun]:
    """Every ask of :data:`ASKS`, three at a time: each its own process, CLI state and
    scripted model, so they share nothing but the time."""
    return side_by_side(
        _asked, ASKS, tmp_path_factory, at_once=3, root_name=lambda name: name.replace(" ", "-")
    )


@pytest.mark.cli
def test_ask_completed_exits_0_with_the_answer_on_stdout(asks: dict[str, AskRun]) -> None:
    proc = asks["completed"].proc
    assert proc.returncode == 0, proc.stderr
    assert sorted(findings_in(proc.stdout)) == ["agent-1", "agent-2"]
    assert "task completed" in proc.stderr and "finished: completed" in proc.stderr


@pytest.mark.cli
def test_ask_against_the_scripted_model_names_no_dollar_cost(asks: dict[str, AskRun]) -> None:
    proc = asks["completed"].proc
    assert proc.returncode == 0, proc.stderr
    (last,) = [line for line in proc.stderr.splitlines() if "finished: completed" in line]
    assert "a scripted model, so no cost" in last and "$" not in last


@pytest.mark.cli
def test_ask_json_is_versioned_ndjson_ending_in_finished(asks: dict[str, AskRun]) -> None:
    proc = asks["json"].proc
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert all(isinstance(r.get("type"), str) and r.get("version") == EVENT_VERSION for r in lines)
    types = [r["type"] for r in lines]
    ended = [r["task_id"] for r in lines if r["type"] == "task_ended"]
    started = [r["task_id"] for r in lines if r["type"] == "task_started"]
    assert sorted(ended) == sorted(started) and len(started) == 2  # each task ends once
    turns = [r["message_id"] for r in lines if r["type"] == "lead_turn"]
    assert len(turns) == len(set(turns))  # one lead_turn per API message
    (fan,) = [r for r in lines if r["type"] == "lead_turn" and r["agent_calls"]]
    calls = [r["tool_use_id"] for r in lines if r["type"] == "agent_call"]
    assert fan["agent_calls"] == calls and fan["tool_names"] == ["Agent", "Agent"]
    assert {
        "session",
        "agent_call",
        "task_started",
        "task_ended",
        "result",
        "fallback_used",
        "resuming",
    } <= set(types)
    last = lines[-1]
    assert last["type"] == "finished" and types.count("finished") == 1
    assert set(last) >= {
        "status",
        "result",
        "session_id",
        "resumes",
        "tasks",
        "cost_usd",
        "reasons",
    }
    assert last["status"] == "completed" and last["resumes"] == 1
    assert sorted(findings_in(last["result"])) == ["agent-1", "agent-2"]
    assert all(set(t) >= {"id", "description", "status", "disposition"} for t in last["tasks"])


@pytest.mark.cli
def test_ask_failed_exits_1(asks: dict[str, AskRun]) -> None:
    proc = asks["failed"].proc
    assert proc.returncode == 1, proc.stderr
    assert "teamlead: failed:" in proc.stderr and "teamlead resume" in proc.stderr


@pytest.mark.cli
def test_a_resume_counts_only_the_results_it_hands_the_lead(asks: dict[str, AskRun]) -> None:
    proc = asks["two of three fail"].proc
    assert proc.returncode == 3, proc.stderr  # partial: two agents failed
    (line,) = [line for line in proc.stderr.splitlines() if "resuming session" in line]
    assert line.endswith("with 1 result(s); 2 failed or left nothing"), line
    assert "FINDING[agent-1]" in proc.stdout


@pytest.mark.cli
def test_ask_partial_exits_3_when_a_teammate_never_reports(asks: dict[str, AskRun]) -> None:
    proc = asks["partial"].proc
    assert proc.returncode == 3, proc.stderr
    assert "FINDING[agent-1]" in proc.stdout
    assert 'teammate "silent-reviewer" did not report' in proc.stderr


@pytest.mark.cli
def test_ctrl_c_mid_fan_out_stops_every_process_and_prints_the_session(tmp_path: Path) -> None:
    with ScriptedServer(FanOut.of(3, delays=30.0)) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        env = {**os.environ, **claude.env}
        proc = subprocess.Popen(
            [*TEAMLEAD, "ask", "Investigate."],
            env=env,
            cwd=claude.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert poll(lambda: len(server.recorded("subagent")) == 3), "the fan-out never started"
        assert poll(lambda: cli_processes(tmp_path / "s")), "no CLI process appeared"
        running = cli_processes(tmp_path / "s")
        proc.send_signal(signal.SIGINT)
        # communicate's deadline is the promptness check: a hang raises TimeoutExpired
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, err
    assert "interrupted; resume with: teamlead resume " in err
    assert "Unknown child process" not in err  # the stop reaps nothing asyncio owns
    # every process teamlead started is stopped and reaped, not merely signalled
    _gone, alive = psutil.wait_procs(running, timeout=10)
    assert alive == []
    assert cli_processes(tmp_path / "s") == []


@pytest.mark.cli
@pytest.mark.parametrize("strategy", ["delegation", "baseline"])
def test_strategy_reaches_the_system_prompt_after_claude_codes_own(
    asks: dict[str, AskRun], strategy: str
) -> None:
    proc, system = asks[strategy].proc, asks[strategy].lead_system
    assert proc.returncode == 0, proc.stderr
    assert system is not None, "the lead never reached the scripted model"
    from teamlead.prompts import default_values, load_strategy

    rendered = load_strategy("delegation").render(default_values())
    marker = rendered.strip().splitlines()[0]
    if strategy == "delegation":
        assert rendered.strip() in system
        assert system.index(marker) > 200  # appended after Claude Code's own prompt
        assert "{max_concurrent_agents}" not in system and "{agent_roster}" not in system
    else:
        assert marker not in system


@pytest.mark.cli
def test_resume_collects_what_a_bare_sdk_run_lost(tmp_path: Path) -> None:
    """A bare claude_agent_sdk.query app loses the findings to a 529; `teamlead resume` recovers."""
    import anyio
    from claude_agent_sdk import query as sdk_query

    script = FanOut.of(2, delays=[0.2, 0.4], synthesis_fault=Reply.error(529))
    with ScriptedServer(script) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        session: dict[str, str] = {}

        async def bare_app() -> None:
            try:
                async for message in sdk_query(prompt="Investigate.", options=claude.options()):
                    sid = getattr(message, "session_id", None) or getattr(message, "data", {}).get(
                        "session_id"
                    )
                    if sid:
                        session.setdefault("id", sid)
            except Exception:  # noqa: BLE001 - the app's run ends in ResultError: the findings are lost
                pass

        anyio.run(bare_app)
        assert session["id"]
        env = {**os.environ, **claude.env}
        proc = subprocess.run(
            [*TEAMLEAD, "resume", session["id"], "--wait", "0", "--quiet"],
            env=env,
            cwd=claude.cwd,
            capture_output=True,
            text=True,
            timeout=90,
        )
    assert proc.returncode == 0, proc.stderr
    assert sorted(findings_in(proc.stdout)) == ["agent-1", "agent-2"]


@pytest.mark.slow  # starts `teamlead serve-scripted` in its own process
def test_serve_scripted_serves_until_terminated() -> None:
    import anthropic

    proc = subprocess.Popen(
        [*TEAMLEAD, "serve-scripted", "--scenario", "echo"], stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        url = first.split(" at ")[1].strip()
        with anthropic.Anthropic(base_url=url, api_key="x", max_retries=0) as client:
            reply = client.messages.create(
                model="m", max_tokens=5, messages=[{"role": "user", "content": "ping"}]
            )
        assert reply.content[0].text == "echo: ping"  # type: ignore[union-attr]
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0 and "stopped after 1 requests" in err


def test_a_missing_cli_is_one_line_naming_the_cause(tmp_path: Path) -> None:
    result = _invoke("ask", "hi", "--cli-path", str(tmp_path / "no-claude"))
    assert result.exit_code == 1
    assert (
        result.output.strip()
        == f"teamlead: error: the Claude Code CLI {str(tmp_path / 'no-claude')!r} does not exist"
    )
    script = tmp_path / "claude"
    script.write_text("#!/bin/sh\nexit 1\n")
    result = _invoke("ask", "hi", "--cli-path", str(script))
    assert result.exit_code == 1 and "is not executable" in result.output


@pytest.mark.cli
def test_a_cli_that_fails_to_start_is_one_line(asks: dict[str, AskRun]) -> None:
    proc = asks["cli fails"].proc
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert (
        len(lines) == 1
        and lines[0].startswith("teamlead: failed:")
        and "Traceback" not in proc.stderr
    )
