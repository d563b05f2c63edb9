"""The agent ledger at the relay: attribution, usage, bad input, budgets, timeouts, results.

A real relay in front of the scripted server; requests are sent with the headers Claude
Code sends (``X-Claude-Code-Session-Id``, ``x-claude-code-agent-id``). Timeouts run on a
FakeClock, so no test waits one out.
"""

from __future__ import annotations

import json
import stat
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx2
import pytest

from teamlead._gate.admission import Admission
from teamlead._gate.reasons import WorkflowRefusal
from teamlead._gate.slots import SpawnCap
from teamlead._governor import UsageScan
from teamlead._metering.book import MAX_AGENTS, AgentBook
from teamlead._metering.request import agent_key, is_workflow_agent, model_of, with_model
from teamlead._relay import Relay, start_relay
from teamlead._run.agents import RunAgents
from teamlead._run.resume_prompt import Delivery, render_resume_prompt
from teamlead.clock import SystemClock
from teamlead.governor import Governor, GovernorPolicy
from teamlead.policy import Policy
from teamlead.testing import FakeClock, Reply, ScriptedRequest, ScriptedServer

from .polling import apoll

pytestmark = pytest.mark.anyio

BODY = json.dumps(
    {
        "model": "claude-opus-5-5",
        "max_tokens": 10,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
).encode()


def workflow_body() -> bytes:
    system = [
        {"type": "text", "text": "x-anthropic-billing-header: cc_is_subagent=true;"},
        {"type": "text", "text": "You are a subagent spawned by a workflow orchestration script."},
    ]
    return json.dumps(
        {
            "model": "m",
            "stream": True,
            "system": system,
            "messages": [{"role": "user", "content": "w"}],
        }
    ).encode()


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    def script(req: ScriptedRequest) -> Reply:
        text = req.first_user_text
        if "nousage" in text:
            return Reply(content="no usage here", usage=False)
        if "hang" in text:
            return Reply.text("late", delay=600)
        return Reply(content="answer " * 10, input_tokens=100, output_tokens=7)

    with ScriptedServer(script) as s:
        yield s


@asynccontextmanager
async def relayed_run(
    server: ScriptedServer, book: AgentBook
) -> AsyncIterator[tuple[Relay, str, httpx2.AsyncClient]]:
    governor = Governor(GovernorPolicy(ceiling=16), clock=FakeClock())
    async with (
        start_relay(server.base_url, governor) as relay,
        httpx2.AsyncClient(timeout=20) as http,
    ):
        run = relay.open_run(agents=book)
        yield relay, run.base_url + "/v1/messages?beta=true", http


def headers(session: str | None = "s-1", agent: str | None = None) -> dict[str, str]:
    out = {"x-api-key": "k", "content-type": "application/json"}
    if session is not None:
        out["X-Claude-Code-Session-Id"] = session
    if agent is not None:
        out["x-claude-code-agent-id"] = agent
    return out


def body(text: str = "hi") -> bytes:
    return json.dumps(
        {
            "model": "claude-opus-5-5",
            "stream": True,
            "messages": [{"role": "user", "content": text}],
        }
    ).encode()


async def test_each_request_is_counted_for_its_agent_with_the_upstreams_usage(
    server: ScriptedServer,
) -> None:
    book = AgentBook(SystemClock())
    async with relayed_run(server, book) as (_, url, http):
        for agent in ("a1", "a1", "a2", None):
            r = await http.post(url, content=body(), headers=headers(agent=agent))
            assert r.status_code == 200
        r = await http.post(url, content=body("nousage"), headers=headers(agent="a3"))
        assert r.status_code == 200 and "no usage here" in r.text
    a1, a2, lead, a3 = (book.agent(a) for a in ("a1", "a2", "", "a3"))
    assert a1 is not None and (a1.requests, a1.input_tokens, a1.output_tokens) == (2, 200, 14)
    assert a2 is not None and (a2.requests, a2.input_tokens) == (1, 100)
    assert book.entries[("s-1", "")].requests == 1 and lead is None  # the lead has no id
    # a reply without usage: unknown, not zero
    assert a3 is not None and a3.tokens is None and a3.unknown_usage == 1
    assert book.tokens == 4 * 107 and book.requests == 5


async def test_bad_ids_are_attributed_safely_and_never_to_another_run(
    server: ScriptedServer,
) -> None:
    mine, other = AgentBook(SystemClock()), AgentBook(SystemClock())
    governor = Governor(GovernorPolicy(ceiling=16), clock=FakeClock())
    async with (
        start_relay(server.base_url, governor) as relay,
        httpx2.AsyncClient(timeout=20) as http,
    ):
        run_a = relay.open_run(agents=mine)
        relay.open_run(agents=other)  # another run of the same relay, with its own ledger
        url = run_a.base_url + "/v1/messages?beta=true"
        forged = "x" * 500
        for hdrs in (
            headers(session=None, agent=None),  # no headers at all: the lead, no session
            headers(agent=forged),  # not a plausible id
            headers(agent="a b;c=1"),  # odd characters
            headers(session="s-of-run-b", agent="b1"),  # another run's session, on our path
        ):
            r = await http.post(url, content=body(), headers=hdrs)
            assert r.status_code == 200
    assert other.requests == 0 and other.entries == {}  # never the other run's
    assert set(mine.entries) == {("", ""), ("s-1", "?invalid"), ("s-of-run-b", "b1")}
    assert mine.entries[("s-1", "?invalid")].requests == 2
    assert mine.agent("b1", "s-1") is None  # not joined to our session's agents


def test_agent_ids_and_workflow_requests_are_read_from_headers_and_body() -> None:
    assert agent_key([(b"x-claude-code-agent-id", b"a" * 65)]) == ("", "?invalid")
    assert agent_key([(b"X-CLAUDE-CODE-SESSION-ID", b"s")]) == ("s", "")
    assert is_workflow_agent(workflow_body())
    assert not is_workflow_agent(BODY)
    assert not is_workflow_agent(b"spawned by a workflow orchestration script, not JSON")


def test_a_body_nested_deeper_than_the_parser_recurses_is_read_as_no_json_object() -> None:
    deep = b"[" * 20_000 + b"]" * 20_000
    body = b'{"system": "spawned by a workflow orchestration script", "x": ' + deep + b"}"
    assert not is_workflow_agent(body)
    assert model_of(body) is None
    assert with_model(body, "pinned") is None  # it goes as it came


def test_a_body_with_half_a_surrogate_pair_still_gets_its_pinned_model() -> None:
    """A tool's output cut inside an emoji leaves half its surrogate pair, escaped in the
    JSON the CLI sends: the body with its model pinned is valid UTF-8 and says the same."""
    body = b'{"model":"sent","messages":[{"role":"user","content":"cut \\ud83d here \xc3\xa9"}]}'
    pinned = with_model(body, "pinned")
    assert pinned is not None
    data = json.loads(pinned.decode("utf-8"))
    assert data["model"] == "pinned"
    assert data["messages"][0]["content"] == "cut \ud83d here \u00e9"


def test_usage_is_read_across_chunk_boundaries_and_malformed_lines_are_skipped() -> None:
    start = b'event: message_start\ndata: {"type":"message_start","message":{"usage":'
    rest = b'{"input_tokens":5,"cache_read_input_tokens":3,"output_tokens":1}}}\n\n'
    delta = b'event: message_delta\ndata: {"type":"message_delta","usage":{"output_tokens":9}}\n'
    scan = UsageScan()
    for chunk in (start[:30], start[30:], rest, b"data: {not json message_delta\n", delta):
        scan.feed(chunk)
    assert (scan.usage.prompt_tokens, scan.usage.output_tokens) == (8, 9)
    empty = UsageScan()
    empty.feed(b'data: {"type":"message_delta","usage":"nonsense"}\n')
    assert not empty.seen


async def test_the_book_stays_bounded_under_a_flood_of_forged_agent_ids() -> None:
    book = AgentBook(SystemClock())
    for n in range(MAX_AGENTS + 50):
        ticket = await book._enter(("s", f"forged-{n}"), b"{}", "subagent")
        assert not isinstance(ticket, type(None))
    assert len(book.entries) == MAX_AGENTS + 1  # the rest folded into one overflow entry
    assert book.entries[("s", "?overflow")].requests == 50


async def test_a_request_budget_refuses_subagents_but_keeps_the_wrap_ups_request(
    server: ScriptedServer,
) -> None:
    admission = Admission(Policy(request_budget=4), SystemClock(), cap=SpawnCap())
    book = AgentBook(SystemClock(), admission)
    async with relayed_run(server, book) as (_, url, http):
        statuses = [
            (await http.post(url, content=body(), headers=headers(agent=a))).status_code
            for a in ("a1", "a2", "a3", "a4")
        ]
        # three forwarded: the fourth is the room kept for the wrap-up
        assert statuses == [200, 200, 200, 400]
        assert admission.exhaust_reason == "request_budget"
        late = await admission.admit_workflow_agent("w9")  # no agent starts now
        assert late is not None and "request budget is reached" in late.reason
        refused = await http.post(url, content=body(), headers=headers(agent="a5"))
        assert "request budget (4) is spent" in refused.json()["error"]["message"]
        assert refused.headers["x-should-retry"] == "false"
        book.wrapping = True  # the run wraps up: the lead's one request is kept for it
        assert (await http.post(url, content=body(), headers=headers())).status_code == 200
        assert (await http.post(url, content=body(), headers=headers())).status_code == 400
    assert book.requests == 4


async def test_a_client_runs_next_turn_spends_no_more_of_the_room_kept_for_a_wrap_up(
    server: ScriptedServer,
) -> None:
    # the last turn's wrap-up let the lead spend the room kept for it; a next turn that
    # kept that leave let its lead past every budget
    policy = Policy(request_budget=3)
    admission = Admission(policy, SystemClock(), cap=SpawnCap())
    agents = RunAgents(policy, SystemClock(), admission)
    async with relayed_run(server, agents.book) as (_, url, http):
        for agent in ("a1", "a2"):
            assert (await http.post(url, content=body(), headers=headers(agent=agent))).is_success
        agents.wrapping()  # the turn wraps up: its lead's request is kept for it
        assert (await http.post(url, content=body(), headers=headers())).status_code == 200
        agents.next_turn()
        refused = await http.post(url, content=body(), headers=headers())
        assert "request budget (3) is spent" in refused.json()["error"]["message"]
    assert agents.book.requests == 3


async def test_a_token_budget_is_checked_before_each_request_from_the_upstreams_usage(
    server: ScriptedServer,
) -> None:
    book = AgentBook(
        SystemClock(), Admission(Policy(token_budget=400), SystemClock(), cap=SpawnCap())
    )
    async with relayed_run(server, book) as (_, url, http):
        codes = []
        for agent in ("a1", "a2", "a3", "a4", "a5"):
            r = await http.post(url, content=body(), headers=headers(agent=agent))
            codes.append(r.status_code)
    # 107 tokens a reply; room kept for the wrap-up: a tenth of the budget (40). A new
    # agent's first request is estimated from the first requests before it (107), so the
    # fourth would pass the budget (321 + 107 >= 360) and is refused before it is forwarded
    assert codes == [200, 200, 200, 400, 400]
    assert book.exhausted == "token_budget" and book.tokens == 321


async def test_an_agent_past_its_timeout_is_cut_and_refused(server: ScriptedServer) -> None:
    clock = FakeClock()
    policy = Policy(spawn={"agent_timeout_s": 30})
    admission = Admission(policy, clock, cap=SpawnCap())
    stopped: list[str] = []

    class Client:  # a client run's: the admission stops the agent's task through it
        async def stop_task(self, task_id: str) -> None:
            stopped.append(task_id)

    admission.stop_with(Client().stop_task)
    book = AgentBook(clock, admission)
    async with relayed_run(server, book) as (_, url, http):
        async with anyio.create_task_group() as tg:
            result: dict[str, int] = {}
            started = anyio.Event()

            async def hung() -> None:
                request = http.stream(
                    "POST", url, content=body("hang"), headers=headers(agent="h1")
                )
                async with request as response:
                    started.set()  # its reply has started: the relay can only cut it short
                    try:
                        async for _ in response.aiter_bytes():
                            pass
                    except httpx2.RemoteProtocolError:
                        result["cut"] = 1

            tg.start_soon(hung)
            with anyio.fail_after(10):
                await started.wait()
            clock.advance(31)
        assert result == {"cut": 1}
        again = await http.post(url, content=body(), headers=headers(agent="h1"))
        other = await http.post(url, content=body(), headers=headers(agent="ok"))
    assert stopped == ["h1"] and book.timed_out == ["h1"]
    assert again.status_code == 400 and "timeout of 30 s" in again.json()["error"]["message"]
    assert other.status_code == 200  # the others go on


async def test_a_workflow_agents_first_request_waits_for_a_slot_fifo(
    server: ScriptedServer,
) -> None:
    cap = SpawnCap(1)
    pool = cap
    assert pool.try_take()  # another run's agent holds the process's only slot
    admission = Admission(Policy(), SystemClock(), cap=cap)
    book = AgentBook(SystemClock(), admission)
    async with relayed_run(server, book) as (_, url, http):
        done: list[str] = []

        async def workflow_agent(agent: str) -> None:
            r = await http.post(url, content=workflow_body(), headers=headers(agent=agent))
            assert r.status_code == 200
            done.append(agent)

        async with anyio.create_task_group() as tg:
            tg.start_soon(workflow_agent, "w1")
            assert await apoll(lambda: pool.waiting, within_s=10)  # the hold queued
            assert server.recorded() == [] and done == []  # held, not forwarded
            pool.release()  # the Agent-tool agent ended: w1 takes its slot
        assert done == ["w1"] and pool.held == 1  # the slot follows the work, not the request
        admission.agent_ended("w1")  # its workflow entry is done
        assert pool.held == 0


def _spill_into(tmp_path: Path) -> Callable[[str, str], str]:
    def spill(key: str, text: str) -> str:
        path = tmp_path / "result.txt"
        path.write_text(text)
        path.chmod(0o600)
        return str(path)

    return spill


def test_results_that_fit_the_prompt_go_whole_however_long_each_is(tmp_path: Path) -> None:
    long = "x" * 29_950 + " FINDING[long] at the very end"
    deliveries = [
        Delivery(
            key="task:t1",
            kind="task",
            label="long",
            status="completed",
            text=long,
            source="summary",
        ),
        *(
            Delivery(
                key=f"task:s{n}",
                kind="task",
                label=f"s{n}",
                status="completed",
                text=f"FINDING[s{n}] " + "y" * 500,
                source="summary",
            )
            for n in range(20)
        ),
    ]
    prompt, used = render_resume_prompt(deliveries, [], Policy(), spill=_spill_into(tmp_path))
    assert used == 21 and "characters cut here" not in prompt
    assert long in prompt and all(d.text in prompt for d in deliveries)
    assert all(d.full_path is None for d in deliveries)  # nothing handed over by path


def test_a_result_over_the_prompt_keeps_its_tail_and_its_file(tmp_path: Path) -> None:
    text = "x" * 89_950 + " FINDING[the-end] at the very end"
    delivery = Delivery(
        key="task:t1", kind="task", label="long", status="completed", text=text, source="summary"
    )
    prompt, used = render_resume_prompt([delivery], [], Policy(), spill=_spill_into(tmp_path))
    assert used == 1
    assert "FINDING[the-end] at the very end" in prompt
    assert f"{tmp_path / 'result.txt'} (Read it)" in prompt
    assert delivery.full_path == str(tmp_path / "result.txt")
    assert Path(delivery.full_path).read_text() == text
    assert stat.S_IMODE(Path(delivery.full_path).stat().st_mode) == 0o600


def test_a_version_1_finished_record_still_reads() -> None:
    from teamlead.events import EVENT_VERSION, Finished

    old = {
        "type": "finished",
        "version": 1,
        "status": "completed",
        "result": "ok",
        "session_id": "s",
        "resumes": 0,
        "tasks": [
            {
                "id": "t1",
                "kind": "task",
                "description": "d",
                "status": "completed",
                "disposition": "included",
                "source": "lead",
            }
        ],
    }
    done = Finished.model_validate(old)
    assert done.version == 1 and done.tasks[0].tokens_in is None
    assert EVENT_VERSION == 6 and Finished.model_validate_json(done.to_json()) == done


class _BrokenAdmission(Admission):
    """A run's admission that fails on every workflow agent."""

    async def admit_workflow_agent(self, agent_id: str) -> WorkflowRefusal | None:
        raise RuntimeError("the gate is gone")


async def test_a_fault_in_the_ledger_never_breaks_a_request(server: ScriptedServer) -> None:
    book = AgentBook(SystemClock(), _BrokenAdmission(Policy(), SystemClock(), cap=SpawnCap()))
    async with relayed_run(server, book) as (_, url, http):
        r = await http.post(url, content=workflow_body(), headers=headers(agent="w1"))
        after = await http.post(url, content=body(), headers=headers(agent="a1"))
    assert r.status_code == 200 and after.status_code == 200
    assert len(server.recorded()) == 2


def test_the_last_tool_is_read_from_the_tail_of_a_request_and_never_trusted_as_text() -> None:
    from teamlead._metering.request import last_tool_of

    def body(*names: str, pad: int = 0) -> bytes:
        blocks = [
            {"type": "tool_use", "id": f"t{i}", "name": n, "input": {}} for i, n in enumerate(names)
        ]
        return json.dumps(
            {
                "messages": [
                    {"role": "user", "content": "x" * pad},
                    {"role": "assistant", "content": blocks},
                ]
            }
        ).encode()

    assert last_tool_of(body()) is None
    assert last_tool_of(body("Read", "Bash")) == "Bash"  # the last call
    assert last_tool_of(body("Grep", pad=5_000_000)) == "Grep"  # past a huge prefix
    assert last_tool_of(body("\x1b[31mEvil[/]")) is None  # not a tool name: shown as nothing
    assert last_tool_of(b"not json at all") is None


async def test_a_workflow_agent_takes_its_spawn_unit_before_its_slot_and_gives_it_back_unstarted(
    server: ScriptedServer,
) -> None:
    from teamlead.policy import SpawnPolicy

    cap = SpawnCap(1)
    pool = cap
    assert pool.try_take()  # another run's agent holds the process's only slot
    clock = SystemClock()
    policy = Policy(spawn=SpawnPolicy(spawn_budget=1), deadline_s=600)
    gate = admission = Admission(policy, clock, cap=cap)
    assert gate.gated
    book = AgentBook(clock, admission)
    async with relayed_run(server, book) as (_, url, http):
        admission.set_deadline(0)  # the wrap-up point has come: no slot will
        late = await http.post(url, content=workflow_body(), headers=headers(agent="w1"))
        assert late.status_code == 400 and gate.spawned == 0  # its unit is back
        admission.set_deadline(600)
        pool.release()
        first = await http.post(url, content=workflow_body(), headers=headers(agent="w2"))
        assert first.status_code == 200 and gate.spawned == 1
        # the budget is spent: refused at once, without waiting for the slot w2 holds
        past = await http.post(url, content=workflow_body(), headers=headers(agent="w3"))
        again = await http.post(url, content=workflow_body(), headers=headers(agent="w3"))
    assert past.status_code == again.status_code == 400 and pool.waiting == 0
    assert "spawn budget of 1 is used up" in past.json()["error"]["message"]
    assert book.denied.keys() == {"w3"} and gate.spawned == 1
    assert [r.agent_id for r in server.recorded()] == ["w2"]
