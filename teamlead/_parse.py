"""The one parser of the SDK's message stream, and the typed events it produces.

:func:`parse_message` accepts typed ``claude_agent_sdk`` messages and raw dicts (the CLI's
stream-json lines, as in recorded traces, and the records a session transcript is
rebuilt from), skips unknown types and malformed fields, and returns typed events: the
tracker, the spawn gate and everything after them see only those. Each input is read
once, in one direction: a typed message by its own attributes (``isinstance`` on the
SDK's classes), a raw dict by its keys; both end in the same event builders. A
``SystemMessage`` carries the CLI's raw frame in ``data`` (the typed task classes leave
fields out), so that frame is what is read. :mod:`teamlead.tracker` folds the events into
state and re-exports every name here.

Example:
    >>> events = parse_message({"type": "system", "subtype": "task_started", "task_id": "t1",
    ...                         "description": "audit", "session_id": "s1"})
    >>> [type(e).__name__ for e in events], events[1].description
    (['SessionSeen', 'TaskStarted'], 'audit')
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, cast, get_args

from claude_agent_sdk import (
    AssistantMessage,
    ResultMessage,
    SystemMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)

__all__ = [
    "TERMINAL_STATES",
    "AgentCallSeen",
    "AgentCallsSent",
    "LeadTurn",
    "ResultSeen",
    "SessionSeen",
    "SessionStateSeen",
    "SubagentToolUse",
    "SubagentTurn",
    "TaskEnded",
    "TaskProgress",
    "TaskStarted",
    "TaskStatus",
    "ToolResultSeen",
    "TrackedEvent",
    "WorkflowAgent",
    "WorkflowAgentChanged",
    "WorkflowCallSeen",
    "WorkflowChange",
    "WorkflowEnded",
    "WorkflowPhaseSeen",
    "WorkflowStarted",
    "WorkflowLaunched",
    "parse_message",
    "tool_summary",
]

#: A task's state as the CLI reports it; the last four are terminal.
TaskStatus: TypeAlias = Literal[
    "pending", "running", "paused", "completed", "failed", "stopped", "killed"
]
#: A task's terminal state.
TerminalStatus: TypeAlias = Literal["completed", "failed", "stopped", "killed"]
TERMINAL_STATES: frozenset[str] = frozenset(get_args(TerminalStatus))
_TASK_STATES: frozenset[str] = frozenset(get_args(TaskStatus))
_AGENT_TOOLS = frozenset({"Agent", "Task"})
_WORKFLOW_TOOL = "Workflow"
#: a workflow run's id, in the tool result text and the CLI's stopped notice
_RUN_ID = re.compile(r"\b(wf_[A-Za-z0-9][A-Za-z0-9_-]{0,99})")
_RUN_ID_LINE = re.compile(r"^Run ID: (wf_[A-Za-z0-9][A-Za-z0-9_-]{0,99})\s*$", re.MULTILINE)
_MAX_TOOL_RESULT = 4000  # of a tool result's text: enough to classify an Agent call's result
_MAX_TOOL_SUMMARY = 200
#: The inputs that say what a tool call works on, in the order they are looked for (a
#: ``Grep``'s pattern before the path it searches).
_SUMMARY_KEYS = (
    "command",
    "file_path",
    "notebook_path",
    "pattern",
    "path",
    "url",
    "query",
    "description",
)


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
    #: a workflow's ``meta.name`` (``workflow_name``); ``None`` for other tasks
    workflow_name: str | None = None


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
    state: str
    agent_id: str | None = None
    phase: str | None = None
    phase_index: int | None = None
    attempt: int | None = None
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

    ``workflow_agents`` is the snapshot of a workflow's agents and ``workflow_phases`` the
    titles of its phases, in order (both ``None`` for other tasks).
    """

    task_id: str
    status: TaskStatus | None = None
    tokens: int | None = None
    last_tool: str | None = None
    tool_uses: int | None = None
    workflow_agents: tuple[WorkflowAgent, ...] | None = None
    workflow_phases: tuple[str, ...] | None = None


