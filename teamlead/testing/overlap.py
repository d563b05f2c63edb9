"""How many requests, or agents, the scripted server had in flight at one instant.

Each recorded request is an interval from its arrival to its last write (open while it
still runs); the peak is found by sweeping the interval ends in time order.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .server import RecordedRequest

__all__ = ["interval_end", "peak_agents", "peak_requests"]


def interval_end(rec: RecordedRequest) -> float:
    """When ``rec`` finished (``inf`` while it still runs)."""
    return rec.finished if rec.finished is not None else float("inf")


def peak_requests(records: Iterable[RecordedRequest], session_id: str | None = None) -> int:
    """The most of ``records`` (of ``session_id``, default all) that overlapped."""
    points: list[tuple[float, int]] = []
    for rec in records:
        if session_id in (None, rec.request.session_id):
            points.append((rec.started, 1))
            points.append((interval_end(rec), -1))
    best = cur = 0
    for _, step in sorted(points, key=lambda p: (p[0], p[1])):
        cur += step
        best = max(best, cur)
    return best


def peak_agents(records: Iterable[RecordedRequest], session_id: str | None = None) -> int:
    """The most distinct agent ids with a request of ``records`` in flight at once."""
    points: list[tuple[float, int, str]] = []
    for rec in records:
        agent = rec.agent_id
        if agent is None or session_id not in (None, rec.request.session_id):
            continue
        points.append((rec.started, 1, agent))
        points.append((interval_end(rec), -1, agent))
    open_requests: dict[str, int] = {}
    best = 0
    for _, step, agent in sorted(points, key=lambda p: (p[0], p[1])):
        open_requests[agent] = open_requests.get(agent, 0) + step
        if open_requests[agent] <= 0:
            del open_requests[agent]
        best = max(best, len(open_requests))
    return best
