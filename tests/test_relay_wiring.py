"""How runs use the request relay: the switches, the notes, the events in the stream, the view.

Scripted ``query_fn`` generators that send real HTTP through the relay to a scripted
server stand in for the CLI here (the real CLI is in tests/cli/test_relay_wiring.py), so the
relay, its governor and its events are the real ones.
"""

from __future__ import annotations

import io
import logging
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from claude_agent_sdk import ClaudeAgentOptions, ResultMessage, SystemMessage

import teamlead
from teamlead._cli.team_view import LiveTeamView, PlainProgress
from teamlead._governor import Limits, ProcessAccount
from teamlead._relay import account_of
from teamlead._run.relayed import relay_wanted
from teamlead.events import (
    BucketSummary,
    ConcurrencyChanged,
    Finished,
    RateLimited,
    RelaySummary,
)
from teamlead.policy import LimitsPolicy
from teamlead.testing import FakeClock, Reply, ScriptedServer

from .parsing import HandFed

pytestmark = pytest.mark.anyio

SESSION = "5e55a1f0-0000-4000-8000-000000000001"


def _messages(base_url: str) -> list[Any]:
    return [
        SystemMessage(
            subtype="init", data={"type": "system", "subtype": "init", "session_id": SESSION}
        ),
        ResultMessage(
            subtype="success",
            duration_ms=1,
            duration_api_ms=1,
            is_error=False,
            num_turns=1,
            session_id=SESSION,
            result=f"answer via {base_url.split('/')[2]}",
        ),
    ]


def _posting_query(seen: list[ClaudeAgentOptions], posts: int = 1) -> Any:
    """A query_fn that, like the CLI, sends its requests to ``ANTHROPIC_BASE_URL``."""

    async def query_fn(*, prompt: str, options: ClaudeAgentOptions) -> AsyncIterator[Any]:
        seen.append(options)
        base = options.env["ANTHROPIC_BASE_URL"]
        async with httpx.AsyncClient(timeout=30) as client:
            for _ in range(posts):
                response = await client.post(
                    f"{base}/v1/messages",
                    headers={"x-api-key": "sk-ant-unit-key", "anthropic-version": "2023-06-01"},
                    json={
                        "model": "claude-unit",
                        "max_tokens": 10,
                        "stream": False,
                        "messages": [{"role": "user", "content": prompt}],
                    },
                )
                assert response.status_code == 200, response.text
        for message in _messages(base):
            yield message

    return query_fn


def _posting_once(statuses: list[int], before: Callable[[], None] = lambda: None) -> Any:
    """A query_fn that, after ``before()``, sends one request to the relay as the CLI would
    and notes the status it got in ``statuses``."""

    async def query_fn(*, prompt: str, options: ClaudeAgentOptions) -> AsyncIterator[Any]:
        before()
        base = options.env["ANTHROPIC_BASE_URL"]
        async with httpx.AsyncClient(timeout=30) as client:
            response = await client.post(
                f"{base}/v1/messages",
                json={"model": "claude-unit", "max_tokens": 10, "messages": []},
            )
            statuses.append(response.status_code)
        for message in _messages(base):
            yield message

    return query_fn


def _limited_once() -> Any:
    calls = {"n": 0}

    def script(req: Any) -> Reply:
        calls["n"] += 1
        if calls["n"] == 1:
            return Reply.error(429, retry_after=0)
        return Reply.text("ok")

    return script


async def test_query_relays_by_default_and_yields_the_relays_events() -> None:
    with ScriptedServer(_limited_once()) as server:
        seen: list[ClaudeAgentOptions] = []
        options = ClaudeAgentOptions(env={"ANTHROPIC_BASE_URL": server.base_url})
        items = [i async for i in teamlead.run("q", options, query_fn=_posting_query(seen))]
        recorded = server.recorded()
    relay_url = seen[0].env["ANTHROPIC_BASE_URL"]
    assert relay_url.startswith("http://127.0.0.1:") and relay_url != server.base_url
    assert options.env == {"ANTHROPIC_BASE_URL": server.base_url}  # the caller's untouched
    limited = [i for i in items if isinstance(i, RateLimited)]
    assert [(e.model, e.outcome, e.status) for e in limited] == [("claude-unit", "absorbed", 429)]
    done = items[-1]
    assert isinstance(done, Finished) and done.relay is not None
    assert (done.relay.requests, done.relay.absorbed, done.relay.passed) == (1, 1, 0)
    assert [s.status for s in recorded] == [429, 200]
    assert all(
        k.lower() != "x-api-key" or v == "sk-ant-unit-key" for r in recorded for k, v in r.headers
    )


