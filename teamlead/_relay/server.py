"""Running the relay: uvicorn on a loopback socket in this process.

:func:`start_relay` binds ``127.0.0.1`` on an ephemeral port, draws a random path prefix,
and serves :class:`~teamlead._relay.app.RelayApp` with uvicorn as a task of the running
event loop (uvicorn's signal handlers are not installed: Ctrl-C stays the program's). The
HTTP parsing (httptools) and the upstream client (one pooled ``aiohttp.ClientSession``)
both parse in C, which keeps what the relay adds per streamed reply under a millisecond.
Each run on a relay (:meth:`Relay.open_run`, made by
:meth:`~teamlead._relay.shared.RelayPool.run`) gets its own :class:`RelayRun`: a base URL
under the relay's prefix, its own counters, events and ceilings, over the shared governor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import secrets
import socket
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import anyio
import uvicorn

from .._gate import Pause, RunLimits
from .._metering import AgentBook
from ..clock import SYSTEM_CLOCK
from ..errors import RelayError
from ..events import ConcurrencyChanged, RelaySummary
from ..governor import Governor, GovernorPolicy
from ..policy import LimitsPolicy
from .app import RUN_MARK, RelayApp, RunShare
from .blame import in_user_terms
from .forward import RelayConfig
from .protocol import ConnectionGuard, GuardedSocket, protocol_for
from .reach import Proxy, connect_ahead, proxy_for
from .stats import RelayListener, notify

__all__ = [
    "RELAY_POLICY",
    "Relay",
    "RelayRun",
    "Reserved",
    "bounded_server",
    "loopback_socket",
    "start_relay",
]

log = logging.getLogger("teamlead.relay")

#: The shared governor's policy: start at 32 concurrent requests per model (above the CLI's
#: 20 subagents plus the lead) and learn down from the first 429s.
RELAY_POLICY = GovernorPolicy(ceiling=32)
_START_TIMEOUT_S = 10.0
#: Whether the listener takes ``SO_REUSEADDR`` (asyncio's own rule: POSIX only; on Windows
#: it would let another program bind the same port).
_REUSE_ADDRESS = os.name == "posix" and sys.platform != "cygwin"
#: Connections waiting to be accepted (uvicorn's default).
_BACKLOG = 2048
#: Bytes of a reply read ahead of a slow client (aiohttp pauses the socket at twice this):
#: small, so memory per stream stays flat however long the reply.
_READ_BUFFER = 16 * 1024


# our own logger reports; uvicorn's would echo paths
for _name in ("uvicorn.error", "uvicorn.access", "uvicorn.asgi"):
    logging.getLogger(_name).setLevel(logging.CRITICAL)


class _QuietServer(uvicorn.Server):
    """uvicorn's server as the relay runs it: the host program owns the signals, and a stop
    is taken at once. (uvicorn looks at its exit flag every 0.1 s, then sleeps 0.1 s more
    before it closes: the end of every run waited on both.)"""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._exit = asyncio.Event()

    def exit_now(self) -> None:
        """Stop serving now, without waiting for the requests still running (the relay
        ends those itself)."""
        self.should_exit = self.force_exit = True
        self._exit.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the host program owns its signals

    async def main_loop(self) -> None:
        await self.on_tick(0)  # the default headers (no date header, so set once)
        await self._exit.wait()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        for server in self.servers:
            await server.wait_closed()


@dataclass(kw_only=True)
class RelayRun(RunShare):
    """One run's share of a relay: point the CLI's ``ANTHROPIC_BASE_URL`` at ``base_url``."""

    base_url: str
    relay: Relay
    token: str

    def summary(self) -> RelaySummary:
        """This run's requests, 429s absorbed and passed on, and each bucket's limit now
        (the governor's, or the run's own ceiling where that is lower)."""
        return self.tally.summary(self.limit_of)

    def limit_of(self, key: str) -> int:
        """The most requests of ``key`` this run may have in flight now."""
        limit = self.relay.limit_of(key)
        own = self.limits.limit_of(key) if self.limits is not None else None
        return limit if own is None else min(limit, own)

    def close(self) -> None:
        """Stop counting for this run (requests still arriving count for the relay only)."""
        self.relay._app.runs.pop(self.token, None)

    def in_user_terms(self, text: str) -> str:
        """``text`` (an error the CLI wrote) naming the upstream where it named the relay,
        the only gateway the CLI knows of (see :func:`.blame.in_user_terms`)."""
        return in_user_terms(text, relay_port=self.relay.port, upstream=self.relay.upstream)


@dataclass(frozen=True)
class Reserved:
    """A relay's address drawn before it starts (its listening socket and path prefix) and
    its first run's token: a CLI told :attr:`base_url` can start before the run is made
    (``teamlead-claude``), its requests waiting in the socket's backlog until the relay
    serves."""

    sock: GuardedSocket
    prefix: str
    token: str

    @classmethod
    def draw(cls) -> Reserved:
        """A free loopback port, listened on, and the random prefix and token.

        Raises:
            OSError: no loopback socket.
        """
        return cls(loopback_socket(0), secrets.token_urlsafe(18), secrets.token_urlsafe(9))

    @property
    def base_url(self) -> str:
        """The run's base URL, as :meth:`Relay.open_run` will give it."""
        return _run_url(_relay_url(self.sock.getsockname()[1], self.prefix), self.token)


