"""The run's limits reach a workflow's agents, which fire no hook of their own (fast tier).

The gate's hook sees the ``Workflow`` call itself: its agents are one level deeper than its
caller, and a spent budget, a closed run or the wrap-up point deny it with the gate's usual
reasons. A workflow agent's first request waits at the relay for a slot and then for its
turn in the run's stagger, the same schedule the gate keeps for Agent calls (on a FakeClock
here, so no test waits a stagger out).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import pytest

from teamlead._gate.admission import Admission
from teamlead._gate.gate import SpawnGate
from teamlead._gate.slots import SpawnCap
from teamlead._metering.book import AgentBook
from teamlead._relay import start_relay
from teamlead.clock import Clock
from teamlead.events import SpawnDecided
from teamlead.governor import Governor, GovernorPolicy
from teamlead.policy import Policy, SpawnPolicy
from teamlead.testing import FakeClock, Reply, ScriptedRequest, ScriptedServer

from .polling import settle
from .step_clock import StepClock

pytestmark = pytest.mark.anyio

WORKFLOW_SYSTEM = "You are a subagent spawned by a workflow orchestration script."


def gate_with(clock: FakeClock | None = None, **policy: Any) -> tuple[SpawnGate, list[Any]]:
    seen: list[Any] = []
    gate = SpawnGate(
        SpawnPolicy(**policy), cap=SpawnCap(20), clock=clock or FakeClock(), on_event=seen.append
    )
    return gate, seen


def admission_with(clock: Clock, *, deadline_s: float = 1800.0, **policy: Any) -> Admission:
    """A run's admission (its spawn gate) on ``clock``, as the run builds it."""
    admission = Admission(
        Policy(spawn=SpawnPolicy(**policy), deadline_s=deadline_s), clock, cap=SpawnCap(20)
    )
    assert admission.gated
    return admission


def workflow_call(agent_id: str | None = None) -> dict[str, Any]:
    """A Workflow call's hook input. The CLI offers subagents no Workflow tool, so a
    subagent's call is built as the CLI sends a subagent's Agent call: with ``agent_id``
    and ``agent_type`` (what a real run's hook receives; the lead's calls carry neither)."""
    data: dict[str, Any] = {
        "hook_event_name": "PreToolUse",
        "tool_name": "Workflow",
        "tool_input": {"script": "export const meta = {name: 'w'}\nreturn 1"},
    }
    if agent_id is not None:
        data |= {"agent_id": agent_id, "agent_type": "general-purpose"}
    return data


def agent_call(name: str, agent_id: str | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "hook_event_name": "PreToolUse",
        "tool_name": "Agent",
        "tool_input": {"description": name, "prompt": f"do {name}"},
    }
    if agent_id is not None:
        data["agent_id"] = agent_id
    return data


def workflow_body(text: str) -> str:
    """A workflow agent's request body whose user text is ``text``."""
    system = [{"type": "text", "text": WORKFLOW_SYSTEM}]
    message = {"role": "user", "content": text}
    return json.dumps({"model": "m", "stream": True, "system": system, "messages": [message]})


Post = Callable[[str, str], Awaitable[httpx2.Response]]


@asynccontextmanager
async def relayed(
    book: AgentBook, script: Callable[[ScriptedRequest], Reply]
) -> AsyncIterator[Post]:
    """A relay of its own before a scripted server, its run's agents ``book``: yields
    ``post(agent, text)``, a workflow agent's request through it."""
    governor = Governor(GovernorPolicy(ceiling=16), clock=FakeClock())
    with ScriptedServer(script) as server:
        async with (
            start_relay(server.base_url, governor) as relay,
            httpx2.AsyncClient(timeout=20) as http,
        ):
            run = relay.open_run(agents=book)
            url = run.base_url + "/v1/messages?beta=true"

            async def post(agent: str, text: str) -> httpx2.Response:
                headers = {
                    "x-api-key": "k",
                    "X-Claude-Code-Session-Id": "s",
                    "x-claude-code-agent-id": agent,
                }
                response: httpx2.Response = await http.post(
                    url, content=workflow_body(text), headers=headers
                )
                return response

            yield post


def _ok(req: ScriptedRequest) -> Reply:
    return Reply.text("ok")


