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

from .._governor.account import Account
from .._governor.accounts import open_account
from .._governor.store import LimitStore
from ..governor import Governor, GovernorPolicy
from ..policy import LimitsPolicy
from .forward import RelayConfig
from .server import RELAY_POLICY, Relay, RelayRun, start_relay
from .stats import RelayListener

__all__ = [
    "DEFAULT_UPSTREAM",
    "Applicability",
    "configure_limits",
    "governor_policy",
    "relay_applicable",
    "shared_account",
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
_limits = LimitsPolicy()


def use_limit_store(store: LimitStore | None) -> None:
    """Keep the learnt limits of governors made from now on in ``store``.

    A Ray worker points it at the experiment's shared store, so the relays of every node
    pace against the limits the others learnt (one account across machines). A Redis
    ``limits`` setting takes precedence: Redis shares the in-flight counts too.
    """
    global _store
    _store = store


def governor_policy(limits: LimitsPolicy) -> GovernorPolicy:
    """The relay governor's policy for ``limits``: unset ceilings leave the relay's own
    start (32 per model) and no cap.

    Example:
        >>> governor_policy(LimitsPolicy(default=4, total=6)).ceiling_for("anthropic/x")
        4
    """
    return RELAY_POLICY.model_copy(
        update={
            "ceiling": limits.default or RELAY_POLICY.ceiling,
            "model_ceilings": dict(limits.models),
            "provider_ceilings": dict(limits.providers),
            "max_total": limits.total,
        }
    )


def configure_limits(limits: LimitsPolicy) -> None:
    """Use ``limits`` for the relay of this process: its ceilings apply at once (to the
    governors already made too); where the state is shared applies to governors made
    from now on."""
    global _limits
    _limits = limits
    policy = governor_policy(limits)
    for governor in list(_governors.values()):
        governor.policy = policy


def shared_account(spec: str) -> Account:
    """A new account for a ``--limits`` value (a Ray worker keeps the experiment's store)."""
    if _store is not None and not spec.startswith(("redis://", "rediss://")):
        spec = "process"  # a Ray worker: the experiment's store is the shared one
    return open_account(spec, store=_store)


def shared_governor() -> Governor:
    """The governor of this process (of the running event loop), made on first use."""
    loop = asyncio.get_running_loop()
    governor = _governors.get(loop)
    if governor is None:
        governor = _governors[loop] = Governor(
            governor_policy(_limits), account=shared_account(_limits.shared)
        )
    return governor


def shared_relay(
    upstream: str = DEFAULT_UPSTREAM,
    *,
    on_event: RelayListener | None = None,
    deadline_s: float | None = None,
    limits: LimitsPolicy | None = None,
    port: int = 0,
) -> AbstractAsyncContextManager[RelayRun]:
    """A run on the shared relay for ``upstream``: started on first use, stopped after last.

    ``deadline_s`` (seconds from now) is when the run ends: none of its requests waits or
    holds a 429 past it (see :meth:`Relay.open_run`). ``limits`` (the run's
    :class:`~teamlead.policy.LimitsPolicy`) configures the process's relay governor first
    (see :func:`configure_limits`). ``port`` is where a relay this run starts listens (0:
    any free port); a relay already serving ``upstream`` keeps its own.

    Entering raises :class:`~teamlead.errors.RelayError` when the relay could not start:
    run direct with a one-line warning then.

    Example:
        >>> async with shared_relay(applicable.upstream, on_event=print) as run:  # doctest: +SKIP
        ...     env["ANTHROPIC_BASE_URL"] = run.base_url
        ...     ...
        ...     finished_summary = run.summary()
    """
    if limits is not None:
        configure_limits(limits)
    return _SharedRun(upstream, on_event, deadline_s, port)


class _SharedRun:
    """:func:`shared_relay`'s context; a class for the reason given in
    :class:`~teamlead._relay.server._RunningRelay`."""

    def __init__(
        self,
        upstream: str,
        on_event: RelayListener | None,
        deadline_s: float | None = None,
        port: int = 0,
    ) -> None:
        self._upstream = upstream
        self._port = port
        self._on_event = on_event
        self._deadline_s = deadline_s
        self._left = False

    async def __aenter__(self) -> RelayRun:
        self._loop = loop = asyncio.get_running_loop()
        lock = _locks.setdefault(loop, anyio.Lock())
        self._entries = entries = _relays.setdefault(loop, {})
        async with lock:
            entry = entries.get(self._upstream)
            if entry is None:
                context = start_relay(
                    self._upstream, shared_governor(), config=RelayConfig(port=self._port)
                )
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
            if not entries:
                _retire_governor(self._loop)


def _retire_governor(loop: asyncio.AbstractEventLoop) -> None:
    """After the loop's last relay stopped: close a shared governor's account (its file or
    Redis connection, its lease renewer). What it learnt stays in the shared store, and the
    next run opens it again; a process-alone governor is kept, with what it learnt."""
    governor = _governors.get(loop)
    if governor is not None and governor.account.shared and governor.total_in_flight == 0:
        del _governors[loop]
        governor.account.close()