def _relay_url(port: int, prefix: str) -> str:
    """A relay's base URL: its loopback port and its random path prefix."""
    return f"http://127.0.0.1:{port}/{prefix}"


def _run_url(relay_url: str, token: str) -> str:
    """The base URL of the relay's run ``token`` (what :class:`~.app.RelayApp` routes)."""
    return f"{relay_url}{RUN_MARK}{token}"


class Relay:
    """A running relay. Get one from :func:`start_relay` (or a run from
    :class:`~teamlead._relay.shared.RelayPool`).

    Attributes:
        base_url: ``http://127.0.0.1:PORT/<random prefix>``: the CLI's ``ANTHROPIC_BASE_URL``.
        upstream: where requests go.
        governor: the governor pacing them.
    """

    def __init__(self, app: RelayApp, port: int) -> None:
        self._app = app
        self.port = port
        self.base_url = _relay_url(port, app.prefix)
        self.upstream = app.upstream
        self.governor = app.governor
        self._unsubscribe = app.governor.subscribe(self._changed)

    def open_run(
        self,
        on_event: RelayListener | None = None,
        *,
        deadline_s: float | None = None,
        limits: LimitsPolicy | None = None,
        overload_hold_s: float | None = None,
        agents: AgentBook | None = None,
        pause: Pause | None = None,
        token: str | None = None,
    ) -> RelayRun:
        """A run of its own: a base URL whose requests are counted (and reported) apart.

        ``deadline_s``: seconds from now until the run ends; none of its requests waits for
        a slot, or holds a 429, past that (the 429 goes on to the run at once instead).
        ``limits``: the run's own ceilings on its requests in flight; they bound this run's
        requests only (see :mod:`teamlead._gate.limits`). ``overload_hold_s``: the longest
        one of the run's requests is held through an overload (``None``: the relay's own bound).
        ``agents``: the run's agent ledger, which counts and governs each of its requests
        per agent. ``pause``: the run's pause, which holds its new requests while it is on.
        ``token``: the run's part of the URL, drawn ahead (:class:`Reserved`); default: new.
        """
        token = token or secrets.token_urlsafe(9)
        clock = self.governor.clock
        deadline = None if deadline_s is None else clock.monotonic() + deadline_s
        run = self._app.runs[token] = RelayRun(
            listeners=[on_event] if on_event else [],
            deadline=deadline,
            limits=RunLimits(limits, clock) if limits is not None else None,
            overload_hold_s=overload_hold_s,
            agents=agents,
            pause=pause,
            base_url=_run_url(self.base_url, token),
            relay=self,
            token=token,
        )
        return run

    def summary(self) -> RelaySummary:
        """All requests since the relay started."""
        return self._app.total.tally.summary(self.limit_of)

    def limit_of(self, key: str) -> int:
        """The governor's limit of ``key`` now (every run's requests together)."""
        return self.governor.state(key).effective

    def _changed(self, event: ConcurrencyChanged) -> None:
        notify(self._app.total.listeners, event)
        for run in list(self._app.runs.values()):
            notify(run.listeners, event)


