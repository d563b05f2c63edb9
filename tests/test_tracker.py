"""The one parser and the tracker, over recorded traces and typed SDK messages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import AssistantMessage, ResultMessage, TextBlock, ToolUseBlock
from claude_agent_sdk.types import TaskNotificationMessage, TaskStartedMessage

from teamlead.tracker import (
    AgentCallSeen,
    LeadTurn,
    ResultSeen,
    SubagentToolUse,
    TaskEnded,
    TaskProgress,
    TaskStarted,
    Tracker,
    parse_message,
)

from .scripted_query import lead, notified

TRACES = Path(__file__).parent / "fixtures" / "traces"


def _lines(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (TRACES / name).read_text().splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("name", "session"),
    [
        ("parallel-agents.query.jsonl", "d6b404c3-7aec-40d7-9803-56ebb9cb00ba"),
        ("parallel-agents.client.jsonl", "8d641867-1608-44ad-9596-05825c0b7e79"),
    ],
)
def test_recorded_trace_parses_into_two_parallel_tasks_all_absorbed(
    name: str, session: str
) -> None:
    tracker = Tracker()
    for raw in _lines(name):
        tracker.feed(raw)
    assert tracker.session_id == session
    assert {t.description for t in tracker.tasks.values()} == {"probe A", "probe B"}
    assert all(t.status == "completed" and t.terminal for t in tracker.tasks.values())
    summaries = sorted(t.summary or "" for t in tracker.tasks.values())
    assert summaries == ["finding for SUBTASK-A: ok", "finding for SUBTASK-B: ok"]
    assert tracker.max_parallel_agent_calls == 2  # two Agent calls share message.id msg_17
    assert [c.tool_use_id for c in tracker.agent_calls.values()] == ["toolu_A", "toolu_B"]
    assert tracker.open_tasks == [] and tracker.unabsorbed_tasks == []
    assert len(tracker.results) == 3 and all(r.ok for r in tracker.results)
    assert tracker.last_success is not None and tracker.last_success.text


def test_trace_event_sequence_is_typed_and_skips_unknown_types() -> None:
    kinds: list[str] = []
    for raw in _lines("parallel-agents.client.jsonl"):
        kinds += [type(e).__name__ for e in parse_message(raw) if type(e).__name__ != "SessionSeen"]
    assert kinds.count("TaskStarted") == 2
    assert kinds.count("TaskEnded") == 4  # task_updated and task_notification for each
    assert kinds.count("AgentCallSeen") == 2
    assert kinds.count("ResultSeen") == 3
    assert parse_message({"type": "_marker", "note": "x"}) == []
    assert parse_message({"type": "brand_new_kind", "session_id": "s"})[0].session_id == "s"  # type: ignore[union-attr]
    assert parse_message("not a message") == []


def test_typed_sdk_objects_parse_like_raw_dicts() -> None:
    started = TaskStartedMessage(
        subtype="task_started",
        data={
            "type": "system",
            "subtype": "task_started",
            "task_id": "t1",
            "tool_use_id": "tu1",
            "description": "probe",
            "prompt": "do it",
            "session_id": "s1",
            "uuid": "u",
            "run_id": "r1",
        },
        task_id="t1",
        description="probe",
        uuid="u",
        session_id="s1",
        tool_use_id="tu1",
    )
    ended = TaskNotificationMessage(
        subtype="task_notification",
        data={
            "type": "system",
            "subtype": "task_notification",
            "task_id": "t1",
            "status": "failed",
            "summary": "boom",
            "output_file": "/x/t1.output",
            "session_id": "s1",
            "uuid": "u2",
            "usage": {"total_tokens": 42},
        },
        task_id="t1",
        status="failed",
        output_file="/x/t1.output",
        summary="boom",
        uuid="u2",
        session_id="s1",
    )
    assistant = AssistantMessage(
        content=[
            TextBlock("fanning out"),
            ToolUseBlock("tu1", "Agent", {"description": "probe", "prompt": "do it"}),
        ],
        model="m",
        message_id="msg_1",
    )
    result = ResultMessage(
        subtype="success",
        duration_ms=1,
        duration_api_ms=1,
        is_error=True,
        num_turns=1,
        session_id="s1",
        api_error_status=529,
        total_cost_usd=0.5,
        origin={"kind": "task-notification", "runId": "r1"},  # type: ignore[typeddict-item]
    )
    tracker = Tracker()
    assert isinstance(tracker.feed(assistant)[0], LeadTurn)
    assert isinstance(tracker.feed(assistant)[1], AgentCallSeen)
    assert isinstance(tracker.feed(started)[-1], TaskStarted)
    assert isinstance(tracker.feed(ended)[-1], TaskEnded)
    seen = tracker.feed(result)[-1]
    assert isinstance(seen, ResultSeen)
    assert (seen.api_error_status, seen.cost_usd, seen.origin_run_id) == (529, 0.5, "r1")
    task = tracker.tasks["t1"]
    assert (task.status, task.summary, task.output_file, task.tokens) == (
        "failed",
        "boom",
        "/x/t1.output",
        42,
    )
    assert not task.absorbed  # the only turn after it failed
    assert tracker.unabsorbed_tasks == [task]
    assert tracker.cost_usd == 0.5


def test_terminal_state_is_cleared_on_whichever_message_comes_first() -> None:
    tracker = Tracker()
    tracker.feed({"type": "system", "subtype": "task_started", "task_id": "t", "description": "d"})
    tracker.feed(
        {"type": "system", "subtype": "task_updated", "task_id": "t", "patch": {"status": "killed"}}
    )
    tracker.feed(
        {
            "type": "system",
            "subtype": "task_notification",
            "task_id": "t",
            "status": "completed",
            "summary": "late summary",
        }
    )
    assert tracker.tasks["t"].status == "killed"
    assert tracker.tasks["t"].summary == "late summary"


def test_successful_lead_turn_absorbs_only_earlier_results() -> None:
    tracker = Tracker()
    for task in ("a", "b"):
        tracker.feed(
            {"type": "system", "subtype": "task_started", "task_id": task, "description": task}
        )
    tracker.feed(
        {
            "type": "system",
            "subtype": "task_notification",
            "task_id": "a",
            "status": "completed",
            "summary": "done a",
        }
    )
    tracker.feed(
        {
            "type": "assistant",
            "message": {"id": "m", "content": [{"type": "text", "text": "ok"}]},
            "error": "server_error",
        }
    )
    assert tracker.unabsorbed_tasks[0].task_id == "a"  # an error turn absorbs nothing
    tracker.feed(
        {"type": "assistant", "message": {"id": "m2", "content": [{"type": "text", "text": "ok"}]}}
    )
    tracker.feed(
        {
            "type": "system",
            "subtype": "task_notification",
            "task_id": "b",
            "status": "completed",
            "summary": "done b",
        }
    )
    assert [t.task_id for t in tracker.unabsorbed_tasks] == ["b"]
    assert tracker.lead_texts == ["ok"]


def test_a_zero_turn_placeholder_for_a_folded_notification_absorbs_nothing() -> None:
    """The stream the real CLI sends when every task ends before the lead's next turn (seen
    under load): a zero-turn placeholder result per notification folded into the next turn,
    then that one turn, which fails. No result was used; all of them must be delivered."""
    tracker = Tracker()
    for task in ("a", "b", "c"):
        tracker.feed(
            {
                "type": "system",
                "subtype": "task_started",
                "task_id": task,
                "run_id": f"run-{task}",
                "description": task,
            }
        )
    for task in ("a", "b", "c"):
        tracker.feed(
            {
                "type": "system",
                "subtype": "task_notification",
                "task_id": task,
                "status": "completed",
                "summary": f"done {task}",
            }
        )

    def result(run: str, **extra: object) -> dict[str, object]:
        origin = {"kind": "task-notification", "producer": "session-task", "runId": run}
        return {"type": "result", "subtype": "success", "is_error": False, "num_turns": 0,
                "result": "", "session_id": "s", "origin": origin, **extra}  # fmt: skip

    tracker.feed(result("run-a"))
    tracker.feed(result("run-b"))
    assert [t.task_id for t in tracker.unabsorbed_tasks] == ["a", "b", "c"]
    tracker.feed(
        {
            "type": "assistant",
            "message": {"id": "m", "content": [{"type": "text", "text": "API Error: 529"}]},
            "error": "server_error",
        }
    )
    tracker.feed(result("run-c", is_error=True, num_turns=1, api_error_status=529))
    assert [t.task_id for t in tracker.unabsorbed_tasks] == ["a", "b", "c"]
    # a turn that ran and succeeded for a notification does absorb its task
    tracker.feed(result("run-a", num_turns=1, result="used a"))
    assert [t.task_id for t in tracker.unabsorbed_tasks] == ["b", "c"]


def test_completed_with_an_empty_summary_is_not_absorbed_by_a_lead_turn() -> None:
    """claude-code #86471: the lead was shown nothing, so the transcript must still reach it."""
    tracker = Tracker()
    tracker.feed({"type": "system", "subtype": "task_started", "task_id": "e", "description": "e"})
    tracker.feed(
        {
            "type": "system",
            "subtype": "task_notification",
            "task_id": "e",
            "status": "completed",
            "summary": " ",
        }
    )
    tracker.feed(
        {"type": "assistant", "message": {"id": "m", "content": [{"type": "text", "text": "ok"}]}}
    )
    assert [t.task_id for t in tracker.unabsorbed_tasks] == ["e"]


