"""One request's exchange with the upstream, paced by the governor.

:func:`open_upstream` takes a governor slot (bucket per model, priority by role), sends the
request and returns the slot with the upstream response still open, headers read, body not
yet: the caller streams it and releases the slot when the stream ends. Whatever the
upstream answers, the slot is the caller's on return, and given back here on any exception.

A 429 is held here: the governor is fed its Retry-After, the slot is given back, and the
request waits for a new slot with a higher priority, which the governor grants once the
pause has passed. A 429 without a usable Retry-After pauses the bucket for a jittered
exponential backoff instead (:func:`backoff_s`). Past ``max_retries``, or when the pause is
longer than the request can wait (the slot timeout, or what is left of its run's
deadline), the 429 goes on to the client at once.

An overload (529, 503, or the upstream dropping the connection before its reply's head) is
held too: the governor pauses the bucket for a jittered backoff (every process of the
account with it), and the request is retried once the pause has passed, for at most
``overload_hold_s`` from its first overload (never past its run's deadline); the caller
keeps a streaming client alive meanwhile (``on_hold``, see :mod:`.keepalive`). Past the
bound, or at once when the upstream marks it ``x-should-retry: false``, the overload goes
on to the client as the upstream gave it.

A Retry-After (or an empty rate-limit window's reset) beyond
:data:`~teamlead._governor.retry_after.PLAUSIBLE_PAUSE_S` is a faulty header: one warning
per run and kind (``warn``), and the request backs off as for a 429 without one; the
governor's pause never sees it. The lead's first try of each request has its own lane
(``through_pause``), so a pause that a subagent's 429 set never starves the synthesis turn.

The caller reports a streamed answer's slot answered
(:meth:`~teamlead.governor.Slot.answered`) once the reply's
:class:`~teamlead._governor.UsageScan` saw its ``message_stop``: the upstream has finished
the request, so a 429 met by a later request does not count it, though the slot is held
until the body's last byte.
"""

from __future__ import annotations

import asyncio
import io
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
import yarl

from .._governor import (
    WarnOnce,
    faulty_retry_after,
    faulty_window,
    read_windows,
    retry_after_from_headers,
)
from ..events import RateLimited
from ..governor import Governor, Slot
from .blame import unreachable_reason
from .routing import RequestInfo, priority

__all__ = [
    "OVERLOADED",
    "Ask",
    "Exchange",
    "NoSlot",
    "RelayConfig",
    "UpstreamDropped",
    "UpstreamLost",
    "UpstreamRequest",
    "UpstreamTimeout",
    "backoff_s",
    "open_upstream",
]

log = logging.getLogger("teamlead.relay")


@dataclass(frozen=True)
class RelayConfig:
    """The relay's bounds.

    Attributes:
        max_retries: 429s held and retried per request before one is passed on.
        connect_timeout_s: the longest wait to connect to the upstream.
        read_timeout_s: the longest silence from the upstream (headers or body) before
            the request is given up (504 if nothing was sent yet, else the stream is cut).
        slot_timeout_s: the longest wait for a governor slot before answering 429; a 429
            whose pause is longer is passed on at once.
        max_body_bytes: larger request bodies are refused with 413 (at once when the
            declared ``Content-Length`` is larger, before any of the body is read).
        provider: the first half of every bucket key (``provider/model``).
        backoff_base_s: the pause after a first 429 without a usable Retry-After; each
            further one doubles it (with jitter), up to ``backoff_max_s``.
        backoff_max_s: the longest such backoff.
        max_header_bytes: a request line and headers larger than this are answered 431.
        max_headers: a request with more header lines is answered 431.
        head_timeout_s: the longest a connection may take to send a complete request line
            and headers, from when it opened or its last reply ended (slow senders are
            cut: 408).
        idle_timeout_s: a keep-alive connection with no new request for this long is closed.
        body_timeout_s: the longest a client may take to send a request body (else 408).
        max_connections: open client connections at most (also kept well below the
            process's open-file limit); past it the oldest idle connection is closed.
        port: the loopback port to listen on (0: any free one, drawn by the system).
        overload_hold_s: the longest one request is held through an overload burst (its
            run may ask for less, see :attr:`~teamlead.policy.Policy.overload_hold_s`);
            0 passes overloads on at once.
        overload_backoff_max_s: the longest wait between two tries of a request held
            through an overload (shorter than ``backoff_max_s``: the burst's end is met
            within one such wait).
        ping_every_s: seconds between the ``ping`` events that keep a held streaming
            request alive.
    """

    max_retries: int = 3
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 300.0
    slot_timeout_s: float = 900.0
    max_body_bytes: int = 64 * 1024 * 1024
    provider: str = "anthropic"
    backoff_base_s: float = 1.0
    backoff_max_s: float = 30.0
    max_header_bytes: int = 64 * 1024
    max_headers: int = 128
    head_timeout_s: float = 10.0
    idle_timeout_s: float = 5.0
    body_timeout_s: float = 60.0
    max_connections: int = 1024
    port: int = 0
    overload_hold_s: float = 300.0
    overload_backoff_max_s: float = 8.0
    ping_every_s: float = 5.0


