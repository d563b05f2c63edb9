"""A run's control endpoint: a Unix socket speaking JSON lines, and the client of it.

Both sides of the wire live here, so the protocol has one owner. Version 1, one request
per connection:

- the client sends one line, a JSON object ``{"version": 1, "op": OP, ...}``, OP one of
  ``status``, ``stop`` (``"now": true`` skips the wrap-up), ``pause``, ``unpause``,
  ``amend`` (``"cap"``: a number or ``null``, ``"subagent_model"``: a name or ``null``; a
  field left out changes nothing, ``null`` restores the run's starting value),
  ``detail`` and ``watch``;
- the run answers one line: ``{"version": 1, "ok": true, ...}`` (for ``status`` the run's
  status, for ``detail`` its agent tree, queue, waiting approvals and limits over time
  (:class:`~teamlead._control.detail.RunDetail`'s JSON under ``detail``), for the others a
  ``message`` saying what was done), or
  ``{"version": 1, "ok": false, "error": CODE, "message": ...}`` (CODE as
  :class:`~teamlead.errors.ControlError`'s ``code``, or ``finished``, ``not_yours``);
- after a ``watch`` answer come the run's NDJSON lines, those ``teamlead ask --json``
  writes (the recent ones first, as far back as the buffer reaches, then each as it
  comes), an empty line as a keep-alive when nothing came for a while, until the run
  ends with its ``finished`` line and closes the connection.

Anything running as this user can connect, so the server reads every request as hostile:
one line of at most 4 KiB within 5 s, parsed into a typed :class:`Request` (unknown ops
and fields of the wrong type refused, unknown fields ignored); the peer must be this user
(checked with ``SO_PEERCRED`` where the system has it, on top of the directory's mode
0700 and the socket's 0600); at most 32 connections at once (more are answered
``busy``); a write that does not drain within 10 s ends its connection, and a watcher 4096
lines behind is dropped. The server runs on the run's own asyncio loop, where the run's
state is read and changed; a failure of its own is one warning line, never the run's.
Nothing here loads the SDK.

Example:
    >>> call("/run/user/1000/teamlead/3f0a9c1d22b4.sock", {"op": "status"})  # doctest: +SKIP
    {'version': 1, 'ok': True, 'run': '3f0a9c1d22b4', 'status': 'running', ...}
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import socket
import struct
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from .._private import json_object
from ..errors import ControlError, NoSuchRun

if TYPE_CHECKING:
    from .steering import RunSteering

__all__ = [
    "PROTOCOL_VERSION",
    "Endpoint",
    "Op",
    "Request",
    "WatchFeed",
    "call",
    "follow",
    "parse_request",
]

log = logging.getLogger("teamlead.control")

PROTOCOL_VERSION = 1
Op: TypeAlias = Literal["status", "detail", "stop", "pause", "unpause", "amend", "watch"]
_OPS: tuple[Op, ...] = ("status", "detail", "stop", "pause", "unpause", "amend", "watch")
#: The longest request line the server reads (bytes, newline included).
MAX_REQUEST = 4096
#: The longest answer or event line the client reads (a ``finished`` line with every
#: agent's result can be megabytes).
MAX_LINE = 64 * 1024 * 1024
_READ_TIMEOUT_S = 5.0
_WRITE_TIMEOUT_S = 10.0
_MAX_CONNECTIONS = 32
_WATCH_BACKLOG = 4096
_REPLAY_LINES = 2000
_REPLAY_BYTES = 4 * 1024 * 1024
_KEEPALIVE_S = 15.0
#: A watcher hears from the run at least this often (keep-alives included).
WATCH_IDLE_S = 4 * _KEEPALIVE_S
_CLOSE_TIMEOUT_S = 2.0
_MAX_MODEL = 200


@dataclass(frozen=True)
class Request:
    """One parsed request.

    Attributes:
        op: what is asked.
        now: for ``stop``: skip the wrap-up.
        amend: for ``amend``: the fields given (``cap``, ``subagent_model``), each a value
            or ``None`` (restore the starting one).
    """

    op: Op
    now: bool = False
    amend: Mapping[str, int | str | None] = field(default_factory=dict)


def parse_request(line: bytes) -> Request:
    """The :class:`Request` in one request line.

    Raises:
        ControlError: not a request of this protocol (``code`` ``bad_request``).

    Example:
        >>> parse_request(b'{"version": 1, "op": "amend", "cap": 2}').amend
        {'cap': 2}
    """
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        raise ControlError("the request is not one JSON line", code="bad_request") from None
    if not isinstance(data, dict):
        raise ControlError("the request is not a JSON object", code="bad_request")
    version = data.get("version", PROTOCOL_VERSION)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ControlError("the request's version is not a protocol version", code="bad_request")
    op = data.get("op")
    if op not in _OPS:
        raise ControlError("unknown op: the ops are " + ", ".join(_OPS), code="bad_request")
    now = data.get("now", False)
    if not isinstance(now, bool):
        raise ControlError("`now` must be true or false", code="bad_request")
    amend: dict[str, int | str | None] = {}
    if op == "amend":
        if "cap" in data:
            cap = data["cap"]
            if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool)):
                raise ControlError("`cap` must be a whole number or null", code="bad_request")
            amend["cap"] = cap
        if "subagent_model" in data:
            model = data["subagent_model"]
            if model is not None and (not isinstance(model, str) or len(model) > _MAX_MODEL):
                raise ControlError(
                    f"the subagent model must be a model name of at most {_MAX_MODEL} characters",
                    code="bad_request",
                )
            amend["subagent_model"] = model
    return Request(op=op, now=now, amend=amend)


@dataclass(eq=False)
class _Watcher:
    """One watch connection's lines not yet written (encoded, each with its newline)."""

    lines: collections.deque[bytes]
    ended: bool
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    dropped: bool = False


