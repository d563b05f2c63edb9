"""The one parser of the SDK's message stream, and the typed events it produces.

:func:`parse_message` accepts typed ``claude_agent_sdk`` messages and raw dicts (the CLI's
stream-json lines, as in recorded traces, and the records a session transcript is
rebuilt from), skips unknown types and malformed fields, and returns typed events: the
tracker and everything after it see only those. :mod:`teamlead.tracker` folds the events
into state and re-exports every name here.

Example:
    >>> events = parse_message({"type": "system", "subtype": "task_started", "task_id": "t1",
    ...                         "description": "audit", "session_id": "s1"})
    >>> [type(e).__name__ for e in events], events[1].description
    (['SessionSeen', 'TaskStarted'], 'audit')
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

__all__ = [
    "TERMINAL_STATES",
    "AgentCallSeen",
    "LeadTurn",
    "ResultSeen",
    "SessionSeen",
    "SessionStateSeen",
    "SubagentTurn",
    "TaskEnded",
    "TaskProgress",
    "TaskStarted",
    "TaskStatus",
    "TrackedEvent",
    "WorkflowAgent",
    "parse_message",
]

TaskStatus = Literal["pending", "running", "paused", "completed", "failed", "stopped", "killed"]
TERMINAL_STATES: frozenset[str] = frozenset({"completed", "failed", "stopped", "killed"})
_AGENT_TOOLS = frozenset({"Agent", "Task"})


# -- events ------------------------------------------------------------------------------
@dataclass(frozen=True)
class SessionSeen:
    """The first message that carried a ``session_id``."""

    session_id: str


@dataclass(frozen=True)
class SessionStateSeen:
    """``system/session_state_changed``: the CLI is ``running``, ``idle``, ... (a client's
    CLI sends it when ``CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS`` is set)."""

    state: str


@dataclass(frozen=True)
class AgentCallSeen:
    """An ``Agent``/``Task`` tool_use by the lead; ``message_id`` groups one API message."""

    tool_use_id: str
    message_id: str | None
    description: str
    prompt: str
    subagent_type: str | None = None
    model: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class TaskStarted:
    """``system/task_started``: a background task (usually a subagent) began."""

    task_id: str
    tool_use_id: str | None
    description: str
    prompt: str | None = None
    subagent_type: str | None = None
    run_id: str | None = None
    task_type: str | None = None
    parent_task_id: str | None = None


#: A workflow agent's state in a ``workflow_progress`` snapshot (unknown states are kept).
WorkflowAgentState: TypeAlias = str
_MAX_WORKFLOW_AGENTS = 1000  # the engine's own hard cap of agent() calls per run
_MAX_FIELD = 500


@dataclass(frozen=True)
class WorkflowAgent:
    """One ``workflow_agent`` entry of a workflow's ``task_progress`` snapshot.

    ``agent_id`` is ``None`` while the agent is queued; it is the ``x-claude-code-agent-id``
    of the agent's requests once it runs. ``state`` is ``start``, ``progress``, ``done`` or
    ``error`` (an unknown state is kept as sent).
    """

    index: int
    label: str
    state: WorkflowAgentState
    agent_id: str | None = None
    phase: str | None = None
    model: str | None = None
    tokens: int | None = None
    tool_calls: int | None = None
    duration_ms: int | None = None
    result_preview: str | None = None
    error: str | None = None
    cached: bool = False


@dataclass(frozen=True)
class TaskProgress:
    """A non-terminal update: ``task_progress`` or a ``task_updated`` patch.

    ``workflow_agents`` is the snapshot of a workflow's agents (``None`` for other tasks).
    """

    task_id: str
    status: str | None = None
    tokens: int | None = None
    last_tool: str | None = None
    tool_uses: int | None = None
    workflow_agents: tuple[WorkflowAgent, ...] | None = None


@dataclass(frozen=True)
class TaskEnded:
    """A terminal state from ``task_notification`` or ``task_updated``."""

    task_id: str
    status: str
    source: Literal["task_notification", "task_updated"]
    summary: str | None = None
    output_file: str | None = None
    usage: Mapping[str, Any] | None = None
    tool_use_id: str | None = None


@dataclass(frozen=True)
class LeadTurn:
    """An assistant message of the lead itself (no ``parent_tool_use_id``)."""

    message_id: str | None
    text: str
    error: str | None
    tool_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class SubagentTurn:
    """An assistant message of a subagent, for progress displays."""

    parent_tool_use_id: str
    text: str
    tool_names: tuple[str, ...] = ()
    tokens: int | None = None


@dataclass(frozen=True)
class ResultSeen:
    """A ``result`` message: the end of one lead turn."""

    is_error: bool
    subtype: str
    text: str | None
    session_id: str | None
    api_error_status: int | None = None
    cost_usd: float | None = None
    usage: Mapping[str, Any] | None = None
    num_turns: int | None = None
    origin_run_id: str | None = None
    terminal_reason: str | None = None

    @property
    def ok(self) -> bool:
        return not self.is_error and self.subtype == "success"

    @property
    def placeholder(self) -> bool:
        """A zero-turn, empty result the CLI emits for a queued turn; it answers nothing."""
        return self.num_turns == 0 and not (self.text or "").strip() and not self.is_error


TrackedEvent: TypeAlias = (
    SessionSeen
    | SessionStateSeen
    | AgentCallSeen
    | TaskStarted
    | TaskProgress
    | TaskEnded
    | LeadTurn
    | SubagentTurn
    | ResultSeen
)


# -- the parser --------------------------------------------------------------------------
def _block_dict(block: Any) -> dict[str, Any] | None:
    if isinstance(block, dict):
        return block
    name = type(block).__name__
    if name == "TextBlock":
        return {"type": "text", "text": block.text}
    if name == "ToolUseBlock":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    if name == "ThinkingBlock":
        return {"type": "thinking"}
    return None


def _raw(message: Any) -> dict[str, Any] | None:
    """A typed SDK message as the CLI's raw dict; raw dicts pass through."""
    if isinstance(message, Mapping):
        return dict(message)
    data = getattr(message, "data", None)
    if isinstance(data, dict) and "subtype" in data:  # SystemMessage and its Task* subclasses
        return data
    name = type(message).__name__
    if name == "AssistantMessage":
        blocks = [b for b in (_block_dict(x) for x in message.content) if b is not None]
        return {
            "type": "assistant",
            "message": {"id": message.message_id, "content": blocks, "usage": message.usage},
            "parent_tool_use_id": message.parent_tool_use_id,
            "error": message.error,
            "session_id": getattr(message, "session_id", None),
        }
    if name == "ResultMessage" and dataclasses.is_dataclass(message):
        raw = {f.name: getattr(message, f.name) for f in dataclasses.fields(message)}
        raw["type"] = "result"
        return raw
    if name == "UserMessage":
        return {"type": "user", "session_id": getattr(message, "session_id", None)}
    return None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text_and_tools(content: Any) -> tuple[str, list[dict[str, Any]]]:
    texts: list[str] = []
    tools: list[dict[str, Any]] = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "tool_use":
            tools.append(block)
    return "".join(texts), tools


