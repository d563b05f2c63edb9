"""One run in detail, for ``teamlead view``: its agent tree, its queue, its waiting
approvals and its governor's limit per model over time.

:class:`RunDetail` is one shape for two sources, drawn the same way: a live run's
(:func:`live_detail`, read on the run's loop off its state, the ``detail`` op's answer) and
a run's read back from its NDJSON log (:mod:`.runlog`). The limits come from the run's
:class:`~teamlead.events.ConcurrencyChanged` events, kept bounded by a
:class:`LimitHistory`. Every text is the agents' or the user's: plain, secrets redacted,
cut short; the tree holds at most :data:`MAX_NODES`, the rest counted.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from .._metering import LEAD
from .._redact import redact
from .._run import clip, labels_from
from ..events import CUT_ENDS, AgentKind, ConcurrencyChanged
from ..tracker import TaskInfo, WorkflowAgent

if TYPE_CHECKING:
    from .._metering import AgentBook
    from .._run import RunState

__all__ = [
    "DETAIL_VERSION",
    "MAX_NODES",
    "AgentNode",
    "LimitHistory",
    "NodeKind",
    "QueuedCall",
    "RunDetail",
    "WaitingApproval",
    "agent_state",
    "build_tree",
    "live_detail",
    "plain",
    "task_state",
    "total",
    "tree_parents",
]

#: The ``version`` of a detail's JSON.
DETAIL_VERSION = 1
#: Nodes a tree holds at most (the lead included); further agents are only counted.
MAX_NODES = 2000
_TEXT = 200
_POINTS = 600  # limit changes kept per bucket (the oldest go first)
_BUCKETS = 16

#: An agent's node, of its :data:`~teamlead.events.AgentKind` (never ``task``: a task's node
#: is an ``agent``, nested ones under their parent, or a ``workflow``), or a workflow's
#: ``phase``, which groups the workflow's ``workflow_agent`` nodes.
NodeKind: TypeAlias = Literal[AgentKind, "phase"]


def plain(value: str | None, limit: int = _TEXT) -> str | None:
    """``value`` as one line of plain text, secrets redacted, at most ``limit`` characters."""
    return None if value is None else clip(redact(value), limit)


@dataclass
class AgentNode:
    """One agent of the run's tree (or a workflow's phase, which groups its agents).

    Attributes:
        id: the agent's id (a task id, a workflow agent's id), unique in the tree.
        kind: what it is (:data:`NodeKind`).
        label: its description or label (plain text).
        state: ``running``, ``queued``, ``done``, ``failed``, or the row's status.
        tokens: input plus output tokens, when known.
        requests: requests counted at the relay, when known.
        last_tool: the tool it called last, when known.
        duration_s: how long it ran (so far, while it runs).
        model: the model its requests named, when known.
        children: the agents it started, a workflow's phases, a phase's agents.
        parent: the id of the node it hangs under until the tree is built (:func:`build_tree`).
        phase: a workflow agent's phase title, until the tree groups it under its phase.
    """

    id: str
    kind: NodeKind
    label: str
    state: str
    tokens: int | None = None
    requests: int | None = None
    last_tool: str | None = None
    duration_s: float | None = None
    model: str | None = None
    children: list[AgentNode] = field(default_factory=list)
    parent: str | None = None
    phase: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The node and its children, without what only builds the tree (``parent``,
        ``phase``)."""
        data = {k: v for k, v in vars(self).items() if k not in ("parent", "phase")}
        data["duration_s"] = None if self.duration_s is None else round(self.duration_s, 1)
        data["children"] = [child.to_json() for child in self.children]
        return data


@dataclass(frozen=True)
class QueuedCall:
    """An Agent call waiting in the spawn gate for a slot."""

    tool_use_id: str
    description: str
    waited_s: float


@dataclass(frozen=True)
class WaitingApproval:
    """A permission request waiting for its answer."""

    tool: str
    agent: str
    what: str
    waited_s: float


