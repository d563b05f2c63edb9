"""The relays and governors a process shares between its runs, and when to use them.

A :class:`RelayPool` holds them (one per process by default, owned by the process's
:class:`~teamlead._run.process.ProcessState`; there is no module state here): one
governor per account and event loop paces every request of every run on that account;
one relay per upstream and account forwards them. The first :meth:`RelayPool.run` starts
the relay, the last one to leave stops it. A run's own ceilings (``--model-limit`` …)
bound that run's requests only (:mod:`teamlead._gate.limits`). :func:`relay_applicable`
says whether a run's environment can use a relay at all.

Runs share a governor and a relay only when they run on the same
:class:`~teamlead.clock.Clock` (every run on the system clock, by default), so the relay's
deadline, the run's ceilings, the pause and the governor's waits all read the run's clock.
"""

from __future__ import annotations

import asyncio
import hashlib
import weakref
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import anyio
import yarl

from .._gate import Pause
from .._governor import Account, NamespacedAccount, WarnOnce, open_account
from .._metering import AgentBook
from ..clock import SYSTEM_CLOCK, Clock
from ..governor import Governor, GovernorPolicy
from ..policy import LimitsPolicy
from .forward import RelayConfig
from .server import RELAY_POLICY, Relay, RelayRun, Reserved, start_relay
from .stats import RelayListener

