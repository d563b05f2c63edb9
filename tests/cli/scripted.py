"""The real-CLI tier's shared scripts for the scripted model, and readers of what it saw.

:class:`Mixed` is a lead that starts Agent calls and (optionally) one workflow in its first
message, then synthesizes; :class:`Redelegates` one that delegates again the work of agents
a dead machine lost. The readers say which agents ran, what reached the lead, what
each agent was sent, and a workflow's requests and journal, from the server's records and
the CLI's files.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from teamlead.testing import AgentCall, Reply, ScriptedRequest, ScriptedServer
from teamlead.testing.recorded import RecordedRequest, peak_requests
from teamlead.testing.replies import ToolUse
from teamlead.testing.scripts import (
    finding_text,
    findings_in,
    synthesize,
    workflow_key,
    workflow_script,
)

__all__ = [
    "Mixed",
    "Redelegates",
    "agents_run",
    "one_done_one_running",
    "wrap_up_answers",
    "journaled",
    "lead_seen",
    "most_accepted_at_once",
    "requests_by_key",
    "sent_usage",
    "tool_result_request",
]


class Mixed:
    """The lead's first message: Agent calls plus (optionally) one workflow; then it
    synthesizes. ``hang`` names an agent whose request the server holds open; ``delays``
    sets how long an agent's replies take (``delay`` for the others); ``inputs`` sets the
    input tokens an agent's replies report; ``held_lead`` holds the lead's turns after its
    first (those that take the agents' notifications) open, but the wrap-up's."""

    def __init__(
        self,
        agents: list[str],
        workflow: list[str] | None = None,
        *,
        delay: float = 1.0,
        delays: dict[str, float] | None = None,
        hang: str | None = None,
        inputs: dict[str, int] | None = None,
        answers: dict[str, str] | None = None,
        wrap_from_last: bool = False,
        held_lead: bool = False,
    ) -> None:
        self.agents = agents
        self.held_lead = held_lead
        self.workflow = workflow or []
        self.delay = delay
        self.delays = delays or {}
        self.hang = hang
        self.inputs = inputs or {}
        self.answers = answers or {}
        self.wrap_from_last = wrap_from_last

    def _answer(self, name: str) -> Reply:
        if name == self.hang:
            return Reply.text(finding_text(name), delay=600)  # held open until cut
        text = self.answers.get(name, finding_text(name))
        delay = self.delays.get(name, self.delay)
        return Reply(content=text, delay=delay, input_tokens=self.inputs.get(name, 20))

    def __call__(self, req: ScriptedRequest) -> Reply:
        first = req.first_user_text
        for label in self.workflow:
            if f"WFJOB {label}" in first:
                return self._answer(label)
        if req.role == "subagent" and req.agent is not None:
            return self._answer(req.agent.description)
        if self.wrap_from_last and "tools are disabled" in req.last_user_text:
            labels = findings_in(req.last_user_text)  # only what the wrap-up prompt quotes
            return Reply.text("FINAL: " + "; ".join(f"FINDING[{x}]" for x in labels))
        if req.role != "lead":
            return Reply.text("ok")
        if req.assistant_turns == 0:
            calls: list[Any] = [
                AgentCall(description=name, prompt=f"AGENTJOB {name}") for name in self.agents
            ]
            if self.workflow:
                calls.append(
                    ToolUse(
                        id="toolu_workflow_1",
                        name="Workflow",
                        input={"script": workflow_script(self.workflow)},
                    )
                )
            return Reply.tools(*calls)
        if self.held_lead:
            return Reply.text("held", delay=600)
        return synthesize(req)


class Redelegates:
    """A lead that starts agents ``a`` to ``d``, of which ``c`` and ``d`` hang on their first
    run (their machine dies with them); when a teamlead resume prompt names agents that were
    lost, it delegates their work again (the same description and prompt), then answers."""

    def __init__(self) -> None:
        self.hung: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, req: ScriptedRequest) -> Reply:
        if req.role == "subagent" and req.agent is not None:
            name = req.agent.description
            with self._lock:
                first = name in ("c", "d") and name not in self.hung
                self.hung.add(name)
            return Reply.text(finding_text(name), delay=600 if first else 0.2)
        if req.role != "lead":
            return Reply.text("ok")
        if req.assistant_turns == 0:
            return Reply.agents(*(AgentCall(n, f"AGENTJOB {n}") for n in "abcd"))
        lost = (
            _LOST.findall(req.last_user_text) if "<teamlead-results" in req.last_user_text else []
        )
        if lost:
            return Reply.agents(*(AgentCall(n, f"AGENTJOB {n}") for n in lost))
        return synthesize(req)


_LOST = re.compile(r'- task "(\w)" ended (?:lost|stopped|killed)')


def wrap_up_answers(lead: Callable[[ScriptedRequest], Reply]) -> Callable[[ScriptedRequest], Reply]:
    """``lead``, plus an answer to a deadline's wrap-up turn, which offers no tools (role
    ``other``)."""

    def script(req: ScriptedRequest) -> Reply:
        if req.role == "other" and "<teamlead-results" in req.last_user_text:
            return synthesize(req)
        return lead(req)

    return script


def one_done_one_running(server: ScriptedServer, done: str, running: str) -> bool:
    """Whether agent ``done``'s finding has reached the lead while agent ``running``'s
    request is still open: the scene a deadline's wrap-up is tested from."""
    told = [
        r
        for r in server.recorded("lead")
        if f"FINDING[{done}]" in r.request.last_user_text and r.finished is not None
    ]
    slow = [
        r
        for r in server.recorded("subagent")
        if r.request.agent and r.request.agent.description == running
    ]
    return bool(told and slow) and all(r.finished is None for r in slow)


