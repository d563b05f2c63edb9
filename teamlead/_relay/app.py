"""The relay's ASGI application: refuse, classify, forward, stream back.

Headers and body bytes pass through untouched, except the hop-by-hop headers HTTP itself
owns (``connection``, ``transfer-encoding`` …), ``host`` (the upstream's), ``content-length``
(recomputed from the same bytes) and ``expect`` (the server answers a ``100-continue`` when
the body is first read: forwarded, it would hold the request until the read timeout). The
response body is forwarded as it arrives (no decoding, no buffering), so SSE events reach
the CLI when the upstream sends them. A slow client slows the upstream read (aiohttp's
bounded read buffer pauses the upstream socket), so memory per stream stays flat. A client
that goes away mid-stream cancels the upstream request and frees its governor slot. A reply
this server could not write (a control character in a header, a status out of range) is a
502 with one warning line, and anything else that goes wrong is one warning line too:
nothing fails silently. A new request of a paused run (``teamlead pause``) is held before
anything else until the pause is lifted, a streaming one with its head and ``ping`` events
meanwhile; requests already streaming go on. Nothing here logs a header, a body or the path
prefix: the API key and the prefix are secrets.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import random
import re
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
import anyio
import yarl

from .._gate import NoPlace, Pause, RunLimits
from .._governor import UsageScan, WarnOnce
from .._metering import AgentBook
from ..events import RateLimited
from ..governor import Governor, bucket_key
from .blame import shown, unreachable_reason
from .forward import (
    UPSTREAM_ERRORS,
    Ask,
    Exchange,
    NoSlot,
    RelayConfig,
    UpstreamLost,
    UpstreamRequest,
    UpstreamTimeout,
    open_upstream,
)
from .keepalive import HeldSend, Message, Send
from .observe import Guarded, RequestObserver, trace_request
from .routing import Refusal, RequestInfo, check_target, classify
from .stats import RelayListener, Tally, notify

__all__ = ["RUN_MARK", "RelayApp", "RunShare"]

log = logging.getLogger("teamlead.relay")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
_T = TypeVar("_T")

_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
_NOT_FORWARDED = _HOP_BY_HOP | {b"host", b"content-length", b"expect"}
#: What the server refuses to write in a response header (uvicorn's own checks).
_BAD_NAME = re.compile(b'[\x00-\x1f\x7f()<>@,;:\\[\\]={} \t\\\\"]')
_BAD_VALUE = re.compile(b"[\x00-\x08\x0a-\x1f\x7f]")
#: What a run's part of a relay URL starts with: ``<prefix>/run-<token>/...``.
RUN_MARK = "/run-"
#: The Retry-After of the relay's own 429, sent when no governor slot came in time.
_NO_SLOT_RETRY_AFTER_S = 5


@dataclass
class RunShare:
    """One run's share of the relay: its counters, listeners, deadline, request observer
    and agent ledger, and the terms :meth:`~teamlead._relay.server.Relay.open_run` gives it.

    ``deadline`` is when the run ends, on the governor's clock, which is the run's
    (:mod:`.shared` gives each clock its governor), in monotonic seconds. ``limits``' places
    are taken before the governor is asked, so they bound this run only. ``warnings``
    tells what the upstream says that cannot be believed (a faulty header) once per kind
    for the run, not once per answer.
    """

    tally: Tally = field(default_factory=Tally)
    listeners: list[RelayListener] = field(default_factory=list)
    deadline: float | None = None
    observer: RequestObserver | None = None
    agents: AgentBook | None = None
    limits: RunLimits | None = None
    overload_hold_s: float | None = None
    pause: Pause | None = None
    warnings: WarnOnce = field(default_factory=lambda: WarnOnce(log))


class _TooLarge(Exception):
    pass


def _unwritable(response: aiohttp.ClientResponse) -> str | None:
    """Why the server could not write this reply's head, or ``None`` when it can."""
    if not 200 <= response.status <= 599:
        return f"status {response.status}"
    headers = response.raw_headers
    if _BAD_NAME.search(b"".join(name for name, _ in headers)):
        return "a malformed header name"
    if _BAD_VALUE.search(b"\t".join(value for _, value in headers)):
        return "a control character in a header"
    return None