def loopback_socket(port: int) -> GuardedSocket:
    """A listening, non-blocking socket on ``127.0.0.1:port`` (0: any free port) whose
    ``accept`` a :func:`bounded_server` holds to its connection cap.

    Raises:
        OSError: the port cannot be bound or listened on.
    """
    # proto=IPPROTO_TCP: asyncio sets TCP_NODELAY on accepted sockets only when it is
    # explicit; without it Nagle and delayed ACKs cost ~40 ms per keep-alive request.
    sock = GuardedSocket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if _REUSE_ADDRESS:
            # a server stopped with streams in flight closed them first: their sockets wait
            # out TIME-WAIT on the port, and without this a restart on a fixed port failed
            # with "Address already in use" for a minute. Not SO_REUSEPORT: a second live
            # server on the same port is still refused.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        # listen here, not in uvicorn: with SO_REUSEADDR two servers can both bind a port
        # that neither listens on yet, and the second learns of it only at listen()
        sock.listen(_BACKLOG)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def bounded_server(
    app: Callable[..., Any], sock: GuardedSocket, *, config: RelayConfig, root: bytes, name: str
) -> _QuietServer:
    """uvicorn serving ``app`` on ``sock`` (from :func:`loopback_socket`) with the client
    connections' bounds of :mod:`.protocol`: request targets under ``root`` only (``b""``:
    any path), bounded and timed heads, a connection cap below the open-file limit (one
    warning naming ``name`` when it is reached). Its signal handlers are not installed:
    the program owns its signals. Serve it with ``server.serve(sockets=[sock])``."""
    sock.guard = guard = ConnectionGuard(root=root, config=config, name=name)
    return _QuietServer(
        uvicorn.Config(
            app,
            lifespan="off",
            http=protocol_for(guard),
            timeout_keep_alive=config.idle_timeout_s,  # type: ignore[arg-type]
            log_config=None,
            log_level=None,  # set once, at import: set per server, it clears every logger's cache
            access_log=False,
            proxy_headers=False,  # no X-Forwarded-* rewriting: the client is local
            server_header=False,
            date_header=False,
            timeout_graceful_shutdown=1,
        )
    )


def _upstream_session(config: RelayConfig, proxy: Proxy) -> aiohttp.ClientSession:
    """The upstream client: pooled, no cookies, no redirects, bytes as they come.

    No header is added that the CLI did not send (``skip_auto_headers``; no ``~/.netrc``
    credentials either), the body is not decompressed, and the proxy is the environment's
    (``HTTPS_PROXY``/``HTTP_PROXY``, ``NO_PROXY``), looked up once, as the CLI's own would be.
    """
    timeout = aiohttp.ClientTimeout(
        total=None, sock_connect=config.connect_timeout_s, sock_read=config.read_timeout_s
    )
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, enable_cleanup_closed=False),
        timeout=timeout,
        auto_decompress=False,
        read_bufsize=_READ_BUFFER,
        cookie_jar=aiohttp.DummyCookieJar(),
        skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
        # trust_env would also read ~/.netrc for the upstream on every request (in a thread)
        proxy=proxy[0],
        proxy_auth=proxy[1],
    )


def start_relay(
    upstream: str = "https://api.anthropic.com",
    governor: Governor | None = None,
    *,
    config: RelayConfig | None = None,
    on_event: RelayListener | None = None,
    rng: random.Random | None = None,
    reserved: Reserved | None = None,
    check: str | None = None,
) -> AbstractAsyncContextManager[Relay]:
    """Run a relay in front of ``upstream`` for the block.

    Entering raises :class:`~teamlead.errors.RelayError` when it could not start (no
    loopback socket, uvicorn failed): run direct then. ``rng`` jitters the backoff after
    a 429 without a usable Retry-After (default: one ``random.Random`` for the process).
    ``reserved``: the socket and prefix to serve on (drawn ahead), instead of new ones.
    ``check``: where the user set ``upstream`` (``ANTHROPIC_BASE_URL``): entering then
    raises :class:`~teamlead._relay.UpstreamUnreachable` when it cannot be connected to
    (:func:`~teamlead._relay.reach.connect_ahead`).

    Example:
        >>> async with start_relay("https://api.anthropic.com") as relay:  # doctest: +SKIP
        ...     env = {"ANTHROPIC_BASE_URL": relay.base_url}
    """
    return _RunningRelay(
        upstream,
        governor or Governor(RELAY_POLICY),
        config or RelayConfig(),
        on_event,
        rng,
        reserved,
        check,
    )


