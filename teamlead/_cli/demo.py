"""``teamlead demo`` and ``teamlead serve-scripted``: runs against the offline test bed.

The only production module allowed to use :mod:`teamlead.testing`, imported inside the
functions, so no other command loads the scripted server.
"""

from __future__ import annotations

import contextlib
import re
import signal
import sys
import tempfile
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import anyio
import click

from .._redact import terminal_safe
from ..clock import SYSTEM_CLOCK
from .exitcodes import EXIT_INTERRUPTED, handle_errors
from .options import Output, no_relay_option, option, output_mode, port_option
from .output import is_terminal
from .signals import release_stop_signals, run_interruptible

__all__ = [
    "demo",
    "offline_exports",
    "request_line",
    "run_demo",
    "scenario_list",
    "serve_scripted",
]


def run_demo(
    output: Output = "auto", *, verbose: bool = False, relay: bool = True, compare: bool = True
) -> int:
    """Run the delegation demo offline: the bundled CLI against the built-in scripted model.

    Then, with ``compare`` and progress on stderr (not ``--json`` or ``--quiet``), the same
    script runs under a bare ``claude_agent_sdk.query``, and both outcomes are printed side
    by side; a stopped demo stops there. Everything lives in a temporary directory.
    Returns the exit code of the teamlead run.
    """
    from ..coordinator import run_stream
    from ..events import Finished
    from ..policy import LimitsPolicy, Policy
    from ..testing.demo import DEMO_PROMPT
    from .running import run_session

    with tempfile.TemporaryDirectory(prefix="teamlead-demo-") as tmp:
        finished: list[Finished] = []
        with _demo_model(Path(tmp) / "teamlead") as (script, options):

            async def first_stream_marks_end(**kwargs: Any) -> AsyncIterator[Any]:
                from claude_agent_sdk import query as sdk_query

                try:  # closed here, not left to the loop's finaliser (a stop ends the loop)
                    stream = cast(AsyncGenerator[Any, None], sdk_query(**kwargs))
                    async with aclosing(stream) as messages:
                        async for message in messages:
                            yield message
                finally:  # the teammate reports once the lead's stream is over
                    script.stream_ended.set()

            run = run_stream(
                DEMO_PROMPT,
                options,
                query_fn=first_stream_marks_end,
                # the scripted upstream's limits stay in this process: a demo never
                # writes what a real run on the machine would read
                policy=Policy(
                    wait_s=20,
                    deadline_s=300,
                    relay=relay,
                    limits=LimitsPolicy(shared="process"),
                ),
            )

            async def items() -> AsyncIterator[Any]:
                async with aclosing(run):
                    async for item in run:
                        if isinstance(item, Finished):
                            finished.append(item)
                        yield item

            code = run_session(
                items, run, output=output, verbose=verbose, scripted=True, resumable=False
            )
        if code == EXIT_INTERRUPTED or not compare or output in ("json", "quiet") or not finished:
            return code  # a stopped demo stops: no comparison with a run cut short
        click.echo(
            "teamlead: now the same script under a bare claude_agent_sdk.query ...", err=True
        )
        bare, stopped = run_interruptible(lambda: _bare_query(Path(tmp) / "bare"))
        if stopped is not None or bare is None:
            click.echo("teamlead: interrupted; the comparison was not finished", err=True)
            return EXIT_INTERRUPTED
        _print_comparison(bare, finished[0])
    return code


@contextlib.contextmanager
def _demo_model(state: Path) -> Iterator[tuple[Any, Any]]:
    """The demo's scripted model on loopback, and options that run the CLI against it."""
    from ..prompts import apply_strategy, load_strategy
    from ..testing import OfflineClaude, ScriptedServer
    from ..testing.demo import DemoScript

    script = DemoScript(config_dir=state / ".claude")
    with ScriptedServer(script) as server:
        claude = OfflineClaude(server.base_url, state_dir=state)
        assert claude.config_dir == script.config_dir
        yield script, apply_strategy(claude.options(), load_strategy("delegation"))


@dataclass
class BareOutcome:
    """What a bare ``claude_agent_sdk.query`` app got from the demo's script."""

    answer: str | None  #: the last successful result's text, as such an app would return
    error: str | None  #: what the stream raised, if it did
    results: int  #: ``result`` messages read