PARTIAL = "NOTE: this agent stopped at its 3-turn limit before finishing.\n\nworking on step 2"


def test_a_resumed_clis_report_of_an_agent_it_has_no_record_of_leaves_the_end_this_run_saw() -> (
    None
):
    tracker = Tracker()
    tracker.feed({"type": "system", "subtype": "task_started", "task_id": "t", "description": "d",
                  "tool_use_id": "tu-agent", "prompt": "AGENTJOB d"})  # fmt: skip
    tracker.feed(notified("t", summary="FINDING[d]"))
    first = tracker.tasks["t"].ended_seq
    # the wrap-up ended the CLI before the lead took the notification; the resumed CLI says
    orphan = 'Background agent "d" didn\'t finish before the previous session ended'
    tracker.feed(notified("t", status="stopped", summary=orphan))
    task = tracker.tasks["t"]
    assert (task.status, task.summary, task.ended_seq) == ("completed", "FINDING[d]", first)
    # an agent this run never saw end is stopped, as the CLI says
    tracker.feed({"type": "system", "subtype": "task_started", "task_id": "u", "description": "e",
                  "tool_use_id": "tu-other", "prompt": "AGENTJOB e"})  # fmt: skip
    tracker.feed(notified("u", status="stopped", summary=orphan.replace('"d"', '"e"')))
    assert tracker.tasks["u"].status == "stopped"


