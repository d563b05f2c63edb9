"""How an agent ended, judged from evidence: an agent the CLI stops at its turn limit.

A subagent type defined with ``maxTurns`` (``.claude/agents/NAME.md`` in the run's project)
makes the real CLI stop an agent that still calls tools at its limit: it reports the task
``completed``, its result PARTIAL. teamlead judges the end from the transcript and the
notification's note, asks the lead to continue the agent (``SendMessage`` to its task id),
within ``Policy.max_continuations``, and never counts a partial text as a complete result.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import teamlead
from teamlead.events import Finished
from teamlead.testing import AgentCall, OfflineClaude, Reply, ScriptedRequest, ScriptedServer
from teamlead.testing.replies import ToolUse
from teamlead.testing.scripts import finding_text, findings_in, synthesize

from .conftest import OfflineFactory, ask, finished, run

pytestmark = [pytest.mark.anyio, pytest.mark.cli]

#: teamlead's ask in a resume prompt: the SendMessage call that continues the agent
_ASKED = re.compile(r"call SendMessage (\{[^\n]*?\})\. It resumes")


def stepper(project: Path, max_turns: int = 3) -> None:
    """Define the subagent type ``stepper`` with ``maxTurns`` in ``project``."""
    agents = project / ".claude" / "agents"
    agents.mkdir(parents=True, exist_ok=True)
    (agents / "stepper.md").write_text(
        f"---\nname: stepper\ndescription: works in steps\nmaxTurns: {max_turns}\n---\n"
        "Work through your steps.\n"
    )


class Steps:
    """A lead that starts ``deep`` (a ``stepper``, which needs ``steps`` tool calls before it
    can answer; ``None``: it never can) and ``quick``, ignores the CLI's notice that an agent
    stopped at its limit, and does what a teamlead resume prompt asks: it loads SendMessage
    and sends the call the prompt names."""

    def __init__(self, steps: int | None) -> None:
        self.steps = steps

    def __call__(self, req: ScriptedRequest) -> Reply:
        if req.role == "subagent" and req.agent is not None:
            if req.agent.description == "quick":
                return Reply.text(finding_text("quick"), delay=0.2)
            done = len(req.tool_uses_sent)
            if self.steps is None or done < self.steps:
                step = ToolUse(name="Bash", input={"command": f"echo step{done}"})
                return Reply.tools(step, text=f"working on step {done}")
            return Reply.text(finding_text("deep"))
        if req.role != "lead":
            return Reply.text("ok")
        if req.assistant_turns == 0:
            return Reply.agents(
                AgentCall("deep", "AGENTJOB deep", subagent_type="stepper"),
                AgentCall("quick", "AGENTJOB quick"),
            )
        asked = _ASKED.search(req.last_user_text)
        if asked is not None and "select:SendMessage" in req.last_user_text:
            return Reply.tools(ToolUse(name="ToolSearch", input={"query": "select:SendMessage"}))
        sent = req.tool_uses_sent
        if sent and sent[-1]["name"] == "ToolSearch":
            call = _ASKED.findall(req.all_text)[-1]
            return Reply.tools(ToolUse(name="SendMessage", input=json.loads(call)))
        return synthesize(req)


def deep_starts(server: ScriptedServer) -> int:
    """How many times ``deep`` started a conversation or was continued: its first request,
    and each request whose last user text carries a message sent to it."""
    deep = [
        r.request
        for r in server.recorded("subagent")
        if r.request.agent and r.request.agent.description == "deep"
    ]
    return sum(
        1 for req in deep if req.assistant_turns == 0 or "Continue from" in req.last_user_text
    )


async def test_an_agent_stopped_at_its_turn_limit_is_continued_and_its_finding_used(
    offline: OfflineFactory,
) -> None:
    server, claude = offline(Steps(steps=5))
    stepper(claude.cwd)
    done = finished(await run(claude.options(), teamlead.Policy(wait_s=5, deadline_s=150)))
    assert done.status == "completed", done.reasons
    assert done.reason == "all_results_used"
    assert sorted(findings_in(done.result or "")) == ["deep", "quick"]
    rows = {r.description: r for r in done.tasks if r.kind == "task"}
    assert rows["deep"].ended == "finished" and rows["deep"].disposition == "included"
    assert rows["quick"].ended == "finished"
    assert done.resumes == 1  # one ask; the lead continued the agent and it finished
    assert deep_starts(server) == 2


def test_an_agent_that_cannot_finish_ends_the_run_partial_with_bounded_tries(
    tmp_path: Path,
) -> None:
    with ScriptedServer(Steps(steps=None)) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        stepper(claude.cwd)
        proc = ask(claude, "--json", "--wait", "5")
        tries = deep_starts(server)
    assert proc.returncode == 3, proc.stderr
    done = Finished.model_validate_json(proc.stdout.splitlines()[-1])
    assert done.status == "partial" and done.reason == "results_missing", done.reasons
    assert findings_in(done.result or "") == ["quick"]  # the other agent's result is used
    rows = {r.description: r for r in done.tasks if r.kind == "task"}
    deep = rows["deep"]
    assert (deep.ended, deep.disposition, deep.status) == ("turn_limit", "missing", "completed")
    assert deep.reason is not None and deep.reason.startswith(
        "stopped at its 3-turn limit before finishing; continued 3 time(s)"
    )
    assert deep.result is not None and "working on step" in deep.result  # kept, as partial
    assert f'task "deep" (completed): {deep.reason}' in done.reasons
    assert tries == 4  # its first run and at most 3 more
    assert done.resumes == 3
