"""The relay's one seam for observers of its requests (telemetry).

A run's :class:`~teamlead._relay.RelayRun` may carry a :class:`RequestObserver`. For each
request of that run the relay asks it for a :class:`RequestTrace` and reports to it, in
order, the methods below; :meth:`~RequestTrace.end` always comes. The relay never passes
the request's headers beyond the two ids that name its sender (the API key stays in the
relay), and an observer that raises is logged and dropped for that request, never allowed
to break it.
"""

from __future__ import annotations

import logging
from typing import Protocol

from .._governor import UsageScan
from ..events import RateLimited
from .routing import RequestInfo

__all__ = ["Guarded", "RequestObserver", "RequestTrace", "sender_ids", "trace_request"]

log = logging.getLogger("teamlead.relay")


class RequestTrace(Protocol):
    """What the relay reports about one request."""

    def pinned(self, info: RequestInfo) -> None:
        """The request goes upstream as ``info``, not as its body came (its agent's model
        pinned)."""

    def limited(self, event: RateLimited) -> None:
        """A 429 or 529 met (absorbed and retried, or passed on)."""

    def opened(self, waited_s: float, attempts: int) -> None:
        """The upstream answered; ``waited_s`` was spent waiting for governor slots."""

    def response(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        """The status and headers sent back to the CLI."""

    def chunk(self, data: bytes) -> None:
        """One chunk of the body sent back, as sent."""

    def end(self, error: str | None, scan: UsageScan) -> None:
        """The request is over: ``error`` says why when it did not complete; ``scan`` holds
        what the relay read of a streamed reply (its usage, model, id, stop reason)."""


class RequestObserver(Protocol):
    """Makes a :class:`RequestTrace` per request, or ``None`` to skip one."""

    def request(
        self, path: str, info: RequestInfo, session_id: str | None, agent_id: str | None
    ) -> RequestTrace | None:
        """A trace for the request to ``path`` from ``session_id``/``agent_id`` (the CLI's
        ``X-Claude-Code-Session-Id`` and ``x-claude-code-agent-id``; ``None`` when absent)."""


_SESSION = b"x-claude-code-session-id"
_AGENT = b"x-claude-code-agent-id"
_MAX_ID = 200


def sender_ids(headers: list[tuple[bytes, bytes]]) -> tuple[str | None, str | None]:
    """The CLI's session and agent id headers (anything else is never read).

    Example:
        >>> sender_ids([(b"X-Claude-Code-Session-Id", b"s1"), (b"x-api-key", b"sk-...")])
        ('s1', None)
    """
    session = agent = None
    for name, value in headers:
        lower = name.lower()
        if lower == _SESSION and len(value) <= _MAX_ID:
            session = value.decode("latin-1")
        elif lower == _AGENT and len(value) <= _MAX_ID:
            agent = value.decode("latin-1")
    return session, agent


class Guarded:
    """A trace whose failures are logged once and then ignored: telemetry never breaks a
    request."""

    __slots__ = ("_trace",)

    def __init__(self, trace: RequestTrace) -> None:
        self._trace: RequestTrace | None = trace

    def _call(self, name: str, *args: object) -> None:
        trace = self._trace
        if trace is None:
            return
        try:
            getattr(trace, name)(*args)
        except Exception:
            log.exception("request observer failed in %s; dropped for this request", name)
            self._trace = None

    def pinned(self, info: RequestInfo) -> None:
        self._call("pinned", info)

    def limited(self, event: RateLimited) -> None:
        self._call("limited", event)

    def opened(self, waited_s: float, attempts: int) -> None:
        self._call("opened", waited_s, attempts)

    def response(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self._call("response", status, headers)

    def chunk(self, data: bytes) -> None:
        self._call("chunk", data)

    def end(self, error: str | None, scan: UsageScan) -> None:
        self._call("end", error, scan)


def trace_request(
    observer: RequestObserver | None,
    path: str,
    info: RequestInfo,
    headers: list[tuple[bytes, bytes]],
) -> Guarded | None:
    """The guarded trace of one request, or ``None`` (no observer, or it declined)."""
    if observer is None:
        return None
    session, agent = sender_ids(headers)
    try:
        trace = observer.request(path, info, session, agent)
    except Exception:
        log.exception("request observer failed; the request goes on untraced")
        return None
    return Guarded(trace) if trace is not None else None
