"""The spawn gate wired into teamlead's runs, on the real bundled CLI against the scripted model.

Through :func:`teamlead.run` and ``teamlead ask`` (a real subprocess): the 24-call fan-out
that the CLI alone would cut at 20, the concurrency cap, the spawn budget (denied calls in
``Finished.tasks``), the depth limit on subagents' own Agent calls, the deadline's no-tools
wrap-up, and a CLI rejection that makes the run partial. A stop signal while calls wait in
the gate is in ``test_stop_signals.py``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKClient, TaskNotificationMessage
from claude_agent_sdk import query as sdk_query

import teamlead
from teamlead.events import EVENT_VERSION, Finished, SpawnDecided
from teamlead.policy import Policy, SpawnPolicy
from teamlead.testing import (
    AgentCall,
    OfflineClaude,
    RecordedRequest,
    Reply,
    ScriptedRequest,
    ScriptedServer,
)
from teamlead.testing.scripts import FanOut, findings_in, synthesize

from ..polling import poll
from ..skip_clock import SkipClock, skipping
from .conftest import OfflineFactory, ask, cli_processes, finished, run
from .scripted import Mixed, agents_run, lead_seen, tool_result_request

pytestmark = pytest.mark.cli

PROMPT = "Investigate every part."


def decided(items: list[Any], outcome: str) -> list[SpawnDecided]:
    """The spawn gate's decisions of ``outcome`` among a run's items, in order."""
    return [i for i in items if isinstance(i, SpawnDecided) and i.outcome == outcome]


async def run_query(
    claude: OfflineClaude, policy: Policy, query_fn: Any = None
) -> tuple[list[Any], Finished]:
    items = await run(claude.options(), policy, prompt=PROMPT, query_fn=query_fn)
    return items, finished(items)


@pytest.mark.anyio
async def test_query_runs_a_fan_out_of_24_never_more_than_20_at_once(
    offline: OfflineFactory,
) -> None:
    # the 24 calls reach the gate within some 0.1 s; each agent runs thirty times that, so
    # the first 20 overlap
    server, claude = offline(FanOut.of(24, delays=3.0))
    items, done = await run_query(claude, Policy())
    assert agents_run(server) == {f"agent-{i}" for i in range(1, 25)}
    # never more than the CLI's cap at the server; the exact level is the gate's count (how
    # many of 20 admitted agents a CLI on a loaded machine has started at one moment varies)
    assert server.max_concurrent("subagent") <= 20
    assert max(i.running or 0 for i in decided(items, "admitted")) == 20
    assert len(decided(items, "queued")) == 4 and len(decided(items, "admitted")) == 24
    assert not any("Concurrent subagent limit" in r.request.all_text for r in server.recorded())
    assert len(lead_seen(server)) == 24  # every answer reached the lead
    assert done.status == "completed", done.reasons
    assert len(findings_in(done.result or "")) == 24
    assert [t.status for t in done.tasks].count("completed") == 24


def test_ask_with_a_cap_of_3_keeps_3_in_flight_and_uses_all_8_results(tmp_path: Path) -> None:
    # the 8 calls come in one message and each agent runs 2 s: the first 3 overlap
    with ScriptedServer(FanOut.of(8, delays=2.0)) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        proc = ask(claude, "--max-concurrent-agents", "3", "--json", prompt=PROMPT)
    assert proc.returncode == 0, proc.stderr
    assert server.max_concurrent("subagent") == 3  # the cap, and no fewer
    assert len(agents_run(server)) == 8
    assert lead_seen(server) == {f"agent-{i}" for i in range(1, 9)}
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    outcomes = [r["outcome"] for r in lines if r["type"] == "spawn_decided"]
    assert outcomes.count("admitted") == 8 and outcomes.count("queued") == 5
    assert max(r["running"] for r in lines if r.get("outcome") == "admitted") == 3
    queued = next(r for r in lines if r.get("outcome") == "queued")
    assert queued["type"] == "spawn_decided" and queued["version"] == EVENT_VERSION
    assert queued["limit"] == 3 and queued["position"] >= 1 and queued["running"] == 3
    assert lines[-1]["status"] == "completed"
    assert sorted(findings_in(lines[-1]["result"])) == sorted(f"agent-{i}" for i in range(1, 9))


@pytest.mark.anyio
async def test_a_spawn_budget_of_5_denies_3_and_reports_them(offline: OfflineFactory) -> None:
    server, claude = offline(FanOut.of(8, delays=0.5))
    items, done = await run_query(claude, Policy(spawn=SpawnPolicy(spawn_budget=5)))
    assert len(agents_run(server)) == 5
    assert len(decided(items, "admitted")) == 5
    assert [i.code for i in decided(items, "denied")] == ["spawn_budget"] * 3
    told = tool_result_request(server)
    assert told.count("PreToolUse:Agent hook error") == 3
    assert told.count("spawn budget of 5 is used up") == 3
    assert done.status == "completed", done.reasons
    denied = [t for t in done.tasks if t.status == "denied"]
    assert len(denied) == 3
    assert all(t.kind == "call" and t.disposition == "not_run" for t in denied)
    assert all("spawn budget of 5" in (t.reason or "") for t in denied)


class Delegating:
    """The lead starts ``parent``; ``parent`` delegates to ``child``, ``child`` to
    ``grandchild``, each once. Records the tools each agent's first request offered."""

    NEXT = {"parent": "child", "child": "grandchild"}

    def __init__(self) -> None:
        self.tools: dict[str, tuple[str, ...]] = {}

    def __call__(self, req: ScriptedRequest) -> Reply:
        if req.role == "subagent" and req.agent is not None:
            name = req.agent.description
            self.tools.setdefault(name, req.tools)
            if name in self.NEXT and not req.tool_uses_sent:
                deeper = self.NEXT[name]
                return Reply.agents(AgentCall(deeper, f"{deeper.upper()}-TASK: look deeper."))
            return Reply.text(f"FINDING[{name}]: done.")
        if req.role == "other":
            return Reply.text("side reply")
        if not req.tool_uses_sent:
            return Reply.agents(AgentCall("parent", "PARENT-TASK: split this up if you like."))
        return synthesize(req)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("max_depth", "ran", "denied", "told"),
    [
        (1, ["parent"], "child", "subagents may not start agents of their own"),
        (2, ["parent", "child"], "grandchild", "nested deeper than 2 levels are not allowed"),
    ],
)
async def test_max_depth_admits_nested_agent_calls_down_to_it_and_denies_the_next_level(
    offline: OfflineFactory, max_depth: int, ran: list[str], denied: str, told: str
) -> None:
    script = Delegating()
    server, claude = offline(script)
    items, done = await run_query(claude, Policy(spawn=SpawnPolicy(max_depth=max_depth)))
    # the CLI offers the Agent tool to every agent that delegates here: it is the gate, not
    # the CLI, that stops the next level (a subagent gets no Workflow tool, so the depth of
    # a subagent's workflow is checked at the hook, in test_workflow_limits.py)
    assert all("Agent" in script.tools[name] for name in ran), script.tools
    assert all("Workflow" not in script.tools[name] for name in ran), script.tools
    assert [i.description for i in decided(items, "admitted")] == ran
    refused = [(i.description, i.code) for i in decided(items, "denied")]
    assert refused == [(denied, "depth")]
    assert agents_run(server) == set(ran)  # the denied agent never ran
    caller = [r.request for r in server.recorded("subagent") if _agent_of(r) == ran[-1]]
    assert any(told in r.last_user_text for r in caller)  # the caller was told why
    rows = {(t.description, t.status, t.disposition) for t in done.tasks}
    assert {(name, "completed", "included") for name in ran} <= rows
    assert [t.description for t in done.tasks if t.status == "denied"] == [denied]
    assert (denied, "denied", "not_run") in rows
    assert done.status == "completed", done.reasons
    assert "parent" in findings_in(done.result or "")