def parse_message(message: Any) -> list[TrackedEvent]:
    """Typed events for one SDK message (typed object or raw dict); ``[]`` if irrelevant.

    Unknown message types and malformed fields are skipped, never raised.
    """
    raw = _raw(message)
    if raw is None:
        return []
    events: list[TrackedEvent] = []
    session = _str(raw.get("session_id"))
    if session:
        events.append(SessionSeen(session))
    kind = raw.get("type")
    if kind == "assistant":
        events.extend(_parse_assistant(raw))
    elif kind == "system":
        event = _parse_system(raw)
        if event is not None:
            events.append(event)
    elif kind == "result":
        events.append(_parse_result(raw))
    return events


def _parse_assistant(raw: dict[str, Any]) -> list[TrackedEvent]:
    msg = raw.get("message") if isinstance(raw.get("message"), dict) else {}
    assert isinstance(msg, dict)
    text, tools = _text_and_tools(msg.get("content"))
    names = tuple(str(t.get("name")) for t in tools)
    parent = _str(raw.get("parent_tool_use_id"))
    if parent:
        usage = msg.get("usage") if isinstance(msg.get("usage"), dict) else {}
        assert isinstance(usage, dict)
        tokens = (_int(usage.get("input_tokens")) or 0) + (_int(usage.get("output_tokens")) or 0)
        return [SubagentTurn(parent, text, names, tokens or None)]
    message_id = _str(msg.get("id"))
    events: list[TrackedEvent] = [LeadTurn(message_id, text, _str(raw.get("error")), names)]
    for tool in tools:
        if tool.get("name") not in _AGENT_TOOLS or not isinstance(tool.get("id"), str):
            continue
        inp = tool.get("input") if isinstance(tool.get("input"), dict) else {}
        assert isinstance(inp, dict)
        events.append(
            AgentCallSeen(
                tool_use_id=tool["id"],
                message_id=message_id,
                description=_str(inp.get("description")) or "",
                prompt=_str(inp.get("prompt")) or "",
                subagent_type=_str(inp.get("subagent_type")),
                model=_str(inp.get("model")),
                name=_str(inp.get("name")),
            )
        )
    return events


