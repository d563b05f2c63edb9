"""One request's exchange with the upstream, paced by the governor.

:func:`open_upstream` takes a governor slot (bucket per model, priority by role), sends the
request and returns the slot with the upstream response still open, headers read, body not
yet: the caller streams it and releases the slot when the stream ends. A 429 is held here:
the governor is fed (Retry-After, as a measured 429: the governor counts the requests in
flight and not rejected at that moment), the slot is given back, and the request waits for
a new slot with a higher priority, which the governor grants once the pause has passed.
Past ``max_retries`` the 429 goes on to the client. A 529 feeds the governor as an overload
and goes on at once: the CLI and teamlead's resume already retry it, and retrying here too
would multiply retries.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
import yarl

from .._governor.retry_after import retry_after_from_headers
from ..events import RateLimited
from ..governor import Governor, Slot
from .routing import RequestInfo, priority

__all__ = [
    "Exchange",
    "NoSlot",
    "RelayConfig",
    "UpstreamRequest",
    "UpstreamTimeout",
    "UpstreamUnreachable",
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
        slot_timeout_s: the longest wait for a governor slot before answering 429.
        max_body_bytes: larger request bodies are refused with 413.
        provider: the first half of every bucket key (``provider/model``).
    """

    max_retries: int = 3
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 300.0
    slot_timeout_s: float = 900.0
    max_body_bytes: int = 64 * 1024 * 1024
    provider: str = "anthropic"


class NoSlot(Exception):
    """No governor slot came within ``slot_timeout_s``."""


class UpstreamTimeout(Exception):
    """The upstream did not connect, or went silent, within its timeout."""


class UpstreamUnreachable(Exception):
    """The upstream could not be reached, or broke the connection."""


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


@dataclass
class Exchange:
    """A request under way: its slot (held) and the upstream response (open)."""

    slot: Slot
    response: aiohttp.ClientResponse
    attempts: int


async def _send(session: aiohttp.ClientSession, request: UpstreamRequest) -> aiohttp.ClientResponse:
    try:
        return await session.request(
            request.method,
            request.url,
            headers=request.headers,
            data=request.body,
            allow_redirects=False,
        )
    except asyncio.TimeoutError:  # aiohttp's connect and read timeouts are both TimeoutErrors
        raise UpstreamTimeout from None
    except aiohttp.ClientError as exc:
        log.warning("relay could not reach the upstream: %s", type(exc).__name__)
        raise UpstreamUnreachable from None


async def open_upstream(
    session: aiohttp.ClientSession,
    request: UpstreamRequest,
    *,
    governor: Governor,
    key: str,
    info: RequestInfo,
    config: RelayConfig,
    on_limited: Callable[[RateLimited], None],
) -> Exchange:
    """Send ``request`` under a governor slot, holding and retrying 429s; see the module.

    Raises:
        NoSlot: no governor slot within ``config.slot_timeout_s``.
        UpstreamTimeout: the upstream did not connect or answer in time.
        UpstreamUnreachable: the upstream could not be reached.
    """
    attempt = 0
    while True:
        try:
            slot = await governor.acquire(
                key, timeout=config.slot_timeout_s, priority=priority(info.role, attempt)
            )
        except TimeoutError:
            raise NoSlot from None
        try:
            response = await _send(session, request)
        except BaseException:
            slot.release()
            raise
        status = response.status
        headers = response.headers
        if status not in (429, 529):
            if 200 <= status < 300:
                slot.streaming()
                governor.pace(key, headers)
            return Exchange(slot, response, attempt + 1)
        retry_after = retry_after_from_headers(headers)
        absorb = status == 429 and attempt < config.max_retries
        event = RateLimited(
            model=info.model,
            role=info.role,
            status=status,
            retry_after_s=retry_after,
            outcome="absorbed" if absorb else "passed",
        )
        if status == 529:
            slot.overloaded(retry_after)
        else:
            slot.rate_limited(retry_after, measured=True)
        governor.pace(key, headers)
        on_limited(event)
        if not absorb:
            return Exchange(slot, response, attempt + 1)
        log.debug("holding a 429 for %s (%s), retry %d", info.model, info.role, attempt + 1)
        slot.release()
        response.close()  # the 429's body is not needed; its connection is not reused
        attempt += 1
