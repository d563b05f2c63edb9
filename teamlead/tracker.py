"""Turn the SDK's message stream into typed events, and keep the state of the work.

:func:`parse_message` is the one parser: it accepts typed ``claude_agent_sdk`` messages
and raw dicts (the CLI's stream-json lines, as in recorded traces), skips unknown types
and returns typed events. :class:`Tracker` folds those events into what the
coordinator needs to know: the session id, every started task and its terminal state,
Agent calls grouped by API message, every ``result``, and which task results a
*successful* lead turn has already absorbed. The events and the parser live in the private
:mod:`teamlead._parse`; their names are re-exported here.

Example:
    >>> tracker = Tracker()
    >>> for line in open("trace.jsonl"):  # doctest: +SKIP
    ...     tracker.feed(json.loads(line))
    >>> tracker.session_id, [t.status for t in tracker.tasks.values()]  # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._parse import (
    TERMINAL_STATES,
    AgentCallSeen,
    AgentCallsSent,
    LeadTurn,
    ResultSeen,
    SessionSeen,
    SessionStateSeen,
    SubagentToolUse,
    SubagentTurn,
    TaskEnded,
    TaskProgress,
    TaskStarted,
    TaskStatus,
    ToolResultSeen,
    TrackedEvent,
    WorkflowAgent,
    parse_message,
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
    "TaskInfo",
    "TaskProgress",
    "TaskStarted",
    "TaskStatus",
    "ToolResultSeen",
    "TrackedEvent",
    "Tracker",
    "WorkflowAgent",
    "parse_message",
]


# -- state -------------------------------------------------------------------------------
@dataclass
class TaskInfo:
    """Everything known about one background task."""

    task_id: str
    description: str = ""
    task_type: str | None = None
    parent_task_id: str | None = None
    tool_use_id: str | None = None
    prompt: str | None = None
    subagent_type: str | None = None
    run_id: str | None = None
    status: TaskStatus = "running"
    summary: str | None = None
    output_file: str | None = None
    usage: Mapping[str, Any] | None = None
    started_at: float = 0.0
    ended_at: float | None = None
    ended_seq: int | None = None
    absorbed: bool = False
    tokens: int = 0
    tool_uses: int | None = None
    last_tool: str | None = None
    last_text: str = ""
    #: a workflow's agents by their index in the script, from the last snapshot
    workflow_agents: dict[int, WorkflowAgent] = field(default_factory=dict)

    @property
    def is_workflow(self) -> bool:
        return self.task_type == "local_workflow"

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATES

    @property
    def has_output(self) -> bool:
        """Whether the lead was shown something: a non-empty summary, or a non-success end.

        A ``completed`` notification with an empty summary happens (claude-code #86471); the
        lead saw nothing then, so the task's transcript still has to reach it.
        """
        return self.status != "completed" or bool((self.summary or "").strip())


_INVALID_INPUT = "InputValidationError"
_MAX_REASON = 300


def invalid_input_reason(result: ToolResultSeen) -> str | None:
    """The CLI's reason when ``result`` says it refused a tool call's input, else ``None``.

    Example:
        >>> invalid_input_reason(ToolResultSeen("t", "<tool_use_error>InputValidationError: "
        ...     "The required parameter `prompt` is missing</tool_use_error>", is_error=True))
        'InputValidationError: The required parameter `prompt` is missing'
    """
    if not result.is_error or _INVALID_INPUT not in result.text:
        return None
    text = result.text.replace("<tool_use_error>", "").replace("</tool_use_error>", "")
    text = text[text.index(_INVALID_INPUT) :]
    text = text.replace("Agent failed due to the following issue:", "")
    return " ".join(text.split())[:_MAX_REASON]


@dataclass
class Tracker:
    """The state of one coordinated query, built from :func:`parse_message` events.

    A task's result counts as *absorbed* once a successful lead turn came after its
    terminal event: a lead assistant message without an error, or a successful
    ``result`` whose origin names the task's run and that ran a turn (not the CLI's
    zero-turn placeholder for a notification folded into a later turn).
    """

    session_id: str | None = None
    tasks: dict[str, TaskInfo] = field(default_factory=dict)
    agent_calls: dict[str, AgentCallSeen] = field(default_factory=dict)
    #: the lead's Agent calls the CLI refused for invalid input (its schema: a numeric
    #: description, a list prompt, no prompt), by tool_use id, with the CLI's reason; the
    #: CLI never ran their PreToolUse hook, so only the stream shows them
    invalid_calls: dict[str, str] = field(default_factory=dict)
    results: list[ResultSeen] = field(default_factory=list)
    lead_texts: list[str] = field(default_factory=list)
    first_agent_call_at: float | None = None
    started_at: float = field(default_factory=time.monotonic)
    _seq: int = 0
    _by_tool_use: dict[str, str] = field(default_factory=dict)

    def feed(self, message: Any) -> list[TrackedEvent]:
        """Parse ``message`` and update the state; returns the events it held."""
        events = parse_message(message)
        for event in events:
            self.apply(event)
        return events

    def apply(self, event: TrackedEvent) -> None:
        self._seq += 1
        now = time.monotonic()
        if isinstance(event, SessionSeen):
            if self.session_id is None:
                self.session_id = event.session_id
        elif isinstance(event, AgentCallSeen):
            self.agent_calls.setdefault(event.tool_use_id, event)
            if self.first_agent_call_at is None:
                self.first_agent_call_at = now
        elif isinstance(event, TaskStarted):
            task = self.tasks.get(event.task_id) or TaskInfo(event.task_id, started_at=now)
            task.description = event.description or task.description
            task.tool_use_id = event.tool_use_id
            task.prompt = event.prompt
            task.subagent_type = event.subagent_type
            task.run_id = event.run_id
            task.task_type = event.task_type or task.task_type
            task.parent_task_id = event.parent_task_id or task.parent_task_id
            self.tasks[event.task_id] = task
            if event.tool_use_id:
                self._by_tool_use[event.tool_use_id] = event.task_id
        elif isinstance(event, TaskProgress):
            task = self._task(event.task_id, now)
            if event.status and not task.terminal:
                task.status = event.status
            if event.tokens is not None:
                task.tokens = event.tokens
            if event.tool_uses is not None:
                task.tool_uses = event.tool_uses
            task.last_tool = event.last_tool or task.last_tool
            for agent in event.workflow_agents or ():
                task.workflow_agents[agent.index] = agent
        elif isinstance(event, TaskEnded):
            task = self._task(event.task_id, now)
            if not task.terminal:  # clear on whichever comes first; keep the richer fields
                task.status = event.status
                task.ended_at = now
                task.ended_seq = self._seq
            task.summary = event.summary or task.summary
            task.output_file = event.output_file or task.output_file
            task.usage = event.usage or task.usage
            if event.usage and isinstance(event.usage.get("total_tokens"), int):
                task.tokens = int(event.usage["total_tokens"])
        elif isinstance(event, SubagentTurn):
            task_id = self._by_tool_use.get(event.parent_tool_use_id)
            if task_id:
                task = self.tasks[task_id]
                task.last_tool = event.tool_names[-1] if event.tool_names else task.last_tool
                task.last_text = event.text or task.last_text
                task.tokens += event.tokens or 0
        elif isinstance(event, LeadTurn):
            if event.error is None:
                if event.text:
                    self.lead_texts.append(event.text)
                self._absorb_before(self._seq)
        elif isinstance(event, ToolResultSeen):
            reason = invalid_input_reason(event)
            if reason is not None and event.tool_use_id in self.agent_calls:
                self.invalid_calls.setdefault(event.tool_use_id, reason)
        elif isinstance(event, ResultSeen):
            self.results.append(event)
            # A zero-turn placeholder answers nothing: the CLI emits one for a task
            # notification it folded into a later turn (under load, several finish before
            # the lead runs), and that later turn may still fail. Only a turn that ran counts.
            if event.ok and event.origin_run_id and not event.placeholder:
                for task in self.tasks.values():
                    if task.run_id == event.origin_run_id and task.terminal and task.has_output:
                        task.absorbed = True

    def _task(self, task_id: str, now: float) -> TaskInfo:
        if task_id not in self.tasks:
            self.tasks[task_id] = TaskInfo(task_id, started_at=now)
        return self.tasks[task_id]

    def _absorb_before(self, seq: int) -> None:
        for task in self.tasks.values():
            ended_before = task.ended_seq is not None and task.ended_seq < seq
            if task.terminal and ended_before and task.has_output:
                task.absorbed = True

    # -- derived views -------------------------------------------------------------------
    @property
    def open_tasks(self) -> list[TaskInfo]:
        """Started tasks that have not reached a terminal state."""
        return [t for t in self.tasks.values() if not t.terminal]

    @property
    def unabsorbed_tasks(self) -> list[TaskInfo]:
        """Terminal tasks whose result no successful lead turn has used yet."""
        return [t for t in self.tasks.values() if t.terminal and not t.absorbed]

    @property
    def agent_calls_by_message(self) -> dict[str, list[AgentCallSeen]]:
        """Agent calls grouped by API ``message.id``: N calls in one message = parallel."""
        groups: dict[str, list[AgentCallSeen]] = {}
        for call in self.agent_calls.values():
            groups.setdefault(call.message_id or call.tool_use_id, []).append(call)
        return groups

    @property
    def max_parallel_agent_calls(self) -> int:
        groups = self.agent_calls_by_message
        return max((len(calls) for calls in groups.values()), default=0)

    @property
    def last_success(self) -> ResultSeen | None:
        """The last successful lead result with text: that text is the final answer."""
        return next((r for r in reversed(self.results) if r.ok and (r.text or "").strip()), None)

    @property
    def cost_usd(self) -> float:
        """The session's cost so far: the largest ``total_cost_usd`` reported.

        The CLI reports the running total of its process on every result, so the
        maximum (not the sum) is this process's cost.
        """
        return max((r.cost_usd or 0.0 for r in self.results), default=0.0)

    def stop_open_tasks(self, now: float) -> list[TaskInfo]:
        """Mark every task still running ``stopped`` at ``now`` (the run stopped it).

        Returns:
            the tasks it stopped.
        """
        stopped = self.open_tasks
        for task in stopped:
            task.status, task.ended_at = "stopped", now
        return stopped
