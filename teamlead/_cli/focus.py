"""Focus on one agent: its last tool calls and lines, for a view that cycles through agents.

:class:`Focus` follows the run's parse of the stream (``feed(item)``): an Agent-tool
subagent's own messages come in it (reference §2) as
:class:`~teamlead.tracker.SubagentTurn` and :class:`~teamlead.tracker.SubagentToolUse`. A
workflow agent's never do (reference §10), so for those :meth:`Focus.of` reads the tail of
the transcript file (:func:`~teamlead._claude.transcript.transcript_tail`, bounded).

Nothing here prints: text is kept raw (secrets redacted, lines cut to 300 characters) for
a view to escape. Memory is bounded: a few calls and lines per agent, at most
:data:`MAX_AGENTS` agents.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .._claude import TranscriptCall, find_subagent_transcript, transcript_tail
from .._redact import redact
from ..errors import UsageError
from ..events import AgentKind
from ..tracker import (
    StreamParse,
    SubagentToolUse,
    SubagentTurn,
    TaskStarted,
    ToolResultSeen,
)

__all__ = ["MAX_AGENTS", "AgentFocus", "Focus"]

#: Agents followed at once; later ones are listed from the run's tracker but not followed.
MAX_AGENTS = 4096
_MAX_LINE_CHARS = 300


@dataclass(frozen=True)
class AgentFocus:
    """What one agent did last.

    Attributes:
        agent_id: its agent id (an Agent-tool task's id, or a workflow agent's id).
        description: its Agent call's description, or its workflow label.
        kind: ``agent`` (the Agent tool) or ``workflow_agent`` (a subagent's
            :data:`~teamlead.events.AgentKind`).
        status: its task's or workflow entry's last state.
        calls: its last tool calls, oldest first (what each works on, and its outcome:
            ``running`` until its result is seen, then ``ok`` or ``error``).
        lines: its last lines of text, oldest first.
        source: ``stream`` (its own messages), ``transcript`` (its transcript file), or
            ``none`` (nothing known yet).
    """

    agent_id: str
    description: str
    kind: AgentKind
    status: str
    calls: tuple[TranscriptCall, ...]
    lines: tuple[str, ...]
    source: Literal["stream", "transcript", "none"]


@dataclass(slots=True)
class _Call:
    """A call as it is followed: its outcome changes when its result comes."""

    tool_use_id: str
    name: str
    summary: str
    outcome: Literal["running", "ok", "error"] = "running"


class _Trail:
    """One agent's last calls and lines, as its messages arrive."""

    def __init__(self, max_calls: int, max_lines: int) -> None:
        self.calls: collections.deque[_Call] = collections.deque(maxlen=max_calls)
        self.lines: collections.deque[str] = collections.deque(maxlen=max_lines)


