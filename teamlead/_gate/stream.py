"""Feeding the spawn gate from the SDK stream: task lifecycle and Agent tool results.

The gate holds a slot from admission until the task has really ended. What ends it shows
up in the stream: a terminal ``task_notification``/``task_updated``, or a tool result that
shows the agent never ran (the CLI's own cap, a hook timeout, another hook's deny) or ran in
the foreground and is already done. :func:`feed_gate` takes the parsed events of every
message of a run (:func:`teamlead.tracker.parse_message`, run once per message by the
round) and tells the gate; :func:`classify_agent_result` is the pure rule for one Agent
tool result.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from ..tracker import (
    LAUNCH_NOTICE,
    AgentCallsSent,
    TaskEnded,
    TaskStarted,
    ToolResultSeen,
    TrackedEvent,
    parse_message,
)
from .gate import SpawnGate

__all__ = ["AgentResult", "classify_agent_result", "feed_gate"]

#: launched: a background agent started (its task events follow); finished: a foreground
#: agent's answer; failed: an error result; rejected: the CLI refused to run it;
#: denied: a PreToolUse hook (this gate or another) denied it.
AgentResult = Literal["launched", "finished", "failed", "rejected", "denied"]

_CLI_LIMIT = "Concurrent subagent limit reached"
_HOOK_TIMEOUT = "PreToolUse hook did not respond before its timeout"
_HOOK_DENY = "PreToolUse:Agent hook error"


def classify_agent_result(result: ToolResultSeen) -> AgentResult:
    """What an Agent call's tool result says about the agent.

    Example:
        >>> classify_agent_result(ToolResultSeen("t", "Concurrent subagent limit reached. "
        ...     "You can run 20 subagents at once.", is_error=True))
        'rejected'
    """
    text = result.text
    if result.is_error:  # the CLI's refusals are error results: an answer may quote one
        if _CLI_LIMIT in text or _HOOK_TIMEOUT in text:
            return "rejected"
        return "denied" if _HOOK_DENY in text else "failed"
    if LAUNCH_NOTICE in text:
        return "launched"
    return "finished"


def feed_gate(gate: SpawnGate, message: Any, events: Sequence[TrackedEvent] | None = None) -> None:
    """Tell ``gate`` what ``message`` (any SDK message or raw dict) means for its slots.

    Never raises: a malformed message is skipped (and noted in ``gate.errors``).

    Args:
        gate: the gate to tell.
        message: one SDK message, typed or raw.
        events: the message's parsed events, when the caller has them already (a round
            parses each message once, for the tracker and the gate alike).
    """
    try:
        for event in parse_message(message) if events is None else events:
            _feed_event(gate, event)
    except Exception as exc:
        gate.errors.append(f"the gate skipped a message: {type(exc).__name__}: {exc}")


def _feed_event(gate: SpawnGate, event: TrackedEvent) -> None:
    if isinstance(event, AgentCallsSent):
        gate.note_message(event.message_id, list(event.tool_use_ids))
    elif isinstance(event, ToolResultSeen):
        if gate.knows(event.tool_use_id):
            _tool_result(gate, event)
    elif isinstance(event, TaskStarted):
        if event.tool_use_id:
            gate.task_started(event.tool_use_id, event.task_id)
    elif isinstance(event, TaskEnded):
        gate.task_ended(event.task_id)
        if event.tool_use_id:
            gate.task_ended(event.tool_use_id)


def _tool_result(gate: SpawnGate, result: ToolResultSeen) -> None:
    outcome = classify_agent_result(result)
    if outcome == "rejected":
        gate.spawn_rejected(result.tool_use_id, result.text.strip())
    elif outcome == "denied":
        gate.denied_elsewhere(result.tool_use_id, result.text.strip())
    elif outcome in ("finished", "failed"):
        gate.task_ended(result.tool_use_id)
