"""Turn the SDK's message stream into typed events, and keep the state of the work.

:func:`parse_message` (in the private :mod:`teamlead._parse`, its names re-exported here)
is the one parser; :class:`Tracker` folds its events into what the coordinator needs: the
session id, every task and its terminal state, Agent calls grouped by API message, every
``result``, and which task results a *successful* lead turn has absorbed. A run parses its
stream once, into its own tracker; every other reader of the stream (the CLI's views, the
NDJSON writer, OpenTelemetry, the experiment runner) reads that parse as a
:class:`StreamParse`.

Example:
    >>> tracker = Tracker()
    >>> for line in open("trace.jsonl"):  # doctest: +SKIP
    ...     tracker.feed(json.loads(line))
    >>> tracker.session_id, [t.status for t in tracker.tasks.values()]  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

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
    WorkflowAgentChanged,
    WorkflowCallSeen,
    WorkflowChange,
    WorkflowEnded,
    WorkflowLaunched,
    WorkflowPhaseSeen,
    WorkflowStarted,
    parse_message,
)
from ._workflow import WorkflowRun
from .clock import SYSTEM_CLOCK, Clock

__all__ = [
    "LAUNCH_NOTICE",
    "TERMINAL_STATES",
    "AgentCallSeen",
    "AgentCallsSent",
    "LeadTurn",
    "ResultSeen",
    "SessionSeen",
    "SessionStateSeen",
    "StreamParse",
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
    "WorkflowAgentChanged",
    "WorkflowCallSeen",
    "WorkflowChange",
    "WorkflowEnded",
    "WorkflowLaunched",
    "WorkflowPhaseSeen",
    "WorkflowRun",
    "WorkflowStarted",
    "parse_message",
]


# -- the run's parse, for the stream's other readers ------------------------------------
class StreamParse(Protocol):
    """A run's one parse of its stream, for the readers of that stream.

    The run feeds each SDK message to its tracker before it yields the message, so when a
    reader gets an item, :meth:`events_of` gives what the run made of it and
    :attr:`tracker` is already past it.
    """

    @property
    def tracker(self) -> Tracker | None:
        """The run's own tracker; ``None`` until the run has started."""

    def events_of(self, item: object) -> Sequence[TrackedEvent]:
        """The events the run made of ``item``, the item it yielded last (with the workflow
        changes they made); none for teamlead's own events or an item it did not parse."""


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
    #: how often it was continued after it ended (a ``SendMessage`` to its id resumed it:
    #: the CLI starts the same task id again, and it notifies again)
    continued: int = 0
    #: a ``task_notification`` told of its last end (a second one is a new end)
    notified: bool = False
    #: a ``local_workflow`` task's run: run id, script, phases, agents
    workflow: WorkflowRun | None = None

    @property
    def is_workflow(self) -> bool:
        return self.task_type == "local_workflow" or self.workflow is not None

    @property
    def workflow_agents(self) -> dict[int, WorkflowAgent]:
        """A workflow's agents by their index in the script, from the last snapshot."""
        return self.workflow.agents if self.workflow is not None else {}

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
#: words every refusal of a ``resumeFromRunId`` by the CLI has (2.1.332): its journal cannot
#: be read, is missing, or the run hides its script; each ends "…without resumeFromRunId"
_RESUME_REFUSED = ("resumeFromRunId", "journal")
#: the tool result of an Agent call whose agent runs in the background (its task events follow)
LAUNCH_NOTICE = "Async agent launched"
_MAX_REASON = 300
#: how a resumed CLI's summary ends for an agent it has no completion record of (2.1.332)
_ORPHAN_NOTICE = "didn't finish before the previous session ended"


