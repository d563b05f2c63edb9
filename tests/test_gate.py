"""The spawn gate without the CLI: budgets under races, FIFO, stagger, depth, deadline,
cancellation, odd input, and what it reads from the stream.

Time is virtual: :class:`~tests.step_clock.StepClock` moves only when a test advances it,
and a sleeper wakes when its time comes, so queue waits and staggers are exact and nothing
sleeps.
"""

from __future__ import annotations

import json
import random
from typing import Any

import anyio
import pydantic
import pytest
from claude_agent_sdk import ClaudeAgentOptions, HookMatcher

from teamlead._gate.calls import call_dispositions
from teamlead._gate.gate import SpawnGate, classify_agent_result
from teamlead._gate.slots import FifoSlots, SpawnCap, cli_subagent_cap
from teamlead._run.options import merge_hook
from teamlead.events import EVENT_VERSION, SpawnDecided
from teamlead.policy import SpawnPolicy
from teamlead.testing import FakeClock
from teamlead.tracker import ToolResultSeen, Tracker, parse_message

from .polling import settle
from .step_clock import StepClock

pytestmark = pytest.mark.anyio


def agent_input(description: str = "part", **extra: Any) -> dict[str, Any]:
    return {
        "hook_event_name": "PreToolUse",
        "tool_name": "Agent",
        "tool_input": {"description": description, "prompt": f"do {description}"},
        **extra,
    }


def decision(output: Any) -> str:
    spec = output.get("hookSpecificOutput") if isinstance(output, dict) else None
    return "deny" if spec and spec.get("permissionDecision") == "deny" else "allow"


class Calls:
    """Hook calls running in the background; their outputs by tool_use_id."""

    def __init__(self, gate: SpawnGate, tg: anyio.abc.TaskGroup) -> None:
        self.gate, self.tg = gate, tg
        self.out: dict[str, Any] = {}

    def start(self, tool_use_id: str, **extra: Any) -> None:
        async def run() -> None:
            self.out[tool_use_id] = await self.gate.hook(
                agent_input(tool_use_id, **extra), tool_use_id, {"signal": None}
            )

        self.tg.start_soon(run)


def gate_with(
    clock: Any = None, cap: SpawnCap | None = None, **policy: Any
) -> tuple[SpawnGate, list[SpawnDecided]]:
    seen: list[SpawnDecided] = []
    gate = SpawnGate(
        SpawnPolicy(**policy),
        cap=cap or SpawnCap(20),
        clock=clock or FakeClock(),
        on_event=seen.append,
        env={},
    )
    return gate, seen


# -- budgets: check and take in one step --------------------------------------------------
async def test_budget_never_over_admits_under_concurrent_calls() -> None:
    rng = random.Random(9)
    for _ in range(1000):
        budget, n = rng.randint(0, 5), rng.randint(1, 12)
        gate, _ = gate_with(spawn_budget=budget)
        async with anyio.create_task_group() as tg:
            calls = Calls(gate, tg)
            for i in range(n):
                calls.start(f"t{i}")
        allowed = [k for k, v in calls.out.items() if decision(v) == "allow"]
        assert len(allowed) == min(budget, n)
        denied = [r for r in gate.records() if r.status == "denied"]
        assert len(denied) == n - len(allowed)
        assert all(r.code == "spawn_budget" for r in denied)
        assert gate.spawned == len(allowed)


async def test_budget_and_turn_limit_race_with_a_queue() -> None:
    rng = random.Random(3)
    for _ in range(25):
        clock = StepClock()
        per_turn = rng.randint(1, 4)
        gate, _ = gate_with(
            clock, spawn_budget=per_turn + 1, max_agents_per_turn=per_turn, max_concurrent_agents=1
        )
        async with anyio.create_task_group() as tg:
            calls = Calls(gate, tg)
            for i in range(6):
                calls.start(f"t{i}")
            await settle()
            for i in range(6):  # end each admitted task in turn so the queue drains
                gate.task_ended(f"t{i}")
                await settle()
        allowed = sorted(k for k, v in calls.out.items() if decision(v) == "allow")
        assert allowed == [f"t{i}" for i in range(per_turn)]  # FIFO, and exactly the limit
        codes = {r.code for r in gate.records() if r.status == "denied"}
        assert codes == {"turn_limit"}