class LimitHistory:
    """The governor's limit per bucket (``provider/model``) over time, from the run's
    :class:`~teamlead.events.ConcurrencyChanged` events: at most 600 changes for each of 16
    buckets (the oldest go first)."""

    def __init__(self) -> None:
        self._points: dict[str, collections.deque[tuple[float, int, int, str]]] = {}

    def record(self, event: ConcurrencyChanged) -> None:
        """Keep one change; a bucket's first also says what it was before (its start)."""
        points = self._points.get(event.key)
        if points is None:
            if len(self._points) >= _BUCKETS:
                return
            points = self._points[event.key] = collections.deque(maxlen=_POINTS)
            if event.previous_cap != event.cap:
                points.append((event.at, event.previous_cap, event.previous_cap, "start"))
        points.append((event.at, event.effective, event.cap, event.reason))

    def to_json(self) -> list[dict[str, Any]]:
        """Each bucket's points, ``[at, effective, cap, reason]``, oldest first."""
        return [
            {"key": plain(key, 120), "points": [list(p) for p in points]}
            for key, points in self._points.items()
        ]


@dataclass
class RunDetail:
    """One run in detail (see the module docstring).

    Attributes:
        run: the run's id.
        source: ``live`` (asked of the run) or ``log`` (read back from its NDJSON).
        status: the run's status (``running``, ``paused``, ...; a log's ``finished`` one,
            or ``unfinished`` when the log has no ``finished`` line).
        lead: the root of the agent tree.
        queue: the Agent calls waiting in the spawn gate.
        waiting_for_slot: workflow agents whose first request the relay holds for a slot.
        held_requests: requests a pause holds.
        approvals: permission requests waiting for an answer.
        limits: the governor's limit per bucket over time.
        omitted: agents left out of the tree (past :data:`MAX_NODES`).
        now: when this was read (wall clock; the chart's right edge while a run goes).
        started: when the run started (wall clock), if known.
        reason: a finished run's reason code; for an ``unfinished`` one, why it shows so.
    """

    run: str
    source: Literal["live", "log"]
    status: str
    lead: AgentNode
    queue: list[QueuedCall] = field(default_factory=list)
    waiting_for_slot: int = 0
    held_requests: int = 0
    approvals: list[WaitingApproval] = field(default_factory=list)
    limits: LimitHistory = field(default_factory=LimitHistory)
    omitted: int = 0
    now: float | None = None
    started: float | None = None
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The detail as the endpoint answers it and the page reads it (versioned)."""
        return {
            "version": DETAIL_VERSION,
            "run": self.run,
            "source": self.source,
            "status": self.status,
            "reason": self.reason,
            "started": self.started,
            "now": self.now,
            "tree": self.lead.to_json(),
            "omitted": self.omitted,
            "queue": [asdict(q) for q in self.queue],
            "waiting_for_slot": self.waiting_for_slot,
            "held_requests": self.held_requests,
            "approvals": [asdict(a) for a in self.approvals],
            "limits": self.limits.to_json(),
        }


def build_tree(
    lead: AgentNode, rows: Iterable[AgentNode], phases: Mapping[str, Sequence[str]]
) -> int:
    """Hang ``rows`` under ``lead``: each under its parent's row (the lead's when it has
    none in the tree), a workflow's agents under its phases; ``phases`` are a workflow's
    phase titles in order, by its row's id (else the order its agents came in).

    Returns:
        how many rows were left out (past :data:`MAX_NODES`).
    """
    nodes: dict[str, AgentNode] = {}
    workflow_agents: dict[str, list[AgentNode]] = {}
    taken = omitted = 0
    for row in rows:
        if taken >= MAX_NODES - 1:
            omitted += 1
            continue
        taken += 1
        if row.kind == "workflow_agent" and row.parent is not None:
            workflow_agents.setdefault(row.parent, []).append(row)
            continue
        if row.id in nodes:  # a repeated id gets the next free one (never a taken one)
            number = len(nodes)
            while f"{row.id}#{number}" in nodes:
                number += 1
            row.id = f"{row.id}#{number}"
        nodes[row.id] = row
    for parent in dict.fromkeys([*workflow_agents, *phases]):
        agents = workflow_agents.get(parent, [])
        holder = nodes.get(parent)
        if holder is None and not agents:
            continue
        if holder is None:  # its workflow's row is missing: a workflow of its own
            holder = nodes[parent] = AgentNode(id=parent, kind="workflow", label=parent, state="?")
        holder.kind = "workflow"
        # the phases in the script's order, else in the order their agents came
        titles = phases.get(parent) or list(dict.fromkeys(n.phase for n in agents if n.phase))
        holder.children.extend(_phase_nodes(parent, agents, titles))
        if holder.tokens is None:
            holder.tokens = total(node.tokens for node in agents)
    ups = tree_parents({node_id: node.parent for node_id, node in nodes.items()})
    for node_id, node in nodes.items():
        up = ups[node_id]
        (lead if up is None else nodes[up]).children.append(node)
    return omitted


def tree_parents(parents: Mapping[str, str | None]) -> dict[str, str | None]:
    """Each node's parent in a tree of them (``None``: under the root): its own parent
    when that is a node, else the root's; one node of each loop of parents (``a`` under
    ``b`` under ``a``) hangs under the root, for a loop never reaches it and each of its
    nodes would be left out.

    Example:
        >>> tree_parents({"a": "b", "b": "a", "c": "gone", "d": "c"})
        {'a': None, 'b': 'a', 'c': None, 'd': 'c'}
    """
    placed: set[str] = set()
    looped: set[str] = set()
    for start in parents:
        path: set[str] = set()
        at: str | None = start
        while at is not None and at in parents and at not in placed:
            if at in path:
                looped.add(at)  # the loop is cut here
                break
            path.add(at)
            up = parents[at]
            at = None if up == at else up
        placed |= path
    return {
        node: None if node in looped or up == node or up not in parents else up
        for node, up in parents.items()
    }


def _phase_nodes(
    parent_id: str, agents: Iterable[AgentNode], titles: Iterable[str]
) -> list[AgentNode]:
    """A workflow's agents grouped under their phases, in phase order (the titles known
    first, then any other an agent named; agents of no phase under ``(no phase)``)."""
    groups: dict[str, list[AgentNode]] = {title: [] for title in titles}
    for node in agents:
        groups.setdefault(node.phase or "", []).append(node)
    out = []
    for index, (title, members) in enumerate(groups.items()):
        if not members and not title:
            continue
        out.append(
            AgentNode(
                id=f"{parent_id}/phase-{index}",
                kind="phase",
                label=plain(title) or "(no phase)",
                state=_phase_state([m.state for m in members]),
                tokens=total(m.tokens for m in members),
                requests=total(m.requests for m in members),
                children=members,
            )
        )
    return out


def _phase_state(states: list[str]) -> str:
    if not states:
        return "pending"
    if any(s in ("running", "queued") for s in states):
        return "running"
    if all(s in ("done", "completed", "cached") for s in states):
        return "done"
    return "failed" if any(s in ("failed", "error", "timeout") for s in states) else states[-1]


def task_state(task: TaskInfo, unended: str) -> str:
    """A task's state in the tree: ``done`` or how it ended, else ``unended``."""
    if not task.terminal:
        return unended
    return "done" if task.status == "completed" else task.status