@pytest.mark.parametrize("how", ["policy", "variable"])
async def test_the_relay_is_off_with_policy_or_variable(
    how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ScriptedServer(lambda req: Reply.text("ok")) as server:
        seen: list[ClaudeAgentOptions] = []
        options = ClaudeAgentOptions(env={"ANTHROPIC_BASE_URL": server.base_url})
        policy = teamlead.Policy(relay=how != "policy")
        if how == "variable":
            monkeypatch.setenv("TEAMLEAD_NO_RELAY", "1")
        items = [
            i
            async for i in teamlead.run("q", options, query_fn=_posting_query(seen), policy=policy)
        ]
    assert seen[0].env["ANTHROPIC_BASE_URL"] == server.base_url  # direct
    assert items[-1].relay is None
    assert not any(isinstance(i, RateLimited | ConcurrencyChanged) for i in items)


def test_relay_wanted_reads_the_switches() -> None:
    assert relay_wanted(teamlead.Policy(), {})
    assert not relay_wanted(teamlead.Policy(relay=False), {})
    assert not relay_wanted(teamlead.Policy(), {"TEAMLEAD_NO_RELAY": "yes"})
    assert relay_wanted(teamlead.Policy(), {"TEAMLEAD_NO_RELAY": "0"})


@pytest.mark.parametrize(
    ("env", "note"),
    [
        ({"CLAUDE_CODE_USE_BEDROCK": "1"}, "Bedrock"),
        ({"CLAUDE_CODE_USE_VERTEX": "true"}, "Vertex"),
        ({"ANTHROPIC_BASE_URL": "unix:///run/gateway.sock"}, "not an http(s) URL"),
    ],
)
async def test_not_applicable_runs_direct_with_one_note(
    env: dict[str, str], note: str, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[ClaudeAgentOptions] = []

    async def query_fn(*, prompt: str, options: ClaudeAgentOptions) -> AsyncIterator[Any]:
        seen.append(options)
        for message in _messages("http://direct/"):
            yield message

    with caplog.at_level(logging.WARNING, logger="teamlead.relay"):
        items = [i async for i in teamlead.run("q", ClaudeAgentOptions(env=env), query_fn=query_fn)]
    assert seen[0].env.get("ANTHROPIC_BASE_URL") == env.get("ANTHROPIC_BASE_URL")
    assert items[-1].relay is None
    lines = [r.getMessage() for r in caplog.records if r.name == "teamlead.relay"]
    assert len(lines) == 1 and note in lines[0] and "\n" not in lines[0]


async def test_a_relay_that_cannot_listen_warns_and_runs_direct(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # a real listener holds the port the run asks its relay for: the bind really fails
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with ScriptedServer(lambda req: Reply.text("ok")) as server:
            seen: list[ClaudeAgentOptions] = []
            options = ClaudeAgentOptions(env={"ANTHROPIC_BASE_URL": server.base_url})
            policy = teamlead.Policy(relay_port=port)
            with caplog.at_level(logging.WARNING, logger="teamlead.relay"):
                items = [
                    i
                    async for i in teamlead.run(
                        "q", options, policy=policy, query_fn=_posting_query(seen)
                    )
                ]
    assert seen[0].env["ANTHROPIC_BASE_URL"] == server.base_url
    assert items[-1].relay is None and items[-1].status == "completed"
    (line,) = [r.getMessage() for r in caplog.records if r.name == "teamlead.relay"]
    assert line == (
        f"request relay off, running direct: the relay cannot listen on 127.0.0.1:{port}: "
        "Address already in use"
    )


async def test_a_run_relay_listens_on_the_port_its_policy_names() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # free once the probe closes
    with ScriptedServer(lambda req: Reply.text("ok")) as server:
        seen: list[ClaudeAgentOptions] = []
        options = ClaudeAgentOptions(env={"ANTHROPIC_BASE_URL": server.base_url})
        policy = teamlead.Policy(relay_port=port)
        items = [
            i
            async for i in teamlead.run("q", options, policy=policy, query_fn=_posting_query(seen))
        ]
    assert seen[0].env["ANTHROPIC_BASE_URL"].startswith(f"http://127.0.0.1:{port}/")
    assert items[-1].relay is not None and items[-1].status == "completed"


async def test_a_client_run_keeps_the_relay_up_for_a_client_and_receive_all_reports_it() -> None:
    with ScriptedServer(_limited_once()) as server:
        options = ClaudeAgentOptions(env={"ANTHROPIC_BASE_URL": server.base_url})
        run = teamlead.ClientRun(options, teamlead.Policy())
        assert run.options.env["ANTHROPIC_BASE_URL"] == server.base_url  # not yet relayed
        async with run:
            base = run.options.env["ANTHROPIC_BASE_URL"]
            assert base != server.base_url
            assert run.options.env["CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS"] == "1"
            client = _Client(run.options)
            items = [i async for i in teamlead.receive_all(client, run)]
        # the block is over: the relay is gone, the next client would need a new block
        async with httpx.AsyncClient(timeout=5) as after:
            with pytest.raises(httpx.ConnectError):
                await after.post(f"{base}/v1/messages", json={})
    assert [type(i).__name__ for i in items if isinstance(i, RateLimited)] == ["RateLimited"]
    done = items[-1]
    assert isinstance(done, Finished) and done.relay is not None and done.relay.absorbed == 1


async def test_relay_for_keeps_the_relay_up_for_a_client_while_the_block_runs() -> None:
    with ScriptedServer(_limited_once()) as server:
        options = ClaudeAgentOptions(env={"ANTHROPIC_BASE_URL": server.base_url})
        async with teamlead.relay_for(options) as relayed_options:
            base = relayed_options.env["ANTHROPIC_BASE_URL"]
            assert base != server.base_url
            client = _Client(relayed_options)
            items = [i async for i in teamlead.receive_all(client)]
        async with httpx.AsyncClient(timeout=5) as after:
            with pytest.raises(httpx.ConnectError):
                await after.post(f"{base}/v1/messages", json={})
    done = items[-1]
    assert isinstance(done, Finished) and done.status == "completed"


class _Client:
    """The part of ClaudeSDKClient receive_all uses; its "CLI" posts to its base URL."""

    def __init__(self, options: ClaudeAgentOptions) -> None:
        self.options = options

    async def query(self, prompt: str, session_id: str = "default") -> None:
        raise AssertionError("nothing to resume in this test")

    async def receive_messages(self) -> AsyncIterator[Any]:
        async for message in _posting_query([])(prompt="q", options=self.options):
            yield message
        yield SystemMessage(
            subtype="session_state_changed",
            data={
                "type": "system",
                "subtype": "session_state_changed",
                "state": "idle",
                "session_id": SESSION,
            },
        )


def _summary() -> RelaySummary:
    return RelaySummary(
        requests=27,
        absorbed=21,
        passed=1,
        buckets=[BucketSummary(key="anthropic/claude-x", limit=3, requests=27, rate_limited=22)],
    )


def _change(previous: int, cap: int, reason: Any = "rate_limited") -> ConcurrencyChanged:
    return ConcurrencyChanged(
        key="anthropic/claude-x",
        reason=reason,
        cap=cap,
        previous_cap=previous,
        effective=cap,
        epoch=1,
        retry_after_s=1.0,
        at=0.0,
    )


def test_plain_lines_for_the_relay() -> None:
    out = io.StringIO()
    view = PlainProgress(out, HandFed())
    view.handle(
        RateLimited(model="claude-x", role="subagent", retry_after_s=1.0, outcome="absorbed")
    )
    view.handle(_change(32, 3))
    view.handle(_change(3, 3, "retry_after"))  # a pause: the limit did not change
    view.handle(
        Finished(status="completed", result="r", session_id=None, resumes=0, relay=_summary())
    )
    lines = [line.split("] ", 1)[1] for line in out.getvalue().splitlines()]
    assert lines == [
        "API 429 for claude-x (subagent, retry after 1 s): absorbed by the relay",
        "governor: anthropic/claude-x limit 32 -> 3 (rate_limited)",
        "finished: completed after 0 resume(s), $0.0000; relay: 27 request(s); 429s 21 "
        "absorbed, 1 passed on; requests allowed in flight per model, as learnt: "
        "anthropic/claude-x 3",
    ]


def test_the_last_line_tells_529s_held_by_the_relay_from_those_passed_on() -> None:
    out = io.StringIO()
    summary = RelaySummary(
        requests=6,
        absorbed=5,  # 1 429 and 4 529s held
        passed=2,  # 1 429 and 1 529 past the hold
        overloaded=5,
        overloaded_held=4,
        buckets=[BucketSummary(key="anthropic/claude-x", limit=3, requests=6, rate_limited=2)],
    )
    PlainProgress(out, HandFed()).handle(
        Finished(status="completed", result="r", session_id=None, resumes=0, relay=summary)
    )
    assert (
        "relay: 6 request(s); 429s 1 absorbed, 1 passed on; 4 overloaded (529) held by the "
        "relay; 1 overloaded (529) passed on;"
    ) in out.getvalue()


def test_live_view_has_a_governor_line() -> None:
    from rich.console import Console

    view = LiveTeamView(Console(file=io.StringIO(), width=120), HandFed())
    try:
        assert view.governor_line() is None
        view.handle(_change(32, 3))
        view.handle(RateLimited(model="claude-x", role="subagent", outcome="absorbed"))
        view.handle(RateLimited(model="claude-x", role="lead", outcome="passed"))
        assert view.governor_line() == (
            "governor: anthropic/claude-x limit 3 · 429s absorbed 1, passed on 1"
        )
        view.handle(RateLimited(model="claude-x", role="lead", status=529, outcome="passed"))
        assert view.governor_line() == (  # a 529 is an overload, never counted as a 429
            "governor: anthropic/claude-x limit 3 · 429s absorbed 1, passed on 1 · "
            "overloaded 1: held 0, passed on 1"
        )
        for status in (529, 503, 502):  # held through an overload (502: a dropped connection)
            view.handle(
                RateLimited(model="claude-x", role="subagent", status=status, outcome="absorbed")
            )
        assert view.governor_line() == (
            "governor: anthropic/claude-x limit 3 · 429s absorbed 1, passed on 1 · "
            "overloaded 4: held 3, passed on 1"
        )
    finally:
        view.close()


def test_finished_without_relay_still_reads() -> None:
    old = (
        '{"type": "finished", "version": 1, "status": "completed", "result": "r", '
        '"session_id": null, "resumes": 0}'
    )
    assert Finished.model_validate_json(old).relay is None
    again = Finished(status="completed", result="r", session_id=None, resumes=0, relay=_summary())
    assert Finished.model_validate_json(again.to_json()) == again


async def test_experiment_trials_share_one_relay_and_count_each_429_once(tmp_path: Path) -> None:
    from teamlead.experiment.running.runner import run_experiment
    from teamlead.experiment.specs.spec import parse_spec

    spec = parse_spec(
        "\n".join(
            [
                "[experiment]",
                'name = "relay"',
                "trials = 2",
                "concurrency = 4",
                'control = "a"',
                "[[variants]]",
                'name = "a"',
                'strategy = "baseline"',
                "[[variants]]",
                'name = "b"',
                'strategy = "baseline"',
                "[[tasks]]",
                'id = "t"',
                'prompt = "Question."',
            ]
        )
    )
    seen: list[ClaudeAgentOptions] = []
    with ScriptedServer(_limited_once()) as server:
        base = ClaudeAgentOptions(env={"ANTHROPIC_BASE_URL": server.base_url})
        progress: list[Any] = []
        summary = await run_experiment(
            spec,
            tmp_path,
            base_options=base,
            query_fn=_posting_query(seen),
            on_progress=progress.append,
        )
        statuses = [r.status for r in server.recorded()]
    assert summary.ran == 4 and summary.failed == 0
    # every trial's requests went through the one relay (trials are not gated by it)
    relays = {o.env["ANTHROPIC_BASE_URL"].rsplit("/run-", 1)[0] for o in seen}
    assert len(seen) == 4 and len(relays) == 1 and server.base_url not in relays
    # the one 429 was absorbed by the relay and counted once, not per trial
    assert statuses.count(429) == 1 and summary.rate_limited == 1
    # the governor's cut reached the progress view once, though every trial's run heard it
    assert [c.reason for c in progress[-1].changes].count("rate_limited") == 1


class _Recording(ProcessAccount):
    """This process's account, telling each write of a rule's result (key, cap, epoch)."""

    def __init__(self) -> None:
        super().__init__()
        self.kept: list[tuple[str, int, int]] = []

    def _keep(self, key: str, limits: Limits) -> None:
        super()._keep(key, limits)
        self.kept.append((key, limits.cap, limits.epoch))


@pytest.mark.parametrize("shared", ["machine", "process"])
async def test_a_process_states_account_serves_every_limits_value_but_redis(shared: str) -> None:
    account = _Recording()
    process = teamlead.ProcessState(account=account, registry=False, history=False)
    policy = teamlead.Policy(limits=LimitsPolicy(shared=shared))
    with ScriptedServer(_limited_once()) as server:
        options = ClaudeAgentOptions(env={"ANTHROPIC_BASE_URL": server.base_url})
        items = [
            i
            async for i in teamlead.run(
                "q", options, query_fn=_posting_query([]), policy=policy, process=process
            )
        ]
    assert isinstance(items[-1], Finished) and items[-1].status == "completed"
    # the relay's governor learnt in the state's account, under the upstream's account name
    bucket = f"{account_of(server.base_url, options.env)}/anthropic/claude-unit"
    assert {key for key, _, _ in account.kept} == {bucket}
    assert account.kept[0] == (bucket, 1, 1)  # the 429's cut: one in flight, epoch 1


async def test_a_pause_past_the_runs_deadline_reaches_the_cli_at_once() -> None:
    # the relay knows the run's deadline: a 60 s pause for a 20 s run is not held
    statuses: list[int] = []
    query_fn = _posting_once(statuses)
    with ScriptedServer(lambda req: Reply.error(429, retry_after=60)) as server:
        options = ClaudeAgentOptions(env={"ANTHROPIC_BASE_URL": server.base_url})
        policy = teamlead.Policy(deadline_s=20)
        items = [i async for i in teamlead.run("q", options, query_fn=query_fn, policy=policy)]
        recorded = server.recorded()
    assert statuses == [429]
    assert len(recorded) == 1
    limited = [i for i in items if isinstance(i, RateLimited)]
    assert [(e.outcome, e.retry_after_s) for e in limited] == [("passed", 60.0)]


async def test_a_run_on_an_upstream_that_refuses_ends_before_its_cli_starts() -> None:
    """The library's entry point says a wrong ``ANTHROPIC_BASE_URL`` as the CLI does: a
    ``SetupError`` naming it, the cause and the fix, raised before the run's CLI (here
    its ``query_fn``) is started at all."""
    started: list[Any] = []

    async def query_fn(**kwargs: Any) -> AsyncIterator[Any]:
        started.append(kwargs)
        yield ResultMessage(
            subtype="success", duration_ms=1, duration_api_ms=1, is_error=False,
            num_turns=1, session_id="s", result="never",
        )  # fmt: skip

    with socket.socket() as dead:  # bound, never listening: connections are refused
        dead.bind(("127.0.0.1", 0))
        port = dead.getsockname()[1]
        options = ClaudeAgentOptions(env={"ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}"})
        with pytest.raises(teamlead.SetupError) as caught:
            async for _ in teamlead.run("x", options, query_fn=query_fn):
                pass
    assert started == []
    assert str(caught.value) == (
        f"cannot connect to ANTHROPIC_BASE_URL http://127.0.0.1:{port}: connection refused; "
        "set ANTHROPIC_BASE_URL to your API's address, or unset it for the Anthropic API"
    )


@pytest.mark.parametrize(("spent_s", "held"), [(0.0, True), (75.0, False)])
async def test_the_relays_deadline_and_holds_run_on_the_runs_clock(
    spent_s: float, held: bool
) -> None:
    """A run on a FakeClock with 100 s to go: its relay holds a 429 whose 30 s Retry-After
    fits in the time left on that clock, spending virtual time, not real; once the test
    moved the clock 75 s on, the same 429 no longer fits, and reaches the CLI at once."""
    clock = FakeClock()
    seen: list[int] = []
    query_fn = _posting_once(seen, before=lambda: clock.advance(spent_s))
    replies = iter([Reply.error(429, retry_after=30)])
    with ScriptedServer(lambda req: next(replies, Reply.text("ok"))) as server:
        options = ClaudeAgentOptions(env={"ANTHROPIC_BASE_URL": server.base_url})
        limits = LimitsPolicy(shared="process")  # one timer: no shared store polled
        policy = teamlead.Policy(deadline_s=100, limits=limits)
        run = teamlead.run("q", options, query_fn=query_fn, policy=policy, clock=clock)
        items = [i async for i in run]
        recorded = server.recorded()
    assert seen == ([200] if held else [429])
    assert [r.status for r in recorded] == ([429, 200] if held else [429])
    limited = [i for i in items if isinstance(i, RateLimited)]
    assert [(e.outcome, e.retry_after_s) for e in limited] == [
        ("absorbed" if held else "passed", 30.0)
    ]
    assert clock.sleeps == ([30.0] if held else [])
    assert isinstance(items[-1], Finished) and items[-1].status == "completed"
