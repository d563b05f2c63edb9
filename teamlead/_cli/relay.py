"""``teamlead relay``: the pacing request relay for any Claude Code client.

An interactive ``claude`` session, a TypeScript SDK app or any other tool on the same key
points its ``ANTHROPIC_BASE_URL`` at this relay and is paced by the same governor as
teamlead's own runs: the relay shares the learnt limits and the requests in flight with
them (``--limits``, this machine by default), holds 429s and retries them once the
Retry-After has passed.

The first line on stdout is ``ANTHROPIC_BASE_URL=http://127.0.0.1:PORT/<prefix>`` (the
random prefix keeps other local programs out), so ``eval`` or a script can read it. The
relay serves until Ctrl-C, SIGTERM or SIGHUP, then closes its port and exits 0. On a
terminal, stderr shows one live line: requests, 429s held and passed on, and per model
the limit, the requests running here and on the whole account, and those waiting.
"""

from __future__ import annotations

import os
import sys
from typing import IO, Any

import anyio
import click

from .._redact import terminal_safe
from ..errors import UsageError
from .exitcodes import handle_errors
from .options import limits_from_options, option, with_limits_options
from .signals import Interruptible

__all__ = ["relay"]

_LIVE_EVERY_S = 0.5


def _status(relay: Any) -> str:
    """The live line: the relay's counts, then each model's limit and load."""
    summary = relay.summary()
    parts = [
        f"{summary.requests} requests, {summary.absorbed} 429s held, {summary.passed} passed on"
    ]
    for key in relay.governor.keys:
        state = relay.governor.state(key)
        model = terminal_safe(key.split("/", 1)[-1])[:40]
        parts.append(
            f"{model}: limit {state.effective}, {state.in_flight} running "
            f"({state.account_in_flight} on the account), {state.waiting} waiting"
        )
    return "teamlead relay: " + "; ".join(parts)


async def _serve(upstream: str, limits: Any, live: IO[str] | None, port: int = 0) -> None:
    from .._relay import RelayConfig, RelayPool, start_relay
    from .._relay.shared import account_of, governor_policy

    # this process serves this relay alone: its ceilings are its governor's own policy
    governor = RelayPool().governor(
        limits.shared,
        account=account_of(upstream, os.environ),
        policy=governor_policy(limits),
    )
    try:
        config = RelayConfig(port=port)
        await _relay_until_stopped(start_relay, upstream, governor, live, config)
    finally:
        governor.account.close()  # gives back nothing: every request has ended


async def _relay_until_stopped(
    start_relay: Any, upstream: str, governor: Any, live: IO[str] | None, config: Any
) -> None:
    async with start_relay(upstream, governor, config=config) as running:
        click.echo(f"ANTHROPIC_BASE_URL={running.base_url}")
        sys.stdout.flush()
        try:
            if live is None:
                await anyio.sleep_forever()
            while True:
                assert live is not None
                width = max(20, _columns() - 1)
                live.write("\r\x1b[K" + _status(running)[:width])
                live.flush()
                await anyio.sleep(_LIVE_EVERY_S)
        finally:
            if live is not None:
                live.write("\r\x1b[K")
                live.flush()


def _check_upstream(url: str | None, flag: str | None) -> None:
    """Refuse an upstream that is not ``http(s)://host``, naming where it came from: the
    ``--upstream`` the user typed, else ``ANTHROPIC_BASE_URL``.

    Raises:
        UsageError: the upstream is no http(s) URL.
    """
    if not (url or "").strip():
        return  # the default upstream
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url or "")
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        ok = False
    if not ok:
        where = flag or "ANTHROPIC_BASE_URL"
        raise UsageError(
            f"{where} {url!r} is not an http(s) URL: give http(s)://host[:port], "
            "e.g. https://api.anthropic.com"
        )


def _columns() -> int:
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except OSError:
        return 100


@click.command("relay")
@option(
    "--upstream",
    help="Where requests go [default: ANTHROPIC_BASE_URL, else https://api.anthropic.com].",
)
@option(
    "--relay-port",
    "port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="The loopback port to listen on, for a base URL that stays the same (0: any free one).",
)
@option("--quiet", "-q", is_flag=True, help="No live line on the terminal.")
@with_limits_options
@handle_errors
def relay(upstream: str | None, port: int, quiet: bool, **kw: Any) -> None:
    """Serve the pacing relay for any Claude Code client until Ctrl-C or SIGTERM.

    Prints ANTHROPIC_BASE_URL=http://127.0.0.1:PORT/<prefix> first; point a client at it,
    e.g. ANTHROPIC_BASE_URL=... claude. Requests are paced with teamlead's own runs.
    """
    from .._relay import relay_applicable

    limits = limits_from_options(**kw)
    env = dict(os.environ)
    if upstream is not None:
        env["ANTHROPIC_BASE_URL"] = upstream
    _check_upstream(env.get("ANTHROPIC_BASE_URL"), "--upstream" if upstream is not None else None)
    applicable = relay_applicable(env)
    if not applicable.ok:
        raise UsageError(applicable.note or "the relay does not apply to this upstream")
    live = sys.stderr if sys.stderr.isatty() and not quiet else None
    Interruptible(lambda: _serve(applicable.upstream, limits, live, port), stop=lambda: None).run()
