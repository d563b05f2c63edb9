"""What the scripted server records: each request as it saw and answered it, and counters.

:class:`RecordedRequest` is what ``ScriptedServer.recorded()`` returns and what its
``on_request`` hook receives; :class:`ServerStats` are its counters.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .replies import Reply, Role, ScriptedRequest

__all__ = ["RecordedRequest", "ServerStats"]


@dataclass
class RecordedRequest:
    """One request as the server saw and answered it.

    ``started``/``finished`` are ``time.monotonic()`` readings, so overlapping intervals
    prove that two streams were in flight at once. ``headers`` are the HTTP request
    headers as received (names as the client spelled them).
    """

    request: ScriptedRequest
    started: float
    finished: float | None = None
    status: int = 200
    reply: Reply | None = None
    error: str | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)

    @property
    def role(self) -> Role:
        return self.request.role

    def overlaps(self, other: RecordedRequest) -> bool:
        end_a = self.finished if self.finished is not None else float("inf")
        end_b = other.finished if other.finished is not None else float("inf")
        return self.started < end_b and other.started < end_a


@dataclass
class ServerStats:
    """Counters, read under the server's lock."""

    requests: int = 0
    rejected: int = 0
    faults: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    status_counts: dict[int, int] = field(default_factory=dict)
