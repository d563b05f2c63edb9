"""Live control of a running fan-out on the real CLI offline: the cap and the subagent model
changed while the run goes (:class:`teamlead.RunControl`).

The scripted server records every request with its model and its timestamps, so a test
says which model each agent was sent on and how many agents had a request in flight at
once. Agent-tool agents are told apart by their Agent call's prompt, workflow agents by
their prompt (``WFJOB``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio
import pytest

import teamlead
from teamlead.events import Finished, RunAmended, SpawnDecided
from teamlead.policy import SpawnPolicy
from teamlead.testing import AgentCall, OfflineClaude, Reply, ScriptedRequest, ScriptedServer
from teamlead.testing.replies import ToolUse
from teamlead.testing.scripts import finding_text, findings_in, synthesize, workflow_script

from .conftest import OfflineFactory, ask

pytestmark = [pytest.mark.anyio, pytest.mark.cli]


class Waves:
    """The lead sends one message of Agent calls (and a workflow, if any) per wave, the next
    wave once the last one's results are in; then it synthesizes."""

    def __init__(
        self, waves: list[list[str]], workflow: list[str] | None = None, delay: float = 1.0
    ) -> None:
        self.waves = waves
        self.workflow = workflow or []
        self.delay = delay

    def __call__(self, req: ScriptedRequest) -> Reply:
        first = req.first_user_text
        for label in self.workflow:
            if f"WFJOB {label}" in first:
                return Reply(content=finding_text(label), delay=self.delay)
        if req.role == "subagent" and req.agent is not None:
            return Reply(content=finding_text(req.agent.description), delay=self.delay)
        if req.role != "lead":
            return Reply.text("ok")
        seen = set(findings_in(req.all_text))
        for index, wave in enumerate(self.waves):
            if not set(wave) <= seen:
                earlier = {name for w in self.waves[:index] for name in w}
                if not earlier <= seen or _sent(req, wave):
                    return Reply.text("waiting for the agents")
                calls: list[Any] = [
                    AgentCall(description=name, prompt=f"AGENTJOB {name}") for name in wave
                ]
                return Reply.tools(*calls)
        if self.workflow and not set(self.workflow) <= seen:
            if any(t.get("name") == "Workflow" for t in req.tool_uses_sent):
                return Reply.text("waiting for the workflow")
            script = workflow_script(self.workflow)
            return Reply.tools(ToolUse(name="Workflow", input={"script": script}))
        return synthesize(req)


def _sent(req: ScriptedRequest, wave: list[str]) -> bool:
    """Whether the lead already sent this wave's Agent calls."""
    sent = {t.get("input", {}).get("description") for t in req.tool_uses_sent}
    return set(wave) <= sent


def models_of(server: ScriptedServer, marker: str) -> list[str]:
    """The model of every request whose conversation starts with ``marker``."""
    return [r.request.model for r in server.recorded() if marker in r.request.first_user_text]


def overlapping(server: ScriptedServer, names: list[str]) -> int:
    """The most of ``names``' agents (by their prompts) with a request in flight at once."""
    spans = [
        (r.started, r.end)
        for r in server.recorded()
        if any(f"AGENTJOB {n}" == r.request.first_user_text.strip() for n in names)
    ]
    peak = 0
    for start, _ in spans:
        peak = max(peak, sum(1 for s, e in spans if s <= start < e))
    return peak


async def steered(
    claude: OfflineClaude,
    policy: teamlead.Policy,
    control: teamlead.RunControl,
    steer: Callable[[list[Any]], None],
) -> tuple[list[Any], Finished]:
    """A run whose ``control`` ``steer(items so far)`` changes after each item."""
    items: list[Any] = []
    with anyio.fail_after(150):
        async for item in teamlead.run(
            "Investigate.", claude.options(), policy=policy, control=control
        ):
            items.append(item)
            steer(items)
    done = items[-1]
    assert isinstance(done, Finished) and done.status == "completed", done.reasons
    return items, done


def finished_agent(server: ScriptedServer, job: str) -> bool:
    """Whether the server finished a reply to the agent whose prompt is ``job``."""
    return any(
        r.finished is not None and job in r.request.first_user_text for r in server.recorded()
    )


async def test_lowering_the_cap_mid_run_caps_the_next_admissions(offline: OfflineFactory) -> None:
    names = ["a", "b", "c", "d", "e", "f"]
    server, claude = offline(Waves([names], delay=1.0))
    control = teamlead.RunControl()
    policy = teamlead.Policy(wait_s=5, deadline_s=150, spawn=SpawnPolicy(max_concurrent_agents=3))
    admitted_after: list[SpawnDecided] = []

    def steer(items: list[Any]) -> None:
        item = items[-1]
        if isinstance(item, SpawnDecided) and item.outcome == "queued" and control.cap == 3:
            control.lower_cap(by=2)  # three run, three wait: they now go one by one
        elif isinstance(item, SpawnDecided) and item.outcome == "admitted" and control.cap == 1:
            admitted_after.append(item)

    items, done = await steered(claude, policy, control, steer)
    assert set(findings_in(done.result or "")) == set(names)
    amended = [i for i in items if isinstance(i, RunAmended)]
    assert [(a.previous_cap, a.cap) for a in amended] == [(3, 1)]
    first = [r.request.agent_description for r in server.recorded() if r.role == "subagent"][:3]
    later = [n for n in names if n not in first]
    assert overlapping(server, first) == 3  # the first three ran at once
    assert overlapping(server, later) == 1  # then one at a time
    assert server.max_concurrent_agents() == 3
    assert [a.limit for a in admitted_after] == [1] * len(admitted_after)