async def test_a_repeated_tool_use_id_gets_a_key_of_its_own_whatever_ids_came_before() -> None:
    gate, _ = gate_with()
    with anyio.fail_after(5):
        for tid in ("a", "a#2", "a", "a"):
            assert decision(await gate.hook(agent_input(), tid, {})) == "allow"
    keys = [r.tool_use_id for r in gate.records()]
    assert keys == ["a", "a#2", "a#3", "a#4"]


async def test_the_stream_frees_the_slot_of_a_call_whose_tool_use_id_repeats() -> None:
    # the second "a" is keyed "a#2"; its task's start and end name "a", as the CLI sends them
    gate, _ = gate_with(max_concurrent_agents=1)
    with anyio.fail_after(5):
        for task_id in ("k1", "k2"):
            assert decision(await gate.hook(agent_input(), "a", {})) == "allow"
            for subtype in ("task_started", "task_notification"):
                gate.observe({"type": "system", "subtype": subtype, "task_id": task_id,
                              "tool_use_id": "a", "description": "a"})  # fmt: skip
            assert gate.running == 0, task_id
    assert [(r.tool_use_id, r.task_id) for r in gate.records()] == [("a", "k1"), ("a#2", "k2")]
    # a tool result naming a repeated id ends the call of it that still runs, not the first
    with anyio.fail_after(5):
        assert decision(await gate.hook(agent_input(), "a", {})) == "allow"
    result = {"type": "user", "message": {"content": [
        {"type": "tool_result", "tool_use_id": "a", "content": "the answer"}]}}  # fmt: skip
    gate.observe(result)
    assert gate.running == 0


async def test_the_end_of_one_of_two_running_calls_of_a_repeated_id_frees_its_own_slot() -> None:
    gate, _ = gate_with(max_concurrent_agents=5)
    with anyio.fail_after(5):
        for task_id in ("k1", "k2"):
            assert decision(await gate.hook(agent_input(), "a", {})) == "allow"
            gate.observe({"type": "system", "subtype": "task_started", "task_id": task_id,
                          "tool_use_id": "a", "description": "a"})  # fmt: skip
    gate.observe({"type": "system", "subtype": "task_notification", "task_id": "k1",
                  "tool_use_id": "a", "status": "completed", "summary": "done"})  # fmt: skip
    assert gate.running == 1  # k2 still runs, and holds its slot
    assert [r.ended_at is not None for r in gate.records()] == [True, False]


async def test_a_repeated_task_start_keeps_the_task_with_its_own_call() -> None:
    gate, _ = gate_with(max_concurrent_agents=5)
    started = {"type": "system", "subtype": "task_started", "task_id": "k1",
               "tool_use_id": "a", "description": "a"}  # fmt: skip
    with anyio.fail_after(5):
        assert decision(await gate.hook(agent_input(), "a", {})) == "allow"
        gate.observe(started)
        assert decision(await gate.hook(agent_input(), "a", {})) == "allow"  # not started yet
    gate.observe(started)  # the same start again
    assert [r.task_id for r in gate.records()] == ["k1", None]
    gate.observe({"type": "system", "subtype": "task_notification", "task_id": "k1",
                  "tool_use_id": "a", "status": "completed", "summary": "done"})  # fmt: skip
    assert [r.ended_at is not None for r in gate.records()] == [True, False]


async def test_a_started_call_whose_tool_use_id_repeats_is_no_lost_call() -> None:
    gate, _ = gate_with()
    tracker = Tracker()
    with anyio.fail_after(5):
        for task_id in ("k1", "k2"):
            assert decision(await gate.hook(agent_input(), "a", {})) == "allow"
            started = {"type": "system", "subtype": "task_started", "task_id": task_id,
                       "tool_use_id": "a", "description": "a"}  # fmt: skip
            gate.observe(started, tracker.feed(started))
    rows, reasons = call_dispositions(gate.records(), seen=tracker.call_seen)
    assert (rows, reasons) == ([], [])  # both started: the stream showed what became of them


