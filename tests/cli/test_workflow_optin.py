"""Opting in to workflows: ``--allow-workflows`` / ``teamlead.allow_workflows``, on the real CLI.

In permission mode ``default`` Claude Code refuses the lead's ``Workflow`` call unless
something approves it. Without the opt-in, teamlead says so once, naming the flag (a
``workflow_denied`` event, one line on stderr); with it, the workflow's agents run.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import teamlead
from teamlead.events import EVENT_VERSION, WorkflowDenied
from teamlead.testing import OfflineClaude, ScriptedServer

from .conftest import OfflineFactory, ask, finished, run
from .scripted import Mixed

pytestmark = [pytest.mark.anyio, pytest.mark.cli]


def workflow_agents_sent(server: ScriptedServer) -> int:
    return sum("WFJOB" in r.request.first_user_text for r in server.recorded())


async def test_the_default_mode_denies_a_workflow_unless_the_options_allow_it(
    offline: OfflineFactory,
) -> None:
    server, claude = offline(Mixed([], ["w1", "w2"], delay=0.3))
    options = dataclasses.replace(claude.options(), permission_mode="default")
    policy = teamlead.Policy(wait_s=5, deadline_s=120)
    items = await run(options, policy)
    denied = [i for i in items if isinstance(i, WorkflowDenied)]
    assert len(denied) == 1 and denied[0].tool_use_id == "toolu_workflow_1"
    assert "teamlead.allow_workflows" in denied[0].hint
    assert workflow_agents_sent(server) == 0

    allowed_server, allowed = offline(Mixed([], ["w1", "w2"], delay=0.3))
    options = teamlead.allow_workflows(
        dataclasses.replace(allowed.options(), permission_mode="default")
    )
    items = await run(options, policy)
    assert not [i for i in items if isinstance(i, WorkflowDenied)]
    assert workflow_agents_sent(allowed_server) == 2
    rows = [r for r in finished(items).tasks if r.kind == "workflow_agent"]
    assert sorted(r.status for r in rows) == ["completed", "completed"]


def test_ask_names_the_flag_once_and_the_flag_lets_the_workflow_run(tmp_path: Path) -> None:
    with ScriptedServer(Mixed([], ["w1", "w2"], delay=0.3)) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "denied")
        proc = ask(claude, "--json", "--wait", "5")
        sent = workflow_agents_sent(server)
    assert proc.returncode == 0, proc.stderr
    assert sent == 0
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    events = [r for r in lines if r["type"] == "workflow_denied"]
    assert len(events) == 1 and events[0]["version"] == EVENT_VERSION
    told = [line for line in proc.stderr.splitlines() if "--allow-workflows" in line]
    assert told == [
        "teamlead: the lead's Workflow call was denied (the permission mode asks for approval); "
        "run again with --allow-workflows (or TEAMLEAD_ALLOW_WORKFLOWS=1) to let workflows run"
    ]

    with ScriptedServer(Mixed([], ["w1", "w2"], delay=0.3)) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "allowed")
        proc = ask(claude, "--wait", "5", extra={"TEAMLEAD_ALLOW_WORKFLOWS": "1"})
        sent = workflow_agents_sent(server)
    assert proc.returncode == 0, proc.stderr
    assert sent == 2
    assert "--allow-workflows" not in proc.stderr
