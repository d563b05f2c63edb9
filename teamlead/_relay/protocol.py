"""The relay's HTTP connections: what a client must do before the relay keeps anything.

Anyone on the machine can connect to the loopback port, so a connection is held to bounds
before a request reaches :class:`~teamlead._relay.app.RelayApp` (uvicorn's httptools
protocol has none of them):

* **The target first.** The request target is checked against the secret path prefix as
  it arrives, before any header is kept: a wrong prefix is answered 404 (400 for a target
  that is not a path, 405 for ``CONNECT``) and the connection closed, whatever follows.
* **Bounded heads.** A request line and headers over ``max_header_bytes`` in all, or more
  than ``max_headers`` header lines, are answered 431.
* **Timed heads.** A connection has ``head_timeout_s`` to send a complete head after it
  opens, and as long as ``idle_timeout_s`` and ``head_timeout_s`` after a reply (a slow
  sender is answered 408; an idle one just closed), so slowloris connections do not pile
  up.
* **Bodies bounded on their word.** A request whose ``Content-Length`` is over
  ``max_body_bytes`` is answered 413 as soon as its head is complete, before any of the body
  is read; the relay's side is then shut and what the client still sends is read and
  dropped for a few seconds, so the client reads the 413 instead of a reset.
* **A connection cap** below the process's open-file limit (:func:`connection_cap`): past
  it, the oldest connection with no request running is closed to make room, so a valid
  request always gets in, and one warning line says so (once per episode). Should the
  descriptors run out first anyway, the connections held then become the cap.

The write buffer is small, so a slow client holds little of a reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, ClassVar

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .forward import RelayConfig

__all__ = ["ConnectionGuard", "GuardedSocket", "connection_cap", "protocol_for"]

log = logging.getLogger("teamlead.relay")

#: Bytes of a reply queued for a slow client before the relay stops reading the upstream
#: (asyncio's default is 64 KiB).
_WRITE_BUFFER = 16 * 1024
#: Open files kept for everything else the process does (CLI pipes, files, upstream).
_FD_RESERVE = 64
#: After a 413, how long the rest of a body is read and dropped before the connection is
#: closed anyway: a client writing its whole body before it reads gets to the answer.
_LINGER_S = 5.0

#: ``accept`` errors that mean no descriptor is left (the process's, or the system's).
_OUT_OF_FILES = (errno.EMFILE, errno.ENFILE)


def connection_cap(wanted: int, open_file_limit: int | None) -> int:
    """Client connections allowed: ``wanted``, but at most half the open files left.

    Each relayed request holds two descriptors (the client's and the upstream's), and the
    process needs some for itself.

    Example:
        >>> connection_cap(1024, 1024), connection_cap(1024, None), connection_cap(1024, 20)
        (480, 1024, 8)
    """
    if open_file_limit is None or open_file_limit <= 0:
        return wanted
    return max(8, min(wanted, (open_file_limit - _FD_RESERVE) // 2))


def _open_file_limit() -> int | None:
    try:
        import resource
    except ImportError:  # not on Windows
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


@dataclass
class ConnectionGuard:
    """What every connection of one server shares: the prefix (``b""``: any path), the
    bounds, who is open, and the server's name for its warning.

    A connection counts from its ``accept`` until its socket is closed (``starting`` until
    the protocol is made, then in ``open``), so a burst of connections is held to the cap
    at the accept itself, before asyncio made a transport for any of them.
    """

    root: bytes
    config: RelayConfig
    name: str = "relay"
    cap: int = field(init=False)
    open: dict[_RelayProtocol, None] = field(default_factory=dict)
    starting: int = 0
    saturated: bool = False

    def __post_init__(self) -> None:
        self.cap = connection_cap(self.config.max_connections, _open_file_limit())

    def accepting(self) -> bool:
        """Whether a connection being accepted may stay (room made if need be)."""
        if self._room():
            self.starting += 1
            return True
        return False

    def made(self, protocol: _RelayProtocol) -> bool:
        """Count a new connection's protocol in; whether it may stay."""
        if self.starting:
            self.starting -= 1  # admitted at its accept
        elif not self._room():  # an event loop that accepts on its own (no GuardedSocket)
            return False
        self.open[protocol] = None
        return True

    def lost(self, protocol: _RelayProtocol) -> None:
        self.open.pop(protocol, None)

    def out_of_files(self) -> bool:
        """``accept`` found no descriptor left (the process's other files took them): the
        connections held now are the cap from here on, and room is made as at the cap;
        whether an idle connection was closed (its descriptor is free on the next tick)."""
        held = self.starting + len(self.open)
        self.cap = max(1, min(self.cap, held))
        limit = _open_file_limit() or "none"
        return self._close_idle(
            f"ran out of open files (limit {limit}) at {held} client connections"
        )

    def _room(self) -> bool:
        """Room for one more: below the cap, or once the oldest idle connection is closed.

        A closed connection's descriptor is freed on the next loop tick, so during one
        burst the descriptors in use stay below twice the cap (each of the ``cap`` open
        connections is closed at most once), which :func:`connection_cap` keeps below the
        open-file limit.
        """
        held = self.starting + len(self.open)
        if held < self.cap:
            if self.saturated and held < self.cap * 3 // 4:
                self.saturated = False
            return True
        limit = _open_file_limit() or "none"
        return self._close_idle(
            f"at its cap of {self.cap} client connections (open-file limit {limit})"
        )

    def _close_idle(self, state: str) -> bool:
        """Close the oldest idle connection to make room, warning once per episode that the
        server is in ``state``; whether one was closed."""
        if not self.saturated:
            self.saturated = True
            log.warning("%s %s: closing the oldest idle ones to make room", self.name, state)
        idle = next((p for p in self.open if p.idle), None)
        if idle is None:
            return False
        idle.drop()
        return True