async def test_deny_reasons_say_what_to_do_next() -> None:
    gate, seen = gate_with(spawn_budget=1)
    assert decision(await gate.hook(agent_input(), "a", {})) == "allow"
    out = await gate.hook(agent_input(), "b", {})
    reason = out["hookSpecificOutput"]["permissionDecisionReason"]  # type: ignore[typeddict-item]
    assert "spawn budget of 1 is used up" in reason and "Answer with the results" in reason
    assert [(e.outcome, e.code) for e in seen] == [("admitted", None), ("denied", "spawn_budget")]
    assert seen[1].reason == reason
    line = json.loads(seen[1].to_json())
    assert line["type"] == "spawn_decided" and line["version"] == EVENT_VERSION
    assert line["outcome"] == "denied" and line["code"] == "spawn_budget"


# -- the queue: FIFO within a run and across runs -------------------------------------------
async def test_calls_over_the_limit_queue_fifo_and_a_slot_follows_the_task() -> None:
    clock = StepClock()
    gate, seen = gate_with(clock, max_concurrent_agents=2)
    async with anyio.create_task_group() as tg:
        calls = Calls(gate, tg)
        for i in range(6):
            calls.start(f"t{i}")
            await settle()
        assert sorted(calls.out) == ["t0", "t1"] and gate.running == 2 and gate.queued == 4
        gate.task_started("t0", "task-0")
        gate.task_ended("task-0")  # by task id
        await settle()
        assert sorted(calls.out) == ["t0", "t1", "t2"]
        for i in range(1, 6):
            gate.task_ended(f"t{i}")  # by tool_use id
            await settle()
    admitted = [e.tool_use_id for e in seen if e.outcome == "admitted"]
    assert admitted == [f"t{i}" for i in range(6)]
    queued = [e for e in seen if e.outcome == "queued"]
    assert [q.position for q in queued] == [1, 2, 3, 4]
    gate.task_ended("t0")  # a second terminal event frees nothing twice
    assert gate.running == 0 and gate._cap.running == 0


async def test_two_runs_share_one_cap_first_come_first_served() -> None:
    clock = StepClock()
    cap = SpawnCap(1)
    order: list[str] = []
    gate_a = SpawnGate(
        SpawnPolicy(),
        cap=cap,
        clock=clock,
        env={},
        on_event=lambda e: order.append(e.tool_use_id) if e.outcome == "admitted" else None,
    )
    gate_b = SpawnGate(
        SpawnPolicy(),
        cap=cap,
        clock=clock,
        env={},
        on_event=lambda e: order.append(e.tool_use_id) if e.outcome == "admitted" else None,
    )
    async with anyio.create_task_group() as tg:
        a, b = Calls(gate_a, tg), Calls(gate_b, tg)
        a.start("a1")
        await settle()
        b.start("b1")
        await settle()
        a.start("a2")
        await settle()
        assert cap.running == 1 and cap.waiting == 2
        gate_a.task_ended("a1")
        await settle()
        gate_b.task_ended("b1")
        await settle()
        gate_a.task_ended("a2")
    assert order == ["a1", "b1", "a2"]
    assert cap.running == 0


def test_the_cli_cap_bounds_every_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLAUDE_CODE_MAX_CONCURRENT_SUBAGENTS", raising=False)
    assert cli_subagent_cap({}) == 20
    assert cli_subagent_cap({"CLAUDE_CODE_MAX_CONCURRENT_SUBAGENTS": "7"}) == 7
    assert cli_subagent_cap({"CLAUDE_CODE_MAX_CONCURRENT_SUBAGENTS": "lots"}) == 20
    assert SpawnCap(50).limit == 20
    gate = SpawnGate(
        SpawnPolicy(max_concurrent_agents=10),
        cap=SpawnCap(20),
        env={"CLAUDE_CODE_MAX_CONCURRENT_SUBAGENTS": "4"},
    )
    assert gate.limit == 4
    with pytest.raises(ValueError, match="at least 1"):
        FifoSlots(0)


# -- stagger, depth, deadline ---------------------------------------------------------------
def _staggered(stagger_s: float) -> tuple[StepClock, SpawnGate, dict[str, float]]:
    """A gate staggering its starts by ``stagger_s`` on a step clock, and when it admitted
    each call (by its tool_use id)."""
    clock = StepClock()
    gate, _ = gate_with(clock, stagger_s=stagger_s)
    admitted_at: dict[str, float] = {}

    def on(e: SpawnDecided) -> None:
        if e.outcome == "admitted":
            admitted_at[e.tool_use_id] = clock.now

    gate.on_event = on
    return clock, gate, admitted_at