class WatchFeed:
    """The run's NDJSON lines for its watchers: written to like a text stream (the run's
    :class:`~teamlead._ndjson.JsonProgress` writes into it), the recent lines kept for a
    watcher that connects later, each new line handed to every watcher.

    Args:
        backlog: the most lines a watcher may have waiting; one further behind is dropped.
    """

    def __init__(self, *, backlog: int = _WATCH_BACKLOG) -> None:
        self._backlog = backlog
        self._recent: collections.deque[bytes] = collections.deque()
        self._recent_bytes = 0
        self._partial = ""
        self._watchers: set[_Watcher] = set()
        self._ended = False

    def write(self, text: str) -> int:
        """Take ``text``: every complete line in it goes out."""
        *lines, self._partial = (self._partial + text).split("\n")
        for line in lines:
            if line:
                self._line(line)
        return len(text)

    def flush(self) -> None:
        """Nothing is buffered but a line's unfinished part."""

    def _line(self, text: str) -> None:
        line = text.encode("utf-8", "replace") + b"\n"
        self._recent.append(line)
        self._recent_bytes += len(line)
        while len(self._recent) > _REPLAY_LINES or self._recent_bytes > _REPLAY_BYTES:
            self._recent_bytes -= len(self._recent.popleft())
        for watcher in list(self._watchers):
            if len(watcher.lines) >= self._backlog:  # it does not keep up: let it go
                watcher.dropped = True
                self._watchers.discard(watcher)
            else:
                watcher.lines.append(line)
            watcher.wake.set()

    def subscribe(self) -> _Watcher:
        """A new watcher, starting with the recent lines."""
        watcher = _Watcher(collections.deque(self._recent), ended=self._ended)
        if not self._ended:
            self._watchers.add(watcher)
        return watcher

    def unsubscribe(self, watcher: _Watcher) -> None:
        self._watchers.discard(watcher)

    def end(self) -> None:
        """The run ended: every watcher gets what is left, then its connection closes."""
        self._ended = True
        for watcher in self._watchers:
            watcher.ended = True
            watcher.wake.set()
        self._watchers.clear()


