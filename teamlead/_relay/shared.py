"""The process-wide relay and governor, shared by concurrent runs, and when to use them.

One governor per event loop paces every request of every run in the process (the account
is one); one relay per upstream forwards them. The first :func:`shared_relay` starts the
relay, the last one to leave stops it. :func:`relay_applicable` says whether a run's
environment can use a relay at all.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio

from .._governor.store import LimitStore
from ..governor import Governor
from .server import RELAY_POLICY, Relay, RelayRun, start_relay
from .stats import RelayListener

__all__ = [
    "DEFAULT_UPSTREAM",
    "Applicability",
    "relay_applicable",
    "shared_governor",
    "shared_relay",
]

DEFAULT_UPSTREAM = "https://api.anthropic.com"
_TRUE = frozenset({"1", "true", "yes", "on"})


@dataclass(frozen=True)
class Applicability:
    """Whether a relay can stand in front of this environment's API.

    Attributes:
        ok: the relay applies.
        upstream: where the relay would forward (``ANTHROPIC_BASE_URL`` or the default API).
        note: when it does not apply, the one-line note to show.
    """

    ok: bool
    upstream: str
    note: str | None = None


def relay_applicable(env: Mapping[str, str]) -> Applicability:
    """Whether the relay applies to ``env`` (the CLI's environment), and its upstream.

    Off for Bedrock and Vertex (their requests are signed for another host) and for a base
    URL that is not HTTP(S).

    Example:
        >>> relay_applicable({"CLAUDE_CODE_USE_BEDROCK": "1"}).note
        'request relay off: Bedrock (CLAUDE_CODE_USE_BEDROCK) is not relayed'
        >>> relay_applicable({}).upstream
        'https://api.anthropic.com'
    """
    base = (env.get("ANTHROPIC_BASE_URL") or "").strip() or DEFAULT_UPSTREAM
    for name, label in (
        ("CLAUDE_CODE_USE_BEDROCK", "Bedrock"),
        ("CLAUDE_CODE_USE_VERTEX", "Vertex"),
    ):
        if (env.get(name) or "").strip().lower() in _TRUE:
            return Applicability(False, base, f"request relay off: {label} ({name}) is not relayed")
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return Applicability(
            False, base, "request relay off: ANTHROPIC_BASE_URL is not an http(s) URL"
        )
    return Applicability(True, base)


@dataclass
class _Entry:
    relay: Relay
    context: AbstractAsyncContextManager[Relay]
    refs: int = 0


_governors: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Governor] = (
    weakref.WeakKeyDictionary()
)
_relays: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, _Entry]] = (
    weakref.WeakKeyDictionary()
)
_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.Lock] = (
    weakref.WeakKeyDictionary()
)


_store: LimitStore | None = None


def use_limit_store(store: LimitStore | None) -> None:
    """Keep the learnt limits of governors made from now on in ``store``.

    A Ray worker points it at the experiment's shared store, so the relays of every node
    pace against the limits the others learnt (one account across machines).
    """
    global _store
    _store = store


def shared_governor() -> Governor:
    """The governor of this process (of the running event loop), made on first use."""
    loop = asyncio.get_running_loop()
    governor = _governors.get(loop)
    if governor is None:
        governor = _governors[loop] = Governor(RELAY_POLICY, store=_store)
    return governor


def shared_relay(
    upstream: str = DEFAULT_UPSTREAM,
    *,
    on_event: RelayListener | None = None,
    deadline_s: float | None = None,
) -> AbstractAsyncContextManager[RelayRun]:
    """A run on the shared relay for ``upstream``: started on first use, stopped after last.

    ``deadline_s`` (seconds from now) is when the run ends: none of its requests waits or
    holds a 429 past it (see :meth:`Relay.open_run`).

    Entering raises :class:`~teamlead.errors.RelayError` when the relay could not start:
    run direct with a one-line warning then.

    Example:
        >>> async with shared_relay(applicable.upstream, on_event=print) as run:  # doctest: +SKIP
        ...     env["ANTHROPIC_BASE_URL"] = run.base_url
        ...     ...
        ...     finished_summary = run.summary()
    """
    return _SharedRun(upstream, on_event, deadline_s)


class _SharedRun:
    """:func:`shared_relay`'s context; a class for the reason given in
    :class:`~teamlead._relay.server._RunningRelay`."""

    def __init__(
        self, upstream: str, on_event: RelayListener | None, deadline_s: float | None = None
    ) -> None:
        self._upstream = upstream
        self._on_event = on_event
        self._deadline_s = deadline_s
        self._left = False

    async def __aenter__(self) -> RelayRun:
        loop = asyncio.get_running_loop()
        lock = _locks.setdefault(loop, anyio.Lock())
        self._entries = entries = _relays.setdefault(loop, {})
        async with lock:
            entry = entries.get(self._upstream)
            if entry is None:
                context = start_relay(self._upstream, shared_governor())
                relay = await context.__aenter__()
                entry = entries[self._upstream] = _Entry(relay, context)
            entry.refs += 1
        self._entry = entry
        self._run = entry.relay.open_run(self._on_event, deadline_s=self._deadline_s)
        return self._run

    async def __aexit__(self, *exc_info: object) -> None:
        if self._left:
            return
        self._left = True
        self._run.close()
        entry, entries = self._entry, self._entries
        # Released without the lock (a plain decrement cannot race on one event loop), so a
        # run that is only finalised after its loop ended leaves no pending lock behind.
        entry.refs -= 1
        if entry.refs == 0 and entries.get(self._upstream) is entry:
            entries.pop(self._upstream, None)
            with anyio.CancelScope(shield=True):
                await entry.context.__aexit__(None, None, None)