#: The deadline of the wrap-up tests. The run's clock skips to the wrap point once the quick
#: agent's result is in (:func:`quick_ended`), so the seconds before it are the CLI's own,
#: however loaded the machine; from there the gate's reserve (half of it) is real time for
#: resuming the CLI and the tool-less wrap-up turn.
_DEADLINE_S = 60.0


def wrap_point(clock: SkipClock, policy: Policy) -> float:
    return clock.monotonic() + _DEADLINE_S - policy.spawn.reserve_for(_DEADLINE_S)


def quick_ended(items: list[Any]) -> Callable[[], bool]:
    """Whether the run so far has the quick agent's result (the slow one's request is
    still open)."""
    return lambda: any(
        isinstance(i, TaskNotificationMessage) and i.status == "completed" for i in items
    )


async def wrapped_up(claude: OfflineClaude) -> list[Any]:
    """A run on ``claude`` whose deadline's wrap-up point comes once only the slow agent is
    left (not after the seconds to it); every item of the run."""
    policy = Policy(wait_s=2, deadline_s=_DEADLINE_S)
    clock = SkipClock()
    items: list[Any] = []

    async def collect() -> None:
        with anyio.fail_after(90):
            async for item in teamlead.run(PROMPT, claude.options(), policy=policy, clock=clock):
                items.append(item)

    await skipping(clock, quick_ended(items), wrap_point(clock, policy), collect())
    return items


