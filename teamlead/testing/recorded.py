"""What the scripted server records: each request as it saw and answered it, its counters,
and how many requests, or agents, were in flight at one instant.

:class:`RecordedRequest` is what ``ScriptedServer.recorded()`` returns and what its
``on_request`` hook receives; :class:`ServerStats` are its counters. A recorded request is
an interval from its arrival to its last write (``inf`` while it still runs); a peak is
found by sweeping the interval ends in time order.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .replies import Reply, Role, ScriptedRequest

__all__ = ["RecordedRequest", "ServerStats", "peak_agents", "peak_requests"]


@dataclass
class RecordedRequest:
    """One request as the server saw and answered it.

    ``started``/``finished`` are ``time.monotonic()`` readings, so overlapping intervals
    prove that two streams were in flight at once. ``released`` is when its answer's last
    write began (it gave back its place under the emulated account limit then), a moment
    before ``finished``. ``headers`` are the HTTP request headers as received
    (names as the client spelled them). ``drawn`` is what it drew from the server's token
    buckets, by kind (empty when refused, or with no buckets). ``status`` is recorded just
    before the answer's last write, so a client that has read its answer reads its status.
    """

    request: ScriptedRequest
    started: float
    finished: float | None = None
    status: int = 200
    reply: Reply | None = None
    error: str | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    released: float | None = None
    drawn: dict[str, float] = field(default_factory=dict)

    @property
    def role(self) -> Role:
        return self.request.role

    @property
    def agent_id(self) -> str | None:  # the x-claude-code-agent-id header (None: the lead)
        return next((v for k, v in self.headers if k.lower() == "x-claude-code-agent-id"), None)

    @property
    def end(self) -> float:
        """When the request ended as its client can know it: its answer's last write began
        (the handler's own end comes later, and a client that has read its answer may
        already have sent the next request by then)."""
        end = self.released if self.released is not None else self.finished
        return end if end is not None else float("inf")

    def overlaps(self, other: RecordedRequest) -> bool:
        return self.started < other.end and other.started < self.end


@dataclass
class ServerStats:
    """Counters, read under the server's lock."""

    requests: int = 0
    rejected: int = 0
    faults: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    status_counts: dict[int, int] = field(default_factory=dict)


def peak_requests(intervals: Iterable[tuple[float, float]]) -> int:
    """The most of ``intervals`` (start, end) that overlapped at one instant."""
    points: list[tuple[float, int]] = []
    for start, end in intervals:
        points += [(start, 1), (end, -1)]
    best = cur = 0
    for _, step in sorted(points):
        cur += step
        best = max(best, cur)
    return best


def peak_agents(intervals: Iterable[tuple[float, float, str]]) -> int:
    """The most distinct agents (start, end, agent id) with a request open at one instant."""
    points: list[tuple[float, int, str]] = []
    for start, end, agent in intervals:
        points += [(start, 1, agent), (end, -1, agent)]
    open_requests: dict[str, int] = {}
    best = 0
    for _, step, agent in sorted(points, key=lambda p: (p[0], p[1])):
        open_requests[agent] = open_requests.get(agent, 0) + step
        if open_requests[agent] <= 0:
            del open_requests[agent]
        best = max(best, len(open_requests))
    return best