class RelayApp:
    """The ASGI callable; one per relay. See the module docstring."""

    def __init__(
        self,
        *,
        upstream: str,
        session: aiohttp.ClientSession,
        governor: Governor,
        config: RelayConfig,
        prefix: str,
        rng: random.Random | None = None,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.rng = rng
        self.session = session
        self.governor = governor
        self.config = config
        self.prefix = prefix
        self.hosts: frozenset[bytes] = frozenset()
        self.total = RunShare()
        self.runs: dict[str, RunShare] = {}
        #: the upstream as errors name it: no credentials, no path (see :mod:`.blame`)
        self.shown_upstream = shown(self.upstream)
        self._warned_unreachable: str | None = None

    def _unreachable(self, reason: str) -> None:
        """One warning line per way the upstream cannot be reached: the CLI retries a 502
        up to ten times, and the same line ten times says nothing new. Once a request
        gets through, the next failure is warned again."""
        if reason == self._warned_unreachable:
            return
        self._warned_unreachable = reason
        log.warning("relay could not reach the upstream %s: %s", self.shown_upstream, reason)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # no websockets; lifespan is off
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            await self._serve(scope, receive, tracked)
        except _StreamCut:
            raise  # logged already; the server drops the connection
        except Exception as exc:  # uvicorn's own error log is off: say it here, once
            log.warning("relay failed on a %s request: %s", scope["method"], type(exc).__name__)
            if started:
                raise  # the server drops the connection: the client sees it incomplete
            await self._answer(send, 500, "api_error", "teamlead relay: internal error")

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        target = check_target(
            scope.get("raw_path") or scope["path"].encode("latin-1"),
            scope["headers"],
            prefix=self.prefix,
            hosts=self.hosts,
        )
        if isinstance(target, Refusal):
            log.info("relay refused a %s request: %s", scope["method"], target.reason)
            await self._answer(send, target.status, "permission_error", target.reason)
            return
        run, path = self._split_run(target)
        body: bytes | None = None
        try:
            with anyio.move_on_after(self.config.body_timeout_s) as timer:
                body = await self._read_body(receive)
        except _TooLarge:
            await self._answer(send, 413, "request_too_large", "request body too large")
            return
        if timer.cancelled_caught:
            message = "teamlead relay: the request body did not arrive in time"
            await self._answer(send, 408, "timeout_error", message)
            return
        if body is None:
            return  # the client went away while sending
        info = classify(body)
        key = bucket_key(self.config.provider, info.model)
        states = [self.total] if run is None else [self.total, run]
        share = run or self.total  # outside a run: the relay's own terms (none)
        for state in states:
            state.tally.request(key)
        query = scope.get("query_string") or b""
        url = self.upstream + path + ("?" + query.decode("latin-1") if query else "")
        headers = [
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in scope["headers"]
            if k.lower() not in _NOT_FORWARDED
        ]
        request = UpstreamRequest(scope["method"], yarl.URL(url, encoded=True), headers, body)

        trace = trace_request(share.observer, path, info, scope["headers"])
        scan = UsageScan()  # the reply's usage, for its trace, its agent's count and the budget
        arrived = self.governor.clock.monotonic() if trace is not None else 0.0

        def limited(event: RateLimited) -> None:
            for state in states:
                state.tally.limited(key, event)
                notify(state.listeners, event)
            if trace is not None:
                trace.limited(event)

        if trace is not None:
            send = _traced_send(send, trace)
        error: str | None = "refused"  # the agent ledger refused it (timeout, budget)

        async def exchange(
            out: Send,
            on_limited: Callable[[RateLimited], None] | None,
            new_body: bytes | None = None,
        ) -> None:
            nonlocal error, key
            error = "interrupted"  # cut mid-stream, or the client went away
            sent, asked = request, info
            if new_body is not None:  # its agent's model pinned: paced in that model's bucket
                sent = dataclasses.replace(request, body=new_body)
                asked = dataclasses.replace(info, model=classify(new_body).model)
                paced = bucket_key(self.config.provider, asked.model)
                for state in states:  # and counted there, with its 429s
                    state.tally.moved(key, paced)
                key = paced
                if trace is not None:
                    trace.pinned(asked)
            ask = Ask(
                self.governor,
                key,
                asked,
                self.config,
                (limited,) if on_limited is None else (limited, on_limited),
                share.deadline,
                hold_s=share.overload_hold_s,
                warn=share.warnings,
                rng=self.rng,
            )
            error = await self._forward(out, sent, ask, trace, arrived, scan, share.limits)

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._watch_disconnect, receive, tg.cancel_scope)
                if share.pause is not None and share.pause.paused:
                    lifted = await self._paused(share.pause, send, info, share.deadline)
                    if lifted is None:
                        error = "paused"
                        tg.cancel_scope.cancel()
                        return
                    send = lifted
                if share.agents is not None:  # counted and governed per agent
                    await share.agents.relay(
                        scope["headers"], body, info.role, send, self._answer, exchange, scan
                    )
                else:
                    await exchange(send, None)
                tg.cancel_scope.cancel()
        finally:
            if trace is not None:
                trace.end(error, scan)

    async def _paused(
        self, pause: Pause, send: Send, info: RequestInfo, deadline: float | None
    ) -> Send | None:
        """Hold one request of a paused run until the pause is lifted, before it asks for
        anything (a slot, a budget): the ``send`` to answer it through then, or ``None``
        when the run's deadline came first (it is answered here, and not retried).

        A streaming request gets the head of its event stream at once and a ``ping`` every
        few seconds while it waits (:class:`~.keepalive.HeldSend`, as through an overload),
        so a client with a first-byte or idle timeout does not give up on it.
        """
        clock = self.governor.clock
        if not info.streaming:
            if await pause.wait(deadline, clock, request=True):
                return send
        else:
            held = HeldSend(send, self.config.ping_every_s)

            async def lifted(hold: Callable[[], None]) -> bool:
                hold()
                return await pause.wait(deadline, clock, request=True)

            if await _kept_alive(held, lifted):
                return held
            send = held
        message = "teamlead relay: the run was paused until its deadline"
        await self._answer(send, 503, "api_error", message, {b"x-should-retry": b"false"})
        return None

    def _split_run(self, path: str) -> tuple[RunShare | None, str]:
        if not path.startswith(RUN_MARK):
            return None, path
        token, _, rest = path[1:].partition("/")
        return self.runs.get(token[len(RUN_MARK) - 1 :]), "/" + rest

    async def _read_body(self, receive: Receive) -> bytes | None:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.config.max_body_bytes:
                raise _TooLarge
            chunks.append(chunk)
            if not message.get("more_body"):
                return b"".join(chunks)

    async def _watch_disconnect(self, receive: Receive, scope: anyio.CancelScope) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                log.debug("client went away; cancelling its upstream request")
                scope.cancel()
                return

    async def _no_slot(self, send: Send, ask: Ask) -> str:
        """The relay's own 429: no slot came in time. A paused bucket says how long; else a
        short wait (the queue is full)."""
        wait = max(_NO_SLOT_RETRY_AFTER_S, math.ceil(self.governor.state(ask.key).cooldown_s))
        ask.limited(False, wait, source="relay")
        message = f"teamlead relay: no slot for {ask.info.model} in time"
        await self._answer(send, 429, "rate_limit_error", message, {b"retry-after": b"%d" % wait})
        return "no_slot"

    async def _forward(
        self,
        send: Send,
        request: UpstreamRequest,
        ask: Ask,
        trace: Guarded | None,
        arrived: float,
        scan: UsageScan,
        limits: RunLimits | None,
    ) -> str | None:
        """Forward one request under its run's own ceilings (``limits``), then the
        governor's slot, and stream its reply back; the error kind, if it failed.
        ``scan`` reads its reply's usage.

        A streaming request held through an overload is kept alive meanwhile (its head at
        once, then pings: :class:`~.keepalive.HeldSend`); whatever is written after that
        goes through it."""
        if limits is not None and limits.active:
            wait_until = self.governor.clock.monotonic() + self.config.slot_timeout_s
            if ask.deadline is not None:
                wait_until = min(ask.deadline, wait_until)
            try:
                async with limits.hold(ask.key, wait_until):
                    return await self._forward(send, request, ask, trace, arrived, scan, None)
            except NoPlace:
                return await self._no_slot(send, ask)
        held = HeldSend(send, self.config.ping_every_s) if ask.info.streaming else None
        if held is not None:
            send = held

        opened = functools.partial(open_upstream, self.session, request, ask)
        try:
            exchange = await (opened() if held is None else _kept_alive(held, opened, _give_back))
        except NoSlot:
            return await self._no_slot(send, ask)
        except UpstreamTimeout:
            message = f"teamlead relay: the upstream {self.shown_upstream} timed out"
            await self._answer(send, 504, "api_error", message)
            return "upstream_timeout"
        except UpstreamLost as exc:
            self._unreachable(exc.reason)
            message = (
                f"teamlead relay: could not reach the upstream {self.shown_upstream} ({exc.reason})"
            )
            await self._answer(send, 502, "api_error", message)
            return "upstream_unreachable"
        self._warned_unreachable = None  # reached: a later failure is news again
        problem = _unwritable(exchange.response)
        if problem is not None:
            log.warning("relay answered 502: the upstream's reply had %s", problem)
            exchange.response.close()
            exchange.slot.release()
            await self._answer(
                send, 502, "api_error", f"teamlead relay: the upstream's reply had {problem}"
            )
            return "upstream_reply_unwritable"
        if trace is not None:
            trace.opened(max(0.0, exchange.slot.acquired_at - arrived), exchange.attempts)
        complete = False
        try:
            await self._stream_back(send, exchange, scan)
            complete = True
        finally:
            if complete:
                exchange.response.release()  # read to the end: the connection is reused
            else:
                exchange.response.close()  # cut short: the connection is dropped
            exchange.slot.release()
        return None

    async def _stream_back(self, send: Send, exchange: Exchange, scan: UsageScan) -> None:
        response = exchange.response
        headers = [(k, v) for k, v in response.raw_headers if k.lower() not in _HOP_BY_HOP]
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        streamed = response.headers.get("content-type", "").startswith("text/event-stream")
        answering = 200 <= response.status < 300 and streamed
        try:
            async for chunk in response.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                for counted in scan.feed(chunk) if streamed else ():
                    if answering:  # the token budget learns from an answer's usage
                        exchange.slot.used(counted)
                if answering and scan.ended:
                    answering = False
                    exchange.slot.answered()  # the upstream counts it no more
        except UPSTREAM_ERRORS as exc:
            # Started already: cut the stream so the client sees it incomplete, not ended.
            log.warning(
                "relay lost the upstream %s mid-stream: %s",
                self.shown_upstream,
                unreachable_reason(exc),
            )
            raise _StreamCut from None
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        if 200 <= response.status < 300:
            exchange.slot.success()

    async def _answer(
        self,
        send: Send,
        status: int,
        kind: str,
        message: str,
        extra: dict[bytes, bytes] | None = None,
    ) -> None:
        body = json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        headers.extend((extra or {}).items())
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})


