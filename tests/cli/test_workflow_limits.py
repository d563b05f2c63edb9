"""The run's limits hold for a workflow's agents on the real CLI offline.

A workflow's agents fire no hook of their own, so the relay governs them (their first
request waits for a slot and for its turn in the stagger; the timeout and the budgets apply
to every request), the workflow engine's own gate is set from the run's cap, and the gate's
hook sees the ``Workflow`` call itself. The scripted server tells workflow agents apart by
their prompt (``WFJOB <label>``) and records every request with its agent id and times.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest

import teamlead
from teamlead.events import SpawnDecided
from teamlead.policy import SpawnPolicy
from teamlead.testing import AgentCall, Reply, ScriptedRequest, ScriptedServer
from teamlead.testing.replies import ToolUse
from teamlead.testing.scripts import findings_in, synthesize, workflow_script

from .conftest import OfflineFactory, finished, run
from .scripted import Mixed

pytestmark = [pytest.mark.anyio, pytest.mark.cli]

WORKFLOW_CAP = "CLAUDE_CODE_WORKFLOW_MAX_CONCURRENT_AGENTS"
#: the engine's own wait for agents sharing a prompt prefix: off, so only teamlead spaces them
NO_PREFIX_STAGGER = {"CLAUDE_CODE_WORKFLOW_PREFIX_STAGGER_MS": "0"}
#: seconds between agent starts in the stagger test: ten times its agents' answer time
STAGGER = 2.0


def with_env(options: Any, env: dict[str, str]) -> Any:
    return dataclasses.replace(options, env={**options.env, **env})


def workflow_requests(server: ScriptedServer) -> list[Any]:
    return [r for r in server.recorded() if "WFJOB" in r.request.first_user_text]


def first_requests(server: ScriptedServer) -> dict[str, float]:
    """Each agent's first request's start on the server (monotonic seconds)."""
    starts: dict[str, float] = {}
    for rec in server.recorded():
        if rec.agent_id and rec.agent_id not in starts:
            starts[rec.agent_id] = rec.started
    return starts


@pytest.mark.slow
async def test_the_engines_gate_follows_the_runs_cap_above_the_users_value(
    offline: OfflineFactory,
) -> None:
    # no relay: only the engine's own gate holds the workflow's agents back
    user = {WORKFLOW_CAP: "8", **NO_PREFIX_STAGGER}
    server, claude = offline(Mixed([], ["w1", "w2", "w3", "w4"], delay=1.0))
    capped = teamlead.Policy(
        wait_s=5, deadline_s=150, relay=False, spawn=SpawnPolicy(max_concurrent_agents=2)
    )
    done = finished(await run(with_env(claude.options(), user), capped))
    assert done.status == "completed", done.reasons
    assert server.max_concurrent_agents() == 2  # the cap, not the user's 8, and not less
    # the same run with no cap of teamlead's: the user's value stands
    free_server, free = offline(Mixed([], ["w1", "w2", "w3", "w4"], delay=1.0))
    uncapped = teamlead.Policy(wait_s=5, deadline_s=150, relay=False)
    done = finished(await run(with_env(free.options(), user), uncapped))
    assert done.status == "completed", done.reasons
    assert free_server.max_concurrent_agents() > 2


async def test_stagger_spaces_workflow_agents_and_agent_calls_with_a_low_cap(
    offline: OfflineFactory,
) -> None:
    # answers far shorter than the stagger: with no stagger, two at a time would start a
    # moment apart and the next two one short answer later
    server, claude = offline(Mixed(["a1", "a2"], ["w1", "w2", "w3"], delay=0.2))
    policy = teamlead.Policy(
        wait_s=5,
        deadline_s=200,
        spawn=SpawnPolicy(max_concurrent_agents=2, stagger_s=STAGGER),
    )
    done = finished(await run(with_env(claude.options(), NO_PREFIX_STAGGER), policy, 180))
    assert done.status == "completed", done.reasons
    assert server.max_concurrent_agents() <= 2
    starts = first_requests(server)
    by_label = {r.label: r.id for r in done.tasks if r.kind == "workflow_agent"}
    assert set(by_label) == {"wf:w1", "wf:w2", "wf:w3"}
    # the relay forwards each workflow agent's first request a stagger after the last start
    flow = sorted(starts[agent] for agent in by_label.values())
    assert all(b - a >= STAGGER - 0.25 for a, b in zip(flow, flow[1:], strict=False)), flow
    # and the gate's Agent calls take turns in the same schedule (admission comes a moment
    # before the agent's first request, so their gaps are looser)
    every = sorted(starts.values())
    assert len(every) == 5
    assert all(b - a >= STAGGER - 1.0 for a, b in zip(every, every[1:], strict=False)), every
    assert {"a1", "a2"} <= set(findings_in(done.result or ""))


async def test_a_cap_of_one_runs_agent_calls_and_workflow_agents_one_at_a_time(
    offline: OfflineFactory,
) -> None:
    # the user's engine gate is wide, the prefix wait is off: only the run's cap holds
    env = {WORKFLOW_CAP: "8", **NO_PREFIX_STAGGER}
    server, claude = offline(Mixed(["a1", "a2"], ["w1", "w2", "w3"], delay=0.4))
    policy = teamlead.Policy(wait_s=5, deadline_s=200, spawn=SpawnPolicy(max_concurrent_agents=1))
    done = finished(await run(with_env(claude.options(), env), policy, 180))
    assert done.status == "completed", done.reasons
    assert len(first_requests(server)) == 5  # every agent ran
    assert server.max_concurrent_agents() == 1
    assert {"a1", "a2"} <= set(findings_in(done.result or ""))
    rows = [r for r in done.tasks if r.kind == "workflow_agent"]
    assert sorted(r.status for r in rows) == ["completed"] * 3


async def test_a_token_budget_stops_a_workflows_later_agents_and_wraps_up(
    offline: OfflineFactory,
) -> None:
    script = Mixed([], ["w1", "w2", "w3"], delay=0.3, inputs={"w1": 6000, "w2": 6000, "w3": 6000})
    server, claude = offline(script)
    policy = teamlead.Policy(
        wait_s=5, deadline_s=150, token_budget=8000, spawn=SpawnPolicy(max_concurrent_agents=1)
    )
    done = finished(await run(claude.options(), policy))
    assert done.reason == "token_budget", done.reasons
    assert done.status == "partial"
    sent = workflow_requests(server)
    assert len({r.agent_id for r in sent if r.status == 200}) == 1  # only w1 was sent upstream
    rows = {r.label: r for r in done.tasks if r.kind == "workflow_agent"}
    assert rows["wf:w1"].status == "completed" and rows["wf:w1"].tokens_in == 6000


async def test_a_request_budget_stops_a_workflows_later_agents(offline: OfflineFactory) -> None:
    server, claude = offline(Mixed([], ["w1", "w2", "w3"], delay=0.3))
    policy = teamlead.Policy(
        wait_s=5, deadline_s=150, request_budget=4, spawn=SpawnPolicy(max_concurrent_agents=1)
    )
    done = finished(await run(claude.options(), policy))
    assert done.reason == "request_budget", done.reasons
    assert done.status == "partial"
    # the lead's turn, its turn after the launch, w1; the fourth is kept for the wrap-up
    assert len(workflow_requests(server)) == 1
    assert len(server.recorded()) <= 4
    rows = {r.label: r for r in done.tasks if r.kind == "workflow_agent"}
    assert rows["wf:w1"].status == "completed"
    for label in ("wf:w2", "wf:w3"):  # refused at the relay: each failed, its result missing
        assert (rows[label].status, rows[label].disposition) == ("failed", "missing")
        assert "request budget (4) is spent" in (rows[label].reason or "")


async def test_a_spawn_budget_counts_agent_calls_and_workflow_agents_together(
    offline: OfflineFactory,
) -> None:
    # a budget of 3 agents: the Agent call takes one, the workflow's first two take the
    # rest, its last two never reach the server and are never run again by a resume
    script = Mixed(["a1"], ["w1", "w2", "w3", "w4"], delay=0.3)
    server, claude = offline(script)
    policy = teamlead.Policy(
        wait_s=5,
        deadline_s=150,
        spawn=SpawnPolicy(max_concurrent_agents=1, spawn_budget=3),
    )
    items = await run(claude.options(), policy)
    done = finished(items)
    sent = {
        m.group(1)
        for r in workflow_requests(server)
        if (m := re.search(r"WFJOB (\w+)", r.request.first_user_text))
    }
    assert sent == {"w1", "w2"}, sent  # the agents past the budget sent nothing upstream
    rows = {r.label: r for r in done.tasks if r.kind == "workflow_agent"}
    assert {label: rows[label].status for label in ("wf:w1", "wf:w2")} == {
        "wf:w1": "completed",
        "wf:w2": "completed",
    }
    for label in ("wf:w3", "wf:w4"):
        assert rows[label].status == "denied", rows[label]
        assert rows[label].disposition == "not_run"
        assert "spawn budget of 3" in (rows[label].reason or "")
    denials = [
        i
        for i in items
        if isinstance(i, SpawnDecided)
        and i.outcome == "denied"
        and i.description == "workflow agent"
    ]
    assert len(denials) == 2 and all(d.code == "spawn_budget" for d in denials)
    # the lead was not asked to resume the workflow for agents the user's budget denied
    leads = [r for r in server.recorded() if r.agent_id is None]
    assert not any("Resume the workflow" in r.request.last_user_text for r in leads)
    assert done.status == "completed", done.reasons
    assert {"a1", "w1", "w2"} <= set(findings_in(done.result or ""))


class TwoSteps:
    """The lead first sends one Agent call, then (its result in) a Workflow call."""

    def __call__(self, req: ScriptedRequest) -> Reply:
        if "WFJOB" in req.first_user_text:
            return Reply.text("workflow finding")
        if req.role == "subagent":
            return Reply.text("FINDING[a1]", delay=0.3)
        if req.role != "lead":
            return Reply.text("ok")
        if req.assistant_turns == 0:
            return Reply.tools(AgentCall(description="a1", prompt="AGENTJOB a1"))
        sent = [t.get("name") for t in req.tool_uses_sent]
        if "Workflow" not in sent and "FINDING[a1]" in req.all_text:
            return Reply.tools(
                ToolUse(id="toolu_wf", name="Workflow", input={"script": workflow_script(["w1"])})
            )
        return synthesize(req)


async def test_a_spent_spawn_budget_denies_the_leads_workflow_call(
    offline: OfflineFactory,
) -> None:
    server, claude = offline(TwoSteps())
    policy = teamlead.Policy(wait_s=5, deadline_s=150, spawn=SpawnPolicy(spawn_budget=1))
    items = await run(claude.options(), policy)
    done = finished(items)
    assert workflow_requests(server) == []  # no workflow agent ever ran
    denials = [
        i
        for i in items
        if isinstance(i, SpawnDecided) and i.outcome == "denied" and i.description == "Workflow"
    ]
    assert [d.code for d in denials] == ["spawn_budget"]
    told = [
        r for r in server.recorded("lead") if "PreToolUse:Workflow hook error" in r.request.all_text
    ]
    assert told and "spawn budget of 1 is used up" in told[0].request.all_text
    assert done.status == "completed", done.reasons  # the user's own limit: nothing is missing
    (row,) = [r for r in done.tasks if r.kind == "call" and r.description == "Workflow"]
    assert (row.id, row.status, row.disposition) == (denials[0].tool_use_id, "denied", "not_run")
    assert "spawn budget of 1 is used up" in (row.reason or "")