def _refuses_resume(result: ToolResultSeen) -> bool:
    """Whether ``result`` (of a Workflow call with ``resumeFromRunId``) is the CLI refusing
    to resume the run, rather than launching it."""
    return result.is_error and any(word in result.text for word in _RESUME_REFUSED)


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

    Every time it stamps (a task's start and end, the first delegation) is read from
    ``clock``, the run's own: row durations are then right on an injected clock too.
    """

    session_id: str | None = None
    tasks: dict[str, TaskInfo] = field(default_factory=dict)
    agent_calls: dict[str, AgentCallSeen] = field(default_factory=dict)
    #: the lead's Agent calls the CLI refused for invalid input (its schema: a numeric
    #: description, a list prompt, no prompt), by tool_use id, with the CLI's reason; the
    #: CLI never ran their PreToolUse hook, so only the stream shows them
    invalid_calls: dict[str, str] = field(default_factory=dict)
    #: the runs whose resume (``resumeFromRunId``) the CLI refused, by ``wf_`` id, with its
    #: reason: a new run, not a resume, can take their unfinished agents over
    refused_resumes: dict[str, str] = field(default_factory=dict)
    results: list[ResultSeen] = field(default_factory=list)
    lead_texts: list[str] = field(default_factory=list)
    #: the tool the lead called last (the last tool of its latest message that called one)
    lead_last_tool: str | None = None
    #: the files the lead read with ``Read`` (each ``file_path`` as it wrote it, normalised)
    lead_reads: set[str] = field(default_factory=set)
    #: when the lead first delegated: its first Agent or Workflow call (``clock.monotonic()``)
    first_delegation_at: float | None = None
    #: the clock every stamp is read from (the run's; the system's by default)
    clock: Clock = field(default=SYSTEM_CLOCK, repr=False, compare=False)
    #: when the tracker was made, on ``clock``
    started_at: float = field(default=-1.0)
    _seq: int = 0
    _by_tool_use: dict[str, str] = field(default_factory=dict)
    _started: set[str] = field(default_factory=set)  # the tasks whose start was seen
    _agent_results: set[str] = field(default_factory=set)
    _workflow_calls: dict[str, WorkflowCallSeen] = field(default_factory=dict)
    _launches: dict[str, WorkflowLaunched] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.started_at < 0:
            self.started_at = self.clock.monotonic()

    def feed(self, message: Any) -> list[TrackedEvent]:
        """Parse ``message`` and update the state; returns the events it held, then the
        workflow changes they made (:data:`WorkflowChange`)."""
        events = parse_message(message)
        changes: list[TrackedEvent] = []
        for event in events:
            changes += self.apply(event)
        return events + changes

    def apply(self, event: TrackedEvent) -> list[WorkflowChange]:
        """Fold ``event`` into the state; returns the workflow changes it made."""
        changes: list[WorkflowChange] = []
        run: WorkflowRun | None
        self._seq += 1
        now = self.clock.monotonic()
        if isinstance(event, AgentCallSeen | WorkflowCallSeen) and self.first_delegation_at is None:
            self.first_delegation_at = now
        if isinstance(event, SessionSeen):
            if self.session_id is None:
                self.session_id = event.session_id
        elif isinstance(event, AgentCallSeen):
            self.agent_calls.setdefault(event.tool_use_id, event)
        elif isinstance(event, TaskStarted):
            task = self._task(event.task_id, now)
            if task.terminal and not task.is_workflow and event.task_id in self._started:
                # continued (a SendMessage to its id): its next notification supersedes the
                # last, so it is running again and nothing of its last end counts as used;
                # a first start that comes after its end (out of order) changes no end
                task.continued += 1
                task.status, task.ended_at, task.ended_seq = "running", None, None
                task.absorbed, task.summary, task.notified = False, None, False
            task.description = event.description or task.description
            # the call that started it (a continuation's task_started names the SendMessage)
            task.tool_use_id = task.tool_use_id or event.tool_use_id
            task.prompt = task.prompt or event.prompt
            task.subagent_type = event.subagent_type
            task.run_id = event.run_id
            task.task_type = event.task_type or task.task_type
            task.parent_task_id = event.parent_task_id or task.parent_task_id
            self._started.add(event.task_id)
            if event.tool_use_id:
                self._by_tool_use[event.tool_use_id] = event.task_id
            if event.task_type == "local_workflow":
                run = self._workflow(task)
                run.name = event.workflow_name or run.name
                run.description = event.description or run.description
                launched = self._launches.get(event.tool_use_id or "")
                if launched is not None:
                    changes += self._launched(launched)
        elif isinstance(event, WorkflowCallSeen):
            self._workflow_calls.setdefault(event.tool_use_id, event)
        elif isinstance(event, WorkflowLaunched):
            self._launches[event.tool_use_id] = event
            changes += self._launched(event)
        elif isinstance(event, TaskProgress):
            task = self._task(event.task_id, now)
            if event.status and not task.terminal:
                task.status = event.status
            if event.tokens is not None:
                task.tokens = event.tokens
            if event.tool_uses is not None:
                task.tool_uses = event.tool_uses
            task.last_tool = event.last_tool or task.last_tool
            if event.workflow_agents is not None:
                task.task_type = task.task_type or "local_workflow"
                run = self._workflow(task)
                if not run.announced:
                    changes.append(run.started())
                changes += run.snapshot(event.workflow_agents, event.workflow_phases)
        elif isinstance(event, TaskEnded):
            task = self._task(event.task_id, now)
            if task.terminal and _ORPHAN_NOTICE in (event.summary or ""):
                # a resumed CLI's report of an agent it found no completion record of in the
                # session it resumed: this run saw that agent end, which stands
                return changes
            if event.workflow_run_id and task.workflow is None:
                task.task_type = task.task_type or "local_workflow"  # a stopped notice
            run = self._workflow(task) if task.is_workflow else None
            if run is not None and event.workflow_run_id:
                run.run_id = run.run_id or event.workflow_run_id
            notice = event.source == "task_notification"
            # the same task notifying again (continued with no start seen): a new end, which
            # supersedes the last one, and which no lead turn has used yet; a repeat of the
            # last notification (its state and summary) is that same end
            repeat = (event.status, event.summary or None) == (task.status, task.summary)
            again = notice and task.notified and run is None and not repeat
            if not task.terminal or again:  # clear on whichever comes first (one end)
                task.status = event.status
                task.ended_at = now
                task.ended_seq = self._seq
                task.absorbed = task.absorbed and not again
                if run is not None and not run.ended:
                    changes.append(run.end(event.status, event.error))
            task.notified = task.notified or notice
            if run is not None:
                run.output_file = event.output_file or run.output_file
            task.summary = (event.summary or None) if again else event.summary or task.summary
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
            if event.tool_names:
                self.lead_last_tool = event.tool_names[-1]
            self.lead_reads.update(os.path.normpath(p) for p in event.read_paths)
            if event.error is None:
                if event.text:
                    self.lead_texts.append(event.text)
                self._absorb_before(self._seq)
        elif isinstance(event, ToolResultSeen):
            refused = self._workflow_calls.get(event.tool_use_id)
            if refused is not None and refused.resume_from and _refuses_resume(event):
                why = " ".join(event.text.split())[:_MAX_REASON]
                self.refused_resumes.setdefault(refused.resume_from, why)
            if event.tool_use_id in self.agent_calls:
                reason = invalid_input_reason(event)
                if reason is not None:
                    self.invalid_calls.setdefault(event.tool_use_id, reason)
                elif LAUNCH_NOTICE not in event.text:
                    self._agent_results.add(event.tool_use_id)  # what became of the call
        elif isinstance(event, ResultSeen):
            self.results.append(event)
            # A zero-turn placeholder answers nothing: the CLI emits one for a task
            # notification it folded into a later turn (under load, several finish before
            # the lead runs), and that later turn may still fail. Only a turn that ran counts.
            if event.ok and event.origin_run_id and not event.placeholder:
                for task in self.tasks.values():
                    if task.run_id == event.origin_run_id and task.terminal and task.has_output:
                        task.absorbed = True
        return changes

    def lead_read(self, path: str) -> bool:
        """Whether the lead read the file ``path`` with ``Read``."""
        return os.path.normpath(path) in self.lead_reads

    def call_seen(self, tool_use_id: str) -> bool:
        """Whether the stream showed what became of the Agent call ``tool_use_id``: its task
        started, a tool result that ended it came (not the notice of a background launch),
        or the CLI refused its input."""
        return (
            tool_use_id in self._by_tool_use
            or tool_use_id in self._agent_results
            or tool_use_id in self.invalid_calls
        )

    def _workflow(self, task: TaskInfo) -> WorkflowRun:
        """``task``'s workflow run, made on first sight (with what its call said)."""
        if task.workflow is None:
            task.workflow = WorkflowRun(task.task_id, description=task.description)
            call = self._workflow_calls.get(task.tool_use_id or "")
            if call is not None:
                task.workflow.resume_from = call.resume_from
                task.workflow.script_path = call.script_path
        return task.workflow

    def _launched(self, event: WorkflowLaunched) -> list[WorkflowChange]:
        """The tool result gave a workflow's run id and script: record, announce once."""
        task_id = event.task_id or self._by_tool_use.get(event.tool_use_id)
        if not task_id:
            return []
        task = self._task(task_id, self.clock.monotonic())
        task.task_type = task.task_type or "local_workflow"
        task.tool_use_id = task.tool_use_id or event.tool_use_id
        self._by_tool_use.setdefault(event.tool_use_id, task_id)
        run = self._workflow(task)
        run.run_id = event.run_id
        run.script_path = event.script_path or run.script_path
        run.transcript_dir = event.transcript_dir or run.transcript_dir
        run.name = run.name or event.name
        run.description = run.description or event.summary or ""
        task.description = task.description or run.description
        self._link_fresh(run)
        return [] if run.announced else [run.started()]

    def _link_fresh(self, run: WorkflowRun) -> None:
        """A new run launched after the CLI refused to resume one that lost agents is that
        run's fresh run (the refused run of the same name first, else the oldest)."""
        if run.fresh_of or run.resume_from or not run.run_id:
            return
        waiting = [
            r
            for r in self.workflow_runs
            if r.run_id in self.refused_resumes
            and r.run_id != run.run_id
            and self.later_attempt(r) is None
            and r.lost_agents(exited=True)
        ]
        same = [r for r in waiting if r.name and r.name == run.name] or waiting
        if same:
            run.fresh_of = same[0].run_id

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
    def workflow_runs(self) -> list[WorkflowRun]:
        """Every workflow attempt seen, in the order their tasks appeared."""
        return [t.workflow for t in self.tasks.values() if t.workflow is not None]

    def later_attempt(self, run: WorkflowRun) -> WorkflowRun | None:
        """The latest attempt of ``run``'s ``wf_`` run after ``run`` itself (a resume, or
        the fresh run of a run the CLI refused to resume), if any."""
        attempts = [
            r
            for r in self.workflow_runs
            if run.run_id and (r.run_id == run.run_id or r.fresh_of == run.run_id)
        ]
        return attempts[-1] if attempts and attempts[-1] is not run else None

    def lost_workflow_agents(
        self, *, exited: bool = False
    ) -> list[tuple[WorkflowRun, list[WorkflowAgent]]]:
        """Each workflow run whose latest attempt lost agents, with those agents.

        An earlier attempt that a resume (the same ``wf_`` id) followed is judged by that
        resume instead; one that a fresh run followed keeps the lost agents the fresh run
        has none of the same label of. With ``exited``, the CLI has exited: an attempt
        still running lost every agent not ``done``.
        """
        out: list[tuple[WorkflowRun, list[WorkflowAgent]]] = []
        for run in self.workflow_runs:
            later = self.later_attempt(run)
            if later is not None and later.fresh_of != run.run_id:
                continue
            lost = run.lost_agents(exited=exited)
            if later is not None:
                lost = [a for a in lost if later.agent_labelled(a.label) is None]
            if lost:
                out.append((run, lost))
        return out

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
            if task.workflow is not None and not task.workflow.ended:
                task.workflow.end("stopped")
        return stopped
