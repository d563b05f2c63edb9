"""Progress output: the live team view, plain lines and NDJSON, fed from a recorded trace."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from teamlead._cli import team_view
from teamlead._cli.team_view import LiveTeamView, PlainProgress
from teamlead._ndjson import JsonProgress
from teamlead.events import (
    EVENT_VERSION,
    AgentUsage,
    Finished,
    InboxCollected,
    RateLimited,
    Resuming,
    SpawnDecided,
    WaitingForTeam,
)

from .parsing import HandFed

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
    view = LiveTeamView(Console(file=out, force_terminal=True, width=120), HandFed())
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
    view = LiveTeamView(Console(file=out, force_terminal=True, width=140), HandFed())
    for item in [json.loads(line) for line in TRACE.read_text().splitlines() if line.strip()]:
        view.handle(item)
    agent = next(iter(view.run.tracker.tasks))
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


def test_live_view_draws_a_frame_while_the_run_adds_agents(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The view's refresh thread draws while the run's loop goes on: an agent, queued
    call or teammate that comes mid-frame waits for the next one, never breaks this one."""
    view = LiveTeamView(Console(file=io.StringIO(), force_terminal=True, width=140), HandFed())
    for item in _items():
        view.handle(item)
    view.queued["t"] = "waiting"
    tasks = view.run.tracker.tasks
    safe = team_view.terminal_safe

    def meanwhile(text: str, **kwargs: Any) -> str:  # the run's thread, between two rows
        if text == "probe A":  # a row of each kind is being drawn
            tasks["late"] = dataclasses.replace(tasks[next(iter(tasks))], task_id="late")
        elif text == "waiting":
            view.queued["t2"] = "also waiting"
        elif text == "reviewer":
            view.teammates["late-mate"] = "pending"
        return safe(text, **kwargs)

    monkeypatch.setattr(team_view, "terminal_safe", meanwhile)
    try:
        frame = view.__rich__()
    finally:
        view.close()
    screen = io.StringIO()
    Console(file=screen, width=140).print(frame)
    assert "probe A" in screen.getvalue() and "reviewer" in screen.getvalue()


def test_plain_progress_is_one_line_per_event() -> None:
    out = io.StringIO()
    progress = PlainProgress(out, HandFed())
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
    progress = JsonProgress(out, HandFed())
    for item in _items():
        progress.handle(item)
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert all(r["version"] == EVENT_VERSION == 6 and isinstance(r["type"], str) for r in records)
    types = [r["type"] for r in records]
    assert types.count("session") == 1 and types.count("task_started") == 2
    assert types[-1] == "finished"


def _json_records(items: list[Any]) -> list[dict[str, Any]]:
    out = io.StringIO()
    progress = JsonProgress(out, HandFed())
    for item in items:
        progress.handle(item)
    progress.close()
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_an_event_holding_half_a_surrogate_pair_is_a_line_a_utf8_stream_can_write() -> None:
    # half a pair, as a cut made in JavaScript leaves it: JSON escapes it, Python reads it
    # back as a code point, and `ask --json` ended in a UnicodeEncodeError writing it raw
    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="utf-8", write_through=True)
    progress = JsonProgress(out, HandFed())
    progress.handle(WaitingForTeam(session_id="s-\ud800", open_tasks=["t\udc00"], wait_s=1.0))
    progress.close()
    (record,) = [json.loads(line) for line in raw.getvalue().decode("utf-8").splitlines()]
    assert (record["session_id"], record["open_tasks"]) == ("s-\ud800", ["t\udc00"])


def test_a_request_held_through_an_overload_is_a_line_of_the_ndjson() -> None:
    held = RateLimited(model="claude-x", role="subagent", status=529, outcome="absorbed")
    (record,) = _json_records([held])
    assert record["type"] == "rate_limited" and record["version"] == EVENT_VERSION
    assert (record["status"], record["outcome"], record["role"]) == (529, "absorbed", "subagent")


def test_json_reports_one_task_ended_per_task_with_both_reports_merged() -> None:
    records = _json_records(_items())
    ended = [r for r in records if r["type"] == "task_ended"]
    assert sorted(r["task_id"] for r in ended) == ["a2cb4083eee649555", "ac8d9a5d9dba98ead"]
    for record in ended:  # task_updated ended it; the notification's summary is merged in
        assert record["source"] == "task_updated" and record["status"] == "completed"
        assert record["summary"].startswith("finding for SUBTASK-")
        assert record["usage"]["total_tokens"] == 15 and record["tool_use_id"]


def test_json_reports_one_lead_turn_per_api_message_with_its_agent_calls() -> None:
    records = _json_records(_items())
    turns = [r for r in records if r["type"] == "lead_turn"]
    ids = [r["message_id"] for r in turns]
    assert ids == ["msg_17", "msg_18", "msg_21", "msg_22"]
    first = turns[0]
    assert first["tool_names"] == ["Agent", "Agent"]
    assert first["agent_calls"] == ["toolu_A", "toolu_B"]
    calls = [r for r in records if r["type"] == "agent_call"]
    assert all(c["message_id"] == "msg_17" for c in calls)
    assert records.index(first) > max(records.index(c) for c in calls)  # written once complete
    assert records[-1]["type"] == "finished"


def test_a_spawn_event_mid_message_does_not_split_the_lead_turn() -> None:
    items = _items()
    first_call = next(
        i
        for i, item in enumerate(items)
        if isinstance(item, dict) and "toolu_A" in json.dumps(item)
    )
    admitted = SpawnDecided(
        outcome="admitted",
        tool_use_id="toolu_A",
        description="probe A",
        waited_s=0.0,
        running=1,
        limit=3,
    )
    records = _json_records([*items[: first_call + 1], admitted, *items[first_call + 1 :]])
    turns = [r for r in records if r["type"] == "lead_turn" and r["message_id"] == "msg_17"]
    assert len(turns) == 1 and turns[0]["agent_calls"] == ["toolu_A", "toolu_B"]


def test_a_task_ended_with_no_notification_is_written_at_the_next_lead_message() -> None:
    updated = {
        "type": "system",
        "subtype": "task_updated",
        "task_id": "t9",
        "patch": {"status": "killed"},
        "session_id": "s",
    }
    lead = {
        "type": "assistant",
        "message": {"id": "m9", "content": [{"type": "text", "text": "next"}]},
        "parent_tool_use_id": None,
        "session_id": "s",
    }
    records = _json_records([updated, lead])
    assert [r["type"] for r in records] == ["session", "task_ended", "lead_turn"]
    assert records[1]["status"] == "killed" and records[1]["source"] == "task_updated"


def test_a_lead_turns_line_names_every_file_its_message_read() -> None:
    def block(kind: str, **fields: Any) -> dict[str, Any]:
        content = [{"type": kind, **fields}]
        return {"type": "assistant", "message": {"id": "msg_r", "content": content}}

    records = _json_records(
        [
            block("text", text="Reading both halves"),
            block("tool_use", name="Read", id="toolu_1", input={"file_path": "/runs/result-a.txt"}),
            block("tool_use", name="Read", id="toolu_2", input={"file_path": "/runs/result-b.txt"}),
        ]
    )
    (turn,) = [r for r in records if r["type"] == "lead_turn"]
    assert turn["read_paths"] == ["/runs/result-a.txt", "/runs/result-b.txt"]
    assert turn["tool_names"] == ["Read", "Read"]