async def test_a_lowered_cap_holds_workflow_agents_at_the_relay(offline: OfflineFactory) -> None:
    server, claude = offline(Waves([], ["w1", "w2", "w3"], delay=0.6))
    control = teamlead.RunControl()
    policy = teamlead.Policy(wait_s=5, deadline_s=150, spawn=SpawnPolicy(max_concurrent_agents=3))

    def steer(items: list[Any]) -> None:
        if len(items) == 1:  # the workflow engine starts with room for three
            control.amend(cap=1)

    _, done = await steered(claude, policy, control, steer)
    rows = [r for r in done.tasks if r.kind == "workflow_agent"]
    assert sorted(r.status for r in rows) == ["completed"] * 3
    assert server.max_concurrent_agents() == 1


async def test_a_subagent_model_set_mid_run_reaches_the_next_agents(
    offline: OfflineFactory,
) -> None:
    server, claude = offline(Waves([["first"], ["second"]], ["w1", "w2"], delay=0.5))
    control = teamlead.RunControl()
    policy = teamlead.Policy(wait_s=5, deadline_s=150)

    def steer(items: list[Any]) -> None:
        if finished_agent(server, "AGENTJOB first") and control.subagent_model is None:
            control.set_subagent_model("haiku")  # an alias: the gate's updatedInput
        second_sent = any("AGENTJOB second" in r.request.first_user_text for r in server.recorded())
        if second_sent and control.subagent_model == "haiku":
            control.set_subagent_model("claude-haiku-4-5")  # a model id: the relay's pin

    items, done = await steered(claude, policy, control, steer)
    lead_model = next(r.request.model for r in server.recorded() if r.role == "lead")
    assert set(models_of(server, "AGENTJOB first")) == {lead_model}  # started before
    assert set(models_of(server, "AGENTJOB second")) == {"claude-haiku-5-5"}  # the CLI's alias
    for label in ("w1", "w2"):
        assert set(models_of(server, f"WFJOB {label}")) == {"claude-haiku-4-5"}
    amended = [i for i in items if isinstance(i, RunAmended)]
    assert [a.subagent_model for a in amended] == ["haiku", "claude-haiku-4-5"]


async def test_a_mid_run_alias_reaches_workflow_agents_after_an_agent_call_ran_on_it(
    offline: OfflineFactory,
) -> None:
    server, claude = offline(Waves([["first"], ["second"]], ["w1", "w2"], delay=0.5))
    control = teamlead.RunControl()
    policy = teamlead.Policy(wait_s=5, deadline_s=150)

    def steer(items: list[Any]) -> None:
        if finished_agent(server, "AGENTJOB first") and control.subagent_model is None:
            control.set_subagent_model("haiku")  # what a key at the terminal does

    await steered(claude, policy, control, steer)
    lead_model = next(r.request.model for r in server.recorded() if r.role == "lead")
    assert set(models_of(server, "AGENTJOB first")) == {lead_model}
    assert set(models_of(server, "AGENTJOB second")) == {"claude-haiku-5-5"}
    for label in ("w1", "w2"):  # the relay learnt the alias from the second agent
        assert set(models_of(server, f"WFJOB {label}")) == {"claude-haiku-5-5"}


async def test_subagent_model_at_start_reaches_agent_and_workflow_agents(
    offline: OfflineFactory,
) -> None:
    server, claude = offline(Waves([["first"]], ["w1"], delay=0.2))
    policy = teamlead.Policy(wait_s=5, deadline_s=150, spawn=SpawnPolicy(subagent_model="haiku"))
    with anyio.fail_after(150):
        items = [i async for i in teamlead.run("Investigate.", claude.options(), policy=policy)]
    done = items[-1]
    assert isinstance(done, Finished) and done.status == "completed", done.reasons
    assert set(models_of(server, "AGENTJOB first")) == {"claude-haiku-5-5"}
    assert set(models_of(server, "WFJOB w1")) == {"claude-haiku-5-5"}


def test_ask_subagent_model_from_its_variable_reaches_every_kind_of_agent(
    offline: OfflineFactory,
) -> None:
    server, claude = offline(Waves([["first"]], ["w1"], delay=0.2))
    variable = {"TEAMLEAD_SUBAGENT_MODEL": "haiku"}
    proc = ask(claude, "--json", "--permission-mode", "bypassPermissions", extra=variable)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["status"] == "completed"
    assert set(models_of(server, "AGENTJOB first")) == {"claude-haiku-5-5"}
    assert set(models_of(server, "WFJOB w1")) == {"claude-haiku-5-5"}
