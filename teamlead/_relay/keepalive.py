"""Keeping a held streaming request alive: the response's head at once, then ``ping`` events.

While the relay holds a request through an overload burst, a client with a first-byte or
idle timeout would give up. So once a streaming request is held, the relay answers as the
Messages API does when it is slow: the head of a ``200`` event stream at once, then an
``event: ping`` every few seconds. The upstream's event stream follows the pings when it
answers (its own head not sent again); a failure goes in-band as the API's own ``error``
event. :class:`HeldSend` is an ASGI ``send`` that does this, transparent to everything
that writes through it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio

from .._private import json_object
from ..clock import SYSTEM_CLOCK, wait_event

__all__ = ["PING", "HeldSend", "error_event"]

Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]

#: The API's own keep-alive event.
PING = b'event: ping\ndata: {"type": "ping"}\n\n'
_HEAD = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
_MOST_ERROR_BODY = 64 * 1024


def error_event(status: int, body: bytes) -> bytes:
    """The ``error`` event for an error reply of ``status`` with JSON ``body``: the
    upstream's own error object when it gave one, else one built from the status.

    Example:
        >>> event = error_event(529, b'{"error": {"type": "overloaded_error", "message": "x"}}')
        >>> event.splitlines()[0], json.loads(event.splitlines()[1][6:])["error"]["type"]
        (b'event: error', 'overloaded_error')
    """
    error: object = None
    parsed = json_object(body[:_MOST_ERROR_BODY])
    if parsed is not None and isinstance(parsed.get("error"), dict):
        found = parsed["error"]
        if isinstance(found.get("type"), str) and isinstance(found.get("message", ""), str):
            error = {"type": found["type"], "message": found.get("message", "")}
    if error is None:
        kind = {429: "rate_limit_error", 529: "overloaded_error", 503: "overloaded_error"}
        error = {"type": kind.get(status, "api_error"), "message": f"upstream status {status}"}
    data = json.dumps({"type": "error", "error": error})
    return b"event: error\ndata: " + data.encode() + b"\n\n"


class HeldSend:
    """An ASGI ``send`` for one streaming request that may be held (see the module).

    Args:
        send: the server's ``send``.
        every_s: seconds between pings, on the system's clock: the pings keep a real
            client's timer alive, whatever clock paces the hold.
    """

    def __init__(self, send: Send, every_s: float) -> None:
        self._send = send
        self._every = every_s
        self._lock = anyio.Lock(fast_acquire=True)  # no event-loop round per write when free
        self._done = anyio.Event()
        self.head_sent = False  # the pings' head went out: later heads are folded in
        self._passed = False  # a head went out as written: no pings any more
        self._error_status: int | None = None
        self._error_body = bytearray()

    def stop(self) -> None:
        """The hold is over: no more pings (the reply, or its failure, comes next)."""
        self._done.set()

    async def keep_alive(self) -> None:
        """Run beside the exchange once the request is held: send the head, then a ping
        every ``every_s``, until :meth:`stop`. A ping being written is never cut."""
        while not self._done.is_set():
            async with self._lock:
                if self._passed or self._done.is_set():
                    return
                if not self.head_sent:
                    await self._send(
                        {"type": "http.response.start", "status": 200, "headers": list(_HEAD)}
                    )
                    self.head_sent = True
                await self._send({"type": "http.response.body", "body": PING, "more_body": True})
            await wait_event(self._done, self._every, SYSTEM_CLOCK)

    async def __call__(self, message: Message) -> None:
        async with self._lock:
            if not self.head_sent:
                if message["type"] == "http.response.start":
                    self._passed = True
                await self._send(message)
                return
            if message["type"] == "http.response.start":
                status = int(message["status"])
                self._error_status = None if 200 <= status < 300 else status
                return  # the pings' head stands for it
            if message["type"] != "http.response.body" or self._error_status is None:
                await self._send(message)
                return
            if len(self._error_body) < _MOST_ERROR_BODY:
                self._error_body += message.get("body", b"")
            if message.get("more_body"):
                return
            event = error_event(self._error_status, bytes(self._error_body))
            await self._send({"type": "http.response.body", "body": event, "more_body": False})