async def _kept_alive(
    held: HeldSend,
    opened: Callable[[Callable[[], None]], Awaitable[_T]],
    lost: Callable[[_T], None] | None = None,
) -> _T:
    """``opened(hold)`` with ``held``'s keep-alive beside it from the first ``hold()`` (the
    pings of a held request; no task for one never held), until it returns; its failure is
    raised as it is, not in a group. ``lost`` is given what ``opened`` returned when it
    cannot be returned: the wait for the keep-alive's last write was cancelled (the client
    went away meanwhile)."""
    result: list[_T] = []
    failure: list[Exception] = []
    started = False
    try:
        async with anyio.create_task_group() as tg:

            def hold() -> None:
                nonlocal started
                if not started:
                    started = True
                    tg.start_soon(held.keep_alive)

            try:
                result.append(await opened(hold))
            except Exception as exc:  # noqa: BLE001 - raised below, outside the task group
                failure.append(exc)
            finally:
                held.stop()  # the pings end; the keep-alive finishes its last write
    except BaseException:
        if result and lost is not None:
            lost(result[0])
        raise
    if failure:
        raise failure[0]
    return result[0]


def _give_back(exchange: Exchange) -> None:
    """Close an exchange no one will stream: its upstream response, then its slot."""
    exchange.response.close()
    exchange.slot.release()


def _traced_send(send: Send, trace: Guarded) -> Send:
    """``send`` that also shows the trace the status, headers and body sent back."""

    async def traced(message: Message) -> None:
        if message["type"] == "http.response.start":
            trace.response(message["status"], list(message.get("headers") or ()))
        elif message["type"] == "http.response.body":
            body = message.get("body", b"")
            if body:
                trace.chunk(body)
        await send(message)

    return traced


class _StreamCut(Exception):
    """The upstream failed after the response started; the connection must be dropped."""