async def _bare_query(state: Path) -> BareOutcome:
    """The demo's script under a bare ``claude_agent_sdk.query``, read to the end."""
    from claude_agent_sdk import ResultMessage
    from claude_agent_sdk import query as sdk_query

    from ..testing.demo import DEMO_PROMPT

    answer: str | None = None
    error: str | None = None
    results = 0
    with _demo_model(state) as (script, options):
        try:
            with anyio.fail_after(120):
                async for message in sdk_query(prompt=DEMO_PROMPT, options=options):
                    if isinstance(message, ResultMessage):
                        results += 1
                        if not message.is_error and message.result:
                            answer = message.result
        except TimeoutError:
            error = "no end after 120 s"
        except Exception as exc:  # what the bare app would see: the stream raising
            api = re.search(r"API Error: \d+ \w+", str(exc))
            error = f"{type(exc).__name__} ({api.group(0) if api else str(exc)[:60]})"
        finally:
            script.stream_ended.set()  # the teammate writes to an inbox nobody reads
    return BareOutcome(answer=answer, error=error, results=results)


def _print_comparison(bare: BareOutcome, finished: Any, stream: IO[str] | None = None) -> None:
    """The two outcomes side by side: how each ended, the findings used, the answer.

    A table on a terminal; two aligned lines otherwise (for logs and pipes).
    """
    from ..testing.demo import DEMO_FINDINGS
    from ..testing.scripts import findings_in

    out = stream or sys.stderr

    def found(text: str | None) -> str:
        names = [f for f in DEMO_FINDINGS if f in findings_in(text or "")]
        return f"{len(names)} of {len(DEMO_FINDINGS)}" + (f": {', '.join(names)}" if names else "")

    def short(text: str | None) -> str:
        first = (text or "(none)").strip().splitlines()[0]
        return first if len(first) <= 70 else first[:69] + "…"

    bare_end = f"raised {bare.error}" if bare.error else "ended"
    ends = {
        "bare claude_agent_sdk.query": (f"{bare_end} after {bare.results} result(s)", bare.answer),
        "teamlead.run": (f"{finished.status} after {finished.resumes} resume(s)", finished.result),
    }
    apps = [(name, end, found(answer), short(answer)) for name, (end, answer) in ends.items()]
    moral = (
        "The bare app stops at the 529 on the synthesis turn and never reads the teammate's "
        "inbox; teamlead collects every result and resumes the lead."
    )
    if is_terminal(out):
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        table = Table(title="the same script, two apps", title_justify="left")
        table.add_column("")
        for app in apps:
            table.add_column(app[0])
        for i, label in enumerate(("how it ended", "findings used", "answer"), start=1):
            table.add_row(label, *(Text(terminal_safe(app[i])) for app in apps))
        console = Console(file=out)
        console.print(table)
        console.print(Text(moral))
        return
    width = max(len(app[0]) for app in apps)
    out.write("the same script, two apps:\n")
    for name, end, used, answer in apps:
        line = f"  {name + ':':<{width + 1}} {end}; findings used {used}; answer: {answer!r}"
        out.write(terminal_safe(line) + "\n")
    out.write(moral + "\n")
    out.flush()


#: What the CLI (or an app that runs it) needs to talk to the scripted model and nothing
#: else: a key of any kind, no retries of an injected fault (a 429 scenario would look
#: hung), no other traffic, no proxy before loopback, and a ``teamlead ask`` whose learnt
#: limits (the script's, not an account's) stay in its process.
_OFFLINE_VARS = (
    ("ANTHROPIC_API_KEY", "offline"),
    ("CLAUDE_CODE_MAX_RETRIES", "0"),
    ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
    ("DISABLE_AUTOUPDATER", "1"),
    ("DISABLE_TELEMETRY", "1"),
    ("DISABLE_ERROR_REPORTING", "1"),
    ("NO_PROXY", "127.0.0.1,::1"),
    ("TEAMLEAD_LIMITS", "process"),
)


def offline_exports(base_url: str) -> str:
    """The ``export`` line that points the CLI, ``teamlead ask`` or an SDK app at ``base_url``."""
    pairs = [("ANTHROPIC_BASE_URL", base_url), *_OFFLINE_VARS]
    return "export " + " ".join(f"{name}={value}" for name, value in pairs)


