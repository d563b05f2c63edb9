"""A loopback HTTP server that speaks the Messages API, driven by a script.

It implements what the Claude Code CLI and the ``anthropic`` client use:
``POST /v1/messages`` (``?beta=true`` too) as SSE or JSON, ``POST
/v1/messages/count_tokens``, and realistic ``error`` bodies. Each request is parsed into
a :class:`~teamlead.testing.replies.ScriptedRequest` and answered with whatever the
script returns. Every request is recorded for assertions.

Threads serve the streams, so the lead and all of its subagents stream at once; a
scripted delay blocks only its own stream. An optional emulated concurrency limit
rejects requests with 429 + ``retry-after`` while more than K are in flight, and optional
token buckets (:class:`~teamlead.testing.rate_buckets.TokenBucket`: requests or input
tokens, refilled continuously, described by ``anthropic-ratelimit-*`` headers) reject
what they cannot cover, as the Messages API's rate limits do.

Example:
    >>> from teamlead.testing import ScriptedServer, Reply
    >>> with ScriptedServer(lambda req: Reply.text("hi")) as server:
    ...     url = server.base_url      # "http://127.0.0.1:<port>"
"""

from __future__ import annotations

import errno
import ipaddress
import json
import logging
import socket
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import urlsplit

from ..clock import Clock, SystemClock
from ..errors import SetupError
from .rate_buckets import RateBuckets, TokenBucket, input_tokens_of
from .recorded import RecordedRequest, ServerStats, peak_agents, peak_requests
from .replies import AgentCall, Fault, Reply, Role, ScriptedRequest
from .wire import message_json, new_message_id, session_from_metadata, sse_events, system_text

__all__ = [
    "RecordedRequest",
    "Script",
    "ScriptedServer",
    "ServerStats",
    "message_json",
    "sse_events",
]

log = logging.getLogger("teamlead.testing")

