"""Focus on one agent, on the real CLI offline: a subagent's last tool call is found in
the real stream (the unit tests, on frames built by hand, are in tests/test_focus.py)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

import teamlead
from teamlead._cli.focus import Focus
from teamlead.testing import AgentCall, Reply, ScriptedRequest
from teamlead.testing.replies import ToolUse
from teamlead.testing.scripts import finding_text, synthesize

from ..parsing import HandFed
from .conftest import OfflineFactory

pytestmark = [pytest.mark.cli, pytest.mark.anyio]


def bash_then_answer(req: ScriptedRequest) -> Reply:
    if req.role == "subagent" and req.agent is not None:
        if req.assistant_turns == 0:
            command = {"command": "echo FOCUS-MARK", "description": "say the mark"}
            return Reply.tools(ToolUse(name="Bash", input=command))
        return Reply.text("checked the mark\n" + finding_text(req.agent.description))
    if req.role != "lead":
        return Reply.text("ok")
    if req.assistant_turns == 0:
        return Reply.tools(AgentCall(description="alpha", prompt="AGENTJOB alpha"))
    return synthesize(req)


async def test_a_subagents_last_tool_call_is_found_in_the_real_stream(
    offline: OfflineFactory,
) -> None:
    _, claude = offline(bash_then_answer)
    focus = Focus(HandFed(), Path(claude.env["CLAUDE_CONFIG_DIR"]))
    policy = teamlead.Policy(wait_s=5, deadline_s=120)
    with anyio.fail_after(120):
        async for item in teamlead.run("Investigate.", claude.options(), policy=policy):
            focus.feed(item)
    assert isinstance(item, teamlead.Finished) and item.status == "completed", item.reasons
    agent = focus.next_agent(None)
    assert agent is not None and focus.agents == [agent]
    view = focus.of(agent)
    assert view is not None and view.source == "stream" and view.description == "alpha"
    assert [(c.name, c.summary, c.outcome) for c in view.calls] == [
        ("Bash", "echo FOCUS-MARK", "ok")
    ]
    assert view.lines[-1] == "FINDING[alpha]: the alpha is done and checked."