class NoSlot(Exception):
    """No governor slot came within ``slot_timeout_s``."""


class UpstreamTimeout(Exception):
    """The upstream did not connect, or went silent, within its timeout."""


class UpstreamLost(Exception):
    """The upstream could not be reached, or broke the connection, during an exchange (the
    start's check raises :class:`~.reach.UpstreamUnreachable`, a setup error, instead).

    Attributes:
        reason: what failed, in words ("connection refused"), for the one line that
            names the upstream (see :mod:`.blame`).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class UpstreamDropped(UpstreamLost):
    """The upstream accepted the connection, then dropped it before its reply's head (an
    overloaded server, a reset): held like an overload."""


#: The statuses held as an overload: the API's 529, and a 503 from a gateway before it.
OVERLOADED = frozenset({503, 529})
#: What a dropped connection is counted as, in events.
DROPPED_STATUS = 502


_RNG = random.Random()

#: What aiohttp raises for a failed exchange (its timeouts are both kinds).
UPSTREAM_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError)


@dataclass(frozen=True)
class UpstreamRequest:
    """What goes upstream: the method, the full URL, headers and body.

    ``url`` is taken as already encoded (``yarl.URL(..., encoded=True)``), so the path and
    query bytes reach the upstream exactly as the CLI sent them.
    """

    method: str
    url: yarl.URL
    headers: list[tuple[str, str]]
    body: bytes


_LARGE_BODY = 1024 * 1024


@dataclass
class _Hold:
    """One request's hold through an overload burst: when it began, how many tries."""

    budget_s: float
    started_at: float | None = None
    tries: int = 0

    def allows(self, now: float, pause: float) -> bool:
        """Whether waiting ``pause`` more keeps the hold within its budget."""
        began = now if self.started_at is None else self.started_at
        return self.budget_s > 0 and now + pause - began <= self.budget_s


@dataclass
class Ask:
    """One request to send: what :func:`open_upstream` paces it and judges its answers by.

    Attributes:
        governor: the governor whose slots pace it.
        key: its bucket, ``provider/model``.
        info: what the relay read of its body.
        config: the relay's bounds.
        on_limited: each told of every 429 and overload it meets.
        deadline: when its run ends (the governor clock's monotonic seconds): no wait goes
            past it.
        hold_s: the longest it is held through overloads (``None``:
            ``config.overload_hold_s``).
        warn: where a faulty header is told, once per kind (its run's).
        rng: the backoff's jitter (``None``: one ``random.Random`` for the process).
    """

    governor: Governor
    key: str
    info: RequestInfo
    config: RelayConfig
    on_limited: tuple[Callable[[RateLimited], None], ...]
    deadline: float | None = None
    hold_s: float | None = None
    warn: WarnOnce = field(default_factory=lambda: WarnOnce(log))
    rng: random.Random | None = None

    def limited(
        self,
        absorbed: bool,
        retry_after_s: float | None,
        status: int = 429,
        source: Literal["upstream", "relay"] = "upstream",
    ) -> None:
        """Tell :attr:`on_limited` of a 429 or overload this request met."""
        event = RateLimited(
            model=self.info.model,
            role=self.info.role,
            status=status,
            retry_after_s=retry_after_s,
            outcome="absorbed" if absorbed else "passed",
            source=source,
        )
        for tell in self.on_limited:
            tell(event)