@dataclass(frozen=True)
class TaskEnded:
    """A terminal state from ``task_notification`` or ``task_updated``."""

    task_id: str
    status: TerminalStatus
    source: Literal["task_notification", "task_updated"]
    summary: str | None = None
    output_file: str | None = None
    usage: Mapping[str, Any] | None = None
    tool_use_id: str | None = None
    #: the error a ``task_updated`` patch carried (a workflow script's exception)
    error: str | None = None
    #: a workflow's ``wf_`` run id, when the summary names it (the CLI's stopped notice)
    workflow_run_id: str | None = None


@dataclass(frozen=True)
class WorkflowCallSeen:
    """A ``Workflow`` tool_use by the lead: a new script, a ``scriptPath`` or a resume.

    ``resume_from`` is the ``resumeFromRunId`` of a call that resumes an earlier run.
    """

    tool_use_id: str
    message_id: str | None
    script_path: str | None = None
    resume_from: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class WorkflowLaunched:
    """The result of a ``Workflow`` call that launched a run: its ``wf_`` run id, its task
    and its script file (from ``tool_use_result``, else the result text)."""

    tool_use_id: str
    run_id: str
    task_id: str | None = None
    script_path: str | None = None
    transcript_dir: str | None = None
    name: str | None = None
    summary: str | None = None


@dataclass(frozen=True)
class LeadTurn:
    """An assistant message of the lead itself (no ``parent_tool_use_id``)."""

    message_id: str | None
    text: str
    error: str | None
    tool_names: tuple[str, ...] = ()
    #: the files its ``Read`` calls read (their ``file_path``)
    read_paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class SubagentTurn:
    """An assistant message of a subagent, for progress displays."""

    parent_tool_use_id: str
    text: str
    tool_names: tuple[str, ...] = ()
    tokens: int | None = None


@dataclass(frozen=True)
class SubagentToolUse:
    """One tool call in a subagent's assistant message, for a view that follows one agent:
    its name and what it works on (``summary``: the command, path or pattern, else the
    input as JSON, cut to :data:`_MAX_TOOL_SUMMARY` characters; the raw text, unescaped)."""

    parent_tool_use_id: str
    tool_use_id: str
    name: str
    summary: str


@dataclass(frozen=True)
class AgentCallsSent:
    """The Agent calls of one model message, the lead's or a subagent's, by tool_use id:
    the spawn gate counts calls per message with it."""

    message_id: str
    tool_use_ids: tuple[str, ...]


@dataclass(frozen=True)
class ToolResultSeen:
    """A tool result in a user message: what an Agent call's result says (text cut to a
    few KB)."""

    tool_use_id: str
    text: str
    is_error: bool


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


# -- a workflow's changes: made by the tracker's WorkflowRun, not by the parser ----------
@dataclass(frozen=True)
class WorkflowStarted:
    """A workflow task launched: its ``wf_`` run id and script file are known.

    ``resume_from`` is the run it resumes (``resumeFromRunId``), else ``None``.
    """

    task_id: str
    run_id: str | None
    name: str | None
    description: str
    script_path: str | None = None
    resume_from: str | None = None


@dataclass(frozen=True)
class WorkflowPhaseSeen:
    """A phase of the script, the first time a snapshot lists it (1-based ``index``)."""

    task_id: str
    run_id: str | None
    index: int
    title: str


@dataclass(frozen=True)
class WorkflowAgentChanged:
    """One workflow agent's state changed (``start``, ``progress``, ``done``, ``error``)."""

    task_id: str
    run_id: str | None
    index: int
    label: str
    state: str
    previous: str | None
    phase: str | None = None
    agent_id: str | None = None
    model: str | None = None
    tokens: int | None = None
    tool_calls: int | None = None
    duration_ms: int | None = None
    error: str | None = None
    cached: bool = False