class GuardedSocket(socket.socket):
    """The relay's listening socket: ``accept`` holds connections to the guard's cap.

    asyncio's selector loop accepts in bursts (up to the backlog per tick) and makes the
    transports later, so a cap checked only when a connection is made comes too late: the
    descriptors are taken already, and at the open-file limit ``accept`` fails in a storm
    of log lines. Here a connection past the cap (no idle one to close) is answered 503
    and closed in ``accept`` itself, its descriptor freed at once; an ``accept`` that
    finds no descriptor left closes the oldest idle connection and tries again next tick.
    """

    guard: ConnectionGuard | None = None

    def accept(self) -> tuple[socket.socket, Any]:
        try:
            conn, addr = super().accept()
        except OSError as exc:
            if exc.errno not in _OUT_OF_FILES or self.guard is None:
                raise
            if not self.guard.out_of_files():
                raise  # nothing to close: asyncio tries again in a second
            raise BlockingIOError from None  # an idle one closed: accept again next tick
        if self.guard is None or self.guard.accepting():
            return conn, addr
        with contextlib.suppress(OSError):
            conn.setblocking(False)
            conn.send(_response(503, f"the {self.guard.name} is at its connection cap"))
        conn.close()
        raise BlockingIOError  # asyncio's "nothing more to accept now": back next tick


def _response(status: int, reason: str) -> bytes:
    body = reason.encode()
    return b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\n" % (
        status,
        HTTPStatus(status).phrase.encode(),
    ) + b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)


@dataclass(eq=False)
class _Refused(Exception):
    status: int
    reason: str


