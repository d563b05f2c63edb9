"""The spawn gate on the real bundled CLI, driven by the scripted model.

Each test runs ``claude_agent_sdk.query`` with the gate's hook in its options and feeds every
message to :meth:`SpawnGate.observe`, as a run's rounds do, for what only the gate's own records
show (per-message limits, stagger, depth, a shared cap, hook timeouts). The scenarios a
whole run covers (a 24-call fan-out, a cap of 3, a spawn budget) run once, through
teamlead's entry points, in ``tests/cli/test_gate_run.py``. What the model saw and when is read from
the scripted server's recorded requests.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from claude_agent_sdk import ClaudeAgentOptions
from claude_agent_sdk import query as sdk_query

from teamlead._gate.gate import SpawnGate
from teamlead._gate.slots import SpawnCap
from teamlead._run.options import merge_hook
from teamlead.events import SpawnDecided
from teamlead.policy import SpawnPolicy
from teamlead.testing import AgentCall, OfflineClaude, Reply, ScriptedRequest
from teamlead.testing.scripts import FanOut

from .conftest import OfflineFactory
from .scripted import agents_run, tool_result_request

pytestmark = [pytest.mark.anyio, pytest.mark.cli]


async def run_gated(
    gate: SpawnGate, options: ClaudeAgentOptions, prompt: str = "Investigate every part."
) -> list[Any]:
    """One run through the gate; the gate is closed at the end, as a run's driver does."""
    messages: list[Any] = []
    try:
        with anyio.fail_after(100):
            async for message in sdk_query(prompt=prompt, options=options):
                gate.observe(message)
                messages.append(message)
    finally:
        gate.close()
    assert gate.errors == []
    return messages


def make_gate(events: list[SpawnDecided] | None = None, cap: int = 20, **policy: Any) -> SpawnGate:
    return SpawnGate(
        SpawnPolicy(**policy),
        cap=SpawnCap(cap),
        deadline_s=120,
        on_event=events.append if events is not None else None,
    )


def with_gate(gate: SpawnGate, options: ClaudeAgentOptions) -> ClaudeAgentOptions:
    """``options`` with ``gate``'s hook after the user's own, as a run's options have it."""
    return merge_hook(options, gate.hook_matcher())


async def test_the_per_message_limit_denies_the_rest_of_the_message(
    offline: OfflineFactory,
) -> None:
    server, claude = offline(FanOut.of(4, delays=0.5))
    gate = make_gate(max_agents_per_turn=2)
    await run_gated(gate, with_gate(gate, claude.options()))
    assert len(agents_run(server)) == 2
    assert [r.status for r in gate.records()] == ["admitted", "admitted", "denied", "denied"]
    assert len({r.turn for r in gate.records()}) == 1
    assert tool_result_request(server).count("at most 2 agents may be started") == 2


async def test_stagger_spaces_the_subagents_first_requests(offline: OfflineFactory) -> None:
    stagger = 1.0
    server, claude = offline(FanOut.of(4, delays=0.3))
    gate = make_gate(stagger_s=stagger)
    await run_gated(gate, with_gate(gate, claude.options()))
    starts = sorted(r.started for r in server.recorded("subagent"))
    assert len(starts) == 4
    admitted = sorted(r.admitted_at or 0.0 for r in gate.records())
    for k, at in enumerate(admitted):  # the gate's own admissions are exact
        assert at - admitted[0] >= k * stagger - 1e-3
    # and no agent's first request came before its turn: the k-th request to arrive came
    # after the k-th admission (which holds if each agent's does). The CLI's own spawn
    # latency only delays requests (by a few hundred ms, more on a loaded machine), so
    # spacing requests from the first one would measure the CLI, not the stagger.
    # The server stamps requests on the monotonic clock, the gate on the wall clock.
    wall = time.time() - time.monotonic()
    for k, start in enumerate(starts):
        assert start + wall >= admitted[k] - 0.05, (k, [s + wall - admitted[0] for s in starts])


def nesting_script(req: ScriptedRequest) -> Reply:
    """The lead delegates one agent, which tries to delegate again."""
    if req.role == "subagent" and req.agent is not None:
        if req.agent.description == "parent" and not req.tool_uses_sent:
            return Reply.agents(AgentCall("child", "CHILD-TASK: look at the details."))
        return Reply.text(f"FINDING[{req.agent.description}]: {req.last_user_text[-300:]}")
    if req.role == "other":
        return Reply.text("side reply")
    if not req.tool_uses_sent:
        return Reply.agents(AgentCall("parent", "PARENT-TASK: split this up if you like."))
    return Reply.text(f"Lead saw: {req.last_user_text[-500:]}")


async def test_a_nested_spawn_is_denied_at_depth_1(offline: OfflineFactory) -> None:
    server, claude = offline(nesting_script)
    gate = make_gate()
    await run_gated(gate, with_gate(gate, claude.options()))
    parent, child = gate.records()
    assert parent.status == "admitted" and parent.depth == 1
    assert child.status == "denied" and child.code == "depth" and child.depth == 2
    assert child.parent_agent_id == parent.task_id is not None
    assert agents_run(server) == {"parent"}
    parent_requests = [r.request for r in server.recorded("subagent")]
    assert any("may not start agents" in r.last_user_text for r in parent_requests)


async def test_two_runs_share_one_process_wide_cap(offline: OfflineFactory, tmp_path: Any) -> None:
    # six agents over 2 slots, each running 1.5 s: two always overlap
    server, claude_a = offline(FanOut.of(3, delays=1.5))
    claude_b = OfflineClaude(server.base_url, state_dir=tmp_path / "second")
    cap = SpawnCap(2)
    gates = [SpawnGate(SpawnPolicy(), cap=cap, deadline_s=120) for _ in range(2)]
    async with anyio.create_task_group() as tg:
        for gate, claude in zip(gates, (claude_a, claude_b), strict=True):
            tg.start_soon(run_gated, gate, with_gate(gate, claude.options()))
    subagent_requests = server.recorded("subagent")
    assert len(subagent_requests) == 6
    assert server.max_concurrent("subagent") == 2  # the shared cap, and no fewer
    for gate in gates:
        assert [r.status for r in gate.records()] == ["admitted"] * 3
    assert cap.running == 0 and cap.waiting == 0


async def test_a_hook_timeout_is_reported_as_rejected(offline: OfflineFactory) -> None:
    # the first agent runs 2.5 times the hook's timeout: the second call is still queued when
    # the CLI gives up on its hook
    server, claude = offline(FanOut.of(2, delays=2.5))
    gate = make_gate(max_concurrent_agents=1)
    options = merge_hook(claude.options(), gate.hook_matcher(timeout_s=1.0))
    await run_gated(gate, options)
    first, second = gate.records()
    assert first.status == "admitted"
    assert second.status == "rejected"
    assert "timeout" in (second.reason or "") or "cancelled" in (second.reason or "")
    assert "did not respond before its timeout" in tool_result_request(server)
    assert len(agents_run(server)) == 1
    assert gate.running == 0