@pytest.mark.parametrize("restarted", [True, False], ids=["started-again", "notified-again"])
def test_a_task_that_notifies_again_is_a_new_end_the_lead_has_not_used(restarted: bool) -> None:
    tracker = Tracker()
    tracker.feed({"type": "system", "subtype": "task_started", "task_id": "t", "description": "d",
                  "tool_use_id": "tu-agent", "prompt": "AGENTJOB d"})  # fmt: skip
    tracker.feed(notified("t", summary=PARTIAL))
    tracker.feed(lead("noted", msg_id="m1"))
    first = tracker.tasks["t"].ended_seq
    assert tracker.tasks["t"].absorbed and first is not None
    if restarted:  # the lead's SendMessage continued it: the CLI starts the same task id
        again = {"type": "system", "subtype": "task_started", "task_id": "t", "description": "d",
                 "tool_use_id": "tu-send", "prompt": "continue"}  # fmt: skip
        tracker.feed(again)
        task = tracker.tasks["t"]
        assert (task.status, task.absorbed, task.summary, task.continued) == (
            "running",
            False,
            None,
            1,
        )
        assert (task.tool_use_id, task.prompt) == ("tu-agent", "AGENTJOB d")  # its own call
    tracker.feed(notified("t", summary="FINDING[d]: the real finding"))
    task = tracker.tasks["t"]
    assert task.terminal and not task.absorbed  # the latest notice supersedes the partial one
    assert task.summary == "FINDING[d]: the real finding"
    assert task.ended_seq is not None and task.ended_seq > first
    tracker.feed(lead("FINDING[d] used", msg_id="m2"))
    assert tracker.tasks["t"].absorbed