def denied(output: Any) -> str | None:
    spec = output.get("hookSpecificOutput") if isinstance(output, dict) else None
    if spec and spec.get("permissionDecision") == "deny":
        return str(spec["permissionDecisionReason"])
    return None


async def test_the_gate_hooks_workflow_calls_too() -> None:
    gate, _ = gate_with()
    assert gate.hook_matcher().matcher == "Agent|Workflow"


async def test_a_workflow_from_a_subagent_counts_one_level_deeper_than_its_caller() -> None:
    gate, seen = gate_with(max_depth=1)
    assert denied(await gate.hook(workflow_call(), "wf-lead", {})) is None  # agents at depth 1
    assert denied(await gate.hook(agent_call("parent"), "t1", {})) is None
    gate.task_started("t1", "task-1")
    reason = denied(await gate.hook(workflow_call("task-1"), "wf-sub", {}))
    assert reason is not None and "max depth 1" in reason
    assert [
        (e.tool_use_id, e.code, e.description)
        for e in seen
        if isinstance(e, SpawnDecided) and e.outcome == "denied"
    ] == [("wf-sub", "depth", "Workflow")]
    assert gate.workflow_denials == [("wf-sub", "depth", reason)]
    # a Workflow call is no Agent call: no record, no slot, no budget unit
    assert [r.tool_use_id for r in gate.records()] == ["t1"]
    assert gate.spawned == 1 and gate.running == 1

    deeper, _ = gate_with(max_depth=2)
    assert denied(await deeper.hook(agent_call("parent"), "t1", {})) is None
    deeper.task_started("t1", "task-1")
    assert denied(await deeper.hook(workflow_call("task-1"), "wf-2", {})) is None  # depth 2
    assert denied(await deeper.hook(agent_call("child", "task-1"), "t2", {})) is None
    deeper.task_started("t2", "task-2")
    reason = denied(await deeper.hook(workflow_call("task-2"), "wf-3", {}))  # depth 3
    assert reason is not None and "deeper than 2 levels" in reason


async def test_a_spent_spawn_budget_denies_a_new_workflow() -> None:
    gate, _ = gate_with(spawn_budget=1)
    assert denied(await gate.hook(workflow_call(), "wf-1", {})) is None  # budget left
    assert denied(await gate.hook(agent_call("a"), "t1", {})) is None
    reason = denied(await gate.hook(workflow_call(), "wf-2", {}))
    assert reason is not None and "spawn budget of 1 is used up" in reason

    none_at_all, _ = gate_with(spawn_budget=0)
    assert denied(await none_at_all.hook(workflow_call(), "wf-1", {})) is not None


async def test_a_closed_run_and_the_wrap_up_point_deny_a_workflow() -> None:
    gate, _ = gate_with()
    gate.close("the run's token budget is reached: no more agents")
    reason = denied(await gate.hook(workflow_call(), "wf-1", {}))
    assert reason is not None and "no more agents start" in reason

    clock = FakeClock()
    late, _ = gate_with(clock, wrap_up_reserve_s=10)
    late.set_deadline(60)
    assert denied(await late.hook(workflow_call(), "wf-early", {})) is None
    clock.advance(55)  # inside the wrap-up reserve
    reason = denied(await late.hook(workflow_call(), "wf-late", {}))
    assert reason is not None and "deadline is near" in reason


async def test_odd_workflow_hook_input_is_decided_never_raised() -> None:
    gate, _ = gate_with(max_depth=1)
    odd: dict[str, Any] = {"tool_name": "Workflow", "agent_id": 7, "tool_input": "not a dict"}
    assert denied(await gate.hook(odd, None, {})) is None  # no caller id: the lead's
    gate.close()
    reason = denied(await gate.hook({"tool_name": "Workflow"}, None, {}))
    assert reason is not None and gate.workflow_denials[-1][0] == "workflow"


