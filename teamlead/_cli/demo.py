"""``teamlead demo`` and ``teamlead serve-scripted``: runs against the offline test bed.

These are the only production modules allowed to use :mod:`teamlead.testing`, and they
import it inside the functions below, so no other command loads the scripted server.
:func:`run_demo` and :func:`serve_scenario` hold the wiring; the click commands only
parse options and pass them on.
"""

from __future__ import annotations

import signal
import sys
import tempfile
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import click

from .exitcodes import handle_errors
from .options import Output, no_relay_option, option, output_mode

__all__ = ["demo", "run_demo", "serve_scenario", "serve_scripted"]


def run_demo(output: Output = "auto", *, verbose: bool = False, relay: bool = True) -> int:
    """Run the delegation demo offline: the bundled CLI against the built-in scripted model.

    Everything lives in a temporary directory that is removed afterwards. Returns the
    exit code of the run.
    """
    from claude_agent_sdk import query as sdk_query

    from ..coordinator import query
    from ..policy import Policy
    from ..prompts import apply_strategy, load_strategy
    from ..testing import OfflineClaude, ScriptedServer
    from ..testing.demo import DEMO_PROMPT, DemoScript
    from .running import run_session

    with tempfile.TemporaryDirectory(prefix="teamlead-demo-") as tmp:
        config_dir = Path(tmp) / ".claude"
        script = DemoScript(config_dir=config_dir)
        with ScriptedServer(script) as server:
            claude = OfflineClaude(server.base_url, state_dir=Path(tmp))
            assert claude.config_dir == config_dir
            options = apply_strategy(claude.options(), load_strategy("delegation"))

            async def first_stream_marks_end(**kwargs: Any) -> AsyncIterator[Any]:
                try:
                    async for message in sdk_query(**kwargs):
                        yield message
                finally:  # the teammate reports once the lead's stream is over
                    script.stream_ended.set()

            return run_session(
                lambda: query(
                    DEMO_PROMPT,
                    options,
                    query_fn=first_stream_marks_end,
                    policy=Policy(wait_s=20, deadline_s=300, relay=relay),
                ),
                output=output,
                verbose=verbose,
            )


def serve_scenario(scenario: str, port: int = 0, concurrency_limit: int | None = None) -> None:
    """Serve the named scripted model on loopback until SIGTERM or Ctrl-C.

    The address and the ``export`` line go to stderr; the server is stopped on the way out.
    """
    from ..testing import ScriptedServer
    from ..testing.scripts import scenario as load_scenario

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


@click.command()
@option("--json", "json_", is_flag=True, help="NDJSON events on stdout.")
@option("--quiet", "-q", is_flag=True, help="Only the final answer.")
@option("--verbose", "-v", is_flag=True, help="Show the lead's text.")
@no_relay_option()
@handle_errors
def demo(json_: bool, quiet: bool, verbose: bool, no_relay: bool) -> None:
    """Run a real `ask` offline: the bundled CLI against a built-in scripted model.

    Three parallel agents, an inbox teammate, and a failed synthesis that teamlead resumes.
    Needs no API key and no network.
    """
    sys.exit(run_demo(output_mode(json_, quiet), verbose=verbose, relay=not no_relay))


@click.command("serve-scripted")
@option("--scenario", default="fan-out", show_default=True, help="Named scripted model.")
@option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="Port; 0 picks a free one.",
)
@option("--concurrency-limit", type=click.IntRange(min=1), help="Emulate a hidden 429 limit.")
@handle_errors
def serve_scripted(scenario: str, port: int, concurrency_limit: int | None) -> None:
    """Serve a scripted model on loopback for manual runs of the CLI or an app."""
    serve_scenario(scenario, port, concurrency_limit)