def scenario_list() -> str:
    """The scenarios ``serve-scripted`` knows, one line each: name and what it does."""
    from ..testing.scripts import SCENARIO_SUMMARIES, SCENARIOS

    width = max(len(name) for name in SCENARIOS)
    return "\n".join(
        f"{name:<{width}}  {SCENARIO_SUMMARIES.get(name, '(no summary)')}"
        for name in sorted(SCENARIOS)
    )


def request_line(record: Any, started: float) -> str:
    """One log line for an answered request: when, who asked, the status and the reply."""
    request = record.request
    who = request.role
    if request.agent is not None and request.agent.description:
        who = f"{who} {request.agent.description!r}"
    reply = record.reply
    if record.status != 200 or reply is None or reply.fault is not None:
        what = f"fault {record.status}" if record.status != 499 else "client went away"
    elif reply.tool_uses:
        names = [u.name for u in reply.tool_uses]
        what = "tool_use " + ", ".join(dict.fromkeys(names))
        if len(names) > 1:
            what += f" ({len(names)} calls)"
    else:
        what = f"text, {len(reply.content)} chars"
    took = (record.finished or record.started) - record.started
    return (
        f"[{record.started - started:6.1f}s] #{request.index} {who} -> {record.status} "
        f"{what} ({took:.2f} s)"
    )


@click.command()
@option("--json", "json_", is_flag=True, help="NDJSON events on stdout.")
@option("--quiet", "-q", is_flag=True, help="Only the final answer.")
@option("--verbose", "-v", is_flag=True, help="Show the lead's text.")
@no_relay_option
@handle_errors
def demo(json_: bool, quiet: bool, verbose: bool, no_relay: bool) -> None:
    """Run a real `ask` offline, on a built-in scripted model.

    Three parallel agents, an inbox teammate, and a failed synthesis that teamlead resumes;
    then the same script under a bare claude_agent_sdk.query, side by side. Needs no API
    key and no network. Ctrl-C stops it there (nothing to resume: its files go with it).
    """
    sys.exit(run_demo(output_mode(json_, quiet), verbose=verbose, relay=not no_relay))


@click.command("serve-scripted")
@option("--scenario", default="fan-out", show_default=True, help="Named scripted model.")
@option("--list", "list_", is_flag=True, help="List the scenarios, one line each, and exit.")
@port_option("Port; 0 picks a free one.")
@option("--concurrency-limit", type=click.IntRange(min=1), help="Emulate a hidden 429 limit.")
@option(
    "--log",
    "log_requests",
    type=click.Choice(["auto", "on", "off"]),
    default="auto",
    show_default=True,
    help="One line per request on stderr; auto: when stderr is a terminal.",
)
@handle_errors
def serve_scripted(
    scenario: str, list_: bool, port: int, concurrency_limit: int | None, log_requests: str
) -> None:
    """Serve a scripted model on loopback, to try runs offline.

    It prints the `export` line to paste into the shell that runs the CLI, `teamlead ask`
    or your app; `--list` shows the scenarios.
    """
    from ..testing import ScriptedServer
    from ..testing.scripts import scenario as load_scenario

    if list_:
        click.echo(scenario_list())
        return
    # it serves until SIGTERM or Ctrl-C: SIGTERM ends the wait, Ctrl-C is a
    # KeyboardInterrupt; one line per answered request follows the export line, with --log
    stop = threading.Event()
    release_stop_signals()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    script = load_scenario(scenario)
    started = SYSTEM_CLOCK.monotonic()
    lock = threading.Lock()

    def log_line(record: Any) -> None:
        line = terminal_safe(request_line(record, started))
        with lock:
            click.echo(line, err=True)

    logged = sys.stderr.isatty() if log_requests == "auto" else log_requests == "on"
    server = ScriptedServer(
        script,
        port=port,
        concurrency_limit=concurrency_limit,
        on_request=log_line if logged else None,
    )
    server.start()
    click.echo(f"serving scenario {scenario!r} at {server.base_url}", err=True)
    click.echo("point the CLI, `teamlead ask` or your app at it from another shell:", err=True)
    click.echo(offline_exports(server.base_url), err=True)
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        click.echo(f"stopped after {server.stats.requests} requests", err=True)