Script = Callable[[ScriptedRequest], Reply]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # small SSE chunks must not wait for delayed ACKs
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s - %s", self.address_string(), format % args)

    # -- routing -------------------------------------------------------------------
    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        path = urlsplit(self.path).path.rstrip("/")
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
        except ValueError as exc:
            self._send_json(400, Fault(400, message=f"invalid JSON body: {exc}").body())
            return
        if path == "/v1/messages":
            chars = len(raw.decode("utf-8", "replace"))
            self.server.owner._handle_messages(self, body, list(self.headers.items()), chars)
        elif path == "/v1/messages/count_tokens":
            text = json.dumps(body.get("messages", [])) + system_text(body.get("system"))
            self._send_json(200, {"input_tokens": max(1, len(text) // 4)})
        else:
            self._send_json(404, Fault(404, message=f"no route for {path}").body())

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        path = urlsplit(self.path).path.rstrip("/")
        if path == "/v1/models":
            self._send_json(200, {"data": [], "has_more": False})
        else:
            self._send_json(404, Fault(404, message=f"no route for {path}").body())

    # -- low-level writers --------------------------------------------------------
    def _send_json(
        self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", f"req_{uuid.uuid4().hex[:24]}")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _start_stream(self, headers: tuple[tuple[str, str], ...] = ()) -> None:
        self.send_response(200)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("request-id", f"req_{uuid.uuid4().hex[:24]}")
        self.end_headers()

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False
    request_queue_size = 256  # the lead and every subagent connect at once
    owner: ScriptedServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up (a CLI exiting, a relay closing its pool) is normal."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def _loopback_host(host: str) -> str:
    """``host`` as a literal IPv4 loopback address (``localhost`` maps to 127.0.0.1).

    Only a literal 127.0.0.0/8 address is accepted, so nothing goes through DNS: a name
    starting with ``127.`` (``127.evil.example``) is refused.
    """
    if host == "localhost":
        return "127.0.0.1"
    try:
        address = ipaddress.IPv4Address(host)
    except ValueError:
        address = None
    if address is None or not address.is_loopback:
        raise SetupError(
            f"the scripted server only binds a literal IPv4 loopback address, not {host!r}"
        )
    return str(address)


class ScriptedServer:
    """The scripted model server. Use it as a context manager, or ``start()``/``stop()``.

    Args:
        script: decides every reply; a callable ``(ScriptedRequest) -> Reply``.
        host: must be a loopback address.
        port: 0 picks a free port.
        concurrency_limit: emulate a hidden account limit: with more than this many
            ``/v1/messages`` requests (streams, from arrival to their last event) in flight,
            answer 429 with ``retry-after``.
        retry_after: seconds sent in ``retry-after`` by the emulated limit.
        limit_roles: the roles the emulated limit counts and rejects (default: all), e.g.
            ``{"subagent"}`` for a limit only the subagents' requests run into.
        on_request: called with each request's record once it has been answered (on the
            server's handler thread), e.g. to log one line per request; an exception it
            raises is logged and the server carries on.
        headers_after: when a streamed answer's response headers go out: seconds after the
            request came (0: at once, as the API does), or ``"answer"``: only with the whole
            answer, as long prefills and buffering gateways do. A 429 of the emulated limit
            is always sent at once.
        token_bucket: one or more emulated rate limits
            (:class:`~teamlead.testing.rate_buckets.TokenBucket`), checked after the
            concurrency limit, for every role: a request they cannot all cover is answered
            429 with ``retry-after``; one they cover draws from each, and its ``usage``
            reports the ``input_tokens`` drawn.
        clock: the clock the token buckets refill on (default: the system's); a test
            that checks an exact refill passes a
            :class:`~teamlead.testing.fake_clock.FakeClock`.

    Raises:
        SetupError: the port is in use, or the host is not loopback.
    """

    def __init__(
        self,
        script: Script,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        concurrency_limit: int | None = None,
        retry_after: float = 1.0,
        limit_roles: Collection[Role] | None = None,
        on_request: Callable[[RecordedRequest], None] | None = None,
        headers_after: float | Literal["answer"] = 0.0,
        token_bucket: TokenBucket | Sequence[TokenBucket] = (),
        clock: Clock | None = None,
    ) -> None:
        if headers_after != "answer" and not (
            isinstance(headers_after, (int, float)) and headers_after >= 0
        ):
            raise SetupError(
                f"headers_after must be seconds >= 0 or 'answer', got {headers_after!r}"
            )
        self.headers_after = headers_after
        self.script = script
        self.on_request = on_request
        self.host = _loopback_host(host)
        self.port = port
        self.concurrency_limit = concurrency_limit
        self.retry_after = retry_after
        self.limit_roles = frozenset(limit_roles) if limit_roles is not None else None
        self._limited_in_flight = 0
        buckets = (token_bucket,) if isinstance(token_bucket, TokenBucket) else token_bucket
        self.token_buckets: tuple[TokenBucket, ...] = tuple(buckets)
        self._clock = clock or SystemClock()
        self._rate = RateBuckets(self.token_buckets, self._clock.monotonic()) if buckets else None
        self.requests: list[RecordedRequest] = []
        self.stats = ServerStats()
        self._lock = threading.Lock()
        self._agents: dict[str, AgentCall] = {}
        self._stopping = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``; valid once started."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> ScriptedServer:
        try:
            httpd = _HTTPServer((self.host, self.port), _Handler)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise SetupError(
                    f"port {self.port} is already in use on {self.host}; pick another with --port"
                ) from None
            raise SetupError(f"cannot listen on {self.host}:{self.port}: {exc.strerror}") from None
        httpd.owner = self
        self._httpd = httpd
        self.port = httpd.server_address[1]
        self._stopping.clear()
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="scripted-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; streams still sleeping in a scripted delay are cut short."""
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- queries for tests --------------------------------------------------------------
    def recorded(self, role: Role | None = None) -> list[RecordedRequest]:
        """A snapshot of the recorded requests, optionally only one role's."""
        with self._lock:
            items = list(self.requests)
        return [r for r in items if role is None or r.role == role]

    def _of(self, role: Role | None, session: str | None) -> list[RecordedRequest]:
        return [r for r in self.recorded(role) if session in (None, r.request.session_id)]

    def max_concurrent(self, role: Role | None = None, session_id: str | None = None) -> int:
        """The most requests (of ``role``, of ``session_id``) that overlapped at one instant."""
        return peak_requests((r.started, r.end) for r in self._of(role, session_id))

    def drawn(self, kind: str = "input-tokens") -> float:
        """What the requests taken drew from the token buckets of ``kind``, in total."""
        return sum(r.drawn.get(kind, 0.0) for r in self.recorded())

    def max_concurrent_agents(self, session_id: str | None = None) -> int:
        """The most agents (distinct agent ids, the lead not counted) in flight at once."""
        return peak_agents(
            (r.started, r.end, r.agent_id or "") for r in self._of(None, session_id) if r.agent_id
        )

    # -- request handling -------------------------------------------------------------
    def _parse(self, body: dict[str, Any], index: int) -> ScriptedRequest:
        messages = body.get("messages") if isinstance(body.get("messages"), list) else []
        tools = tuple(
            str(t.get("name"))
            for t in body.get("tools") or []
            if isinstance(t, dict) and t.get("name")
        )
        probe = ScriptedRequest(
            index=index,
            body=body,
            system=system_text(body.get("system")),
            messages=messages or [],
            tools=tools,
            session_id=session_from_metadata(body),
            role="lead",
            agent=None,
            stream=bool(body.get("stream")),
            model=str(body.get("model") or "claude-opus-5-5"),
        )
        first = probe.first_user_text
        with self._lock:
            agent = next((a for p, a in self._agents.items() if p and p in first), None)
        role: Role = "subagent" if agent else ("lead" if tools else "other")
        return ScriptedRequest(**{**probe.__dict__, "role": role, "agent": agent})

    def _handle_messages(
        self,
        handler: _Handler,
        body: dict[str, Any],
        headers: list[tuple[str, str]],
        chars: int = 0,
    ) -> None:
        with self._lock:
            index = self.stats.requests
            self.stats.requests += 1
            self.stats.in_flight += 1
            self.stats.max_in_flight = max(self.stats.max_in_flight, self.stats.in_flight)
        request = self._parse(body, index)
        counted = self.concurrency_limit is not None and (
            self.limit_roles is None or request.role in self.limit_roles
        )
        with self._lock:
            if counted:
                self._limited_in_flight += 1
            over_limit = counted and self._limited_in_flight > (self.concurrency_limit or 0)
        record = RecordedRequest(request=request, started=time.monotonic(), headers=headers)
        with self._lock:
            self.requests.append(record)
        released = not counted

        def release(status: int | None = None) -> None:
            # before the last write: a client that has read its answer never races the
            # status recorded, nor its place under the limit with its next request
            nonlocal released
            if status is not None:
                record.status = status
            if record.released is None:  # the client cannot have the whole answer before
                record.released = time.monotonic()
            if not released:
                released = True
                with self._lock:
                    self._limited_in_flight -= 1

        drawn = None
        if self._rate is not None and not over_limit:
            now, wall = self._clock.monotonic(), self._clock.time()
            drawn = self._rate.draw(input_tokens_of(chars), now=now, wall=wall)
            record.drawn = drawn.drawn
        try:
            if over_limit:
                reply = Reply(fault=Fault(429, retry_after=self.retry_after))
                with self._lock:
                    self.stats.rejected += 1
            elif drawn is not None and not drawn.taken:
                message = "This request would exceed your organization's rate limit."
                fault = Fault(429, retry_after=drawn.retry_after, message=message)
                reply = Reply(fault=fault, headers=drawn.headers)
                with self._lock:
                    self.stats.rejected += 1
            else:
                try:
                    reply = self.script(request)
                    if not isinstance(reply, Reply):
                        raise TypeError(f"script returned {type(reply).__name__}, not a Reply")
                except Exception as exc:  # a broken script must answer, never hang the CLI
                    log.error(
                        "scripted model failed on request %d:\n%s", index, traceback.format_exc()
                    )
                    record.error = f"{type(exc).__name__}: {exc}"
                    reply = Reply(fault=Fault(500, message=f"script error: {record.error}"))
                if drawn is not None:  # the usage reports what was drawn
                    tokens = int(drawn.drawn.get("input-tokens", input_tokens_of(chars)))
                    reply = replace(
                        reply, input_tokens=tokens, headers=reply.headers + drawn.headers
                    )
            record.reply = reply
            self._remember_agents(reply)
            record.status = self._answer(handler, request, reply, release)
        except (BrokenPipeError, ConnectionResetError):
            record.status = 499  # the client went away mid-reply
        finally:
            record.finished = time.monotonic()
            release()
            with self._lock:
                self.stats.in_flight -= 1
                self.stats.status_counts[record.status] = (
                    self.stats.status_counts.get(record.status, 0) + 1
                )
                if record.status != 200:
                    self.stats.faults += 1
            if self.on_request is not None:
                try:
                    self.on_request(record)
                except Exception:  # a broken logger must not break the replies
                    log.exception("on_request failed on request %d", index)

    def _remember_agents(self, reply: Reply) -> None:
        for use in reply.tool_uses:
            if use.name in ("Agent", "Task") and isinstance(use.input.get("prompt"), str):
                call = AgentCall(
                    description=str(use.input.get("description", "")),
                    prompt=str(use.input["prompt"]),
                    subagent_type=str(use.input.get("subagent_type", "general-purpose")),
                    name=use.input.get("name"),
                    model=use.input.get("model"),
                )
                with self._lock:
                    self._agents[call.prompt] = call

    def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._stopping.wait(seconds)

    def _answer(
        self,
        handler: _Handler,
        request: ScriptedRequest,
        reply: Reply,
        release: Callable[[int], None],
    ) -> int:
        """Write ``reply``; ``release`` records its status and frees its hidden-limit place
        just before the last write."""
        fault = reply.fault
        # Like the real API, a stream that will succeed (or break only later) is answered
        # 200 at once and its events follow when the "model" has written them.
        streams = request.stream and (fault is None or (fault.drop and fault.after_events > 0))
        streams = streams and self.headers_after != "answer"
        early = 0.0 if self.headers_after == "answer" else min(reply.delay, self.headers_after)
        self._sleep(early)  # a slow prefill, or a gateway that holds the headers back
        if streams:
            handler._start_stream(reply.headers)
        self._sleep(reply.delay - early)
        if fault is not None and fault.drop and fault.after_events <= 0:
            handler.connection.shutdown(socket.SHUT_RDWR)
            handler.close_connection = True
            return 0
        if fault is not None and not fault.drop:
            retry = fault.should_retry
            if retry is None:
                retry = fault.status in (429, 500, 529)
            headers = {"x-should-retry": "true" if retry else "false"}
            headers.update(reply.headers)
            if fault.retry_after is not None:
                headers["retry-after"] = f"{fault.retry_after:g}"
            release(fault.status)
            handler._send_json(fault.status, fault.body(), headers)
            return fault.status
        message_id = new_message_id()
        if not request.stream:
            release(200)
            handler._send_json(
                200, message_json(reply, request.model, message_id), dict(reply.headers)
            )
            return 200
        if not streams:
            handler._start_stream(reply.headers)
        for n, (name, data) in enumerate(sse_events(reply, request.model, message_id)):
            if fault is not None and n >= fault.after_events:
                handler.connection.shutdown(socket.SHUT_RDWR)
                handler.close_connection = True
                return 0
            if self._stopping.is_set():
                handler.close_connection = True
                return 0
            handler._write_chunk(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            if name == "content_block_delta" and data["delta"]["type"] == "text_delta":
                self._sleep(reply.chunk_delay)
        release(200)
        handler._end_stream()
        return 200