class Focus:
    """The last tool calls and lines of every agent of a run (see the module docstring).

    Args:
        run: the run's parse of the items :meth:`feed` is given (its tracker names the
            agents).
        config_dir: the Claude config dir, to find a transcript by agent id (``None``: only
            a task's ``output_file`` is read).
        max_calls: tool calls kept per agent.
        max_lines: lines of text kept per agent.
    """

    def __init__(
        self,
        run: StreamParse,
        config_dir: Path | None = None,
        *,
        max_calls: int = 5,
        max_lines: int = 6,
    ) -> None:
        self.run = run
        self.config_dir = config_dir
        self.max_calls = max(1, max_calls)
        self.max_lines = max(1, max_lines)
        self._trails: dict[str, _Trail] = {}  # by the Agent call's tool_use_id
        self._open: dict[str, _Call] = {}  # calls waiting for their result, by id
        self._agent_of: dict[str, str] = {}  # Agent call's tool_use_id -> agent (task) id

    # -- what the stream says ------------------------------------------------------------
    def feed(self, item: Any) -> None:
        """Read one stream item (an SDK message; teamlead's own events are skipped)."""
        if callable(getattr(item, "to_json", None)):
            return  # a teamlead event: nothing an agent did
        for event in self.run.events_of(item):  # its tracker has them already
            if isinstance(event, TaskStarted) and event.tool_use_id:
                self._agent_of[event.tool_use_id] = event.task_id
            elif isinstance(event, SubagentTurn):
                trail = self._trail(event.parent_tool_use_id)
                if trail is not None:
                    for line in event.text.splitlines():
                        if line.strip():
                            trail.lines.append(redact(line)[:_MAX_LINE_CHARS])
            elif isinstance(event, SubagentToolUse):
                trail = self._trail(event.parent_tool_use_id)
                if trail is not None:
                    if len(trail.calls) == trail.calls.maxlen:  # the oldest falls out
                        self._open.pop(trail.calls[0].tool_use_id, None)
                    call = _Call(event.tool_use_id, redact(event.name), redact(event.summary))
                    trail.calls.append(call)
                    self._open[call.tool_use_id] = call
            elif isinstance(event, ToolResultSeen):
                done = self._open.pop(event.tool_use_id, None)
                if done is not None:
                    done.outcome = "error" if event.is_error else "ok"

    def _trail(self, parent_tool_use_id: str) -> _Trail | None:
        trail = self._trails.get(parent_tool_use_id)
        if trail is None and len(self._trails) < MAX_AGENTS:
            trail = self._trails[parent_tool_use_id] = _Trail(self.max_calls, self.max_lines)
        return trail

    # -- which agents ---------------------------------------------------------------------
    @property
    def agents(self) -> list[str]:
        """Every agent of the run seen so far, in the order they started: Agent-tool tasks,
        each workflow's agents (those that have an id) right after their workflow."""
        out: list[str] = []
        tracker = self.run.tracker
        # copied in one step: the live view's refresh thread reads while the run adds tasks
        for task in list(tracker.tasks.values()) if tracker is not None else ():
            if task.is_workflow:
                for index in sorted(task.workflow_agents):
                    agent_id = task.workflow_agents[index].agent_id
                    if agent_id:
                        out.append(agent_id)
            elif task.task_type in (None, "local_agent"):
                out.append(task.task_id)
        return out

    def next_agent(self, current: str | None, step: int = 1) -> str | None:
        """The agent after ``current`` (``step`` -1: before it), cycling; the first one when
        ``current`` is ``None`` or gone; ``None`` when there is no agent yet."""
        agents = self.agents
        if not agents:
            return None
        if current not in agents:
            return agents[0] if step >= 0 else agents[-1]
        return agents[(agents.index(current) + step) % len(agents)]

    # -- one agent --------------------------------------------------------------------------
    def of(self, agent_id: str) -> AgentFocus | None:
        """What ``agent_id`` did last; ``None`` for an id this run never had.

        From the stream when its messages came there, else from the tail of its transcript
        (a bounded read of a local file: at most a few MB, from the end).
        """
        tracker = self.run.tracker
        if tracker is None:
            return None  # the run has not started: no agent yet
        task = tracker.tasks.get(agent_id)
        base: tuple[str, str, Any, str]
        if task is not None and not task.is_workflow:
            tool_use_id = task.tool_use_id
            trail = self._trails.get(tool_use_id) if tool_use_id else None
            base = (agent_id, task.description, "agent", task.status)
            if trail is not None and (trail.calls or trail.lines):
                return self._from_trail(base, trail)
            return self._from_transcript(base, task.output_file)
        for workflow in list(tracker.tasks.values()):  # as in :attr:`agents`
            for agent in list(workflow.workflow_agents.values()):
                if agent.agent_id == agent_id:
                    base = (agent_id, agent.label, "workflow_agent", agent.state)
                    return self._from_transcript(base, None)
        return None

    def _from_trail(self, base: tuple[str, str, Any, str], trail: _Trail) -> AgentFocus:
        calls = tuple(
            TranscriptCall(c.tool_use_id, c.name, c.summary, c.outcome) for c in trail.calls
        )
        return AgentFocus(*base, calls=calls, lines=tuple(trail.lines), source="stream")

    def _from_transcript(self, base: tuple[str, str, Any, str], path: str | None) -> AgentFocus:
        found = Path(path) if path else None
        tracker = self.run.tracker
        session_id = tracker.session_id if tracker is not None else None
        if found is None and self.config_dir is not None and session_id:
            try:
                found = find_subagent_transcript(self.config_dir, session_id, base[0])
            except UsageError:  # an id that is not a plain id never steers a path
                found = None
        tail = (
            transcript_tail(found, max_calls=self.max_calls, max_lines=self.max_lines)
            if found is not None
            else None
        )
        if tail is None or not (tail.calls or tail.lines):
            return AgentFocus(*base, calls=(), lines=(), source="none")
        return AgentFocus(*base, calls=tail.calls, lines=tail.lines, source="transcript")