@dataclass
class Exchange:
    """A request under way: its slot (held) and the upstream response (open)."""

    slot: Slot
    response: aiohttp.ClientResponse
    attempts: int


async def _send(session: aiohttp.ClientSession, request: UpstreamRequest) -> aiohttp.ClientResponse:
    # a body over aiohttp's large-body mark (1 MiB: a lead whose history quotes a huge
    # Agent input) goes as a stream of its own per try, as aiohttp asks
    body = request.body
    data: bytes | io.BytesIO = io.BytesIO(body) if len(body) > _LARGE_BODY else body
    try:
        return await session.request(
            request.method,
            request.url,
            headers=request.headers,
            data=data,
            allow_redirects=False,
        )
    except asyncio.TimeoutError:  # aiohttp's connect and read timeouts are both TimeoutErrors
        raise UpstreamTimeout from None
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
        if isinstance(exc, aiohttp.ClientConnectorError):  # never connected: not an overload
            raise UpstreamLost(unreachable_reason(exc)) from None
        raise UpstreamDropped(unreachable_reason(exc)) from None
    except aiohttp.ClientError as exc:
        raise UpstreamLost(unreachable_reason(exc)) from None


def backoff_s(
    config: RelayConfig, attempt: int, rng: random.Random, most: float | None = None
) -> float:
    """The pause after the ``attempt``-th (from 0) 429 that had no usable Retry-After.

    Exponential (``backoff_base_s * 2**attempt``), bounded by ``backoff_max_s`` (or
    ``most``), and jittered to between half and all of that, so requests cut by one burst
    do not all come back at the same instant.

    Example:
        >>> rng = random.Random(1)
        >>> [round(backoff_s(RelayConfig(), n, rng), 2) for n in (0, 1, 2, 40)]
        [0.57, 1.85, 3.53, 18.83]
    """
    top = config.backoff_max_s if most is None else most
    ceiling = min(top, config.backoff_base_s * 2.0 ** min(attempt, 32))
    return ceiling * (0.5 + 0.5 * rng.random())


async def open_upstream(
    session: aiohttp.ClientSession,
    request: UpstreamRequest,
    ask: Ask,
    on_hold: Callable[[], None] | None = None,
) -> Exchange:
    """Send ``request`` under a governor slot, holding and retrying 429s and overloads;
    see the module. ``on_hold`` is called when the request is first held for an overload
    (the caller keeps its client alive from then on).

    Raises:
        NoSlot: no governor slot within ``config.slot_timeout_s`` (or the deadline).
        UpstreamTimeout: the upstream did not connect or answer in time.
        UpstreamLost: the upstream could not be reached (or dropped the
            connection past the hold).
    """
    governor, info = ask.governor, ask.info
    attempt = 0
    hold = _Hold(ask.config.overload_hold_s if ask.hold_s is None else ask.hold_s)
    while True:
        try:
            slot = await governor.acquire(
                ask.key,
                timeout=_wait_left(ask),
                priority=priority(info.role, attempt),
                through_pause=info.role == "lead" and attempt == 0,
                estimate=info.estimate,
            )
        except TimeoutError:
            raise NoSlot from None
        response: aiohttp.ClientResponse | None = None
        try:
            response = await _send(session, request)
            absorb = _report(ask, slot, response, attempt, hold)
        except UpstreamDropped:
            held = _overloaded(ask, slot, DROPPED_STATUS, None, hold)
            slot.release()
            if not held:
                raise
            absorb = True
        except BaseException:
            slot.release()
            if response is not None:
                response.close()
            raise
        if not absorb:
            assert response is not None
            return Exchange(slot, response, attempt + 1)
        if hold.tries and on_hold is not None:
            on_hold()
        log.debug("holding a request for %s (%s), retry %d", info.model, info.role, attempt + 1)
        if response is not None:
            slot.release()
            response.close()  # the error's body is not needed; its connection is not reused
        attempt += 1