def _parse_system(raw: dict[str, Any]) -> TrackedEvent | None:
    subtype = raw.get("subtype")
    if subtype == "session_state_changed":
        state = _str(raw.get("state"))
        return SessionStateSeen(state) if state is not None else None
    task_id = _str(raw.get("task_id"))
    if not task_id:
        return None
    if subtype == "task_started":
        return TaskStarted(
            task_id=task_id,
            tool_use_id=_str(raw.get("tool_use_id")),
            description=_str(raw.get("description")) or "",
            prompt=_str(raw.get("prompt")),
            subagent_type=_str(raw.get("subagent_type")),
            run_id=_str(raw.get("run_id")),
            task_type=_str(raw.get("task_type")),
            parent_task_id=_str(raw.get("parent_task_id")),
        )
    if subtype == "task_notification":
        status = _str(raw.get("status")) or "completed"
        usage = raw.get("usage") if isinstance(raw.get("usage"), dict) else None
        if status in TERMINAL_STATES:
            return TaskEnded(
                task_id=task_id,
                status=status,
                source="task_notification",
                summary=_str(raw.get("summary")),
                output_file=_str(raw.get("output_file")),
                usage=usage,
                tool_use_id=_str(raw.get("tool_use_id")),
            )
        return TaskProgress(task_id, status=status)
    if subtype == "task_updated":
        patch = raw.get("patch") if isinstance(raw.get("patch"), dict) else {}
        assert isinstance(patch, dict)
        patch_status = _str(patch.get("status"))
        if patch_status is not None and patch_status in TERMINAL_STATES:
            return TaskEnded(
                task_id=task_id,
                status=patch_status,
                source="task_updated",
                summary=_str(patch.get("summary")) or _str(patch.get("result")),
                output_file=_str(patch.get("output_file")),
            )
        return TaskProgress(task_id, status=patch_status)
    if subtype == "task_progress":
        usage = raw.get("usage") if isinstance(raw.get("usage"), dict) else {}
        assert isinstance(usage, dict)
        return TaskProgress(
            task_id,
            tokens=_int(usage.get("total_tokens")),
            last_tool=_str(raw.get("last_tool_name")),
            tool_uses=_int(usage.get("tool_uses")),
            workflow_agents=_workflow_agents(raw.get("workflow_progress")),
        )
    return None


def _short(value: Any) -> str | None:
    text = _str(value)
    return text[:_MAX_FIELD] if text is not None else None


def _workflow_agents(progress: Any) -> tuple[WorkflowAgent, ...] | None:
    """The ``workflow_agent`` entries of a snapshot; malformed entries are skipped."""
    if not isinstance(progress, list):
        return None
    agents: list[WorkflowAgent] = []
    for entry in progress:
        if len(agents) >= _MAX_WORKFLOW_AGENTS:
            break
        if not isinstance(entry, dict) or entry.get("type") != "workflow_agent":
            continue
        index = _int(entry.get("index"))
        if index is None:
            continue
        error = entry.get("error")
        agents.append(
            WorkflowAgent(
                index=index,
                label=_short(entry.get("label")) or f"agent {index}",
                state=_short(entry.get("state")) or "start",
                agent_id=_short(entry.get("agentId")),
                phase=_short(entry.get("phaseTitle")),
                model=_short(entry.get("model")),
                tokens=_int(entry.get("tokens")),
                tool_calls=_int(entry.get("toolCalls")),
                duration_ms=_int(entry.get("durationMs")),
                result_preview=_short(entry.get("resultPreview")),
                error=_short(error)
                if isinstance(error, str)
                else (_short(json.dumps(error)) if error is not None else None),
                cached=entry.get("cached") is True,
            )
        )
    return tuple(agents)


def _parse_result(raw: dict[str, Any]) -> ResultSeen:
    origin = raw.get("origin")
    run_id = None
    if isinstance(origin, dict) and origin.get("kind") == "task-notification":
        run_id = _str(origin.get("runId")) or _str(origin.get("run_id"))
    cost = raw.get("total_cost_usd")
    return ResultSeen(
        is_error=bool(raw.get("is_error")),
        subtype=_str(raw.get("subtype")) or "unknown",
        text=_str(raw.get("result")),
        session_id=_str(raw.get("session_id")),
        api_error_status=_int(raw.get("api_error_status")),
        cost_usd=float(cost) if isinstance(cost, (int, float)) else None,
        usage=raw.get("usage") if isinstance(raw.get("usage"), dict) else None,
        num_turns=_int(raw.get("num_turns")),
        origin_run_id=run_id,
        terminal_reason=_str(raw.get("terminal_reason")),
    )