@dataclass(frozen=True)
class WorkflowEnded:
    """A workflow task ended: how many agents it had, finished, failed, replayed, and the
    labels of the ones it lost."""

    task_id: str
    run_id: str | None
    status: str
    agents: int
    done: int
    errors: int
    cached: int
    lost: tuple[str, ...] = ()
    error: str | None = None


WorkflowChange: TypeAlias = (
    WorkflowStarted | WorkflowPhaseSeen | WorkflowAgentChanged | WorkflowEnded
)


TrackedEvent: TypeAlias = (
    SessionSeen
    | SessionStateSeen
    | AgentCallSeen
    | TaskStarted
    | TaskProgress
    | TaskEnded
    | LeadTurn
    | SubagentTurn
    | SubagentToolUse
    | AgentCallsSent
    | ToolResultSeen
    | ResultSeen
    | WorkflowCallSeen
    | WorkflowLaunched
    | WorkflowChange
)


# -- the parser --------------------------------------------------------------------------
def parse_message(message: Any) -> list[TrackedEvent]:
    """Typed events for one SDK message (typed object or raw dict); ``[]`` if irrelevant.

    Unknown message types and malformed fields are skipped, never raised.

    Args:
        message: a typed ``claude_agent_sdk`` message, or a raw stream-json dict.
    """
    if isinstance(message, Mapping):
        return _from_raw(message)
    if isinstance(message, AssistantMessage):
        return _from_assistant(message)
    if isinstance(message, UserMessage):
        return _tool_results(message.content, message.tool_use_result)
    if isinstance(message, ResultMessage):
        return _with_session(message.session_id, [_result(vars(message))])
    if isinstance(message, SystemMessage):
        data = message.data  # the CLI's raw frame: the typed Task* classes drop fields
        return _from_raw(data) if isinstance(data, Mapping) else []
    return []


def _with_session(session: Any, events: list[TrackedEvent]) -> list[TrackedEvent]:
    return [SessionSeen(session), *events] if isinstance(session, str) and session else events


def _from_raw(raw: Mapping[str, Any]) -> list[TrackedEvent]:
    kind = raw.get("type")
    events: list[TrackedEvent] = []
    if kind == "assistant":
        msg = _map(raw.get("message"))
        events = _assistant_events(
            message_id=_str(msg.get("id")),
            parent=_str(raw.get("parent_tool_use_id")),
            error=_str(raw.get("error")),
            usage=_map(msg.get("usage")),
            blocks=_raw_blocks(msg.get("content")),
        )
    elif kind == "user":
        events = _tool_results(_map(raw.get("message")).get("content"), raw.get("tool_use_result"))
    elif kind == "system":
        event = _parse_system(raw)
        events = [event] if event is not None else []
    elif kind == "result":
        events = [_result(raw)]
    return _with_session(raw.get("session_id"), events)


# a content block, as (kind, fields): text, tool_use (id, name, input) or tool_result
_Block: TypeAlias = tuple[str, Mapping[str, Any]]


def _raw_blocks(content: Any) -> list[_Block]:
    blocks: list[_Block] = []
    for block in content if isinstance(content, list) else []:
        if isinstance(block, Mapping) and isinstance(block.get("type"), str):
            blocks.append((block["type"], block))
    return blocks


def _from_assistant(message: AssistantMessage) -> list[TrackedEvent]:
    blocks: list[_Block] = []
    for block in message.content if isinstance(message.content, list) else []:
        if isinstance(block, TextBlock):
            blocks.append(("text", {"text": block.text}))
        elif isinstance(block, ToolUseBlock):
            blocks.append(("tool_use", {"id": block.id, "name": block.name, "input": block.input}))
    events = _assistant_events(
        message_id=_str(message.message_id),
        parent=_str(message.parent_tool_use_id),
        error=_str(message.error),
        usage=_map(message.usage),
        blocks=blocks,
    )
    return _with_session(message.session_id, events)