async def test_stagger_spaces_the_starts_of_a_burst() -> None:
    clock, gate, admitted_at = _staggered(2.0)
    async with anyio.create_task_group() as tg:
        calls = Calls(gate, tg)
        for i in range(4):
            calls.start(f"t{i}")
        await clock.advance(10)
    assert admitted_at == {"t0": 0.0, "t1": 2.0, "t2": 4.0, "t3": 6.0}
    # a later call after a quiet spell starts at once: a new burst
    await clock.advance(30)
    async with anyio.create_task_group() as tg:
        Calls(gate, tg).start("t4")
    assert admitted_at["t4"] == 40.0


async def test_a_stagger_turn_of_a_call_that_never_starts_is_given_back() -> None:
    clock, gate, admitted_at = _staggered(30.0)
    async with anyio.create_task_group() as tg:
        calls = Calls(gate, tg)
        calls.start("t0")  # starts at once
        calls.start("t1")  # its turn is at 30 s
        await clock.advance(5)
        gate.spawn_rejected("t1", "PreToolUse hook did not respond before its timeout")
        await clock.advance(1)
        calls.start("t2")  # t1's turn is free again: t2 takes it
        await clock.advance(60)
    assert admitted_at == {"t0": 0.0, "t2": 30.0}
    assert decision(calls.out["t1"]) == "deny"


async def test_depth_one_denies_spawns_from_subagents() -> None:
    gate, _ = gate_with()
    out = await gate.hook(agent_input("nested", agent_id="task-1"), "n1", {})
    assert decision(out) == "deny"
    (record,) = gate.records()
    assert record.code == "depth" and record.parent_agent_id == "task-1" and record.depth == 2
    assert "may not start agents" in (record.reason or "")

    deeper, _ = gate_with(max_depth=2)
    assert decision(await deeper.hook(agent_input(), "lead-1", {})) == "allow"
    deeper.task_started("lead-1", "task-a")
    assert decision(await deeper.hook(agent_input(agent_id="task-a"), "n1", {})) == "allow"
    deeper.task_started("n1", "task-b")
    out = await deeper.hook(agent_input(agent_id="task-b"), "n2", {})
    assert decision(out) == "deny" and deeper.records()[-1].depth == 3

    # a nested spawn never queues behind its own parent's slot: that would deadlock
    full, _ = gate_with(max_depth=2, max_concurrent_agents=1)
    assert decision(await full.hook(agent_input(), "lead-1", {})) == "allow"
    full.task_started("lead-1", "task-a")
    out = await full.hook(agent_input(agent_id="task-a"), "n1", {})
    assert decision(out) == "deny" and "cannot wait" in (full.records()[-1].reason or "")
    assert full.running == 1 and full.spawned == 1


async def test_deadline_reserve_stops_admission_and_queued_calls_are_told() -> None:
    clock = StepClock()
    gate = SpawnGate(
        SpawnPolicy(max_concurrent_agents=1, wrap_up_reserve_s=20),
        cap=SpawnCap(20),
        clock=clock,
        deadline_s=100,
        env={},
    )
    assert gate.hook_timeout_s == pytest.approx(80 + 10)
    async with anyio.create_task_group() as tg:
        calls = Calls(gate, tg)
        calls.start("t0")
        calls.start("t1")
        calls.start("t2")
        await clock.advance(50)
        gate.task_ended("t0")  # t1 starts now: the time left is judged at t=50, not t=0
        await clock.advance(1)
        assert decision(calls.out["t1"]) == "allow"
        await clock.advance(40)  # t=91: t2 is still queued and the reserve has begun
    denied = gate.records()[2]
    assert denied.status == "denied" and denied.code == "deadline"
    assert "deadline is near" in (denied.reason or "") and "20 s kept" in (denied.reason or "")
    assert gate.spawned == 2  # the denied call gave its unit back
    out = await gate.hook(agent_input(), "late", {})
    assert decision(out) == "deny" and gate.records()[-1].code == "deadline"


async def test_wait_without_deadline_is_bounded() -> None:
    clock = StepClock()
    gate = SpawnGate(
        SpawnPolicy(max_concurrent_agents=1), cap=SpawnCap(20), clock=clock, max_wait_s=30, env={}
    )
    async with anyio.create_task_group() as tg:
        calls = Calls(gate, tg)
        calls.start("t0")
        calls.start("t1")
        await clock.advance(31)
    assert decision(calls.out["t1"]) == "deny" and gate.records()[1].code == "wait_limit"


