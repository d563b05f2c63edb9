"""``teamlead relay``: the pacing request relay for any Claude Code client (its ``--help``
says how it is used).

A client on the same key is paced by the same governor as teamlead's own runs: the relay
shares the learnt limits and the requests in flight with them (``--limits``). The URL's
random prefix keeps other local programs out. On a terminal, stderr shows one live line:
requests, 429s held and passed on, and per model the limit, the requests running here and
on the whole account, and those waiting. With ``--``, the CLI runs on this terminal: a
Ctrl-C at the terminal is the CLI's to handle (an interactive session cancels a turn);
SIGTERM or SIGHUP to teamlead stops the CLI and all it started, and teamlead exits 130.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from typing import IO, Any

import anyio
import click

from .._procs import stop_descendants
from .._redact import terminal_safe
from ..clock import SYSTEM_CLOCK
from ..errors import SetupError, UsageError
from .exitcodes import EXIT_INTERRUPTED, handle_errors
from .options import limits_from_options, limits_options, option, port_option
from .signals import STOP_SIGNALS, defer_stop_signals, receive_stop_signals, run_interruptible

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


#: After SIGTERM or SIGHUP, how long the CLI may take to end before it is killed.
_CLI_STOP_S = 10.0


@contextlib.asynccontextmanager
async def _relay(
    upstream: str, limits: Any, port: int, check: str | None = None
) -> AsyncIterator[Any]:
    """The relay to ``upstream`` on ``port``, running for the block, on a governor of its
    own (this process serves this relay alone: its ceilings are its governor's policy);
    ``check``: where the user set ``upstream``, to stop at once if it cannot be reached."""
    from .._relay import RelayConfig, RelayPool, account_of, governor_policy, start_relay

    governor = RelayPool().governor(
        limits.shared, account=account_of(upstream, os.environ), policy=governor_policy(limits)
    )
    try:
        config = RelayConfig(port=port)
        async with start_relay(upstream, governor, config=config, check=check) as running:
            yield running
    finally:
        governor.account.close()  # gives back nothing: every request has ended


async def _serve(upstream: str, limits: Any, live: IO[str] | None, port: int) -> None:
    """Serve until cancelled: the base URL on stdout, the live line on ``live``."""
    async with _relay(upstream, limits, port) as running:
        click.echo(f"ANTHROPIC_BASE_URL={running.base_url}")
        sys.stdout.flush()
        if live is None:
            return await anyio.sleep_forever()
        try:
            while True:
                width = max(20, _columns() - 1)
                live.write("\r\x1b[K" + _status(running)[:width])
                live.flush()
                await SYSTEM_CLOCK.sleep(_LIVE_EVERY_S)
        finally:
            live.write("\r\x1b[K")
            live.flush()


async def _serve_cli(
    upstream: str, limits: Any, port: int, argv: Sequence[str], setting: str | None
) -> int:
    """Serve the relay while ``argv`` (the CLI and its arguments) runs through it; returns
    the exit code teamlead exits with. An upstream the user set (``setting``: where) that
    cannot be reached ends it before the CLI starts, in one line."""
    async with _relay(upstream, limits, port, check=setting) as running:
        return await _run_cli(argv, {**os.environ, "ANTHROPIC_BASE_URL": running.base_url})


async def _run_cli(argv: Sequence[str], env: dict[str, str]) -> int:
    """Run the CLI on this terminal until it exits; its exit code, or 130 when a stop
    signal to teamlead ended it (a CLI killed by a signal ``n`` gives 128 + n, as a shell
    says it, and 130 for every stop signal)."""
    try:
        process = await anyio.open_process(
            list(argv), stdin=None, stdout=None, stderr=None, env=env
        )
    except OSError as exc:
        raise SetupError(
            f"cannot run the Claude Code CLI {argv[0]}: {exc.strerror or exc}"
        ) from None
    stopped = False
    try:
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                nonlocal stopped
                with receive_stop_signals() as signals:  # with one noted as the relay started
                    async for received in signals:
                        # a Ctrl-C as the relay started, before the CLI ran, is a stop
                        if received == signal.SIGINT and not signals.early:
                            if _terminal_sent_it():
                                continue  # the CLI got this Ctrl-C too: the CLI's to handle
                            with contextlib.suppress(ProcessLookupError):
                                process.send_signal(signal.SIGINT)  # sent to us alone: pass it on
                            continue
                        stopped = True
                        await anyio.to_thread.run_sync(stop_descendants, 2.0)
                        return

            tg.start_soon(watch)
            code = await process.wait()
            tg.cancel_scope.cancel()
    finally:
        if process.returncode is None:  # cancelled: never leave the CLI behind
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CLI_STOP_S):
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
    if stopped:
        click.echo("teamlead: interrupted", err=True)
        return EXIT_INTERRUPTED
    if code < 0:
        return EXIT_INTERRUPTED if -code in STOP_SIGNALS else 128 - code
    return code


def _terminal_sent_it() -> bool:
    """Whether a SIGINT came from the terminal (Ctrl-C), which sends it to the whole
    foreground process group, the CLI included: teamlead's group is the foreground one."""
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):
            if os.isatty(fd):
                return os.tcgetpgrp(fd) == os.getpgrp()
    return False