def _assistant_events(
    *,
    message_id: str | None,
    parent: str | None,
    error: str | None,
    usage: Mapping[str, Any],
    blocks: Sequence[_Block],
) -> list[TrackedEvent]:
    text = "".join(f["text"] for k, f in blocks if k == "text" and isinstance(f.get("text"), str))
    tools = [f for k, f in blocks if k == "tool_use"]
    names = tuple(str(t.get("name")) for t in tools)
    agent_calls = [t for t in tools if t.get("name") in _AGENT_TOOLS and _str(t.get("id"))]
    call_ids = tuple(str(t["id"]) for t in agent_calls)
    sent: list[TrackedEvent] = (
        [AgentCallsSent(message_id, call_ids)] if message_id and call_ids else []
    )
    if parent:
        tokens = (_int(usage.get("input_tokens")) or 0) + (_int(usage.get("output_tokens")) or 0)
        uses: list[TrackedEvent] = [
            SubagentToolUse(parent, str(t["id"]), str(t.get("name")), tool_summary(t.get("input")))
            for t in tools
            if _str(t.get("id"))
        ]
        return [SubagentTurn(parent, text, names, tokens or None), *uses, *sent]
    reads = tuple(
        path
        for t in tools
        if t.get("name") == "Read" and (path := _str(_map(t.get("input")).get("file_path")))
    )
    events: list[TrackedEvent] = [LeadTurn(message_id, text, error, names, reads)]
    for tool in agent_calls:
        inp = _map(tool.get("input"))
        events.append(
            AgentCallSeen(
                tool_use_id=str(tool["id"]),
                message_id=message_id,
                description=_short(inp.get("description")) or "",
                prompt=_str(inp.get("prompt")) or "",
                subagent_type=_str(inp.get("subagent_type")),
                model=_str(inp.get("model")),
                name=_str(inp.get("name")),
            )
        )
    for tool in tools:
        if tool.get("name") == _WORKFLOW_TOOL and _str(tool.get("id")):
            inp = _map(tool.get("input"))
            events.append(
                WorkflowCallSeen(
                    tool_use_id=str(tool["id"]),
                    message_id=message_id,
                    script_path=_short(inp.get("scriptPath")),
                    resume_from=_run_id(inp.get("resumeFromRunId")),
                    name=_short(inp.get("name")),
                )
            )
    return events + sent


def tool_summary(tool_input: Any) -> str:
    """What a tool call works on, in one short line (see :class:`SubagentToolUse`).

    Example:
        >>> tool_summary({"command": "pytest -q", "timeout": 60})
        'pytest -q'
    """
    data = _map(tool_input)
    for key in _SUMMARY_KEYS:
        value = data.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()[:_MAX_TOOL_SUMMARY]
    try:
        text = json.dumps(dict(data), ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):  # nested deeper than the stack has room
        return ""
    return text[:_MAX_TOOL_SUMMARY] if data else ""


def _run_id(value: Any) -> str | None:
    """``value`` if it is a well-formed ``wf_`` run id (it is quoted back to the lead)."""
    text = _str(value)
    match = _RUN_ID.fullmatch(text) if text else None
    return match.group(1) if match else None


def _workflow_launched(
    tool_use_id: str, text: str, result: Mapping[str, Any]
) -> WorkflowLaunched | None:
    """A launched workflow, from the message's ``tool_use_result`` or the result text."""
    run_id = _run_id(result.get("runId"))
    if run_id is None:
        match = _RUN_ID_LINE.search(text)
        run_id = match.group(1) if match else None
    if run_id is None or (result and result.get("taskType", "local_workflow") != "local_workflow"):
        return None
    return WorkflowLaunched(
        tool_use_id=tool_use_id,
        run_id=run_id,
        task_id=_short(result.get("taskId")),
        script_path=_short(result.get("scriptPath")),
        transcript_dir=_short(result.get("transcriptDir")),
        name=_short(result.get("workflowName")),
        summary=_short(result.get("summary")),
    )