def _wait_left(ask: Ask) -> float:
    """How long this request may still wait: the slot timeout, or less near the deadline."""
    most = ask.config.slot_timeout_s
    if ask.deadline is None:
        return most
    return max(0.0, min(most, ask.deadline - ask.governor.clock.monotonic()))


def _report(
    ask: Ask, slot: Slot, response: aiohttp.ClientResponse, attempt: int, hold: _Hold
) -> bool:
    """Feed the governor what ``response`` says; whether to hold (absorb) and retry it."""
    governor, key, config = ask.governor, ask.key, ask.config
    status = response.status
    headers = response.headers
    _warn_if_faulty(ask, headers, status)
    if status in OVERLOADED:
        retry = retry_after_from_headers(headers, now=governor.clock.time())
        final = headers.get("x-should-retry", "").strip().lower() == "false"
        governor.pace(key, headers, slot)
        # the upstream says no retry will help: no hold
        return _overloaded(ask, slot, status, retry, _Hold(0.0) if final else hold)
    if status != 429:
        if 200 <= status < 300:
            slot.streaming()
            governor.pace(key, headers, slot)
        return False
    retry_after = retry_after_from_headers(headers, now=governor.clock.time())
    pause = retry_after if retry_after is not None else backoff_s(config, attempt, ask.rng or _RNG)
    absorb = attempt < config.max_retries and pause <= _wait_left(ask)
    governor.pace(key, headers, slot)  # first: a 429 a token window explains is the budget's
    # a backoff only paces our own retry; a 429 passed on leaves that to the client
    slot.rate_limited(pause if absorb else retry_after, measured=True)
    ask.limited(absorb, retry_after)
    return absorb


def _warn_if_faulty(ask: Ask, headers: Any, status: int) -> None:
    """One warning line per kind for a Retry-After, or an empty window's reset, past the
    plausibility bound (each is ignored)."""
    now, warn = ask.governor.clock.time(), ask.warn
    faulty = faulty_retry_after(headers, now=now)
    if faulty is not None:
        warn(
            "retry-after",
            f"the upstream asked a {ask.info.role} request to wait {min(faulty, 1e12):.0f} s "
            f"after a {status}: not a plausible rate-limit pause, ignored (the request "
            "backs off instead)",
        )
    window = faulty_window(read_windows(headers), now=now)
    if window is not None:
        warn(
            "window",
            f"the upstream said its {window.name} window is empty for "
            f"{min(window.reset_at - now, 1e12):.0f} s: not a plausible rate-limit window, "
            "ignored (nothing waits for it)",
        )


def _overloaded(ask: Ask, slot: Slot, status: int, retry_after: float | None, hold: _Hold) -> bool:
    """An overload met (``status``; :data:`DROPPED_STATUS` for a dropped connection): feed
    the governor, and whether to hold the request and retry it (see the module)."""
    governor, config = ask.governor, ask.config
    now = governor.clock.monotonic()
    # a pause asked shorter than the backoff's (none, a zero, a date already past by a
    # skewed clock, a millisecond) is the backoff: a burst's end is met within one short
    # wait, so it is not overshot long; without one, the tries would come as fast as the
    # upstream answers them for the whole hold
    backoff = backoff_s(config, hold.tries, ask.rng or _RNG, config.overload_backoff_max_s)
    pause = max(retry_after or 0.0, backoff)
    absorb = hold.allows(now, pause) and pause <= _wait_left(ask)
    if absorb:
        if hold.started_at is None:
            hold.started_at = now
        hold.tries += 1
    slot.overloaded(pause if absorb else retry_after)
    ask.limited(absorb, retry_after, status)
    return absorb
