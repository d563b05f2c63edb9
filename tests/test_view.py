"""Progress output: the live team view, plain lines and NDJSON, fed from a recorded trace."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from rich.console import Console

from teamlead.events import (
    EVENT_VERSION,
    AgentUsage,
    Finished,
    InboxCollected,
    Resuming,
    WaitingForTeam,
)
from teamlead.view import JsonProgress, LiveTeamView, PlainProgress

TRACE = Path(__file__).parent / "fixtures" / "traces" / "parallel-agents.query.jsonl"


def _items() -> list[Any]:
    items: list[Any] = [json.loads(line) for line in TRACE.read_text().splitlines() if line.strip()]
    items += [
        WaitingForTeam(session_id="s", pending_members=["reviewer"], team="t", wait_s=5),
        InboxCollected(team="t", messages=[{"from": "reviewer", "kind": "idle"}]),
        Resuming(session_id="s", round=1, deliveries=["inbox:k"]),
        Finished(status="completed", result="answer", session_id="s", resumes=1),
    ]
    return items


def test_live_view_shows_a_row_per_agent_and_teammate() -> None:
    out = io.StringIO()
    view = LiveTeamView(Console(file=out, force_terminal=True, width=120))
    for item in _items():
        view.handle(item)
    view.close()
    screen = out.getvalue()
    for text in (
        "probe A",
        "probe B",
        "completed",
        "reviewer",
        "lead: completed",
        "resuming session s",
    ):
        assert text in screen


def test_live_view_shows_each_agents_tokens_and_a_workflows_agents() -> None:
    workflow = TRACE.parent / "workflows" / "basic.jsonl"
    out = io.StringIO()
    view = LiveTeamView(Console(file=out, force_terminal=True, width=140))
    for item in [json.loads(line) for line in TRACE.read_text().splitlines() if line.strip()]:
        view.handle(item)
    agent = next(iter(view.tracker.tasks))
    usage = AgentUsage(
        agent_id=agent, kind="agent", requests=2, input_tokens=1234, output_tokens=56
    )
    view.handle(usage)
    for line in workflow.read_text().splitlines():
        record = json.loads(line)
        if "_driver_event" not in record:
            view.handle(record)
    view.close()
    screen = out.getvalue()
    assert "1234/56" in screen  # the relay's count, not the CLI's estimate
    assert "wf agent" in screen and "scan:a" in screen and "done" in screen


def test_plain_progress_is_one_line_per_event() -> None:
    out = io.StringIO()
    progress = PlainProgress(out)
    for item in _items():
        progress.handle(item)
    lines = out.getvalue().splitlines()
    assert any("task started: probe A" in line for line in lines)
    assert any("task completed: probe B" in line for line in lines)
    assert any("Agent call 2 of its message" in line for line in lines)
    assert any("waiting up to 5 s for reviewer" in line for line in lines)
    assert lines[-1].endswith("finished: completed after 1 resume(s), $0.0000")


def test_json_progress_lines_are_versioned_and_typed() -> None:
    out = io.StringIO()
    progress = JsonProgress(out)
    for item in _items():
        progress.handle(item)
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert all(r["version"] == EVENT_VERSION and isinstance(r["type"], str) for r in records)
    types = [r["type"] for r in records]
    assert types.count("session") == 1 and types.count("task_started") == 2
    assert types[-1] == "finished"