def _tool_results(content: Any, tool_use_result: Any = None) -> list[TrackedEvent]:
    """The tool results of a user message's content (typed blocks or raw dicts); a
    launched workflow's result also gives a :class:`WorkflowLaunched`."""
    events: list[TrackedEvent] = []
    tool_use_id: Any
    for block in content if isinstance(content, list) else []:
        if isinstance(block, ToolResultBlock):
            tool_use_id, body, is_error = block.tool_use_id, block.content, block.is_error
        elif isinstance(block, Mapping) and block.get("type", "tool_result") == "tool_result":
            tool_use_id, body, is_error = map(block.get, ("tool_use_id", "content", "is_error"))
        else:
            continue
        if isinstance(tool_use_id, str) and tool_use_id:
            text = _result_text(body)
            events.append(ToolResultSeen(tool_use_id, text, bool(is_error)))
            if not is_error and "wf_" in text:
                launched = _workflow_launched(tool_use_id, text, _map(tool_use_result))
                if launched is not None:
                    events.append(launched)
    return events


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content[:_MAX_TOOL_RESULT]
    parts = [
        item["text"]
        for item in (content if isinstance(content, list) else [])
        if isinstance(item, Mapping) and isinstance(item.get("text"), str)
    ]
    return "\n".join(parts)[:_MAX_TOOL_RESULT]


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _path(value: Any) -> str | None:
    """``value`` if it can name a file: a non-empty string with no NUL byte (which every
    look at such a path raises on)."""
    return value if isinstance(value, str) and value and "\x00" not in value else None