__all__ = [
    "DEFAULT_UPSTREAM",
    "Applicability",
    "RelayPool",
    "account_of",
    "governor_policy",
    "relay_applicable",
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
    try:
        parts = urlsplit(base)
        usable = parts.scheme in ("http", "https") and bool(parts.hostname)
        _ = parts.port  # a port out of range or not a number: no connection can be made
        yarl.URL(base)  # as the relay reads it: a host name IDNA cannot encode is none
    except ValueError:  # e.g. an unclosed IPv6 bracket (UnicodeError is one too)
        usable = False
    if not usable:
        return Applicability(
            False, base, "request relay off: ANTHROPIC_BASE_URL is not an http(s) URL"
        )
    return Applicability(True, base)


#: Where the CLI finds its credential, in the order it prefers them.
_CREDENTIALS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")


def account_of(upstream: str, env: Mapping[str, str]) -> str:
    """The account a run's requests count against: its upstream and credential, as a key
    that holds neither secret: ``host:port#<hash>``.

    The hash is a one-way SHA-256 of the upstream URL and the credential the CLI will send
    (``ANTHROPIC_API_KEY``, else ``ANTHROPIC_AUTH_TOKEN``, else ``CLAUDE_CODE_OAUTH_TOKEN``;
    with none, the login Claude Code keeps, one per user: the upstream alone then, whatever
    the config dir, so an experiment's trials in homes of their own are one account). What
    one account learns (limits, pauses) is stored under its key and never limits another.

    Example:
        >>> a = account_of("https://api.anthropic.com", {"ANTHROPIC_API_KEY": "sk-1"})
        >>> b = account_of("https://api.anthropic.com/", {"ANTHROPIC_API_KEY": "sk-2"})
        >>> a.split("#")[0], a == b
        ('api.anthropic.com', False)
        >>> "sk-1" in a
        False
    """
    credential = next((env[name] for name in _CREDENTIALS if env.get(name)), "login")
    parts = urlsplit(upstream.strip())
    where = (parts.netloc.rpartition("@")[2] or parts.path).lower()
    url = f"{parts.scheme.lower()}://{where}{parts.path.rstrip('/') if parts.netloc else ''}"
    digest = hashlib.sha256(f"{url}\n{credential}".encode("utf-8", "replace")).hexdigest()
    return f"{where}#{digest[:16]}"


@dataclass
class _Entry:
    relay: Relay
    context: AbstractAsyncContextManager[Relay]
    refs: int = 0


@dataclass
class _LoopShare:
    """What one event loop's runs share (a governor belongs to one loop)."""

    lock: anyio.Lock = field(default_factory=anyio.Lock)
    #: keyed by where the state is shared, the account and the clock's ``id`` (a governor
    #: holds its clock, so the ``id`` is not reused while the governor is kept)
    governors: dict[tuple[str, str, int], Governor] = field(default_factory=dict)
    relays: dict[tuple[str, str, str, int], _Entry] = field(default_factory=dict)


def governor_policy(limits: LimitsPolicy) -> GovernorPolicy:
    """The policy of a governor that serves only ``limits``' requests (``teamlead relay``):
    unset ceilings leave the relay's own start (32 per model) and no cap.

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


class RelayPool:
    """The relays and governors of one process, per event loop, made on first use.

    Args:
        account: the account that serves every ``--limits`` value but a Redis URL
            (``process`` and ``machine`` alike), and Redis's last fallback; ``None``: each
            value opens its own (:func:`~teamlead._governor.open_account`). A Ray worker
            passes the experiment's ``RayAccount``, so the relays of every node pace
            against the limits the others learnt (one account across machines); Redis
            shares the in-flight counts too, so it keeps precedence.

    Example:
        >>> pool = RelayPool()
        >>> async with pool.run(applicable.upstream, on_event=print) as run:  # doctest: +SKIP
        ...     env["ANTHROPIC_BASE_URL"] = run.base_url
    """

    def __init__(self, *, account: Account | None = None) -> None:
        #: the account given (see Args); the relays made from now on use it
        self.process_account = account
        #: what the pool's shared accounts found wrong in their stores, told once per kind
        self.warnings = WarnOnce()
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopShare] = (
            weakref.WeakKeyDictionary()
        )
        self._reserved: Reserved | None = None

    def reserve(self) -> str:
        """Draw the address of the next relay this pool starts (a listened loopback socket
        and its prefix) and of its first run; returns that run's base URL, so a CLI can be
        started on it before the run is made. Taken by the next run that starts a relay on
        any port (else :meth:`release` closes it).

        Raises:
            OSError: no loopback socket.
        """
        self.release()
        self._reserved = Reserved.draw()
        return self._reserved.base_url

    def release(self) -> None:
        """Give up the address :meth:`reserve` drew, if no run took it."""
        reserved, self._reserved = self._reserved, None
        if reserved is not None:
            reserved.sock.close()

    def _share(self) -> _LoopShare:
        loop = asyncio.get_running_loop()
        share = self._loops.get(loop)
        if share is None:
            share = self._loops[loop] = _LoopShare()
        return share

    def governor(
        self,
        shared: str = "machine",
        *,
        account: str = "",
        policy: GovernorPolicy | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> Governor:
        """The governor of ``account`` (:func:`account_of`; where its state is ``shared``) on
        ``clock`` and the running event loop, made on first use with ``policy`` (default:
        the relay's own). Its store is the pool's :attr:`process_account` for any ``shared``
        but a Redis URL, else a new one read on ``clock``."""
        share = self._share()
        key = (shared, account, id(clock))
        governor = share.governors.get(key)
        if governor is None:
            given = self.process_account
            if given is not None and not shared.startswith(("redis://", "rediss://")):
                store = given
            else:
                store = open_account(shared, clock=clock, alone=given, warnings=self.warnings)
            named = NamespacedAccount(store, account) if account else store
            governor = share.governors[key] = Governor(
                policy or RELAY_POLICY, clock=clock, account=named
            )
        return governor

    def run(
        self,
        upstream: str = DEFAULT_UPSTREAM,
        *,
        on_event: RelayListener | None = None,
        deadline_s: float | None = None,
        limits: LimitsPolicy | None = None,
        port: int = 0,
        account: str = "",
        overload_hold_s: float | None = None,
        agents: AgentBook | None = None,
        pause: Pause | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> AbstractAsyncContextManager[RelayRun]:
        """A run on the pool's relay for ``upstream``, ``account`` and ``clock``: started
        on first use, stopped after the last run left.

        ``on_event``, ``deadline_s``, ``limits``, ``overload_hold_s``, ``agents`` and
        ``pause`` are the run's, as :meth:`Relay.open_run` takes them; ``limits.shared``
        also says where the account's state is shared. ``port`` is where a relay this run
        starts listens (0: any free port); a relay already serving keeps its own. ``clock``
        is the run's: its relay's governor reads it, and with it the run's deadline,
        ceilings and pause.

        Entering raises :class:`~teamlead.errors.RelayError` when the relay could not
        start: run direct with a one-line warning then; and
        :class:`~.reach.UpstreamUnreachable` (a :class:`~teamlead.errors.SetupError`) when
        an upstream the user set (not the default API) refuses connections, does not
        resolve or fails TLS: the run cannot go on, direct or not.
        """
        limits = limits or LimitsPolicy()

        def open_run(relay: Relay, token: str | None) -> RelayRun:
            return relay.open_run(
                on_event,
                deadline_s=deadline_s,
                limits=limits,
                overload_hold_s=overload_hold_s,
                agents=agents,
                pause=pause,
                token=token,
            )

        key = (upstream, limits.shared, account, id(clock))
        return _PoolRun(self, key, port, clock, open_run)


@dataclass(eq=False)
class _PoolRun:
    """:meth:`RelayPool.run`'s context; a class for the reason given in
    :class:`~teamlead._relay.server._RunningRelay`. ``key`` names the relay it shares
    (upstream, where the limits are shared, account, clock); ``open_run`` opens the run's
    share of it."""

    _pool: RelayPool
    _key: tuple[str, str, str, int]
    _port: int
    _clock: Clock
    _open_run: Callable[[Relay, str | None], RelayRun]
    _left: bool = field(default=False, init=False)

    async def __aenter__(self) -> RelayRun:
        upstream, shared, account, _ = self._key
        self._share = share = self._pool._share()
        reserved, self._pool._reserved = self._pool._reserved, None
        token = None
        try:
            async with share.lock:
                entry = share.relays.get(self._key)
                if entry is None:
                    governor = self._pool.governor(shared, account=account, clock=self._clock)
                    taken = reserved if not self._port else None
                    if taken is not None:  # the relay owns its socket from here
                        token, reserved = taken.token, None
                    config = RelayConfig(port=self._port)
                    # the user's ANTHROPIC_BASE_URL: a wrong one ends the run now, in one
                    # line, not after the CLI's retries
                    check = "ANTHROPIC_BASE_URL" if upstream != DEFAULT_UPSTREAM else None
                    context = start_relay(
                        upstream, governor, config=config, reserved=taken, check=check
                    )
                    relay = await context.__aenter__()
                    entry = share.relays[self._key] = _Entry(relay, context)
                entry.refs += 1
        finally:  # not taken: a relay serves already, or on its own port
            if reserved is not None:
                reserved.sock.close()
        self._entry = entry
        self._run = self._open_run(entry.relay, token)
        return self._run

    async def __aexit__(self, *exc_info: object) -> None:
        if self._left:
            return
        self._left = True
        self._run.close()
        entry, share = self._entry, self._share
        # Released without the lock (a plain decrement cannot race on one event loop), so a
        # run that is only finalised after its loop ended leaves no pending lock behind.
        entry.refs -= 1
        if entry.refs == 0 and share.relays.get(self._key) is entry:
            share.relays.pop(self._key, None)
            with anyio.CancelScope(shield=True):
                await entry.context.__aexit__(None, None, None)
            _retire_governor(share, entry.relay.governor)


def _retire_governor(share: _LoopShare, governor: Governor) -> None:
    """After the last relay of a governor stopped: close a shared governor's account (its
    file or Redis connection, its lease renewer). What it learnt stays in the shared store,
    and the next run opens it again; a process-alone governor is kept, with what it
    learnt."""
    if any(entry.relay.governor is governor for entry in share.relays.values()):
        return
    if governor.account.shared and governor.total_in_flight == 0:
        for key, value in list(share.governors.items()):
            if value is governor:
                del share.governors[key]
        governor.account.close()