def _cli_to_run() -> str:
    """The bundled Claude Code CLI (else ``claude`` on PATH), as ``ask`` finds it."""
    from .._claude import bundled_cli_path
    from .settings import find_cli

    return find_cli(None) or str(bundled_cli_path())


def _check_upstream(url: str | None, where: str) -> None:
    """Refuse an upstream that is not ``http(s)://host``, naming ``where`` it came from
    (``--upstream`` or ``ANTHROPIC_BASE_URL``).

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
        raise UsageError(
            f"{where} {url!r} is not an http(s) URL: give http(s)://host[:port], "
            "e.g. https://api.anthropic.com"
        )


def _columns() -> int:
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except OSError:
        return 100


#: ``ctx.meta`` key: the command line had ``--``, so a CLI is to run (with no arguments too).
_RUN_CLI = "teamlead.relay.run_cli"


class _RelayCommand(click.Command):
    """``relay``, noting whether ``--`` was given: ``teamlead relay --`` alone runs an
    interactive CLI, which the (empty) arguments after it cannot tell from no ``--``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[_RUN_CLI] = "--" in args
        return super().parse_args(ctx, args)


@click.command("relay", cls=_RelayCommand)
@option(
    "--upstream",
    help="Where requests go [default: ANTHROPIC_BASE_URL, else https://api.anthropic.com].",
)
@port_option(
    "The loopback port to listen on, for a base URL that stays the same (0: any free one)."
)
@option(
    "--relay-port",
    type=click.IntRange(0, 65535),
    hidden=True,
    help="The old name of --port (still read, with a warning).",
)
@option("--quiet", "-q", is_flag=True, help="No live line on the terminal.")
@limits_options
@click.argument("claude_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- CLAUDE_ARGS...]")
@handle_errors
def relay(
    upstream: str | None,
    port: int,
    relay_port: int | None,
    quiet: bool,
    claude_args: tuple[str, ...],
    **kw: Any,
) -> None:
    """Serve the pacing relay for any Claude Code client.

    Prints ANTHROPIC_BASE_URL=http://127.0.0.1:PORT/<prefix> first; point a client at it.
    Requests are paced with teamlead's own runs. It serves until Ctrl-C or SIGTERM.

    With --, it runs the Claude Code CLI that claude-agent-sdk bundles through the relay,
    with the arguments after it: `teamlead relay --` for an interactive session,
    `teamlead relay -- -p "Review the diff"` for one prompt. The relay stops when the CLI
    exits, and teamlead exits with the CLI's exit code.
    """
    from .._relay import relay_applicable

    if relay_port is not None:  # the name it had before `view`'s and this one were one
        click.echo("teamlead: warning: --relay-port is now --port", err=True)
        port = port or relay_port
    limits = limits_from_options(**kw)
    env = dict(os.environ)
    if upstream is not None:
        env["ANTHROPIC_BASE_URL"] = upstream
    source = "--upstream" if upstream is not None else "ANTHROPIC_BASE_URL"
    _check_upstream(env.get("ANTHROPIC_BASE_URL"), source)
    applicable = relay_applicable(env)
    if not applicable.ok:
        raise UsageError(applicable.note or "the relay does not apply to this upstream")
    run_cli = bool(click.get_current_context().meta.get(_RUN_CLI))
    if claude_args and not run_cli:
        raise UsageError(
            f"unexpected argument {claude_args[0]!r}: the Claude Code CLI's arguments go "
            'after --, e.g. teamlead relay -- -p "hello"'
        )
    if run_cli:
        argv = [_cli_to_run(), *claude_args]
        defer_stop_signals()  # a stop from here is noted until the CLI runs, then ends it
        given = upstream is not None or (env.get("ANTHROPIC_BASE_URL") or "").strip()
        setting = source if given else None
        sys.exit(anyio.run(_serve_cli, applicable.upstream, limits, port, argv, setting))
    live = sys.stderr if sys.stderr.isatty() and not quiet else None
    run_interruptible(lambda: _serve(applicable.upstream, limits, live, port), stop=lambda: None)