class _RelayProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the bounds of the module docstring."""

    guard: ClassVar[ConnectionGuard]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._refusal: _Refused | None = None
        self._lingering = False
        self._next_head()

    def _next_head(self) -> None:
        """Count the next request's head from nothing."""
        self._in_head = True
        self._head_bytes = 0
        self._header_count = 0
        self._declared_length = 0

    # -- connection ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        if isinstance(transport, asyncio.WriteTransport):
            transport.set_write_buffer_limits(high=_WRITE_BUFFER)
        if not self.guard.made(self):
            self._answer(503, f"the {self.guard.name} is at its connection cap")
            return
        self._arm_head_timer(self.guard.config.head_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.lost(self)
        self._cancel_head_timer()
        super().connection_lost(exc)

    @property
    def idle(self) -> bool:
        """No request is running on this connection (it may be sending a head), and it is
        not closing already."""
        if self.transport is None or self.transport.is_closing():
            return False
        return self.cycle is None or self.cycle.response_complete

    def drop(self) -> None:
        """Close this connection now (it is idle: nothing is lost)."""
        self._cancel_head_timer()
        if not self.transport.is_closing():
            self.transport.close()

    # -- reading ------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return  # the rest of a refused body: dropped
        self._unset_keepalive_if_required()
        limit = self.guard.config.max_header_bytes
        try:
            while data and self._in_head and not self.transport.is_closing():
                room = limit - self._head_bytes
                if room <= 0:
                    raise _Refused(431, "request line and headers too large")
                piece, data = data[:room], data[room:]
                self._head_bytes += len(piece)
                self.parser.feed_data(piece)
            if data and not self.transport.is_closing():
                self.parser.feed_data(data)
        except _Refused as refused:
            self._refuse(refused)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            self._refuse(self._refusal or _Refused(400, "invalid HTTP request"))

    def _stop(self, refused: _Refused) -> None:
        """Stop the parser here (it wraps what a callback raises): nothing more is read."""
        self._refusal = refused
        raise refused

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        refusal = self._check_target(self.url)
        if refusal is not None:
            self._stop(refusal)

    def _check_target(self, target: bytes) -> _Refused | None:
        if self.parser.get_method().upper() == b"CONNECT":
            return _Refused(405, "CONNECT is not relayed")
        if not target.startswith(b"/"):
            return _Refused(400, "only origin-form request targets are relayed")
        root = self.guard.root
        if len(target) <= len(root):
            return None if root.startswith(target) else _Refused(404, "unknown path")
        if target.startswith(root) and target[len(root) : len(root) + 1] in (b"/", b"?"):
            return None
        return _Refused(404, "unknown path")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self.guard.config.max_headers:
            self._stop(_Refused(431, "too many request headers"))
        if name.lower() == b"content-length" and value.strip().isdigit():
            self._declared_length = int(value)  # anything else llhttp refuses itself (400)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self.parser.should_upgrade():
            self._stop(_Refused(400, "protocol upgrades are not relayed"))
        self._in_head = False
        self._cancel_head_timer()
        if self._declared_length > self.guard.config.max_body_bytes:
            self._stop(_Refused(413, "request body too large"))
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._next_head()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            config = self.guard.config
            self._arm_head_timer(max(config.idle_timeout_s, config.head_timeout_s))

    # -- refusing -----------------------------------------------------------------------
    def _refuse(self, refused: _Refused) -> None:
        log.info("relay refused a connection: %s", refused.reason)
        if refused.status == 413 and self.idle:
            self._answer_and_linger(refused.status, refused.reason)
        else:
            self._answer(refused.status, refused.reason)

    def _answer(self, status: int, reason: str) -> None:
        """Answer ``status`` with a one-line body and close: the rest is never read.

        With a reply under way (a pipelined request refused), the connection is only
        closed: an answer written now would land inside that reply.
        """
        if self.idle:
            self.transport.write(_response(status, reason))
        self._cancel_head_timer()
        self.transport.close()

    def _answer_and_linger(self, status: int, reason: str) -> None:
        """Answer ``status``, shut the relay's side, and drop what still comes until the
        client closes or :data:`_LINGER_S` passed: closed with the client's body unread,
        the connection would be reset, and the client might never read the answer."""
        self._cancel_head_timer()
        self._lingering = True
        self.transport.write(_response(status, reason))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._head_timer = self.loop.call_later(_LINGER_S, self.drop)

    def _arm_head_timer(self, seconds: float) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(seconds, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or not self._in_head or not self.idle:
            return
        if self._head_bytes:
            self._refuse(_Refused(408, "no complete request head in time"))
        else:
            self.drop()  # opened, or idle after a reply, and silent: just close


def protocol_for(guard: ConnectionGuard) -> type[HttpToolsProtocol]:
    """The protocol class uvicorn builds each connection of one relay from."""
    return type("RelayProtocol", (_RelayProtocol,), {"guard": guard})