def agent_state(agent: WorkflowAgent, unended: str) -> str:
    """A workflow agent's state in the tree: ``cached``, ``done`` or ``failed``, else
    ``unended``."""
    if agent.state == "done":
        return "cached" if agent.cached else "done"
    return "failed" if agent.state == "error" else unended


def total(values: Iterable[int | None]) -> int | None:
    """The sum of the known values (``None`` when none is known)."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


# -- a live run ----------------------------------------------------------------------------
def live_detail(state: RunState, *, run: str, status: str, limits: LimitHistory) -> RunDetail:
    """The detail of the live run ``state`` (called on the run's loop)."""
    book = state.agents.book
    now = state.clock.monotonic()
    wall = state.clock.time()
    tracker = state.stream.tracker
    leads = [c for (_, agent), c in book.entries.items() if agent == LEAD]
    lead = AgentNode(
        id="lead",
        kind="lead",
        label="lead",
        state=status,
        tokens=total(c.tokens for c in leads),
        requests=total(c.requests for c in leads),
        last_tool=plain(tracker.lead_last_tool, 80),  # the stream's: the book keeps none
        duration_s=max(0.0, now - tracker.started_at),
    )
    phases = {t.task_id: t.workflow.phases for t in tracker.tasks.values() if t.workflow}
    omitted = build_tree(lead, _task_rows(state, now), phases)
    queue = [
        QueuedCall(
            tool_use_id=record.tool_use_id,
            description=plain(record.description) or "",
            waited_s=0.0
            if record.queued_at is None
            else round(max(0.0, wall - record.queued_at), 1),
        )
        for record in state.admission.records()
        if record.status == "queued"
    ]
    label_for = labels_from(state.stream)
    approvals = [
        WaitingApproval(
            tool=plain(asked.tool, 80) or "",
            agent=plain(label_for(asked.agent_id), 80) or "",
            what=plain(asked.what) or "",
            waited_s=round(max(0.0, now - asked.asked_at), 1),
        )
        for asked in state.outside.permissions.waiting
    ]
    waiting_for_slot = sum(
        1
        for count in book.entries.values()
        if count.kind == "workflow_agent" and count.requests == 0 and count.denied is None
    )
    return RunDetail(
        run=run,
        source="live",
        status=status,
        lead=lead,
        queue=queue,
        waiting_for_slot=waiting_for_slot,
        held_requests=state.admission.pause.held_requests,
        approvals=approvals,
        limits=limits,
        omitted=omitted,
        now=wall,
        started=wall - (now - tracker.started_at),
    )


def _task_rows(state: RunState, now: float) -> Iterator[AgentNode]:
    """A node per task of the live run, each workflow's agents after it (:func:`build_tree`
    hangs them)."""
    book = state.agents.book
    for task in state.stream.tracker.tasks.values():
        node = _task_node(task, book, now)
        judged = state.delivered.collected.ends.get(task.task_id)
        if task.terminal and judged is not None and judged[0] == task.ended_seq:
            # an agent the CLI called completed that was cut says how
            node.state = judged[1].kind if judged[1].kind in CUT_ENDS else node.state
        yield node
        for index, agent in sorted(task.workflow_agents.items()):
            yield _workflow_agent_node(task, index, agent, book, task.terminal)


def _task_node(task: TaskInfo, book: AgentBook, now: float) -> AgentNode:
    count = book.agent(task.task_id)
    ended = task.ended_at if task.ended_at is not None else now
    state = task_state(task, "running")
    run = task.workflow
    label = (run.name or run.description or task.description) if run else None
    return AgentNode(
        id=task.task_id,
        kind="workflow" if task.is_workflow else "agent",
        label=plain(label or task.description or task.subagent_type or task.task_id)
        or task.task_id,
        state=state,
        tokens=(
            count.tokens if count is not None and count.tokens is not None else task.tokens or None
        ),
        requests=count.requests if count is not None else None,
        last_tool=plain((count.last_tool if count is not None else None) or task.last_tool, 80),
        duration_s=max(0.0, ended - task.started_at),
        model=plain(count.sent_model, 80) if count is not None else None,
        parent=task.parent_task_id,
    )


def _workflow_agent_node(
    task: TaskInfo, index: int, agent: WorkflowAgent, book: AgentBook, ended: bool
) -> AgentNode:
    count = book.agent(agent.agent_id) if agent.agent_id else None
    if ended:
        state = agent_state(agent, "lost")
    elif agent.agent_id is None or (count is not None and count.requests == 0):
        state = agent_state(agent, "queued")
    else:
        state = agent_state(agent, "running")
    tokens = (
        agent.tokens if agent.tokens is not None else (count.tokens if count is not None else None)
    )
    return AgentNode(
        id=agent.agent_id or f"{task.task_id}#{index}",
        kind="workflow_agent",
        label=plain(agent.label) or f"agent {index}",
        state=state,
        tokens=tokens,
        requests=count.requests if count is not None else None,
        last_tool=plain(count.last_tool, 80) if count is not None else None,
        duration_s=agent.duration_ms / 1000 if agent.duration_ms is not None else None,
        model=plain(agent.model or (count.sent_model if count is not None else None), 80),
        parent=task.task_id,
        phase=agent.phase,
    )
