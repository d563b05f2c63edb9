"""Rebuilding a session's state from its transcript (for `teamlead resume`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from teamlead._claude.saved_session import load_session
from teamlead.errors import UsageError

SID = "0f0e0d0c-1111-2222-3333-444455556666"


def _write(config: Path, records: list[dict[str, object]]) -> None:
    path = config / "projects" / "-tmp-project" / f"{SID}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n{torn line")


def _note(task: str, status: str, result: str) -> str:
    return (
        f"<task-notification>\n<task-id>{task}</task-id>\n<status>{status}</status>\n"
        f"<result>{result}</result>\n</task-notification>"
    )


def test_rebuilds_tasks_notifications_and_failed_turns(tmp_path: Path) -> None:
    agent_call = {
        "type": "tool_use",
        "id": "tu1",
        "name": "Agent",
        "input": {"description": "a", "prompt": "p"},
    }
    _write(
        tmp_path,
        [
            {"type": "user", "isSidechain": False, "message": {"role": "user", "content": "go"}},
            {
                "type": "assistant",
                "isSidechain": False,
                "message": {"id": "m1", "content": [agent_call]},
            },
            {
                "type": "user",
                "isSidechain": False,
                "toolUseResult": {"agentId": "t1", "description": "a"},
                "message": {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "tu1"}],
                },
            },
            {
                "type": "assistant",
                "isSidechain": True,
                "message": {"content": [{"type": "text", "text": "sub"}]},
            },
            {
                "type": "assistant",
                "isSidechain": False,
                "message": {"id": "m2", "content": [{"type": "text", "text": "waiting"}]},
            },
            {
                "type": "user",
                "isSidechain": False,
                "message": {
                    "role": "user",
                    "content": _note("t1", "completed", "FOUND") + _note("t2", "failed", "boom"),
                },
            },
            {
                "type": "assistant",
                "isSidechain": False,
                "isApiErrorMessage": True,
                "error": "server_error",
                "message": {"content": [{"type": "text", "text": "API Error: 529"}]},
            },
        ],
    )
    tracker = load_session(tmp_path, SID)
    assert tracker.session_id == SID
    assert tracker.tasks["t1"].status == "completed" and tracker.tasks["t1"].summary == "FOUND"
    assert tracker.tasks["t2"].status == "failed"
    assert {t.task_id for t in tracker.unabsorbed_tasks} == {
        "t1",
        "t2",
    }  # only a failed turn followed
    assert tracker.last_success is not None and tracker.last_success.text == "waiting"
    assert tracker.max_parallel_agent_calls == 1


def test_missing_or_malformed_sessions_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no session"):
        load_session(tmp_path, SID)
    with pytest.raises(UsageError, match="not a session id"):
        load_session(tmp_path, "../../etc/passwd")


def test_a_resume_the_cli_refused_is_read_back_with_its_reason(tmp_path: Path) -> None:
    resume = {
        "type": "tool_use",
        "id": "tu2",
        "name": "Workflow",
        "input": {"resumeFromRunId": "wf_abc-1", "scriptPath": "/cfg/s.js"},
    }
    refusal = (
        "A line of the journal of workflow run wf_abc-1 cannot be read, so this session cannot "
        "tell whether the run hides its script and will not resume it. Start a new run without "
        "resumeFromRunId; it runs again the agents this run had finished."
    )
    result = {"type": "tool_result", "tool_use_id": "tu2", "content": refusal, "is_error": True}
    failed = {"type": "tool_result", "tool_use_id": "tu3", "content": "boom", "is_error": True}
    _write(
        tmp_path,
        [
            {"type": "assistant", "message": {"id": "m2", "content": [resume]}},
            {
                "type": "user",
                "toolUseResult": f"Error: {refusal}",
                "message": {"role": "user", "content": [result]},
            },
            {"type": "user", "message": {"role": "user", "content": [failed]}},
        ],
    )
    tracker = load_session(tmp_path, SID)
    assert tracker.refused_resumes == {"wf_abc-1": refusal}