def agents_run(server: ScriptedServer) -> set[str]:
    """The descriptions of the Agent-tool agents that sent the server a request."""
    return {r.request.agent.description for r in server.recorded("subagent") if r.request.agent}


def lead_seen(server: ScriptedServer) -> set[str]:
    """Every finding label that reached the lead in any request."""
    return {label for r in server.recorded("lead") for label in findings_in(r.request.all_text)}


def tool_result_request(server: ScriptedServer) -> str:
    """The lead request that carried the first message's tool results."""
    for rec in server.recorded("lead"):
        if rec.request.tool_uses_sent:
            return rec.request.last_user_text
    raise AssertionError("the lead never got its tool results")


def sent_usage(server: ScriptedServer) -> dict[str, tuple[int, int]]:
    """Input and output tokens the server reported, per agent id."""
    totals: dict[str, tuple[int, int]] = {}
    for rec in server.recorded():
        if rec.agent_id is None or rec.reply is None or rec.status != 200:
            continue
        inp, out = totals.get(rec.agent_id, (0, 0))
        totals[rec.agent_id] = (
            inp + rec.reply.input_tokens,
            out + rec.reply.resolved_output_tokens,
        )
    return totals


def most_accepted_at_once(requests: list[RecordedRequest]) -> int:
    """The most of ``requests`` the upstream was answering (not rejecting) at one time, each
    from its arrival until its end (:attr:`~teamlead.testing.recorded.RecordedRequest.end`:
    its place under the limit is given back as its last write begins, and a next request may
    take it while the last bytes still go out)."""
    return peak_requests(
        (r.started, r.end) for r in requests if r.status == 200 and r.finished is not None
    )


def requests_by_key(server: ScriptedServer) -> dict[str, list[int | None]]:
    """Each workflow agent key's requests, as the statuses the server answered."""
    out: dict[str, list[int | None]] = {}
    for rec in server.recorded():
        key = workflow_key(rec.request)
        if key is not None:
            out.setdefault(key, []).append(rec.status)
    return out


def journaled(state_dir: Path, results: int) -> Path | None:
    """The workflow journal under ``state_dir`` that holds ``results`` results, if any.

    The glob follows the journal's layout instead of walking all of ``state_dir``, where the
    CLI makes and removes lock directories while the test polls."""
    for path in (state_dir / ".claude").glob("projects/*/*/subagents/workflows/*/journal.jsonl"):
        if path.read_text(errors="replace").count('"type":"result"') >= results:
            return path
    return None