@pytest.mark.anyio
async def test_the_deadline_stops_the_slow_agent_and_wraps_up_with_the_quick_one(
    offline: OfflineFactory,
) -> None:
    # the quick agent answers in 0.3 s, the slow one's request is held open (600 s); the
    # wrap-up turn answers from what its prompt quotes alone
    server, claude = offline(
        Mixed(["agent-1", "agent-2"], delay=0.3, hang="agent-2", wrap_from_last=True)
    )
    done = finished(await wrapped_up(claude))
    assert done.status == "partial" and done.reason == "deadline", done.reasons
    # the final answer came from the wrap-up prompt alone, and it quotes the quick finding
    assert done.result is not None and done.result.startswith("FINAL:")
    assert findings_in(done.result) == ["agent-1"]
    status = {t.description: t.status for t in done.tasks}
    assert status == {"agent-1": "completed", "agent-2": "stopped"}
    wrap = [
        r.request for r in server.recorded("other") if "<teamlead-results" in r.request.all_text
    ]
    assert len(wrap) == 1 and wrap[0].tools == ()  # one round, no tools
    assert "agent-2" in wrap[0].last_user_text and "did not finish" in wrap[0].last_user_text
    assert "replaces every earlier reply" in wrap[0].last_user_text
    # the slow agent was not waited for: the wrap-up point ended the run's CLI tree, whose
    # subagent request was cut before its reply
    slow = [
        r
        for r in server.recorded("subagent")
        if r.request.agent and r.request.agent.description == "agent-2"
    ]
    assert slow and all(r.error is not None or r.finished is None for r in slow), slow
    assert poll(lambda: not cli_processes(claude.state_dir), within_s=10)


