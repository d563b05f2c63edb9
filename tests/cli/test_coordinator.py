"""The coordinator on the real CLI, driven by the scripted model."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator
from typing import Any

import anyio
import psutil
import pytest
from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKClient, ResultMessage
from claude_agent_sdk import query as sdk_query

import teamlead
from teamlead._claude.inbox import read_inbox
from teamlead.events import (
    FallbackUsed,
    Finished,
    InboxCollected,
    ResumeFailed,
    Resuming,
    WaitingForTeam,
)
from teamlead.policy import Policy, RetryPolicy
from teamlead.testing import AgentCall, Reply, ScriptedRequest, ToolUse
from teamlead.testing.scripts import FanOut, finding_text, findings_in, synthesize
from teamlead.testing.teammate import create_team, idle_notification, post_to_inbox, team_inbox

from .conftest import OfflineFactory, cli_processes

pytestmark = [pytest.mark.anyio, pytest.mark.cli]


async def _run(
    prompt: str, options: ClaudeAgentOptions, **kwargs: Any
) -> tuple[list[Any], Finished]:
    items = [item async for item in teamlead.run(prompt, options, **kwargs)]
    assert isinstance(items[-1], Finished)
    assert sum(isinstance(i, Finished) for i in items) == 1
    return items, items[-1]


async def test_fan_out_absorbed_by_the_cli_needs_no_resume(offline: OfflineFactory) -> None:
    server, claude = offline(FanOut.of(3, delays=[0.6, 0.2, 0.4]))
    items, done = await _run("Investigate three parts.", claude.options())
    results = [i for i in items if isinstance(i, ResultMessage)]
    assert done.status == "completed"
    assert done.resumes == 0 and not any(isinstance(i, Resuming) for i in items)
    assert done.result == results[-1].result  # the last successful lead result
    assert findings_in(done.result or "") == ["agent-2", "agent-3", "agent-1"]
    assert [t.disposition for t in done.tasks] == ["included"] * 3
    assert {t.source for t in done.tasks} == {"lead"}
    assert done.reasons == []
    # fan-out, ack, and the CLI's injected turns (under load it folds all three notifications
    # into one turn, so 3 requests is as valid as one per notification)
    lead = server.recorded("lead")
    assert 3 <= len(lead) <= 5
    assert not any("<teamlead-results" in r.request.last_user_text for r in lead)


async def test_every_synthesis_turn_failing_529_is_resumed_with_the_findings(
    offline: OfflineFactory,
) -> None:
    script = FanOut.of(3, delays=[0.2, 0.4, 0.6], synthesis_fault=Reply.error(529))
    server, claude = offline(script)
    items, done = await _run("Investigate three parts.", claude.options())
    assert done.status == "completed", done.reasons
    assert done.resumes == 1
    resuming = [i for i in items if isinstance(i, Resuming)]
    assert len(resuming) == 1 and len(resuming[0].deliveries) == 3
    assert sorted(findings_in(done.result or "")) == ["agent-1", "agent-2", "agent-3"]
    assert {t.source for t in done.tasks} == {"summary"}
    assert all(t.disposition == "included" for t in done.tasks)
    resume_request = server.recorded("lead")[-1].request
    assert resume_request.session_id == done.session_id  # resume kept the session
    assert "<teamlead-results" in resume_request.last_user_text
    for n in (1, 2, 3):
        assert finding_text(f"agent-{n}") in resume_request.last_user_text
    # exactly once: nothing is delivered again after the successful resume
    assert sum(isinstance(i, FallbackUsed) for i in items) == 3


async def test_external_teammate_reporting_after_the_stream_ended(offline: OfflineFactory) -> None:
    holder: dict[str, Any] = {}
    fan = FanOut.of(1, delays=0.2)

    def script(req: ScriptedRequest) -> Reply:
        if req.role == "lead" and not req.tool_uses_sent and "team" not in holder:
            holder["team"] = create_team(
                claude.config_dir, req.session_id or "", members=["researcher"]
            )
        return fan(req)

    def teammate() -> None:
        inbox = team_inbox(claude.config_dir, holder["team"])
        post_to_inbox(
            inbox,
            idle_notification(
                "researcher",
                result="FINDING[researcher]: the API is rate limited at 50 rpm.",
                summary="rate limits",
            ),
        )

    server, claude = offline(script)
    items: list[Any] = []
    reporter = threading.Thread(target=teammate, daemon=True)
    async for item in teamlead.run("Ask the team.", claude.options(), policy=Policy(wait_s=20)):
        items.append(item)
        if isinstance(item, WaitingForTeam) and not reporter.is_alive():
            # the lead's stream has ended and the coordinator waits: the teammate reports now
            reporter.start()
    reporter.join(timeout=10)
    done = items[-1]
    assert isinstance(done, Finished)
    waiting = [i for i in items if isinstance(i, WaitingForTeam)]
    collected = [i for i in items if isinstance(i, InboxCollected)]
    assert waiting and waiting[0].pending_members == ["researcher"]
    assert collected and collected[0].messages[0]["from"] == "researcher"
    assert done.status == "completed", done.reasons
    assert done.resumes == 1
    assert "FINDING[researcher]" in (done.result or "") and "FINDING[agent-1]" in (
        done.result or ""
    )
    teammate_row = next(t for t in done.tasks if t.kind == "teammate")
    assert (teammate_row.id, teammate_row.disposition, teammate_row.source) == (
        "researcher",
        "included",
        "inbox",
    )
    # consumed: the delivered entry is gone, the inbox file and config stay
    inbox = team_inbox(claude.config_dir, holder["team"])
    assert read_inbox(inbox).messages == ()
    assert (inbox.parent.parent / "config.json").exists()
    assert not inbox.with_name(inbox.name + ".lock").exists()


async def test_client_helper_keeps_receiving_past_the_first_result(offline: OfflineFactory) -> None:
    server, claude = offline(FanOut.of(2, delays=[1.5, 0.8]))
    async with ClaudeSDKClient(options=claude.options()) as client:
        await client.query("Investigate both parts.")
        items = [item async for item in teamlead.receive_all(client, policy=Policy(wait_s=1))]
    done = items[-1]
    assert isinstance(done, Finished)
    results = [i for i in items if isinstance(i, ResultMessage)]
    assert len(results) == 3  # receive_response() would have stopped after the first
    assert done.status == "completed" and done.resumes == 0
    assert sorted(findings_in(done.result or "")) == ["agent-1", "agent-2"]


async def test_client_helper_resumes_on_the_same_client_after_a_failed_synthesis(
    offline: OfflineFactory,
) -> None:
    server, claude = offline(FanOut.of(2, delays=[0.3, 0.6], synthesis_fault=Reply.error(529)))
    async with ClaudeSDKClient(options=claude.options()) as client:
        await client.query("Investigate both parts.")
        items = [item async for item in teamlead.receive_all(client, policy=Policy(wait_s=1))]
    done = items[-1]
    assert isinstance(done, Finished)
    assert done.status == "completed", done.reasons
    assert done.resumes == 1
    assert sorted(findings_in(done.result or "")) == ["agent-1", "agent-2"]


def _partial_then_hang(req: ScriptedRequest) -> Reply:
    if req.role == "subagent":
        assert req.agent is not None
        if req.assistant_turns == 0:  # first step: some progress, then a tool call
            return Reply.tools(
                ToolUse("Bash", {"command": "echo step", "description": "progress"}),
                text=f"FINDING[{req.agent.description}-partial]: half of the answer so far.",
            )
        return Reply.text("never arrives", delay=60)
    if req.role == "other":
        return Reply.text("side")
    if not req.tool_uses_sent:
        return Reply.agents(
            AgentCall("slow-1", "SLOW-1: dig deep."), AgentCall("slow-2", "SLOW-2: dig deeper.")
        )
    if "<teamlead-results" in req.last_user_text:
        return synthesize(req)
    return Reply.text("Agents are working.")


async def test_agents_killed_mid_run_fall_back_to_transcripts_and_end_partial(
    offline: OfflineFactory,
) -> None:
    killed: list[str] = []
    progressed: set[str] = set()  # agents whose partial answer the CLI has recorded
    stop = threading.Event()
    reader: dict[str, Any] = {}  # the first run's read scope, and the loop to cancel it on

    def script(req: ScriptedRequest) -> Reply:
        if req.role == "subagent" and req.agent is not None and req.assistant_turns >= 1:
            progressed.add(req.agent.description)  # it asks again: its first step is written
            if len(progressed) == 2 and not stop.is_set():
                stop.set()
                anyio.from_thread.run_sync(lambda: reader["scope"].cancel(), token=reader["loop"])
                # the crash itself: the CLI tree gets its SIGTERM now, where the cancelled
                # stream's close would first wait the SDK's 5 s grace for a CLI whose agents
                # still run (a closed stdin alone does not end it)
                for proc in cli_processes(claude.state_dir):
                    with contextlib.suppress(psutil.Error):
                        proc.terminate()
        return _partial_then_hang(req)

    async def killing_query(**kwargs: Any) -> AsyncIterator[Any]:
        """Stop the CLI (and so its agents) once both agents made progress, as a crash would."""
        agen = sdk_query(**kwargs)
        first_run = kwargs["options"].resume is None
        reader["loop"] = anyio.lowlevel.current_token()
        try:
            while True:
                with anyio.CancelScope() as scope:
                    reader["scope"] = scope
                    if first_run and stop.is_set():
                        scope.cancel()
                    try:
                        message = await agen.__anext__()
                    except StopAsyncIteration:
                        return
                if scope.cancelled_caught:
                    killed.append("first run")
                    return
                yield message  # outside the cancel scope
        finally:
            await agen.aclose()

    server, claude = offline(script)
    items, done = await _run(
        "Dig.", claude.options(), query_fn=killing_query, policy=Policy(wait_s=1)
    )
    assert killed == ["first run"]
    fallbacks = [i for i in items if isinstance(i, FallbackUsed)]
    assert sorted(f.source for f in fallbacks) == ["transcript", "transcript"]
    assert done.status == "partial"
    assert done.resumes == 1
    assert sorted(findings_in(done.result or "")) == ["slow-1-partial", "slow-2-partial"]
    assert {t.disposition for t in done.tasks} == {"failed"}
    # the resumed CLI reports the agents it lost as stopped
    assert {t.status for t in done.tasks} == {"stopped"}
    assert any("slow-1" in r for r in done.reasons)


async def test_resume_itself_failing_ends_failed_with_reasons(offline: OfflineFactory) -> None:
    script = FanOut.of(2, delays=0.2, synthesis_fault=Reply.error(529), fail_resumes=True)
    server, claude = offline(script)
    policy = Policy(resume_retry=RetryPolicy(attempts=2, base_s=0.2))
    items, done = await _run("Investigate.", claude.options(), policy=policy)
    failures = [i for i in items if isinstance(i, ResumeFailed)]
    assert [f.attempt for f in failures] == [1, 2]
    assert failures[0].transient and failures[0].retry_in_s == 0.2
    assert failures[1].retry_in_s is None
    assert done.status == "failed"
    assert done.session_id and any(done.session_id in r for r in done.reasons)
    assert any("resume round 1 failed after 2 attempt(s)" in r and "529" in r for r in done.reasons)


async def test_client_helper_waits_for_idle_when_the_cli_retries_queued_turns(
    tmp_path: Any,
) -> None:
    """The CLI retries failing synthesis turns while later notifications queue up.

    The first error result comes with no task running, but queued turns (and a zero-turn
    placeholder result) follow; only the session's "idle" says the CLI is done. Resuming
    before it would take the placeholder for the answer.
    """
    from teamlead.testing import OfflineClaude, ScriptedServer

    script = FanOut.of(3, delays=[0.3, 0.35, 0.4], synthesis_fault=Reply.error(529))
    policy = Policy(wait_s=1)
    with ScriptedServer(script) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s", max_retries=2)
        options = teamlead.prepare_options(claude.options(), policy, client=True)
        async with ClaudeSDKClient(options=options) as client:
            await client.query("Investigate three parts.")
            items = [item async for item in teamlead.receive_all(client, policy=policy)]
    done = items[-1]
    assert isinstance(done, Finished)
    assert done.status == "completed", done.reasons
    assert sorted(findings_in(done.result or "")) == ["agent-1", "agent-2", "agent-3"]
    assert done.resumes == 1


async def test_a_resume_retry_waits_at_least_the_apis_retry_after(offline: OfflineFactory) -> None:
    """A 529 with ``retry-after`` on a resumed lead turn: the relay passes it to the CLI,
    the round's outcome carries the wait, and the retry sleeps at least that long (on the
    injected clock). The backoff is set ten times shorter than the ``retry-after``, so only
    the API's value can explain the wait; the relay itself pauses that long in real time
    before it forwards the next request, so the value is kept small."""
    from teamlead.testing import FakeClock

    script = FanOut.of(
        1, synthesis_fault=Reply.error(529, retry_after=1), synthesis_faults=2, fail_resumes=True
    )
    server, claude = offline(script)
    clock = FakeClock()
    policy = Policy(wait_s=1, resume_retry=RetryPolicy(base_s=0.1))
    items, done = await _run("Investigate one part.", claude.options(), policy=policy, clock=clock)
    failed = [i for i in items if isinstance(i, ResumeFailed)]
    assert [(f.round, f.attempt, f.transient) for f in failed] == [(1, 1, True)]
    assert failed[0].retry_in_s == 1.0  # the backoff alone would be 0.1 s
    assert 1.0 in clock.sleeps and 0.1 not in clock.sleeps
    assert done.status == "completed", done.reasons
    assert findings_in(done.result or "") == ["agent-1"]
    assert done.relay is not None and done.relay.overloaded >= 2
