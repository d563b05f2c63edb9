"""Feeding the spawn gate from the SDK stream: task lifecycle and Agent tool results.

The gate holds a slot from admission until the task has really ended. What ends it shows
up in the stream: a terminal ``task_notification``/``task_updated``, or a tool result that
shows the agent never ran (the CLI's own cap, a hook timeout, another hook's deny) or ran in
the foreground and is already done. :func:`observe` takes every message of a run and tells
the gate; :func:`classify_agent_result` is the pure rule for one Agent tool result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ..tracker import TaskEnded, TaskStarted, parse_message
from .gate import SpawnGate

__all__ = ["AgentResult", "classify_agent_result", "observe", "tool_result_text"]

#: launched: a background agent started (its task events follow); finished: a foreground
#: agent's answer; failed: an error result; rejected: the CLI refused to run it;
#: denied: a PreToolUse hook (this gate or another) denied it.
AgentResult = Literal["launched", "finished", "failed", "rejected", "denied"]

_CLI_LIMIT = "Concurrent subagent limit reached"
_HOOK_TIMEOUT = "PreToolUse hook did not respond before its timeout"
_HOOK_DENY = "PreToolUse:Agent hook error"
_LAUNCHED = "Async agent launched"
_AGENT_TOOLS = frozenset({"Agent", "Task"})
_MAX_SCAN = 4000


def tool_result_text(block: Any) -> str:
    """The text of a ``ToolResultBlock`` (or its raw dict), at most a few KB."""
    content = (
        block.get("content") if isinstance(block, Mapping) else getattr(block, "content", None)
    )
    if isinstance(content, str):
        return content[:_MAX_SCAN]
    parts: list[str] = []
    for item in content if isinstance(content, list) else []:
        if isinstance(item, Mapping) and isinstance(item.get("text"), str):
            parts.append(item["text"])
    return "\n".join(parts)[:_MAX_SCAN]


def classify_agent_result(block: Any) -> AgentResult:
    """What an Agent call's tool result says about the agent.

    Example:
        >>> classify_agent_result({"tool_use_id": "t", "is_error": True,
        ...     "content": "Concurrent subagent limit reached. You can run 20 ..."})
        'rejected'
    """
    text = tool_result_text(block)
    is_error = (
        block.get("is_error") if isinstance(block, Mapping) else getattr(block, "is_error", None)
    )
    if _CLI_LIMIT in text or _HOOK_TIMEOUT in text:
        return "rejected"
    if _HOOK_DENY in text:
        return "denied"
    if is_error:
        return "failed"
    if _LAUNCHED in text:
        return "launched"
    return "finished"


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def observe(gate: SpawnGate, message: Any, events: Sequence[Any] | None = None) -> None:
    """Tell ``gate`` what ``message`` (any SDK message or raw dict) means for its slots.

    Never raises: a malformed message is skipped (and noted in ``gate.errors``).

    Args:
        gate: the gate to tell.
        message: one SDK message, typed or raw.
        events: the message's parsed events, when the caller has them already.
    """
    try:
        _observe(gate, message)
    except Exception as exc:
        gate.errors.append(f"observe skipped a message: {type(exc).__name__}: {exc}")


def _observe(gate: SpawnGate, message: Any) -> None:
    name = type(message).__name__
    if name == "AssistantMessage":
        ids = [
            b.id
            for b in message.content or []
            if type(b).__name__ == "ToolUseBlock" and b.name in _AGENT_TOOLS
        ]
        if ids and isinstance(message.message_id, str):
            gate.note_message(message.message_id, ids)
        return
    if name == "UserMessage":
        content = message.content
        for block in content if isinstance(content, list) else []:
            tool_use_id = _field(block, "tool_use_id")
            if isinstance(tool_use_id, str) and gate.knows(tool_use_id):
                _tool_result(gate, tool_use_id, block)
        return
    for event in parse_message(message):
        if isinstance(event, TaskStarted) and event.tool_use_id:
            gate.task_started(event.tool_use_id, event.task_id)
        elif isinstance(event, TaskEnded):
            gate.task_ended(event.task_id)
            if event.tool_use_id:
                gate.task_ended(event.tool_use_id)


def _tool_result(gate: SpawnGate, tool_use_id: str, block: Any) -> None:
    outcome = classify_agent_result(block)
    if outcome == "rejected":
        gate.spawn_rejected(tool_use_id, tool_result_text(block).strip())
    elif outcome == "denied":
        gate.denied_elsewhere(tool_use_id, tool_result_text(block).strip())
    elif outcome in ("finished", "failed"):
        gate.task_ended(tool_use_id)
