"""What a trial's agents did, counted from its ``Finished.tasks`` rows.

A trial record says how the lead delegated: its Agent calls come from the stream, its
workflows' agents from the rows of kind ``workflow_agent`` (their status, ``cached``) and
from the relay's timings on every agent row (``started_at``/``ended_at``), whose overlaps
say how many agents ran at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ...events import TaskDisposition

__all__ = ["LOST_STATES", "AgentCounts", "agent_counts", "most_at_once"]

#: A workflow agent in one of these ended in error or never finished: its work is lost.
LOST_STATES = frozenset({"failed", "lost", "stopped", "killed", "timeout"})
_AGENT_KINDS = ("task", "workflow_agent")


@dataclass(frozen=True)
class AgentCounts:
    """The agent fields of a :class:`~teamlead.experiment.specs.records.TrialRecord`."""

    workflow_agents: int = 0
    workflow_agents_at_once: int = 0
    workflow_agents_lost: int = 0
    workflow_agents_cached: int = 0
    agents_at_once: int = 0


def most_at_once(intervals: Iterable[tuple[float, float]]) -> int:
    """The most intervals ``(start, end)`` open at one instant (one that ends when another
    starts does not overlap it).

    Example:
        >>> most_at_once([(0, 2), (1, 3), (2, 4)])
        2
    """
    edges: list[tuple[float, int]] = []
    for start, end in intervals:
        edges += [(start, 1), (max(start, end), -1)]
    edges.sort()  # at one instant the ends (-1) come before the starts
    now = 0
    peak = 1 if edges else 0  # an agent of no measurable length still ran
    for _, step in edges:
        now += step
        peak = max(peak, now)
    return peak


def _timed(rows: Iterable[TaskDisposition]) -> list[tuple[float, float]]:
    return [
        (row.started_at, row.ended_at)
        for row in rows
        if row.started_at is not None and row.ended_at is not None
    ]


def agent_counts(tasks: Sequence[TaskDisposition]) -> AgentCounts:
    """Count a run's workflow agents and the most agents that ran at once.

    Example:
        >>> row = TaskDisposition(id="w1", kind="workflow_agent", description="w1",
        ...     status="cached", disposition="included", source="lead", cached=True)
        >>> agent_counts([row]).workflow_agents_cached
        1
    """
    workflow = [row for row in tasks if row.kind == "workflow_agent"]
    return AgentCounts(
        workflow_agents=len(workflow),
        workflow_agents_at_once=most_at_once(_timed(workflow)),
        workflow_agents_lost=sum(row.status in LOST_STATES for row in workflow),
        workflow_agents_cached=sum(row.cached or row.status == "cached" for row in workflow),
        agents_at_once=most_at_once(_timed(row for row in tasks if row.kind in _AGENT_KINDS)),
    )
