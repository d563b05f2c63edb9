"""The ``teamlead`` command line: a thin click layer over the public API.

Every option also reads ``TEAMLEAD_<NAME>``. Errors print one line and exit with a
code: 0 completed, 1 failed, 2 usage error, 3 partial, 130 interrupted.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import click

from ._version import __version__
from .errors import SetupError, TeamleadError, UsageError

__all__ = ["EXIT_COMPLETED", "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_PARTIAL", "EXIT_USAGE", "main"]

EXIT_COMPLETED = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_PARTIAL = 3
EXIT_INTERRUPTED = 130

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str, code: int) -> None:
    """Print one line to stderr and exit with ``code``."""
    click.echo(f"teamlead: {message}", err=True)
    sys.exit(code)


def handle_errors(func: F) -> F:
    """Turn teamlead errors into one line and an exit code, never a traceback."""
    import functools

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except UsageError as exc:
            fail(f"error: {exc}", EXIT_USAGE)
        except TeamleadError as exc:
            fail(f"error: {exc}", EXIT_FAILED)
        except KeyboardInterrupt:
            fail("interrupted", EXIT_INTERRUPTED)
        return None

    return wrapper  # type: ignore[return-value]


@click.group(context_settings={"auto_envvar_prefix": "TEAMLEAD", "help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="teamlead")
def main() -> None:
    """Never lose a subagent's or teammate's result with the Claude Agent SDK."""


@main.command("serve-scripted")
@click.option("--scenario", default="fan-out", show_default=True, help="Named scripted model.")
@click.option("--port", type=int, default=0, show_default=True, help="Port; 0 picks a free one.")
@click.option("--concurrency-limit", type=int, default=None, help="Emulate a hidden 429 limit.")
@handle_errors
def serve_scripted(scenario: str, port: int, concurrency_limit: int | None) -> None:
    """Serve a scripted model on loopback for manual runs of the CLI or an app."""
    from .testing import ScriptedServer
    from .testing.scripts import scenario as load_scenario

    script = load_scenario(scenario)
    server = ScriptedServer(script, port=port, concurrency_limit=concurrency_limit)
    server.start()
    click.echo(f"serving scenario {scenario!r} at {server.base_url}", err=True)
    click.echo(f"export ANTHROPIC_BASE_URL={server.base_url} ANTHROPIC_API_KEY=offline", err=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        click.echo(f"stopped after {server.stats.requests} requests", err=True)


