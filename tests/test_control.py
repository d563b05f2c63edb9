"""The run-control handle without the CLI: the amend's three states per field (left out,
``None``, a value), the live cap the gate's queue and the relay's hold follow, the subagent
model, and calls from another thread.

The run is a real run state (:func:`teamlead._run.state.new_run`) with its spawn gate and
agent ledger; Agent calls go through the gate's hook, workflow agents' first requests
through the ledger's relay path, so what is checked is what the run itself would do.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from claude_agent_sdk import ClaudeAgentOptions

import teamlead
from teamlead import AmendRefused, RunControl
from teamlead._gate.slots import FifoSlots
from teamlead._relay import start_relay
from teamlead._run.state import SUBAGENT_MODEL_VAR, RunState, new_run
from teamlead.events import RunAmended
from teamlead.policy import Policy, SpawnPolicy, is_model_alias
from teamlead.testing import FakeClock, Reply, ScriptedServer

from .parsing import HandFed
from .relay_upstream import fake_governor, http, serve, server_factory
from .step_clock import StepClock

__all__ = ["server_factory"]  # the fixture, imported for this module's tests

pytestmark = pytest.mark.anyio

WORKFLOW_BODY = json.dumps(
    {
        "model": "claude-opus-5-5",
        "system": [{"type": "text", "text": "You are spawned by a workflow orchestration script."}],
        "messages": [{"role": "user", "content": "WFJOB"}],
    }
).encode()


_RUNS: list[RunState] = []


@pytest.fixture(autouse=True)
def _runs_end() -> Iterator[None]:
    """Every run a test made ends after it, freeing its slots in the process-wide cap."""
    yield
    while _RUNS:
        _RUNS.pop().close()


def a_run(control: RunControl, *, cap: int | None = 3, **spawn: Any) -> RunState:
    policy = Policy(spawn=SpawnPolicy(max_concurrent_agents=cap, **spawn), deadline_s=600)
    # virtual time that stands still: a queued call waits until the test frees a slot
    state = new_run("query", ClaudeAgentOptions(), policy, StepClock(), control=control)
    _RUNS.append(state)
    return state


def amends(state: RunState) -> list[RunAmended]:
    """The control's events the run's stream has not yet yielded (its bus's public side)."""
    return [e for e in state.events.stream.drain() if isinstance(e, RunAmended)]


def agent_input(name: str, **tool: Any) -> dict[str, Any]:
    return {
        "hook_event_name": "PreToolUse",
        "tool_name": "Agent",
        "tool_input": {"description": name, "prompt": f"do {name}", **tool},
    }


class Hooks:
    """Agent calls in the gate's hook, in the background; their outputs by name."""

    def __init__(self, state: RunState, tg: anyio.abc.TaskGroup) -> None:
        assert state.admission.gated
        self.gate = state.admission
        self.tg = tg
        self.out: dict[str, Any] = {}

    def start(self, name: str, **tool: Any) -> None:
        async def call() -> None:
            self.out[name] = await self.gate.hook(agent_input(name, **tool), name, None)

        self.tg.start_soon(call)

    async def settle(self) -> None:
        await anyio.wait_all_tasks_blocked()


# -- the three-state amend -------------------------------------------------------------------
async def test_a_field_left_out_changes_nothing_none_restores_and_a_value_sets() -> None:
    control = RunControl()
    state = a_run(control, cap=3, subagent_model="haiku")
    assert (control.cap, control.subagent_model) == (3, "haiku")
    event = control.amend(cap=5)
    assert event.changed == ["cap"] and (event.cap, event.previous_cap) == (5, 3)
    assert control.subagent_model == "haiku"  # left out: unchanged
    event = control.amend(subagent_model="sonnet")
    assert event.changed == ["subagent_model"] and control.cap == 5
    event = control.amend(cap=None, subagent_model=None)  # both back to the start
    assert event.changed == ["cap", "subagent_model"]
    assert (control.cap, control.subagent_model) == (3, "haiku")
    assert (event.default_cap, event.default_subagent_model) == (3, "haiku")
    assert state.admission.cap == 3
    assert [e.changed for e in amends(state)] == [
        ["cap"],
        ["subagent_model"],
        ["cap", "subagent_model"],
    ]


async def test_an_amend_that_changes_nothing_is_refused_and_emits_nothing() -> None:
    control = RunControl()
    state = a_run(control, cap=3)
    with pytest.raises(AmendRefused, match="names no field"):
        control.amend()
    with pytest.raises(AmendRefused, match="the cap is already 3"):
        control.amend(cap=3)
    with pytest.raises(AmendRefused, match="changes nothing"):
        control.amend(cap=None, subagent_model=None)  # both already at the start values
    control.amend(subagent_model="haiku")
    with pytest.raises(AmendRefused, match="subagent model is already haiku"):
        control.set_subagent_model("haiku")
    assert [e.subagent_model for e in amends(state)] == ["haiku"]


async def test_bad_values_are_refused_with_the_field_and_change_nothing() -> None:
    control = RunControl()
    state = a_run(control, cap=3)
    for bad in (0, -1, 21, True):
        with pytest.raises(AmendRefused) as caught:
            control.amend(cap=bad)
        assert caught.value.field == "cap"
    for model in ("", "  ", "two words", "x\x1b[31m", "m" * 201):
        with pytest.raises(AmendRefused) as caught:
            control.amend(subagent_model=model)
        assert caught.value.field == "subagent_model"
    with pytest.raises(AmendRefused):  # one bad field: the good one is not applied either
        control.amend(cap=4, subagent_model="")
    assert (control.cap, control.subagent_model) == (3, None)
    assert amends(state) == []
    assert isinstance(AmendRefused("x"), teamlead.UsageError)


async def test_the_helpers_step_the_cap_within_its_floor_and_ceiling() -> None:
    control = RunControl()
    a_run(control, cap=2)
    assert control.max_cap == 20
    assert control.lower_cap().cap == 1
    with pytest.raises(AmendRefused, match="already 1, the lowest"):
        control.lower_cap()
    assert control.raise_cap(by=30).cap == 20  # clamped to the CLI's own cap
    with pytest.raises(AmendRefused, match="the most the CLI allows"):
        control.raise_cap()
    assert control.set_subagent_model("claude-haiku-5-5").subagent_model == "claude-haiku-5-5"


async def test_a_control_with_no_run_or_an_ended_run_refuses() -> None:
    control = RunControl()
    assert (control.cap, control.subagent_model, control.active) == (None, None, False)
    with pytest.raises(AmendRefused, match="no run is using this control"):
        control.amend(cap=2)
    with pytest.raises(AmendRefused, match="no run is using this control"):
        control.raise_cap()
    state = a_run(control)
    with pytest.raises(AmendRefused, match="already serves a running run"):
        a_run(control)
    state.close()
    assert not control.active and control.cap == 3  # the last values stay readable
    with pytest.raises(AmendRefused, match="no run is using this control"):
        control.amend(cap=2)
    a_run(control, cap=4)  # the next run may use it
    assert control.cap == 4


async def test_without_the_spawn_gate_the_cap_cannot_change_but_the_model_can() -> None:
    control = RunControl()
    policy = Policy(spawn=SpawnPolicy(enabled=False))
    state = new_run("query", ClaudeAgentOptions(), policy, FakeClock(), control=control)
    _RUNS.append(state)
    assert control.cap is None
    with pytest.raises(AmendRefused, match="no spawn gate"):
        control.amend(cap=2)
    with pytest.raises(AmendRefused, match="no spawn gate"):
        control.lower_cap()
    control.amend(subagent_model="claude-haiku-5-5")
    assert state.admission.pinned_model == "claude-haiku-5-5"


# -- the cap the queue follows ---------------------------------------------------------------
async def test_raising_the_cap_admits_queued_calls_at_once_in_arrival_order() -> None:
    control = RunControl()
    state = a_run(control, cap=1)
    async with anyio.create_task_group() as tg:
        hooks = Hooks(state, tg)
        for name in ("a", "b", "c", "d"):
            hooks.start(name)
            await hooks.settle()
        assert list(hooks.out) == ["a"] and hooks.gate.queued == 3
        control.amend(cap=3)
        await hooks.settle()
        assert list(hooks.out) == ["a", "b", "c"] and hooks.gate.running == 3
        hooks.gate.task_ended("a")
        await hooks.settle()
        assert list(hooks.out) == ["a", "b", "c", "d"]
        assert all(out == {} for out in hooks.out.values())


async def test_lowering_the_cap_stops_nobody_and_holds_new_calls_until_under_it() -> None:
    control = RunControl()
    state = a_run(control, cap=3)
    async with anyio.create_task_group() as tg:
        hooks = Hooks(state, tg)
        for name in ("a", "b", "c"):
            hooks.start(name)
        await hooks.settle()
        assert hooks.gate.running == 3
        control.amend(cap=1)
        hooks.start("d")
        await hooks.settle()
        assert "d" not in hooks.out and hooks.gate.running == 3  # the running three go on
        hooks.gate.task_ended("a")
        hooks.gate.task_ended("b")
        await hooks.settle()
        assert "d" not in hooks.out and hooks.gate.running == 1  # still at the new cap
        hooks.gate.task_ended("c")
        await hooks.settle()
        assert hooks.out["d"] == {} and hooks.gate.running == 1


async def test_the_relay_hold_of_workflow_agents_follows_the_live_cap() -> None:
    control = RunControl()
    state = a_run(control, cap=1)
    book = state.agents.book
    sent: list[str] = []

    async def forward(agent: str) -> None:
        async def exchange(send: Any, on_limited: Any, body: bytes | None) -> None:
            sent.append(agent)

        async def answer(*args: Any) -> None:
            sent.append(f"refused {agent}")

        headers = [
            (b"x-claude-code-session-id", b"s1"),
            (b"x-claude-code-agent-id", agent.encode()),
        ]
        await book.relay(headers, WORKFLOW_BODY, "subagent", _no_send, answer, exchange)

    async with anyio.create_task_group() as tg:
        for agent in ("w1", "w2", "w3"):
            tg.start_soon(forward, agent)
            await anyio.wait_all_tasks_blocked()
        assert sent == ["w1"]
        control.raise_cap()
        await anyio.wait_all_tasks_blocked()
        assert sent == ["w1", "w2"]
        control.lower_cap()
        state.admission.agent_ended("w1")  # its workflow entry is done
        await anyio.wait_all_tasks_blocked()
        assert sent == ["w1", "w2"]  # w2 still runs: the cap of 1 is full
        state.admission.agent_ended("w2")
        await anyio.wait_all_tasks_blocked()
        assert sent == ["w1", "w2", "w3"]


def headers_of(agent: str) -> list[tuple[bytes, bytes]]:
    return [(b"x-claude-code-session-id", b"s1"), (b"x-claude-code-agent-id", agent.encode())]


async def _no_send(message: Any) -> None:
    """The ASGI send of a request whose reply the test does not read."""


def test_fifo_slots_follow_a_changed_limit() -> None:
    slots = FifoSlots(2)
    assert slots.try_take() and slots.try_take() and not slots.try_take()
    slots.set_limit(1)
    slots.release()
    assert not slots.try_take()  # two were held over the new limit of one
    slots.release()
    assert slots.try_take() and slots.held == 1
    with pytest.raises(ValueError, match="at least 1"):
        slots.set_limit(0)


# -- the subagent model ------------------------------------------------------------------------
async def test_an_alias_goes_into_later_agent_calls_and_a_model_id_is_pinned_at_the_relay() -> None:
    control = RunControl()
    state = a_run(control, cap=5)
    admission = gate = state.admission
    assert gate.gated
    assert await gate.hook(agent_input("before"), "before", None) == {}
    control.set_subagent_model("haiku")
    out = await gate.hook(agent_input("after", model="opus"), "after", None)
    updated = out["hookSpecificOutput"]["updatedInput"]
    assert updated == {"description": "after", "prompt": "do after", "model": "haiku"}
    assert "permissionDecision" not in out["hookSpecificOutput"]  # the user's rules still ask
    assert admission.pinned_model == "haiku" and admission.aliases == {}  # the CLI's to resolve
    control.set_subagent_model("claude-haiku-5-5")
    assert await gate.hook(agent_input("id"), "id", None) == {}  # not an Agent input
    assert admission.pinned_model == "claude-haiku-5-5"
    control.set_subagent_model(None)
    assert admission.pinned_model is None and gate.subagent_model is None


async def test_a_pinned_model_reaches_new_agents_only_and_stays_with_each() -> None:
    control = RunControl()
    state = a_run(control, cap=5)
    book = state.agents.book
    bodies: dict[str, list[bytes | None]] = {}

    async def request(agent: str) -> None:
        async def exchange(send: Any, on_limited: Any, body: bytes | None) -> None:
            bodies.setdefault(agent, []).append(body)

        headers = [
            (b"x-claude-code-session-id", b"s1"),
            (b"x-claude-code-agent-id", agent.encode()),
        ]
        await book.relay(headers, WORKFLOW_BODY, "subagent", _no_send, _no_send, exchange)

    await request("old")
    control.set_subagent_model("claude-haiku-5-5")
    await request("old")  # started before the amend: keeps its model
    await request("new")
    control.set_subagent_model("claude-sonnet-5-5")
    await request("new")  # one agent, one model
    assert bodies["old"] == [None, None]
    pinned = [json.loads(b or b"{}")["model"] for b in bodies["new"]]
    assert pinned == ["claude-haiku-5-5", "claude-haiku-5-5"]
    assert json.loads(bodies["new"][0] or b"{}")["messages"] == [
        {"role": "user", "content": "WFJOB"}
    ]


async def test_a_pinned_agents_requests_are_paced_in_the_bucket_of_the_model_they_go_to(
    server_factory: list[ScriptedServer],
) -> None:
    """The upstream's limits are per model: a request sent with its agent's pinned model
    takes a slot of that model's bucket, not of the model its body named."""
    control = RunControl()
    state = a_run(control, cap=5)
    control.set_subagent_model("claude-haiku-5-5")
    server = serve(server_factory, lambda req: Reply.text("done"))
    governor = fake_governor()
    headers = {"x-claude-code-session-id": "s1", "x-claude-code-agent-id": "w1"}
    async with start_relay(server.base_url, governor) as relay, http() as h:
        run = relay.open_run(agents=state.agents.book)
        r = await h.post(run.base_url + "/v1/messages", content=WORKFLOW_BODY, headers=headers)
    assert r.status_code == 200
    (seen,) = server.recorded()
    assert seen.request.body["model"] == "claude-haiku-5-5"
    assert governor.keys == ["anthropic/claude-haiku-5-5"]


async def test_a_pinned_agents_request_is_summarised_in_the_bucket_of_the_model_it_went_to(
    server_factory: list[ScriptedServer],
) -> None:
    """The run's summary counts a pinned request, and its 429, under the model it was sent
    with: the body's own model never went upstream."""
    control = RunControl()
    state = a_run(control, cap=5)
    control.set_subagent_model("claude-haiku-5-5")
    replies = iter([Reply.error(429, retry_after=1), Reply.text("done")])
    server = serve(server_factory, lambda req: next(replies))
    headers = {"x-claude-code-session-id": "s1", "x-claude-code-agent-id": "w1"}
    async with start_relay(server.base_url, fake_governor()) as relay, http() as h:
        run = relay.open_run(agents=state.agents.book)
        r = await h.post(run.base_url + "/v1/messages", content=WORKFLOW_BODY, headers=headers)
        summary = run.summary()
    assert r.status_code == 200 and summary.requests == 1
    assert [(b.key, b.requests, b.rate_limited) for b in summary.buckets] == [
        ("anthropic/claude-haiku-5-5", 1, 1)
    ]


async def test_an_alias_pins_workflow_agents_once_an_agent_call_showed_what_it_became() -> None:
    control = RunControl()
    state = a_run(control, cap=5)
    assert state.admission.gated
    gate, book = state.admission, state.agents.book
    bodies: dict[str, list[bytes | None]] = {}

    async def request(agent: str, body: bytes = WORKFLOW_BODY) -> None:
        async def exchange(send: Any, on_limited: Any, new_body: bytes | None) -> None:
            bodies.setdefault(agent, []).append(new_body)

        await book.relay(headers_of(agent), body, "subagent", _no_send, _no_send, exchange)

    control.set_subagent_model("haiku")
    await request("early")  # nothing known of "haiku" yet: no pin, the CLI's own model
    hook_out = await gate.hook(agent_input("call"), "toolu_call", None)
    assert hook_out["hookSpecificOutput"]["updatedInput"]["model"] == "haiku"
    resolved = json.dumps({"model": "claude-haiku-5-5", "messages": []}).encode()
    await request("task-1", resolved)  # the Agent call's agent: its first request...
    gate.task_started("toolu_call", "task-1")  # ...then the stream names its task
    assert state.admission.aliases == {"haiku": "claude-haiku-5-5"}
    await request("late")
    assert bodies["early"] == [None] and bodies["task-1"] == [None]
    assert json.loads(bodies["late"][0] or b"{}")["model"] == "claude-haiku-5-5"


def test_the_starting_model_is_the_policys_else_the_users_variable() -> None:
    control = RunControl()
    policy = Policy(spawn=SpawnPolicy(subagent_model="haiku"))
    state = new_run("query", ClaudeAgentOptions(), policy, FakeClock(), control=control)
    assert state.ask.options.env[SUBAGENT_MODEL_VAR] == "haiku"
    assert control.default_subagent_model == "haiku"
    state.close()
    options = ClaudeAgentOptions(env={SUBAGENT_MODEL_VAR: "claude-sonnet-4-5"})
    state = new_run("query", options, Policy(), FakeClock(), control=control)
    _RUNS.append(state)
    assert state.ask.options.env[SUBAGENT_MODEL_VAR] == "claude-sonnet-4-5"
    assert control.subagent_model == "claude-sonnet-4-5"
    with pytest.raises(ValueError, match="subagent_model"):
        SpawnPolicy(subagent_model="bad model")
    assert is_model_alias("haiku") and not is_model_alias("claude-haiku-5-5")


# -- from another thread -------------------------------------------------------------------------
async def test_an_amend_from_another_thread_is_applied_on_the_runs_loop() -> None:
    control = RunControl()
    state = a_run(control, cap=1)
    state.start_clock()  # the run binds its loop
    results: list[RunAmended | BaseException] = []

    def from_thread() -> None:
        try:
            results.append(control.raise_cap())
        except BaseException as exc:
            results.append(exc)

    async with anyio.create_task_group() as tg:
        hooks = Hooks(state, tg)
        hooks.start("a")
        hooks.start("b")
        await hooks.settle()
        assert list(hooks.out) == ["a"]
        await anyio.to_thread.run_sync(from_thread)
        await hooks.settle()
        assert list(hooks.out) == ["a", "b"]
    assert isinstance(results[0], RunAmended) and results[0].cap == 2
    assert [e.cap for e in amends(state)] == [2]


# -- the record of each amend ----------------------------------------------------------------
def test_each_amend_is_a_versioned_ndjson_line_and_a_progress_line() -> None:
    import io

    from teamlead._cli.team_view import PlainProgress
    from teamlead._ndjson import JsonProgress
    from teamlead.events import EVENT_VERSION

    control = RunControl()
    state = a_run(control, cap=3)
    control.amend(cap=1, subagent_model="claude-haiku-5-5")
    control.amend(subagent_model=None)
    out, log = io.StringIO(), io.StringIO()
    ndjson, plain = JsonProgress(out, HandFed()), PlainProgress(log, HandFed())
    for event in amends(state):
        ndjson.handle(event)
        plain.handle(event)
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["type"] == "run_amended" and first["version"] == EVENT_VERSION
    assert (first["changed"], first["cap"], first["previous_cap"]) == (
        ["cap", "subagent_model"],
        1,
        3,
    )
    assert second["subagent_model"] is None and second["previous_subagent_model"]
    assert RunAmended.model_validate_json(json.dumps(first)).cap == 1
    lines = log.getvalue().splitlines()
    assert "cap 3 -> 1" in lines[0] and "subagent model -> claude-haiku-5-5" in lines[0]
    assert "subagent model -> their own" in lines[1]


def test_a_bad_subagent_model_is_one_line_and_exit_2() -> None:
    from click.testing import CliRunner

    from teamlead._cli import main

    # the flag's value is checked before anything starts
    result = CliRunner().invoke(main, ["ask", "x", "--subagent-model", "two words"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "subagent_model" in lines[0], result.output


async def test_a_client_run_is_controlled_from_before_its_client_connects() -> None:
    control = RunControl()
    policy = Policy(spawn=SpawnPolicy(max_concurrent_agents=2), relay=False)
    run = teamlead.ClientRun(ClaudeAgentOptions(), policy, control=control)
    assert control.active and control.cap == 2
    async with run:
        assert control.lower_cap().cap == 1
    assert not control.active  # the client's run ended with the block
    with pytest.raises(AmendRefused):
        control.raise_cap()