async def test_workflow_agents_and_agent_calls_share_one_stagger_on_the_clock() -> None:
    clock = FakeClock()
    admission = gate = admission_with(clock, stagger_s=2.0)
    book = AgentBook(clock, admission)
    forwarded: list[tuple[str, float]] = []

    def script(req: ScriptedRequest) -> Reply:
        forwarded.append((req.first_user_text, clock.monotonic()))  # the virtual time
        return Reply.text("ok")

    async with relayed(book, script) as post:

        async def workflow_agent(agent: str) -> None:
            r = await post(agent, agent)
            assert r.status_code == 200, r.text

        with anyio.fail_after(20):
            await workflow_agent("w1")
            await workflow_agent("w2")
            assert denied(await gate.hook(agent_call("a"), "t1", {})) is None
            admitted_at = clock.monotonic()
            await workflow_agent("w3")
            await workflow_agent("w2")  # a later request of a started agent: no turn
    starts = [at for _, at in forwarded]
    assert [text for text, _ in forwarded] == ["w1", "w2", "w3", "w2"]
    assert starts[:2] == [0.0, 2.0] and admitted_at == 4.0 and starts[2] == 6.0
    assert starts[3] == 6.0 and clock.sleeps == [2.0, 2.0, 2.0]
    assert gate.running == 4  # w1..w3 hold their slots until their work ends, t1 its own
    for agent in ("w1", "w2", "w3"):
        admission.agent_ended(agent)
    assert gate.running == 1


async def test_a_stagger_turn_after_the_wrap_up_refuses_the_agent_and_frees_its_slot() -> None:
    clock = FakeClock()
    # the wrap-up point (at 10 s) comes before a second start's turn
    admission = gate = admission_with(
        clock, deadline_s=10, stagger_s=30.0, max_concurrent_agents=2, wrap_up_reserve_s=0
    )
    book = AgentBook(clock, admission)
    codes = []
    async with relayed(book, _ok) as post:
        for agent in ("w1", "w2"):
            with anyio.fail_after(20):
                r = await post(agent, "w")
            codes.append((r.status_code, r.text))
    assert codes[0][0] == 200
    assert codes[1][0] != 200 and "stagger comes after the run's wrap-up" in codes[1][1]
    assert gate.running == 1 and gate.max_workflow_agents == 1  # w2's slot was given back