# -- cancellation and the end of a run ------------------------------------------------------
async def test_cancelled_while_queued_frees_everything() -> None:
    clock = StepClock()
    cap = SpawnCap(1)
    gate, seen = gate_with(clock, cap=cap, spawn_budget=5)
    async with anyio.create_task_group() as tg:
        calls = Calls(gate, tg)
        calls.start("t0")
        await settle()
        with anyio.CancelScope() as scope:
            tg.start_soon(gate.hook, agent_input(), "t1", {})
            await settle()
            assert cap.waiting == 1
        tg.cancel_scope.cancel()  # Ctrl-C: every hook task is cancelled
    del scope
    record = gate.records()[1]
    assert record.status == "rejected" and "cancelled" in (record.reason or "")
    assert cap.waiting == 0 and gate.spawned == 1 and gate.queued == 0
    assert any(e.outcome == "rejected" for e in seen)
    gate.close()
    assert cap.running == 0 and gate.running == 0


async def test_a_process_ending_between_rounds_frees_its_slots_but_not_the_run() -> None:
    cap = SpawnCap(2)
    gate, _ = gate_with(cap=cap, spawn_budget=3)
    for tid in ("a", "b"):
        assert decision(await gate.hook(agent_input(), tid, {})) == "allow"
    gate.process_ended()
    assert cap.running == 0 and gate.running == 0 and gate.spawned == 2
    assert decision(await gate.hook(agent_input(), "c", {})) == "allow"
    assert decision(await gate.hook(agent_input(), "d", {})) == "deny"  # the budget spans rounds


async def test_a_rejection_seen_while_still_queued_stops_the_wait() -> None:
    from claude_agent_sdk import ToolResultBlock, UserMessage

    clock = StepClock()
    cap = SpawnCap(1)
    gate, _ = gate_with(clock, cap=cap)
    async with anyio.create_task_group() as tg:
        calls = Calls(gate, tg)
        calls.start("t0")
        calls.start("t1")
        await settle()
        timeout = "PreToolUse hook did not respond before its timeout (1s)"
        gate.observe(UserMessage(content=[ToolResultBlock("t1", timeout, True)]))
        await settle()
        gate.task_ended("t0")
    assert decision(calls.out["t1"]) == "deny"
    record = gate.records()[1]
    assert record.status == "rejected" and "did not respond" in (record.reason or "")
    assert cap.running == 0 and cap.waiting == 0 and gate.spawned == 1


async def test_close_denies_queued_calls_and_frees_slots() -> None:
    clock = StepClock()
    cap = SpawnCap(2)
    gate, _ = gate_with(clock, cap=cap)
    async with anyio.create_task_group() as tg:
        calls = Calls(gate, tg)
        for i in range(4):
            calls.start(f"t{i}")
        await settle()
        gate.close("the deadline was reached")
    assert [decision(calls.out[f"t{i}"]) for i in range(4)] == ["allow", "allow", "deny", "deny"]
    assert gate.records()[3].reason == (
        "the deadline was reached; no more agents start. Answer with the results you have."
    )
    assert cap.running == 0 and cap.waiting == 0
    out = await gate.hook(agent_input(), "after", {})
    assert decision(out) == "deny" and gate.records()[-1].code == "closed"


# -- odd input never raises -------------------------------------------------------------------
@pytest.mark.parametrize(
    "payload",
    [None, "Agent", 42, {}, {"tool_input": "x"}, {"tool_input": {"description": 3}}],
)
async def test_odd_input_is_denied_with_a_reason(payload: Any) -> None:
    gate, seen = gate_with()
    out = await gate.hook(payload, None, None)
    assert decision(out) == "deny"
    (record,) = gate.records()
    assert record.code == "bad_input" and record.tool_use_id.startswith("unknown-")
    assert "prompt" in (record.reason or "")


