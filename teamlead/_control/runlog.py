"""A run read back from its NDJSON log (``teamlead ask --json``'s output), as a
:class:`~.detail.RunDetail`: what ``teamlead view run.ndjson`` shows.

The log's lines are the agents' words, so it is read with limits (:data:`MAX_LOG_BYTES`,
:data:`MAX_LINE_BYTES` a line, :data:`~.detail.MAX_NODES` agents); each record is parsed
into its event type at this edge, unknown types and malformed records skipped, older
versions read as their fields allow, every text through :func:`~.detail.plain`.

A finished run's rows are its ``finished`` line's (each agent's last ``agent_usage`` adds
its last tool). A log with no ``finished`` line (the run was killed, lost its machine, or
still runs) is rebuilt from its records: each task with its parent, progress and end, each
workflow's phases and agents, the Agent calls that never became a task and what the gate
did with them; the run, and every agent whose end the log lacks, is :data:`UNFINISHED`.
A file with no record of a run is refused.

Example:
    >>> detail = read_log(Path("run.ndjson"))  # doctest: +SKIP
    >>> detail.status, [child.label for child in detail.lead.children]  # doctest: +SKIP
    ('unfinished', ['security', 'tests'])
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from .._claude import FileProblem, open_regular
from .._ndjson import RECORD_FACTS, current_record, read_record
from .._private import json_object
from ..errors import UsageError
from ..events import (
    CUT_ENDS,
    AgentUsage,
    ConcurrencyChanged,
    Finished,
    SpawnDecided,
    TaskDisposition,
)
from ..tracker import (
    AgentCallSeen,
    LeadTurn,
    SessionSeen,
    SubagentTurn,
    TaskEnded,
    TaskProgress,
    TaskStarted,
    Tracker,
    WorkflowAgent,
    WorkflowAgentChanged,
    WorkflowEnded,
    WorkflowPhaseSeen,
    WorkflowStarted,
)
from .detail import (
    MAX_NODES,
    AgentNode,
    LimitHistory,
    NodeKind,
    RunDetail,
    agent_state,
    build_tree,
    plain,
    task_state,
    total,
)

__all__ = [
    "MAX_LINE_BYTES",
    "MAX_LOG_BYTES",
    "UNFINISHED",
    "UNFINISHED_REASON",
    "detail_of_log",
    "read_log",
]

#: The largest log read (bytes).
MAX_LOG_BYTES = 512 * 1024 * 1024
#: The longest line read (a ``finished`` line with every agent's result can be large).
MAX_LINE_BYTES = 64 * 1024 * 1024
#: The status of a run whose log has no ``finished`` line, and the state of each of its
#: agents whose end the log does not hold.
UNFINISHED = "unfinished"
#: Why a run shows :data:`UNFINISHED` (its ``reason``).
UNFINISHED_REASON = (
    "the log ends without a `finished` line: the run was stopped before its end or is still running"
)
_DONE = frozenset({"completed", "included"})
_KINDS: dict[str, NodeKind] = {
    "workflow_agent": "workflow_agent",
    "teammate": "teammate",
    "call": "call",
}
_ID = 120  # characters of an id kept
#: what a workflow agent's record leaves out once known: kept from its earlier ones
_KEPT = ("agent_id", "phase", "tokens", "duration_ms")
_WORKFLOW = "local_workflow"  # a workflow task's ``task_type``
_WORKFLOW_RECORDS = (WorkflowStarted, WorkflowPhaseSeen, WorkflowAgentChanged, WorkflowEnded)
#: the fields a workflow agent's record tells of it
_AGENT_FIELDS = tuple(
    f.name
    for f in dataclasses.fields(WorkflowAgent)
    if f.name in {g.name for g in dataclasses.fields(WorkflowAgentChanged)}
)
_TOOL = 80


#: The records a log is read for, by ``type`` (the lead's results make no row).
_READ = frozenset(
    {"finished", "agent_usage", "concurrency_changed", "spawn_decided", *RECORD_FACTS}
) - {"result"}


def read_log(path: Path) -> RunDetail:
    """The run in the NDJSON log at ``path``, finished or not.

    Raises:
        UsageError: the file cannot be read, is too large, or holds no record of a run.
    """
    try:
        log = open_regular(path)  # a FIFO (a pipe) is refused, never waited on
    except FileProblem as problem:
        raise UsageError(problem.message) from None
    try:
        with log:
            size = os.fstat(log.fileno()).st_size
            if size > MAX_LOG_BYTES:
                raise UsageError(f"{path} is larger than a run's log can be ({size} bytes)")
            lines = iter(lambda: log.readline(MAX_LINE_BYTES + 1), b"")
            return detail_of_log(lines, name=path.stem)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None


def detail_of_log(lines: Iterable[bytes | str], *, name: str = "log") -> RunDetail:
    """The run in ``lines`` (a run's NDJSON log): its ``finished`` line's, or, when the log
    ends before one, the :data:`UNFINISHED` run its records tell.

    Raises:
        UsageError: no line is a record of a run (not a run's log).
    """
    log = _Log()
    for raw in lines:
        found = json_object(raw) if len(raw) <= MAX_LINE_BYTES else None
        record = current_record(found or {})
        if not isinstance(record.get("type"), str) or record["type"] not in _READ:
            continue
        try:
            event = read_record(record)
        except (ValueError, RecursionError):
            continue
        log.add(event)
    if not log.records:
        raise UsageError(
            "the file holds no record of a run: it is not a run's NDJSON log "
            "(`teamlead ask --json` writes one; `teamlead view` shows a live run)"
        )
    return log.detail(name)


def _ident(value: str) -> str:
    """An id of the log, as the tree keeps it (plain, cut short)."""
    return plain(value, _ID) or "?"


def _usage_tokens(usage: AgentUsage | None) -> int | None:
    return total((usage.input_tokens, usage.output_tokens)) if usage is not None else None


def _finished_row(row: TaskDisposition, usage: Mapping[str, AgentUsage]) -> AgentNode:
    """A row of the ``finished`` line as the tree shows it."""
    seen = usage.get(row.id)
    node_id = _ident(row.id)
    return AgentNode(
        id=node_id,
        kind=_KINDS.get(row.kind, "agent"),
        label=plain(row.label or row.description or row.id) or node_id,
        # an agent the CLI called completed that never finished shows how it was cut
        state=row.ended if row.ended in CUT_ENDS else "done" if row.status in _DONE else row.status,
        parent=_ident(row.parent) if row.parent is not None else None,
        phase=row.phase,
        tokens=total((row.tokens_in, row.tokens_out)),
        requests=row.requests,
        last_tool=plain(seen.last_tool, _TOOL) if seen is not None else None,
        duration_s=row.duration_s,
    )


# -- what the records of a log say -------------------------------------------------------
class _Log:
    """What a log's records say, folded in the order they came (:meth:`add`), and the run
    it makes (:meth:`detail`). Its records are folded by a
    :class:`~teamlead.tracker.Tracker`, as a live run's are (a workflow's changes as the
    snapshots they came from). It follows at most :data:`MAX_NODES` tasks, calls and
    workflow agents; the rest are counted."""

    def __init__(self) -> None:
        self.records = 0
        self.finished: Finished | None = None
        self.usage: dict[str, AgentUsage] = {}
        self.limits = LimitHistory()
        self.first_at: float | None = None
        self.lead_tool: str | None = None
        self.tracker = Tracker()
        self.spawned: dict[str, str] = {}  # an Agent call's state, by its tool_use id
        self.workflows_ended: set[str] = set()
        self.followed = 0
        self.omitted = 0

    def add(self, event: object) -> None:
        """Fold one record's event in."""
        self.records += 1
        tracker = self.tracker
        if isinstance(event, Finished):
            self.finished = event
        elif isinstance(event, AgentUsage):
            if event.agent_id in self.usage or len(self.usage) <= MAX_NODES:
                self.usage[event.agent_id] = event
        elif isinstance(event, ConcurrencyChanged):
            self.limits.record(event)
            self.first_at = event.at if self.first_at is None else min(self.first_at, event.at)
        elif isinstance(event, LeadTurn):
            if event.tool_names:
                self.lead_tool = event.tool_names[-1]
        elif isinstance(event, AgentCallSeen):
            if event.tool_use_id not in tracker.agent_calls and self._follow(new=True):
                tracker.apply(event)
        elif isinstance(event, SpawnDecided):
            if event.tool_use_id in tracker.agent_calls:
                admitted = event.outcome == "admitted"
                self.spawned[event.tool_use_id] = UNFINISHED if admitted else event.outcome
        elif isinstance(event, (TaskStarted, TaskProgress, TaskEnded)):
            new = isinstance(event, TaskStarted)
            if event.task_id in tracker.tasks or self._follow(new=new):
                tracker.apply(event)
        elif isinstance(event, (SessionSeen, SubagentTurn)):
            tracker.apply(event)
        else:
            self._workflow(event)

    def _follow(self, *, new: bool) -> bool:
        """Whether one more task, call or agent may be followed; one refused is counted
        when ``new`` (the record that introduces it: each is counted once)."""
        if self.followed >= MAX_NODES:
            self.omitted += new
            return False
        self.followed += 1
        return True

    def _workflow(self, event: object) -> None:
        if not isinstance(event, _WORKFLOW_RECORDS):
            return
        if event.task_id not in self.tracker.tasks:  # a workflow made on first sight
            started = event if isinstance(event, WorkflowStarted) else None
            if not self._follow(new=started is not None):
                return
            text, name = (started.description, started.name) if started else ("", None)
            self.tracker.apply(
                TaskStarted(event.task_id, None, text, task_type=_WORKFLOW, workflow_name=name)
            )
        task = self.tracker.tasks[event.task_id]
        if isinstance(event, WorkflowPhaseSeen) and 0 < event.index <= MAX_NODES:
            titles = ("",) * (event.index - 1) + (event.title,)  # a snapshot's, up to it
            self.tracker.apply(
                TaskProgress(task.task_id, workflow_agents=(), workflow_phases=titles)
            )
        elif isinstance(event, WorkflowAgentChanged):
            before = task.workflow.agents.get(event.index) if task.workflow else None
            if before is not None or self._follow(new=event.previous is None):
                agents = (_agent_of(event, before),)
                self.tracker.apply(TaskProgress(task.task_id, workflow_agents=agents))
        elif isinstance(event, WorkflowEnded):
            self.workflows_ended.add(task.task_id)

    # -- the run --------------------------------------------------------------------------
    def detail(self, name: str) -> RunDetail:
        finished = self.finished
        status = finished.status if finished is not None else UNFINISHED
        lead_usage = self.usage.get("")
        lead = AgentNode(
            id="lead",
            kind="lead",
            label="lead",
            state=status,
            tokens=_usage_tokens(lead_usage),
            requests=lead_usage.requests if lead_usage else None,
            last_tool=plain(
                self.lead_tool or (lead_usage.last_tool if lead_usage else None), _TOOL
            ),
        )
        if finished is not None:
            rows = (_finished_row(row, self.usage) for row in finished.tasks)
            omitted = build_tree(lead, rows, {})
        else:  # the records carry no wall clock but the governor's changes
            omitted = build_tree(lead, self._rows(), self._phases()) + self.omitted
        tasks = finished.tasks if finished is not None else []
        started = [r.started_at for r in tasks if r.started_at is not None]
        ended = [r.ended_at for r in tasks if r.ended_at is not None]
        if self.first_at is not None:
            started.append(self.first_at)
        if started and ended:
            lead.duration_s = max(ended) - min(started)
        session = finished.session_id if finished is not None else None
        return RunDetail(
            run=plain(session or self.tracker.session_id or name, 80) or name,
            source="log",
            status=status,
            reason=finished.reason if finished is not None else UNFINISHED_REASON,
            lead=lead,
            limits=self.limits,
            omitted=omitted,
            now=max(ended) if ended else None,
            started=min(started) if started else None,
        )

    def _rows(self) -> Iterable[AgentNode]:
        """The rows a ``finished`` line would have carried, as far as the records tell:
        each task (a workflow's agents after it), then each Agent call that never became a
        task."""
        for task_id, task in self.tracker.tasks.items():
            run = task.workflow
            usage = self.usage.get(task_id)
            tool = None if task.is_workflow else task.last_tool  # a workflow's: an agent's
            tokens = _usage_tokens(usage)
            if tokens is None and not (run and run.agents):  # a workflow's: its agents'
                tokens = task.tokens or None
            node_id = _ident(task_id)
            label = task.description or task.subagent_type or (run.name if run else None)
            yield AgentNode(
                id=node_id,
                kind="workflow" if task.is_workflow else "agent",
                label=plain(label or task_id) or node_id,
                state=task_state(task, UNFINISHED),
                parent=_ident(task.parent_task_id) if task.parent_task_id else None,
                tokens=tokens,
                requests=usage.requests if usage is not None else None,
                last_tool=plain((usage.last_tool if usage is not None else None) or tool, _TOOL),
                duration_s=_seconds((task.usage or {}).get("duration_ms")),
            )
            if run is not None:
                over = task.terminal or task_id in self.workflows_ended
                for index in sorted(run.agents):
                    yield self._agent_row(task_id, index, run.agents[index], over)
        for tool_use_id, call in self.tracker.agent_calls.items():
            if not self.tracker.call_seen(tool_use_id):
                node_id = _ident(tool_use_id)
                label = plain(call.description or tool_use_id) or node_id
                state = self.spawned.get(tool_use_id, UNFINISHED)
                yield AgentNode(id=node_id, kind="call", label=label, state=state)

    def _agent_row(self, task_id: str, index: int, agent: WorkflowAgent, over: bool) -> AgentNode:
        usage = self.usage.get(agent.agent_id) if agent.agent_id else None
        # lost: its workflow ended without it; unfinished: the log ends before it did
        state = agent_state(agent, "lost" if over else UNFINISHED)
        tokens = _usage_tokens(usage)
        node_id = _ident(agent.agent_id or f"{task_id}#{index}")
        return AgentNode(
            id=node_id,
            kind="workflow_agent",
            label=plain(agent.label or f"agent {index}") or node_id,
            state=state,
            parent=_ident(task_id),
            phase=plain(agent.phase),
            tokens=tokens if tokens is not None else agent.tokens,
            requests=usage.requests if usage is not None else None,
            last_tool=plain(usage.last_tool, _TOOL) if usage is not None else None,
            duration_s=_seconds(agent.duration_ms),
        )

    def _phases(self) -> dict[str, list[str]]:
        """Each workflow's phase titles, in the script's order."""
        return {
            _ident(task_id): [plain(title) or "" for title in task.workflow.phases]
            for task_id, task in self.tracker.tasks.items()
            if task.workflow is not None and task.workflow.phases
        }


def _agent_of(event: WorkflowAgentChanged, before: WorkflowAgent | None) -> WorkflowAgent:
    """The workflow agent ``event`` tells, with what ``before`` told of it and ``event``
    leaves out (:data:`_KEPT`)."""
    said = {name: getattr(event, name) for name in _AGENT_FIELDS}
    if before is not None:
        said.update({name: getattr(before, name) for name in _KEPT if said[name] is None})
    return WorkflowAgent(**said)


def _seconds(ms: object) -> float | None:
    return round(ms / 1000, 3) if isinstance(ms, (int, float)) and ms >= 0 else None