@dataclass(eq=False)
class _RunningRelay:
    """:func:`start_relay`'s context. A class, not a generator: a run abandoned mid-stream
    is finalised by the event loop's async-generator hook, which would also close a
    generator-based context on its own, a second time and from another task."""

    _upstream: str
    _governor: Governor
    _config: RelayConfig
    _on_event: RelayListener | None
    _rng: random.Random | None = None
    _reserved: Reserved | None = None
    _check: str | None = None
    _relay: Relay | None = field(default=None, init=False)
    _stopped: bool = field(default=False, init=False)
    _ahead: asyncio.Task[None] | None = field(default=None, init=False)

    async def __aenter__(self) -> Relay:
        reserved = self._reserved
        try:
            self._sock = sock = reserved.sock if reserved else loopback_socket(self._config.port)
        except OSError as exc:
            where = f"127.0.0.1:{self._config.port}" if self._config.port else "127.0.0.1"
            raise RelayError(f"the relay cannot listen on {where}: {exc.strerror}") from None
        port = sock.getsockname()[1]
        try:
            proxy = proxy_for(self._upstream)
        except RelayError:
            sock.close()  # the relay's, reserved or not
            raise
        self._session = _upstream_session(self._config, proxy)
        app = RelayApp(
            upstream=self._upstream,
            session=self._session,
            governor=self._governor,
            config=self._config,
            prefix=reserved.prefix if reserved else secrets.token_urlsafe(18),
            rng=self._rng,
        )
        app.hosts = frozenset({b"127.0.0.1:%d" % port, b"localhost:%d" % port})
        root = b"/" + app.prefix.encode()
        self._server = server = bounded_server(
            app, sock, config=self._config, root=root, name="relay"
        )
        loop = asyncio.get_running_loop()
        self._task = task = loop.create_task(server.serve(sockets=[sock]))
        # the first request would wait for the upstream's handshakes (and the store's, just
        # below): they are done while the CLI starts, or before, for an upstream to check
        self._ahead = ahead = loop.create_task(
            connect_ahead(self._session, self._upstream, proxy, check=self._check)
        )
        try:
            with anyio.move_on_after(_START_TIMEOUT_S):
                delay = 0.0  # uvicorn starts in a loop turn or two: look at once, then back off
                while not server.started and not task.done():  # noqa: ASYNC110 - uvicorn has a flag only
                    await SYSTEM_CLOCK.sleep(delay)
                    delay = min(max(delay * 2, 0.0002), 0.005)
            if not server.started:
                raise RelayError("the relay did not start within 10 s")
            if self._check is not None:  # a wrong setting ends the run before its CLI asks
                await ahead
        except BaseException:
            await self._stop()
            raise
        loop.call_soon(self._governor.connect_account)
        if self._on_event is not None:  # every event of the relay (all runs)
            app.total.listeners.append(self._on_event)
        relay = self._relay = Relay(app, port)
        log.debug("relay listening on 127.0.0.1:%d", port)
        return relay

    async def __aexit__(self, *exc_info: object) -> None:
        await self._stop()

    async def _stop(self) -> None:
        """Stop serving, end the requests still running, close every upstream connection.

        Idempotent, bounded (5 s a step) and shielded: it runs even when the run that
        used the relay is being cancelled.
        """
        if self._stopped:
            return
        self._stopped = True
        if self._relay is not None:
            self._relay._unsubscribe()
        server, task = self._server, self._task
        with anyio.CancelScope(shield=True):
            server.exit_now()
            with anyio.move_on_after(5):
                await asyncio.wait({task})
            if not task.done():
                task.cancel()
            elif not task.cancelled() and task.exception() is not None:
                log.warning("the relay stopped with an error: %s", type(task.exception()).__name__)
            # force_exit does not wait for the requests still streaming: end them here (and
            # a connection still being opened ahead), so none uses the upstream session
            # after it is closed
            requests = {t for t in server.server_state.tasks if not t.done()}
            if self._ahead is not None and not self._ahead.done():
                requests.add(self._ahead)
            for request in requests:
                request.cancel()
            if requests:
                await asyncio.wait(requests, timeout=5)
            self._sock.close()
            with anyio.move_on_after(5):
                await self._session.close()