async def test_an_internal_fault_denies_and_is_recorded() -> None:
    class BrokenClock(FakeClock):
        def time(self) -> float:
            raise RuntimeError("clock unplugged")

    def bad_listener(event: SpawnDecided) -> None:
        raise ValueError("listener broke")

    gate = SpawnGate(
        SpawnPolicy(), cap=SpawnCap(20), clock=BrokenClock(), env={}, on_event=bad_listener
    )
    out = await gate.hook(agent_input(), "t0", {})
    reason = out["hookSpecificOutput"]["permissionDecisionReason"]  # type: ignore[typeddict-item]
    assert "spawn gate failed" in reason and "clock unplugged" in reason
    assert gate.errors and "clock unplugged" in gate.errors[0]
    assert gate.spawned == 0 and gate._cap.running == 0

    listening = SpawnGate(SpawnPolicy(), cap=SpawnCap(20), env={}, on_event=bad_listener)
    assert decision(await listening.hook(agent_input(), "t0", {})) == "allow"
    assert "listener broke" in listening.errors[0]


# -- installing the hook --------------------------------------------------------------------
async def test_the_gates_hook_joins_the_users_hooks_once() -> None:
    async def mine(*_: Any) -> Any:
        return {}

    user = HookMatcher(matcher="Bash", hooks=[mine])
    options = ClaudeAgentOptions(hooks={"PreToolUse": [user], "Stop": [HookMatcher(hooks=[mine])]})
    gate = SpawnGate(SpawnPolicy(), cap=SpawnCap(20), env={})
    gated = merge_hook(options, gate.hook_matcher())
    assert gated.hooks is not None
    pre = gated.hooks["PreToolUse"]
    assert pre[0] is user and pre[1].matcher == "Agent|Workflow" and pre[1].hooks == [gate.hook]
    assert pre[1].timeout == gate.hook_timeout_s == 1810.0
    assert gated.hooks["Stop"] == options.hooks["Stop"]  # type: ignore[index]
    assert options.hooks["PreToolUse"] == [user]  # type: ignore[index]
    assert merge_hook(gated, gate.hook_matcher()) is gated


# -- the stream ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("content", "is_error", "expected"),
    [
        ("Concurrent subagent limit reached. You can run 20 subagents at once.", True, "rejected"),
        ("PreToolUse hook did not respond before its timeout (1s)", True, "rejected"),
        ("PreToolUse:Agent hook error: spawn budget of 5 is used up", True, "denied"),
        (
            [{"type": "text", "text": "Async agent launched successfully.\nagentId: a1"}],
            None,
            "launched",
        ),
        ("the report", False, "finished"),
        pytest.param(  # a nested agent's answer quoting a deny it met: still its answer
            "FINDING: my own Agent call got PreToolUse:Agent hook error: too deep.",
            None,
            "finished",
            id="an-answer-quoting-a-deny",
        ),
        pytest.param(
            "Concurrent subagent limit reached, the agent wrote in its report.",
            False,
            "finished",
            id="an-answer-quoting-the-clis-limit",
        ),
        ("boom", True, "failed"),
        (None, None, "finished"),
    ],
)
def test_classify_agent_result(content: Any, is_error: Any, expected: str) -> None:
    block = {"type": "tool_result", "tool_use_id": "t", "content": content, "is_error": is_error}
    (result,) = parse_message({"type": "user", "message": {"content": [block]}})
    assert isinstance(result, ToolResultSeen)
    assert classify_agent_result(result) == expected


async def test_the_stream_frees_slots() -> None:
    from claude_agent_sdk import ToolResultBlock, UserMessage

    gate, seen = gate_with(max_concurrent_agents=5)
    for tid in ("t0", "t1", "t2"):
        assert decision(await gate.hook(agent_input(), tid, {})) == "allow"
    gate.observe(
        {
            "type": "system",
            "subtype": "task_started",
            "task_id": "k0",
            "tool_use_id": "t0",
            "description": "t0",
        },
    )
    gate.observe(
        {
            "type": "system",
            "subtype": "task_updated",
            "task_id": "k0",
            "patch": {"status": "killed"},
        },
    )
    rejected = ToolResultBlock(
        tool_use_id="t1", is_error=True, content="Concurrent subagent limit reached. Do not retry."
    )
    gate.observe(UserMessage(content=[rejected]))
    gate.observe(object())
    gate.observe({"type": "system", "subtype": "task_started", "task_id": None})
    by_id = {r.tool_use_id: r for r in gate.records()}
    assert by_id["t0"].task_id == "k0" and by_id["t0"].ended_at is not None
    assert by_id["t1"].status == "rejected" and "Concurrent subagent limit" in (
        by_id["t1"].reason or ""
    )
    assert by_id["t2"].ended_at is None and gate.running == 1
    assert seen[-1].outcome == "rejected" and seen[-1].tool_use_id == "t1"