def _amount(value: Any) -> float | None:
    """``value`` as an amount of money: a finite number not below zero (a NaN would win or
    lose every comparison, so a cost budget would never be reached), else ``None``."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        amount = float(value)
    except OverflowError:  # an integer past any float
        return None
    return amount if math.isfinite(amount) and amount >= 0 else None


def _task_status(value: Any) -> TaskStatus | None:
    return cast(TaskStatus, value) if value in _TASK_STATES else None


def _terminal(value: Any) -> TerminalStatus | None:
    return cast(TerminalStatus, value) if value in TERMINAL_STATES else None


def _parse_system(raw: Mapping[str, Any]) -> TrackedEvent | None:
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
            description=_short(raw.get("description")) or "",
            prompt=_str(raw.get("prompt")),
            subagent_type=_str(raw.get("subagent_type")),
            run_id=_str(raw.get("run_id")),
            task_type=_str(raw.get("task_type")),
            parent_task_id=_str(raw.get("parent_task_id")),
            workflow_name=_short(raw.get("workflow_name")),
        )
    if subtype == "task_notification":
        status = raw.get("status") if isinstance(raw.get("status"), str) else "completed"
        usage = raw.get("usage") if isinstance(raw.get("usage"), Mapping) else None
        terminal = _terminal(status)
        if terminal is not None:
            summary = _str(raw.get("summary"))
            found = _RUN_ID.search(summary) if summary and "(run wf_" in summary else None
            return TaskEnded(
                task_id=task_id,
                status=terminal,
                source="task_notification",
                summary=summary,
                output_file=_path(raw.get("output_file")),
                usage=usage,
                tool_use_id=_str(raw.get("tool_use_id")),
                workflow_run_id=found.group(1) if found else None,
            )
        return TaskProgress(task_id, status=_task_status(status))
    if subtype == "task_updated":
        patch = _map(raw.get("patch"))
        terminal = _terminal(patch.get("status"))
        if terminal is not None:
            return TaskEnded(
                task_id=task_id,
                status=terminal,
                source="task_updated",
                summary=_str(patch.get("summary")) or _str(patch.get("result")),
                output_file=_path(patch.get("output_file")),
                error=_short(patch.get("error")),
            )
        return TaskProgress(task_id, status=_task_status(patch.get("status")))
    if subtype == "task_progress":
        usage = _map(raw.get("usage"))
        return TaskProgress(
            task_id,
            tokens=_int(usage.get("total_tokens")),
            last_tool=_str(raw.get("last_tool_name")),
            tool_uses=_int(usage.get("tool_uses")),
            workflow_agents=_workflow_agents(raw.get("workflow_progress")),
            workflow_phases=_workflow_phases(raw.get("workflow_progress")),
        )
    return None


def _short(value: Any) -> str | None:
    text = _str(value)
    return text[:_MAX_FIELD] if text is not None else None


def _workflow_phases(progress: Any) -> tuple[str, ...] | None:
    """The phase titles of a snapshot, by index; malformed entries are skipped."""
    if not isinstance(progress, list):
        return None
    phases: dict[int, str] = {}
    for entry in progress[: _MAX_WORKFLOW_AGENTS * 2]:
        if isinstance(entry, Mapping) and entry.get("type") == "workflow_phase":
            index, title = _int(entry.get("index")), _short(entry.get("title"))
            if index is not None and title is not None and len(phases) < _MAX_WORKFLOW_AGENTS:
                phases.setdefault(index, title)
    return tuple(phases[i] for i in sorted(phases))


def _workflow_agents(progress: Any) -> tuple[WorkflowAgent, ...] | None:
    """The ``workflow_agent`` entries of a snapshot; malformed entries are skipped."""
    if not isinstance(progress, list):
        return None
    agents: list[WorkflowAgent] = []
    for entry in progress:
        if len(agents) >= _MAX_WORKFLOW_AGENTS:
            break
        if not isinstance(entry, Mapping) or entry.get("type") != "workflow_agent":
            continue
        index = _int(entry.get("index"))
        if index is None:
            continue
        error = entry.get("error")
        if error is not None and not isinstance(error, str):
            try:
                error = json.dumps(error)
            except (TypeError, ValueError, RecursionError):  # nested past the stack's room
                error = None
        agents.append(
            WorkflowAgent(
                index=index,
                label=_short(entry.get("label")) or f"agent {index}",
                state=_short(entry.get("state")) or "start",
                agent_id=_short(entry.get("agentId")),
                phase=_short(entry.get("phaseTitle")),
                phase_index=_int(entry.get("phaseIndex")),
                attempt=_int(entry.get("attempt")),
                model=_short(entry.get("model")),
                tokens=_int(entry.get("tokens")),
                tool_calls=_int(entry.get("toolCalls")),
                duration_ms=_int(entry.get("durationMs")),
                result_preview=_short(entry.get("resultPreview")),
                error=_short(error),
                cached=entry.get("cached") is True,
            )
        )
    return tuple(agents)


def _result(raw: Mapping[str, Any]) -> ResultSeen:
    """A result message's :class:`ResultSeen`, from its wire fields (the SDK's
    ``ResultMessage`` has the same names, so a typed one is read through ``vars``)."""
    origin = raw.get("origin")
    cost = raw.get("total_cost_usd")
    usage = raw.get("usage")
    run_id = None
    if isinstance(origin, Mapping) and origin.get("kind") == "task-notification":
        run_id = _str(origin.get("runId")) or _str(origin.get("run_id"))
    return ResultSeen(
        is_error=bool(raw.get("is_error")),
        subtype=_str(raw.get("subtype")) or "unknown",
        text=_str(raw.get("result")),
        session_id=_str(raw.get("session_id")),
        api_error_status=_int(raw.get("api_error_status")),
        cost_usd=_amount(cost),
        usage=usage if isinstance(usage, Mapping) else None,
        num_turns=_int(raw.get("num_turns")),
        origin_run_id=run_id,
        terminal_reason=_str(raw.get("terminal_reason")),
    )
