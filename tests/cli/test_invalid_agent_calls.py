"""Agent calls the CLI rejects for invalid input are accounted for, on the real CLI offline.

The CLI answers a call whose input fails its schema (a numeric description, a list
prompt, no prompt) with an ``InputValidationError`` tool result and never runs the hook,
so the spawn gate never sees it: the stream does, and the call is in ``Finished.tasks``.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import teamlead
from teamlead.events import Finished
from teamlead.testing import AgentCall, Reply, ScriptedRequest, ToolUse
from teamlead.testing.scripts import subagent_answers, synthesize

from .conftest import OfflineFactory
from .scripted import agents_run

pytestmark = pytest.mark.cli

_KIND = {"subagent_type": "general-purpose"}
_INVALID = [
    {"description": 42, "prompt": "SUBTASK-2: a numeric description.", **_KIND},
    {"description": "list-prompt", "prompt": ["not", "a", "string"], **_KIND},
    {"description": "no-prompt", **_KIND},
]


def _lead_with_invalid_calls(req: ScriptedRequest) -> Reply:
    if req.role == "subagent":
        return subagent_answers({})(req)
    if req.role == "other":
        return Reply.text("Scripted side reply.")
    if not any(u.get("name") in ("Agent", "Task") for u in req.tool_uses_sent):
        valid = AgentCall(description="agent-1", prompt="SUBTASK-1: report one finding.")
        return Reply.tools(valid, *(ToolUse("Agent", dict(i)) for i in _INVALID))
    last = req.last_user_text
    if "<teamlead-results" in last or "<task-notification>" in last:
        return synthesize(req)
    return Reply.text("Dispatched the agents; waiting for their results.")


@pytest.mark.anyio
async def test_agent_calls_the_cli_rejects_as_invalid_are_rejected_tasks_and_missing_work(
    offline: OfflineFactory,
) -> None:
    server, claude = offline(_lead_with_invalid_calls)
    items: list[Any] = []
    with anyio.fail_after(120):
        async for item in teamlead.run("Investigate every part.", claude.options()):
            items.append(item)
    done = items[-1]
    assert isinstance(done, Finished)
    assert agents_run(server) == {"agent-1"}
    rejected = [t for t in done.tasks if t.status == "rejected"]
    assert len(rejected) == 3, done.tasks
    assert all(t.kind == "call" and t.disposition == "missing" for t in rejected), rejected
    assert all("InputValidationError" in (t.reason or "") for t in rejected), rejected
    assert {t.description for t in rejected} >= {"list-prompt", "no-prompt"}
    assert done.status == "partial" and done.reason == "results_missing", done.reasons