async def test_turns_follow_message_ids_when_the_tracker_names_them() -> None:
    gate, _ = gate_with(max_agents_per_turn=2)
    gate.note_message("m1", ["a", "b", "c"])
    gate.note_message("m2", ["d"])
    results = [decision(await gate.hook(agent_input(), t, {})) for t in "abcd"]
    assert results == ["allow", "allow", "deny", "allow"]
    assert [r.turn for r in gate.records()] == ["m1", "m1", "m1", "m2"]


# -- policy ----------------------------------------------------------------------------------
def test_spawn_policy_validates_with_clear_errors() -> None:
    # 20 %, but room for one turn (10 s, or half a shorter deadline), at most 30 s
    reserves = {d: SpawnPolicy().reserve_for(d) for d in (1.8, 10, 30, 60, 600)}
    assert reserves == {1.8: 0.9, 10: 5.0, 30: 10.0, 60: 12.0, 600: 30.0}
    assert SpawnPolicy(wrap_up_reserve_s=5).reserve_for(600) == 5
    with pytest.raises(pydantic.ValidationError, match="greater than or equal to 1"):
        SpawnPolicy(max_concurrent_agents=0)
    with pytest.raises(pydantic.ValidationError, match="larger than spawn_budget"):
        SpawnPolicy(spawn_budget=2, max_agents_per_turn=3)
    with pytest.raises(pydantic.ValidationError, match="Extra inputs"):
        SpawnPolicy(max_agents=3)  # type: ignore[call-arg]
    with pytest.raises(pydantic.ValidationError):
        SpawnPolicy(stagger_s=-1)


# -- a starved process-wide cap, and an interrupted run --------------------------------------
async def test_a_call_denied_while_other_runs_hold_the_cap_is_missing_work_not_a_decline() -> None:
    from teamlead._gate.calls import call_dispositions

    clock = StepClock()
    cap = SpawnCap(1)
    assert cap.try_take()  # another run of the process holds the only slot
    gate = SpawnGate(SpawnPolicy(), cap=cap, clock=clock, max_wait_s=30, env={})
    # the run's own limit full is the user's choice: a decline, not missing work
    own = SpawnGate(
        SpawnPolicy(max_concurrent_agents=1), cap=SpawnCap(20), clock=clock, max_wait_s=30, env={}
    )
    async with anyio.create_task_group() as tg:
        calls, mine = Calls(gate, tg), Calls(own, tg)
        calls.start("starved")
        mine.start("first")
        mine.start("declined")
        await clock.advance(1801)
    starved = gate.records()[0]
    assert starved.status == "denied" and starved.starved
    assert "other runs of this process held all 1 agent slots" in (starved.reason or "")
    rows, reasons = call_dispositions(gate.records())
    assert [r.disposition for r in rows] == ["missing"] and reasons
    declined = own.records()[1]
    assert declined.status == "denied" and not declined.starved
    assert [r.disposition for r in call_dispositions(own.records())[0]] == ["not_run"]
    cap.release()