@pytest.mark.anyio
async def test_an_agent_ended_before_the_wrap_up_stays_completed_when_the_resumed_cli_says_not(
    offline: OfflineFactory,
) -> None:
    # the lead's turn that takes the quick agent's notification is held: the CLI the wrap-up
    # ends has no record of that agent's end, and the wrap-up's resumed CLI reports it
    # "stopped": "didn't finish before the previous session ended"
    script = Mixed(["agent-1", "agent-2"], delay=0.3, hang="agent-2", wrap_from_last=True,
                   held_lead=True)  # fmt: skip
    _, claude = offline(script)
    items = await wrapped_up(claude)
    done = finished(items)
    orphaned = [
        i.task_id
        for i in items
        if isinstance(i, TaskNotificationMessage) and "previous session ended" in i.summary
    ]
    quick = next(t for t in done.tasks if t.description == "agent-1")
    assert quick.id in orphaned  # the resumed CLI's word, which the run did not take
    assert {t.description: t.status for t in done.tasks} == {
        "agent-1": "completed",
        "agent-2": "stopped",
    }
    assert findings_in(done.result or "") == ["agent-1"], done.result


def _agent_of(record: RecordedRequest) -> str | None:
    return record.request.agent.description if record.request.agent else None


@pytest.mark.anyio
async def test_a_call_the_cli_rejects_makes_the_run_partial(offline: OfflineFactory) -> None:
    server, claude = offline(FanOut.of(3, delays=1.0))

    def cli_capped_at_1(*, prompt: str, options: ClaudeAgentOptions) -> AsyncIterator[Any]:
        # the CLI's cap set where the gate cannot see it (e.g. in its settings)
        env = {**options.env, "CLAUDE_CODE_MAX_CONCURRENT_SUBAGENTS": "1"}
        return sdk_query(prompt=prompt, options=dataclasses.replace(options, env=env))

    _, done = await run_query(claude, Policy(), query_fn=cli_capped_at_1)
    assert len(agents_run(server)) == 1
    rejected = [t for t in done.tasks if t.status == "rejected"]
    assert len(rejected) == 2 and all(t.disposition == "missing" for t in rejected)
    assert all("Concurrent subagent limit" in (t.reason or "") for t in rejected)
    assert done.status == "partial" and done.reason == "results_missing", done.reasons


@pytest.mark.anyio
async def test_receive_all_gates_the_clients_agent_calls(offline: OfflineFactory) -> None:
    server, claude = offline(FanOut.of(4, delays=1.5))  # the first two overlap
    policy = Policy(spawn=SpawnPolicy(max_concurrent_agents=2))
    items: list[Any] = []
    with anyio.fail_after(120):
        async with (
            teamlead.ClientRun(claude.options(), policy) as run,
            ClaudeSDKClient(options=run.options) as client,
        ):
            await client.query("Investigate every part.")
            async for item in teamlead.receive_all(client, run):
                items.append(item)
    done = items[-1]
    assert isinstance(done, Finished) and done.status == "completed", done
    assert server.max_concurrent("subagent") == 2  # the cap, and no fewer
    admitted = decided(items, "admitted")
    assert len(admitted) == 4 and max(i.running or 0 for i in admitted) == 2
    assert len(decided(items, "queued")) == 2
    assert sorted(findings_in(done.result or "")) == [f"agent-{i}" for i in range(1, 5)]


@pytest.mark.anyio
async def test_a_clients_wrap_up_stops_the_slow_task_and_answers(offline: OfflineFactory) -> None:
    server, claude = offline(FanOut.of(2, delays=[0.3, 40.0]))
    policy = Policy(deadline_s=_DEADLINE_S)
    clock = SkipClock()
    items: list[Any] = []

    async def collect() -> None:
        with anyio.fail_after(120):
            async with (
                teamlead.ClientRun(claude.options(), policy, clock=clock) as run,
                ClaudeSDKClient(options=run.options) as client,
            ):
                await client.query(PROMPT)
                async for item in teamlead.receive_all(client, run):
                    items.append(item)

    await skipping(clock, quick_ended(items), wrap_point(clock, policy), collect())
    done = items[-1]
    assert isinstance(done, Finished)
    assert done.status == "partial" and done.reason == "deadline", done.reasons
    assert findings_in(done.result or "") == ["agent-1"]
    assert {t.description: t.status for t in done.tasks} == {
        "agent-1": "completed",
        "agent-2": "stopped",
    }