@pytest.mark.parametrize(
    ("cap", "user", "process", "expected"),
    [
        (3, None, None, "3"),  # the run's cap
        (3, "8", None, "3"),  # the user's higher value: the run's cap wins
        (3, "2", None, "2"),  # the user's lower value stands
        (3, "lots", None, "3"),  # a value that is no number: the run's cap
        (3, "0", None, "3"),
        (3, None, "1", "1"),  # the value in teamlead's own environment counts too
        (None, None, None, "20"),  # no cap of the user's: the CLI's subagent cap
    ],
)
def test_the_workflow_engines_gate_is_set_from_the_runs_cap(
    cap: int | None,
    user: str | None,
    process: str | None,
    expected: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from claude_agent_sdk import ClaudeAgentOptions

    from teamlead._run.process import ProcessState
    from teamlead._run.state import new_run
    from teamlead.policy import Policy

    var = "CLAUDE_CODE_WORKFLOW_MAX_CONCURRENT_AGENTS"
    monkeypatch.delenv(var, raising=False)
    if process is not None:
        monkeypatch.setenv(var, process)
    env = {var: user} if user is not None else {}
    policy = Policy(spawn=SpawnPolicy(max_concurrent_agents=cap))
    world = ProcessState(registry=False)  # options built, no run started
    state = new_run("query", ClaudeAgentOptions(env=env), policy, FakeClock(), process=world)
    assert state.ask.options.env[var] == expected
    off = new_run(
        "query",
        ClaudeAgentOptions(env=env),
        Policy(spawn=SpawnPolicy(enabled=False)),
        FakeClock(),
        process=world,
    )
    assert off.ask.options.env.get(var) == user  # no gate: the user's own value, untouched


async def test_a_held_workflow_agents_timeout_runs_from_its_release_not_its_wait() -> None:
    clock = FakeClock()
    admission = admission_with(clock, stagger_s=30.0, agent_timeout_s=10)
    book = AgentBook(clock, admission)
    async with relayed(book, _ok) as post:
        with anyio.fail_after(20):
            first = await post("w0", "w")
            book.agent_started("w1")  # the stream shows w1 start: its wait begins
            held = await post("w1", "w")  # waits 30 s
            assert clock.monotonic() == 30.0
            again = await post("w1", "w")
            clock.advance(11)  # now past its timeout, counted from its release
            late = await post("w1", "w")
    assert (first.status_code, held.status_code, again.status_code) == (200, 200, 200)
    assert late.status_code != 200 and "timeout of 10 s" in late.text
    assert book.timed_out == ["w1"]


async def test_a_closed_admission_leaves_workflow_agents_their_slots_until_their_work_ends() -> (
    None
):
    admission = gate = admission_with(FakeClock(), spawn_budget=5)
    assert await admission.admit_workflow_agent("w1") is None
    assert await admission.admit_workflow_agent("w2") is None
    admission.budget_reached("token_budget")  # no agent starts from now on...
    assert gate.running == 2 and gate.spawned == 2  # ...the running ones keep their slots
    admission.agent_ended("w1")
    assert gate.running == 1
    admission.process_ended()  # their CLI exited: they ended with it
    assert gate.running == 0
    late = await admission.admit_workflow_agent("w3")  # its first request came after
    assert late is not None and late.code == "no_slot" and "token budget" in late.reason, late
    assert gate.running == 0 and gate.spawned == 2
    admission.end()  # the run ends: every slot is let go
    assert gate.running == 0 and gate.max_workflow_agents == 2


async def test_a_workflow_agent_waiting_for_a_slot_is_refused_as_the_run_closes() -> None:
    # the slot the close frees (an Agent call's) goes to no one: no agent starts after it
    clock = StepClock()
    admission = gate = admission_with(clock, max_concurrent_agents=1)
    out: dict[str, Any] = {}
    async with anyio.create_task_group() as tg:
        assert await gate.hook(agent_call("t0"), "t0", {"signal": None}) == {}

        async def wait(agent_id: str) -> None:
            out[agent_id] = await admission.admit_workflow_agent(agent_id)

        tg.start_soon(wait, "w1")
        await settle()
        assert gate.running == 1 and not out  # w1 waits for t0's slot
        admission.close("the deadline's wrap-up began")
        await settle()
    assert out["w1"] is not None and "wrap-up began" in out["w1"].reason, out
    assert gate.running == 0 and gate.spawned == 1 and clock.monotonic() == 0.0


@pytest.mark.parametrize("cli_ends", [False, True], ids=["answered-late", "cancelled"])
async def test_a_stopped_runs_workflow_agents_are_refused_and_held_as_its_hooks_are(
    cli_ends: bool,
) -> None:
    # a refusal answered at once would end the agent's workflow and make the CLI send the
    # lead one more request, of a run that was stopped: answered only after 5 s, by when
    # the run has ended its CLI (which ends the request: nothing answered, nothing held)
    clock = StepClock()
    admission = gate = admission_with(clock, max_concurrent_agents=1)
    out: dict[str, Any] = {}
    async with anyio.create_task_group() as tg:

        async def wait(agent_id: str) -> None:
            out[agent_id] = await admission.admit_workflow_agent(agent_id)

        tg.start_soon(wait, "w0")
        tg.start_soon(wait, "queued")
        await settle()
        assert list(out) == ["w0"] and out["w0"] is None  # w0 runs, "queued" waits
        admission.stopped("SIGTERM")
        await settle()
        tg.start_soon(wait, "late")  # its first request comes after the stop
        await clock.advance(4.9)
        assert list(out) == ["w0"]  # the refusals are not answered yet...
        assert gate.running == 1 and gate.spawned == 1  # ...and took nothing
        if cli_ends:
            tg.cancel_scope.cancel()
        await clock.advance(0.2)
    assert sorted(out) == (["w0"] if cli_ends else ["late", "queued", "w0"])
    for agent_id in set(out) - {"w0"}:
        assert out[agent_id].code == "no_slot" and "SIGTERM" in out[agent_id].reason
    admission.end()
    assert gate.running == 0 and gate.spawned == 1


async def test_a_workflow_agent_whose_first_request_comes_after_the_wrap_up_point_is_refused() -> (
    None
):
    # a free slot and no stagger: nothing to wait for, but the wrap-up point has passed
    clock = FakeClock()
    admission = gate = admission_with(clock, deadline_s=60, wrap_up_reserve_s=10)
    assert await admission.admit_workflow_agent("w1") is None
    clock.advance(55)  # inside the wrap-up reserve, before the round is cut
    with anyio.fail_after(5):
        late = await admission.admit_workflow_agent("w2")
    assert late is not None and late.code == "no_slot", late
    assert gate.running == 1 and gate.spawned == 1  # w2 took nothing