@pytest.mark.parametrize("cli_ends", [False, True], ids=["answered-late", "cancelled"])
async def test_an_interrupted_gate_rejects_its_queued_calls_and_holds_their_answers(
    cli_ends: bool,
) -> None:
    # a refusal answered at once would make the CLI send the lead one more request of a
    # stopped run: the run ends the CLI first (the SDK cancels its hooks then: nothing is
    # answered, each call stays rejected once); if it does not, answered 5 s later
    clock = StepClock()
    gate, seen = gate_with(clock, max_concurrent_agents=1)
    async with anyio.create_task_group() as tg:
        calls = Calls(gate, tg)
        calls.start("t0")
        calls.start("t1")
        calls.start("t2")
        await settle()
        gate.stopped("SIGTERM")
        await settle()
        calls.start("late")
        workflow = {"tool_name": "Workflow", "tool_input": {"script": "return 1"}}

        async def late_workflow() -> None:
            calls.out["workflow"] = await gate.hook(workflow, "workflow", {"signal": None})

        tg.start_soon(late_workflow)
        await clock.advance(4.9)
        assert list(calls.out) == ["t0"]  # the refused calls' hooks are unanswered yet
        assert gate.running == 0 and gate.queued == 0  # but hold nothing
        if cli_ends:
            tg.cancel_scope.cancel()
        await clock.advance(0.2)
    assert [r.status for r in gate.records()] == ["admitted", "rejected", "rejected", "denied"]
    assert all("SIGTERM" in (r.reason or "") for r in gate.records()[1:3])
    assert [e.outcome for e in seen].count("rejected") == 2
    assert sorted(calls.out) == (["t0"] if cli_ends else ["late", "t0", "t1", "t2", "workflow"])
    assert [code for _, code, _ in gate.workflow_denials] == ["closed"]
    for tool_use_id in set(calls.out) - {"t0"}:
        decision = calls.out[tool_use_id]["hookSpecificOutput"]["permissionDecision"]
        assert decision == "deny", calls.out[tool_use_id]
    gate.close()
    assert gate.running == 0 and gate.queued == 0


def test_a_call_refused_for_invalid_input_is_missing_unless_the_lead_sent_it_again() -> None:
    from teamlead._gate.calls import SpawnRecord, call_dispositions, with_invalid_calls

    admitted = SpawnRecord(tool_use_id="t2", description="docs", status="admitted")
    order = {"t1": "docs", "t2": "docs", "t3": "tests"}
    invalid = {"t1": "InputValidationError: prompt", "t3": "InputValidationError: prompt"}
    records = with_invalid_calls([admitted], invalid, order)
    assert [r.tool_use_id for r in records] == ["t1", "t2", "t3"]
    rows, _ = call_dispositions(records)
    by_id = {r.id: r for r in rows}
    assert by_id["t1"].status == "rejected" and by_id["t1"].disposition == "not_run"  # re-sent
    assert by_id["t3"].disposition == "missing" and "InputValidation" in (by_id["t3"].reason or "")


def test_an_admitted_call_nothing_more_was_seen_of_is_a_lost_row_and_a_reason() -> None:
    """The stream broke after the gate admitted it: no task, no tool result. Without a row
    it would vanish from ``Finished.tasks``; one seen to start or end gets none here."""
    from teamlead._gate.calls import SpawnRecord, call_dispositions

    records = [
        SpawnRecord(tool_use_id=t, description=d, status="admitted")
        for t, d in (("t1", "started"), ("t2", "answered"), ("t3", "unseen"))
    ]
    rows, reasons = call_dispositions(records, seen=lambda tool_use_id: tool_use_id != "t3")
    assert [(r.id, r.kind, r.status, r.disposition) for r in rows] == [
        ("t3", "call", "lost", "missing")
    ]
    assert "seen to start or end" in (rows[0].reason or "")
    assert reasons == [f'Agent call "unseen" was lost: {rows[0].reason}']
    assert call_dispositions(records) == ([], [])  # no tracker to ask: all count as seen


def test_a_call_is_seen_once_its_task_starts_or_a_result_ends_it_not_at_its_launch_notice() -> None:
    from teamlead.tracker import LAUNCH_NOTICE, Tracker

    tracker = Tracker()
    for tool_use_id in ("t1", "t2", "t3"):
        tracker.feed(
            {
                "type": "assistant",
                "message": {
                    "id": f"m-{tool_use_id}",
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": tool_use_id,
                            "name": "Agent",
                            "input": {"description": tool_use_id, "prompt": "go"},
                        }
                    ],
                },
            }
        )

    def result(tool_use_id: str, text: str) -> dict[str, object]:
        block = {"type": "tool_result", "tool_use_id": tool_use_id, "content": text}
        return {"type": "user", "message": {"role": "user", "content": [block]}}

    tracker.feed(result("t1", f"{LAUNCH_NOTICE} successfully. agentId: a1"))
    tracker.feed(result("t2", "the foreground agent's answer"))
    assert [tracker.call_seen(t) for t in ("t1", "t2", "t3")] == [False, True, False]
    tracker.feed(
        {"type": "system", "subtype": "task_started", "task_id": "a1", "tool_use_id": "t1"}
    )
    assert tracker.call_seen("t1") and not tracker.call_seen("t3")
