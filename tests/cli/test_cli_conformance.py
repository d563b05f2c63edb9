"""The real bundled Claude Code CLI, offline, against the scripted model server."""

from __future__ import annotations

from typing import Any

import pytest
from claude_agent_sdk import ClaudeSDKClient, ResultMessage, query

from teamlead.testing import OfflineClaude
from teamlead.testing.scripts import FanOut, finding_text
from teamlead.tracker import LeadTurn, TaskEnded, TaskStarted, Tracker

from .conftest import OfflineFactory

pytestmark = [pytest.mark.anyio, pytest.mark.cli]


async def test_query_fan_out_of_two_agents_in_one_message(offline: OfflineFactory) -> None:
    server, claude = offline(FanOut.of(2, delays=[1.0, 0.3]))
    tracker = Tracker()
    order: list[Any] = []
    async for message in query(prompt="Investigate both parts.", options=claude.options()):
        order.extend(tracker.feed(message))

    started = [e for e in order if isinstance(e, TaskStarted)]
    ended = [e for e in order if isinstance(e, TaskEnded) and e.source == "task_notification"]
    assert len(started) == 2
    assert len(ended) == 2
    assert sorted(e.summary or "" for e in ended) == [
        finding_text("agent-1"),
        finding_text("agent-2"),
    ]
    assert tracker.max_parallel_agent_calls == 2
    # after each notification the CLI injects a lead turn
    for end in ended:
        later = order[order.index(end) + 1 :]
        assert any(isinstance(e, LeadTurn) and e.error is None and e.text for e in later)
    assert len(tracker.results) == 3
    assert tracker.unabsorbed_tasks == [] and tracker.open_tasks == []
    # both subagents were streaming at the same time
    assert len(server.recorded("subagent")) == 2
    assert server.max_concurrent("subagent") == 2
    assert all(r.request.session_id == tracker.session_id for r in server.recorded("lead"))


async def test_client_receive_response_returns_before_agents_finish(
    offline: OfflineFactory,
) -> None:
    # the first result comes some 0.1 s after the agents start, and closing the client waits
    # for them to end: they run ten times that, not thirty
    server, claude = offline(FanOut.of(2, delays=[1.5, 1.0]))
    seen: list[Any] = []
    async with ClaudeSDKClient(options=claude.options()) as client:
        await client.query("Investigate both parts.")
        async for message in client.receive_response():
            seen.append(message)
        assert isinstance(seen[-1], ResultMessage)
        tracker = Tracker()
        for message in seen:
            tracker.feed(message)
        assert len(tracker.tasks) == 2
        assert len(tracker.open_tasks) == 2  # the first result came while both still ran
        subagents = server.recorded("subagent")
        assert subagents and all(r.finished is None for r in subagents)


def test_offline_env_isolates_state_and_refuses_remote_urls(tmp_path: Any) -> None:
    from teamlead.errors import SetupError

    claude = OfflineClaude("http://127.0.0.1:9", state_dir=tmp_path / "s")
    env = claude.options().env
    assert env["CLAUDE_CONFIG_DIR"].startswith(str(tmp_path))
    assert env["HOME"] == str(tmp_path / "s") and env["TMPDIR"].startswith(str(tmp_path))
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert env["DISABLE_AUTOUPDATER"] == env["DISABLE_TELEMETRY"] == "1"
    assert env["CLAUDE_CODE_MAX_RETRIES"] == "0"
    with pytest.raises(SetupError, match="loopback"):
        OfflineClaude("https://api.example.com")
    from claude_agent_sdk import ClaudeAgentOptions

    with pytest.raises(SetupError, match="loopback"):
        claude.options(ClaudeAgentOptions(env={"ANTHROPIC_BASE_URL": "http://10.1.2.3"}))