class Endpoint:
    """One run's control endpoint, serving on the run's event loop.

    Args:
        path: the socket to listen on (its directory is the runtime directory, 0700).
        steering: what each op does to the run.
        run: the run's id (every answer names it).
        feed: the run's NDJSON lines for ``watch``.
        read_timeout_s: how long a request line may take to arrive.
        max_connections: connections served at once (more are answered ``busy``).
    """

    def __init__(
        self,
        path: Path,
        steering: RunSteering,
        *,
        run: str,
        feed: WatchFeed,
        read_timeout_s: float = _READ_TIMEOUT_S,
        max_connections: int = _MAX_CONNECTIONS,
    ) -> None:
        self.path = path
        self._read_timeout_s = read_timeout_s
        self._max_connections = max_connections
        self._steering = steering
        self._run = run
        self.feed = feed
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closing = False

    async def start(self) -> None:
        """Listen (mode 0600: the directory's 0700 already keeps others out).

        Raises:
            OSError: the socket could not be made.
        """
        self._server = await asyncio.start_unix_server(
            self._serve, path=str(self.path), limit=MAX_REQUEST, backlog=self._max_connections
        )
        self.path.chmod(0o600)

    async def close(self) -> None:
        """Stop serving: watchers get the lines left (a moment at most), the socket goes.
        Bounded and idempotent."""
        self._closing = True
        self.feed.end()
        server, self._server = self._server, None
        if server is not None:
            server.close()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=_CLOSE_TIMEOUT_S)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=_CLOSE_TIMEOUT_S)
        if server is not None:
            with contextlib.suppress(asyncio.TimeoutError, Exception):
                await asyncio.wait_for(server.wait_closed(), _CLOSE_TIMEOUT_S)
        with contextlib.suppress(OSError):
            self.path.unlink()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._conversation(reader, writer)
        except (ConnectionError, asyncio.TimeoutError, asyncio.IncompleteReadError):
            pass  # the client went away or stalled: nothing to answer
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the run goes on whatever a client does
            log.warning("the run's control endpoint failed on a request: %s", type(exc).__name__)
        finally:
            # the task counts until its socket is really closed: an endpoint closed
            # meanwhile waits for it, so no socket outlives the loop unclosed
            try:
                writer.close()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(writer.wait_closed(), _CLOSE_TIMEOUT_S)
            finally:
                if task is not None:
                    self._tasks.discard(task)

    async def _conversation(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            if self._closing:
                raise ControlError("the run has finished", code="finished")
            if len(self._tasks) > self._max_connections:
                raise ControlError("the run is busy; try again", code="busy")
            if not self._peer_allowed(writer):
                raise ControlError("this run belongs to another user", code="not_yours")
            try:
                line = await asyncio.wait_for(reader.readline(), self._read_timeout_s)
            except (ValueError, asyncio.LimitOverrunError):  # longer than MAX_REQUEST
                raise ControlError("the request is too long", code="bad_request") from None
            if not line.endswith(b"\n"):
                return  # the client went away (or never finished its line)
            request = parse_request(line)
        except ControlError as exc:
            await self._answer(writer, _refusal(exc.code, str(exc)))
            return
        if request.op == "watch":
            await self._watch(writer)
        else:
            await self._answer(writer, self._act(request))

    def _act(self, request: Request) -> dict[str, Any]:
        steering = self._steering
        try:
            if request.op == "status":
                return {"version": PROTOCOL_VERSION, "ok": True, **steering.status()}
            if request.op == "detail":
                return {**self._ok(), "detail": steering.detail()}
            if request.op == "stop":
                message = steering.stop(now=request.now)
            elif request.op == "pause":
                message = steering.pause()
            elif request.op == "unpause":
                message = steering.unpause()
            else:
                message = steering.amend(request.amend)
        except ControlError as exc:
            return _refusal(exc.code, str(exc))
        return {**self._ok(), "message": message}

    def _ok(self) -> dict[str, Any]:
        return {"version": PROTOCOL_VERSION, "ok": True, "run": self._run}

    async def _watch(self, writer: asyncio.StreamWriter) -> None:
        watcher = self.feed.subscribe()
        try:
            await self._answer(writer, self._ok())
            while True:
                watcher.wake.clear()  # a line that comes while this writes wakes the wait
                while watcher.lines:
                    if writer.is_closing():  # the watcher hung up (drain() does not say so)
                        return
                    writer.write(watcher.lines.popleft())
                    if writer.transport.get_write_buffer_size() > 256 * 1024:
                        await asyncio.wait_for(writer.drain(), _WRITE_TIMEOUT_S)
                await asyncio.wait_for(writer.drain(), _WRITE_TIMEOUT_S)
                if watcher.dropped or (watcher.ended and not watcher.lines):
                    return
                try:
                    await asyncio.wait_for(watcher.wake.wait(), _KEEPALIVE_S)
                except asyncio.TimeoutError:
                    writer.write(b"\n")  # still here; NDJSON readers skip empty lines
        finally:
            self.feed.unsubscribe(watcher)

    async def _answer(self, writer: asyncio.StreamWriter, answer: dict[str, Any]) -> None:
        writer.write(json.dumps(answer, ensure_ascii=True).encode() + b"\n")
        await asyncio.wait_for(writer.drain(), _WRITE_TIMEOUT_S)

    def _peer_allowed(self, writer: asyncio.StreamWriter) -> bool:
        """The peer is this user (or the system cannot say: the modes keep others out)."""
        option = getattr(socket, "SO_PEERCRED", None)
        sock = writer.get_extra_info("socket")
        if option is None or sock is None:
            return True
        try:
            raw = sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("iII"))
            _pid, uid, _gid = struct.unpack("iII", raw)
        except (OSError, struct.error):
            return False
        return bool(uid == os.getuid())


