"""Stream-json frames of a run's subagents, as the CLI writes them, built by hand.

For the unit tests of the stream's readers (focus, the live view, approvals): an agent's
start, its tool calls and lines (``parent_tool_use_id`` set), a tool's result, its end,
and a workflow's progress snapshot. The shapes are the recorded traces'
(``tests/fixtures/traces``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["SESSION", "ended", "result", "started", "sub_text", "sub_tool", "workflow"]

SESSION = "d6b404c3-7aec-40d7-9803-56ebb9cb00ba"


def started(task_id: str, tool_use_id: str, description: str) -> dict[str, Any]:
    return {
        "type": "system",
        "subtype": "task_started",
        "task_id": task_id,
        "tool_use_id": tool_use_id,
        "description": description,
        "task_type": "local_agent",
        "session_id": SESSION,
    }


def sub_tool(parent: str, tool_id: str, name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    block = {"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}
    return {
        "type": "assistant",
        "parent_tool_use_id": parent,
        "message": {"id": f"m-{tool_id}", "content": [block]},
        "session_id": SESSION,
    }


def sub_text(parent: str, text: str) -> dict[str, Any]:
    return {
        "type": "assistant",
        "parent_tool_use_id": parent,
        "message": {"id": f"m-{len(text)}", "content": [{"type": "text", "text": text}]},
        "session_id": SESSION,
    }


def result(tool_id: str, *, error: bool = False) -> dict[str, Any]:
    block = {"type": "tool_result", "tool_use_id": tool_id, "content": "out", "is_error": error}
    return {"type": "user", "message": {"content": [block]}, "session_id": SESSION}


def ended(task_id: str, output_file: str) -> dict[str, Any]:
    return {
        "type": "system",
        "subtype": "task_notification",
        "task_id": task_id,
        "status": "completed",
        "output_file": output_file,
        "summary": "done",
        "session_id": SESSION,
    }


def workflow(task_id: str, agents: list[tuple[int, str | None, str]]) -> list[dict[str, Any]]:
    snapshot = [
        {"type": "workflow_agent", "index": i, "label": label, "agentId": agent, "state": "done"}
        for i, agent, label in agents
    ]
    return [
        {
            "type": "system",
            "subtype": "task_started",
            "task_id": task_id,
            "description": "scan",
            "task_type": "local_workflow",
            "session_id": SESSION,
        },
        {
            "type": "system",
            "subtype": "task_progress",
            "task_id": task_id,
            "workflow_progress": snapshot,
            "session_id": SESSION,
        },
    ]