@pytest.mark.parametrize("cost", [float("nan"), float("inf"), -1.0, 10**400])
def test_a_cost_that_is_not_a_finite_amount_is_no_cost(cost: float) -> None:
    # json.loads reads NaN, Infinity and integers past any float (whose float() raised in
    # the parser, which must never raise): a NaN total would make every later total lose to
    # it (max) and the cost budget never be reached (NaN >= budget is false)
    tracker = Tracker()
    tracker.feed({"type": "result", "subtype": "success", "result": "a", "total_cost_usd": 0.5})
    tracker.feed({"type": "result", "subtype": "success", "result": "b", "total_cost_usd": cost})
    assert tracker.results[-1].cost_usd is None
    assert tracker.cost_usd == 0.5


def test_a_start_that_comes_after_its_tasks_end_is_no_continuation() -> None:
    # out of order: the notification first; the late start must not wipe the result
    tracker = Tracker()
    tracker.feed(notified("t", summary="FINDING[d]"))
    tracker.feed({"type": "system", "subtype": "task_started", "task_id": "t", "description": "d",
                  "tool_use_id": "tu-t", "prompt": "AGENTJOB d"})  # fmt: skip
    task = tracker.tasks["t"]
    assert (task.status, task.summary, task.continued) == ("completed", "FINDING[d]", 0)
    assert task.description == "d" and task.tool_use_id == "tu-t" and not tracker.open_tasks


def test_the_same_notification_repeated_is_one_end_the_lead_has_used() -> None:
    # a repeat of the notification the lead already used is no new end: delivering it
    # again would resume the lead with a result it has
    tracker = Tracker()
    tracker.feed({"type": "system", "subtype": "task_started", "task_id": "t", "description": "d",
                  "tool_use_id": "tu-t", "prompt": "AGENTJOB d"})  # fmt: skip
    tracker.feed(notified("t", summary="FINDING[d]"))
    tracker.feed(lead("FINDING[d] used", msg_id="m1"))
    first = tracker.tasks["t"].ended_seq
    tracker.feed(notified("t", summary="FINDING[d]"))
    task = tracker.tasks["t"]
    assert task.absorbed and task.ended_seq == first and not tracker.unabsorbed_tasks


def test_a_deeply_nested_tool_input_is_summarised_never_raised() -> None:
    # the SDK parsed the line on a shallow stack; summarising it deeper (as JSON) recursed
    # past the limit, and the parser must never raise
    nested: dict[str, Any] = {}
    for _ in range(5000):
        nested = {"a": nested}
    block = {"type": "tool_use", "id": "x", "name": "Bash", "input": nested}
    message = {"type": "assistant", "parent_tool_use_id": "p",
               "message": {"id": "m", "content": [block]}}  # fmt: skip
    events = parse_message(message)
    uses = [e for e in events if isinstance(e, SubagentToolUse)]
    assert len(uses) == 1 and len(uses[0].summary) <= 200


def test_a_deeply_nested_workflow_agent_error_is_read_never_raised() -> None:
    nested: dict[str, Any] = {}
    for _ in range(5000):
        nested = {"a": nested}
    entry = {"type": "workflow_agent", "index": 0, "label": "a", "state": "error", "error": nested}
    message = {"type": "system", "subtype": "task_progress", "task_id": "w",
               "workflow_progress": [entry]}  # fmt: skip
    (progress,) = parse_message(message)
    assert isinstance(progress, TaskProgress) and progress.workflow_agents is not None
    (agent,) = progress.workflow_agents
    assert agent.state == "error" and agent.error is None


def test_a_huge_task_description_is_cut_where_it_is_parsed() -> None:
    # the model writes an Agent call's description: a megabyte of it went into every row,
    # reason line and event of the run
    huge = "d" * 1_000_000
    tracker = Tracker()
    call = {"type": "tool_use", "id": "tu", "name": "Agent",
            "input": {"description": huge, "prompt": "p"}}  # fmt: skip
    tracker.feed({"type": "assistant", "message": {"id": "m", "content": [call]}})
    tracker.feed({"type": "system", "subtype": "task_started", "task_id": "t",
                  "tool_use_id": "tu", "description": huge})  # fmt: skip
    assert len(tracker.agent_calls["tu"].description) <= 500
    assert len(tracker.tasks["t"].description) <= 500