def _refusal(code: str, message: str) -> dict[str, Any]:
    return {"version": PROTOCOL_VERSION, "ok": False, "error": code, "message": message}


# -- the client ----------------------------------------------------------------------------
def _connect(path: str, timeout: float) -> socket.socket:
    """A connection to the endpoint at ``path``.

    Raises:
        ControlError: nothing listens there (``code`` ``unreachable``).
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
    except (OSError, ValueError) as exc:
        sock.close()
        raise ControlError(
            f"the run does not answer on its control socket ({_reason(exc)})", code="unreachable"
        ) from None
    return sock


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return type(exc).__name__


def _request_line(request: Mapping[str, Any]) -> bytes:
    """``request`` as its line; checked before anything connects.

    Raises:
        ControlError: longer than the run reads (``code`` ``bad_request``).
    """
    line = json.dumps({"version": PROTOCOL_VERSION, **request}).encode() + b"\n"
    if len(line) > MAX_REQUEST:
        raise ControlError("the request is too long", code="bad_request")
    return line


def _send(sock: socket.socket, line: bytes) -> Generator[bytes, None, None]:
    """Send a request ``line``; the answer's lines as they come (at most :data:`MAX_LINE`
    each)."""
    try:
        # a run too busy to serve us answers ``busy`` and closes without reading the
        # request: its answer may be waiting to be read all the same
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(line)
        # the reader holds the socket open until it is closed: closed here, even when the
        # caller stops early (the generator's close), so the socket's own close is real
        with sock.makefile("rb") as reader:
            while True:
                got = reader.readline(MAX_LINE + 1)
                if not got:
                    return
                if len(got) > MAX_LINE:
                    raise ControlError("the run sent a line too long to read", code="unreachable")
                yield got
    except OSError as exc:
        raise ControlError(
            f"the run's control socket failed ({_reason(exc)})", code="unreachable"
        ) from None


def _checked(raw: bytes, ref: str) -> dict[str, Any]:
    """The answer in ``raw``; a refusal raised as the error it stands for."""
    answer = json_object(raw)
    if answer is None or not isinstance(answer.get("ok"), bool):
        raise ControlError("the run's answer is not one of this protocol", code="unreachable")
    if answer["ok"]:
        return answer
    error, said = answer.get("error"), answer.get("message")
    code = error if isinstance(error, str) else "refused"
    message = said if isinstance(said, str) else code
    if code in ("finished", "not_yours"):
        raise NoSuchRun(f"run {ref}: {message}", ref=ref, why=code)
    raise ControlError(message[:1000], code=code[:40])


def call(
    path: str, request: Mapping[str, Any], *, ref: str = "", timeout: float = 5.0
) -> dict[str, Any]:
    """Send one request to the endpoint at ``path`` and return its answer.

    Args:
        path: the run's socket (its registry entry's ``socket``).
        request: the request without ``version`` (``{"op": "pause"}``).
        ref: how the run is named in errors.
        timeout: for connecting and for the answer.

    Raises:
        ControlError: the run refused (its ``code``) or does not answer (``unreachable``).
        NoSuchRun: the run has finished meanwhile, or is another user's.
    """
    line = _request_line(request)
    with (
        contextlib.closing(_connect(path, timeout)) as sock,
        contextlib.closing(_send(sock, line)) as answers,
    ):
        for raw in answers:
            return _checked(raw, ref or path)
    raise ControlError("the run closed its control socket without an answer", code="unreachable")


def follow(path: str, *, ref: str = "", timeout: float = 5.0) -> Iterator[str]:
    """The run's NDJSON event lines (``watch``), the recent ones first, until it ends.

    Each read waits at most :data:`WATCH_IDLE_S`: the run sends a keep-alive line well
    within it, so a run whose process hangs ends the watch with ``unreachable``.

    Raises:
        ControlError: as :func:`call`.
        NoSuchRun: as :func:`call`.
    """
    with (
        contextlib.closing(_connect(path, timeout)) as sock,
        contextlib.closing(_send(sock, _request_line({"op": "watch"}))) as lines,
    ):
        head = next(lines, None)
        if head is None:
            raise ControlError("the run closed its control socket", code="unreachable")
        _checked(head, ref or path)
        sock.settimeout(WATCH_IDLE_S)
        for raw in lines:
            text = raw.decode("utf-8", "replace").rstrip("\r\n")
            if text:
                yield text
