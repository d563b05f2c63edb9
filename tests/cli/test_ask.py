"""``teamlead ask`` and ``teamlead resume`` as a user runs them: real subprocesses on the
real CLI offline, each against a scripted model of its own (the command's parsing and
errors, through click's runner, are in tests/test_cli.py; a stop signal is in
``test_stop_signals.py``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from teamlead.events import EVENT_VERSION
from teamlead.testing import OfflineClaude, Reply, ScriptedRequest, ScriptedServer
from teamlead.testing.scripts import FanOut, findings_in
from teamlead.testing.teammate import create_team

from ..isolated import isolated_env, run_to_the_end, side_by_side
from .conftest import TEAMLEAD, OfflineFactory, ask, ask_env

pytestmark = pytest.mark.cli


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
        prompt, *args = make_args(root)
        proc = ask(claude, *args, prompt=prompt, base=isolated_env(root), timeout=90)
        leads = server.recorded("lead")
    return AskRun(proc, leads[0].request.system if leads else None)


@pytest.fixture(scope="module")
def asks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, AskRun]:
    """Every ask of :data:`ASKS`, three at a time: each its own process, CLI state and
    scripted model, so they share nothing but the time."""
    return side_by_side(
        _asked, ASKS, tmp_path_factory, at_once=3, root_name=lambda name: name.replace(" ", "-")
    )


def test_ask_completed_exits_0_with_the_answer_on_stdout(asks: dict[str, AskRun]) -> None:
    proc = asks["completed"].proc
    assert proc.returncode == 0, proc.stderr
    assert sorted(findings_in(proc.stdout)) == ["agent-1", "agent-2"]
    assert "task completed" in proc.stderr and "finished: completed" in proc.stderr


def test_ask_against_the_scripted_model_says_its_cost_is_an_estimate_nothing_charged(
    asks: dict[str, AskRun],
) -> None:
    """The figure is the one ``--json`` carries (the CLI's list price for made-up tokens),
    said as what it is: never "no cost" beside a cost."""
    proc = asks["completed"].proc
    assert proc.returncode == 0, proc.stderr
    (last,) = [line for line in proc.stderr.splitlines() if "finished: completed" in line]
    assert re.search(
        r", \$\d+\.\d{4} list-price estimate for a scripted model, nothing charged", last
    )
    assert "no cost" not in last


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


def test_ask_failed_exits_1(asks: dict[str, AskRun]) -> None:
    proc = asks["failed"].proc
    assert proc.returncode == 1, proc.stderr
    assert "teamlead: failed:" in proc.stderr and "teamlead resume" in proc.stderr


def test_a_resume_counts_only_the_results_it_hands_the_lead(asks: dict[str, AskRun]) -> None:
    proc = asks["two of three fail"].proc
    assert proc.returncode == 3, proc.stderr  # partial: two agents failed
    (line,) = [line for line in proc.stderr.splitlines() if "resuming session" in line]
    assert line.endswith("with 1 result(s); 2 failed or left nothing"), line
    assert "FINDING[agent-1]" in proc.stdout


def test_ask_partial_exits_3_when_a_teammate_never_reports(asks: dict[str, AskRun]) -> None:
    proc = asks["partial"].proc
    assert proc.returncode == 3, proc.stderr
    assert "FINDING[agent-1]" in proc.stdout
    assert 'teammate "silent-reviewer" did not report' in proc.stderr


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


def test_a_cli_that_fails_to_start_is_one_line(asks: dict[str, AskRun]) -> None:
    proc = asks["cli fails"].proc
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert (
        len(lines) == 1
        and lines[0].startswith("teamlead: failed:")
        and "Traceback" not in proc.stderr
    )


def test_sessions_lists_the_local_sessions_without_a_store(offline: OfflineFactory) -> None:
    """``teamlead sessions`` with no ``--session-store`` lists what its help says: the
    sessions Claude Code keeps on this machine, the run just asked among them (no status:
    the local files keep none)."""
    from claude_agent_sdk import project_key_for_directory

    _, claude = offline(FanOut.of(1, delays=0.1))
    proc = ask(claude, "--json")
    assert proc.returncode == 0, proc.stderr
    session = json.loads(proc.stdout.splitlines()[-1])["session_id"]
    listed = run_to_the_end([*TEAMLEAD, "sessions", "--json"], env=ask_env(claude), timeout=60)
    assert listed.returncode == 0, listed.stderr
    (line,) = [json.loads(x) for x in listed.stdout.splitlines()]
    key = project_key_for_directory(str(claude.cwd))
    assert line == {
        "version": 1,
        "session_id": session,
        "project_key": key,
        "last_modified": line["last_modified"],
        "status": None,
    }
    table = run_to_the_end([*TEAMLEAD, "sessions"], env=ask_env(claude), timeout=60)
    (row,) = table.stdout.splitlines()
    assert row.startswith(session) and row.split()[-2:] == [key, "-"]
