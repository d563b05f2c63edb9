"""The `teamlead` command line: parsing and errors, through click's runner.

Real runs of ``teamlead ask`` and ``resume`` on the real CLI are in tests/cli/test_ask.py.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from teamlead._cli import main
from teamlead.testing.teammate import create_team

from .isolated import TEAMLEAD


def _invoke(*args: str, env: dict[str, str] | None = None, input: str | None = None) -> Any:
    return CliRunner().invoke(main, list(args), env=env, input=input)


# -- parsing and errors ------------------------------------------------------------------
def test_version_and_help() -> None:
    assert "teamlead, version" in _invoke("--version").output
    result = _invoke("ask", "--help")
    assert (
        result.exit_code == 0 and "--max-resumes" in result.output and "--strategy" in result.output
    )


def test_the_commands_are_listed_by_what_they_are_for_each_on_one_line_that_fits() -> None:
    from teamlead._cli.commands import COMMAND_SECTIONS, COMMANDS

    result = CliRunner().invoke(main, ["--help"], terminal_width=80)
    assert result.exit_code == 0
    headings = [line[:-1] for line in result.output.splitlines() if line.endswith(":")]
    assert headings == [
        "Options",
        "Run",
        "Steer a running run",
        "Look back",
        "Experiment",
        "Set up",
    ]
    placed = [name for _, names in COMMAND_SECTIONS for name in names]
    assert sorted(placed) == sorted(COMMANDS)  # every command under one heading, once
    for name, (_, summary) in COMMANDS.items():  # whole, on its own line, within 80 columns
        (line,) = [line for line in result.output.splitlines() if line.split()[:1] == [name]]
        assert line.endswith(summary) and len(line) <= 80, line


@pytest.mark.parametrize("group", ["experiment", "inbox", "limits", "prompts"])
def test_a_command_groups_commands_each_fit_one_line_whole(group: str) -> None:
    result = CliRunner().invoke(main, [group, "--help"], terminal_width=80)
    listed = result.output.split("Commands:\n")[1].splitlines()
    assert listed and all(len(line) <= 80 and not line.endswith("...") for line in listed)


def test_ask_help_lists_its_options_under_headings_each_once() -> None:
    from teamlead._cli.ask import ask

    text = CliRunner().invoke(main, ["ask", "--help"]).output
    headings = [line for line in text.splitlines() if line.endswith(":") and line[0] != " "]
    assert headings == [
        "Output:",
        "The lead:",
        "Time, resumes and cost:",
        "Agents (the spawn gate):",
        "Request relay (pacing against the API's limits):",
        "Other options:",
    ]
    flags = [o for p in ask.params if isinstance(p, click.Option) for o in p.opts if "--" in o]
    for flag in flags:
        assert len(re.findall(rf"(?<![\w-]){re.escape(flag)}(?![\w-])\s", text)) >= 1, flag
    other = text.split("Other options:")[1]
    assert other.split() == ["-h,", "--help", "Show", "this", "message", "and", "exit."]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["dmeo"], "no such command 'dmeo' (did you mean 'demo'?); see 'teamlead --help'"),
        (
            ["experiment", "rpeort"],
            "no such command 'rpeort' (did you mean 'report'?); see 'teamlead experiment --help'",
        ),
        (["xyzzy"], "no such command 'xyzzy'; see 'teamlead --help'"),
        (["ask"], "missing argument 'PROMPT'; see 'teamlead ask --help'"),
        (
            ["ask", "hi", "--verbos"],
            "no such option '--verbos' (did you mean '--verbose'?); see 'teamlead ask --help'",
        ),
        (
            ["relay", "--port", "x"],
            "invalid value for '--port': 'x' is not a valid integer range; "
            "see 'teamlead relay --help'",
        ),
    ],
)
def test_click_usage_errors_are_one_teamlead_error_line_naming_where_the_usage_is(
    args: list[str], line: str
) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"teamlead: error: {line}"]


def test_the_relay_and_the_view_name_their_port_alike() -> None:
    for command in ("relay", "view"):
        text = CliRunner().invoke(main, [command, "--help"]).output
        assert "--port INTEGER RANGE" in text and "--relay-port" not in text, command


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
    assert "invalid value for '--max-resumes': -4 is not in the range" in result.output


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
