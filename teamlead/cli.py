"""The ``teamlead`` command line: a thin click layer over the public API.

Every option also reads ``TEAMLEAD_<NAME>`` (``--max-resumes`` reads
``TEAMLEAD_MAX_RESUMES``). Errors print one line and exit with a code: 0 completed,
1 failed, 2 usage error, 3 partial, 130 interrupted.
"""

from __future__ import annotations

import functools
import json
import signal
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ._version import __version__
from .errors import TeamleadError, UsageError

if TYPE_CHECKING:
    from .app import Output

__all__ = ["main"]

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

F = TypeVar("F", bound=Callable[..., Any])


def _fail(message: str, code: int) -> None:
    click.echo(f"teamlead: {message}", err=True)
    sys.exit(code)


def handle_errors(func: F) -> F:
    """Turn teamlead errors into one line and an exit code, never a traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except UsageError as exc:
            _fail(f"error: {exc}", EXIT_USAGE)
        except TeamleadError as exc:
            _fail(f"error: {exc}", EXIT_FAILED)
        except KeyboardInterrupt:
            _fail("interrupted", EXIT_INTERRUPTED)
        return None

    return wrapper  # type: ignore[return-value]


def _env(name: str) -> str:
    return f"TEAMLEAD_{name.upper().replace('-', '_')}"


def _output(json_: bool, quiet: bool) -> Output:
    if json_ and quiet:
        raise UsageError("--json and --quiet cannot be combined")
    return "json" if json_ else ("quiet" if quiet else "auto")


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="teamlead")
def main() -> None:
    """Never lose a subagent's or teammate's result with the Claude Agent SDK."""
    _configure_logging()


def _configure_logging() -> None:
    """teamlead's warnings as one line each; the SDK's own error logs are folded into ours."""
    import logging

    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("teamlead: warning: %(message)s"))
    ours = logging.getLogger("teamlead")
    if not ours.handlers:
        ours.addHandler(handler)
        ours.setLevel(logging.WARNING)
        ours.propagate = False
    # a failing CLI is reported in the run's reasons; the SDK's traceback-style log is noise
    logging.getLogger("claude_agent_sdk").setLevel(logging.CRITICAL)


# -- ask ----------------------------------------------------------------------------------
def _run_options(func: F) -> F:
    options = [
        click.option("--model", envvar=_env("model"), help="Model for the lead (SDK `model`)."),
        click.option(
            "--cwd", envvar=_env("cwd"), type=click.Path(file_okay=False), help="Working directory."
        ),
        click.option(
            "--max-resumes",
            envvar=_env("max_resumes"),
            type=click.IntRange(min=0),
            default=3,
            show_default=True,
            help="Re-queries with resume=session at most.",
        ),
        click.option(
            "--wait",
            "wait_s",
            envvar=_env("wait"),
            type=click.FloatRange(min=0),
            default=60.0,
            show_default=True,
            help="Seconds to wait for teammates and the inbox.",
        ),
        click.option(
            "--deadline",
            "deadline_s",
            envvar=_env("deadline"),
            type=click.FloatRange(min=0, min_open=True),
            default=1800.0,
            show_default=True,
            help="Seconds for the whole run.",
        ),
        click.option(
            "--max-cost",
            "max_cost",
            envvar=_env("max_cost"),
            type=click.FloatRange(min=0, min_open=True),
            help="Stop resuming at this many USD.",
        ),
        click.option(
            "--allowed-tools",
            envvar=_env("allowed_tools"),
            help="Comma-separated tools to allow (passed to the SDK).",
        ),
        click.option(
            "--permission-mode",
            envvar=_env("permission_mode"),
            type=click.Choice(
                ["default", "acceptEdits", "plan", "bypassPermissions", "dontAsk", "auto"]
            ),
            help="Passed to the SDK.",
        ),
        click.option(
            "--json",
            "json_",
            envvar=_env("json"),
            is_flag=True,
            help="NDJSON events on stdout; the last line is `finished`.",
        ),
        click.option(
            "--quiet", "-q", envvar=_env("quiet"), is_flag=True, help="Only the final answer."
        ),
        click.option(
            "--cli-path",
            envvar=_env("cli_path"),
            type=click.Path(dir_okay=False),
            help="Claude Code CLI to run (default: the one claude-agent-sdk bundles).",
        ),
        click.option(
            "--verbose",
            "-v",
            envvar=_env("verbose"),
            is_flag=True,
            help="Show the lead's text as it streams.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _settings(
    strategy: str,
    model: str | None,
    cwd: str | None,
    max_resumes: int,
    wait_s: float,
    deadline_s: float,
    max_cost: float | None,
    allowed_tools: str | None,
    permission_mode: str | None,
    cli_path: str | None,
) -> Any:
    from .app import AskSettings

    return AskSettings(
        strategy=strategy,
        model=model,
        cwd=cwd,
        max_resumes=max_resumes,
        wait_s=wait_s,
        deadline_s=deadline_s,
        max_cost_usd=max_cost,
        allowed_tools=[t.strip() for t in (allowed_tools or "").split(",") if t.strip()],
        permission_mode=permission_mode,
        cli_path=cli_path,
    )


@main.command()
@click.argument("prompt")
@click.option(
    "--strategy",
    envvar=_env("strategy"),
    default="delegation",
    show_default=True,
    help="Strategy prompt: a name from `teamlead prompts list` or a path.",
)
@_run_options
@handle_errors
def ask(prompt: str, strategy: str, json_: bool, quiet: bool, verbose: bool, **kw: Any) -> None:
    """Ask the lead; wait for its agents and teammates; resume until one answer uses every result.

    PROMPT is the task; `-` reads it from stdin.
    """
    from .app import build_run, check_setup, merged_env, run_session
    from .coordinator import query

    if prompt == "-":
        prompt = sys.stdin.read()
    if not prompt.strip():
        raise UsageError("the prompt is empty")
    output = _output(json_, quiet)
    options, policy, _ = build_run(_settings(strategy, **kw))
    check_setup(merged_env(options.env))
    sys.exit(
        run_session(lambda: query(prompt, options, policy=policy), output=output, verbose=verbose)
    )


@main.command()
@click.argument("session_id")
@click.option(
    "--strategy",
    envvar=_env("strategy"),
    default="baseline",
    show_default=True,
    help="Strategy prompt for the resumed turns (use the original run's).",
)
@_run_options
@handle_errors
def resume(
    session_id: str, strategy: str, json_: bool, quiet: bool, verbose: bool, **kw: Any
) -> None:
    """Collect the unused results of SESSION_ID and resume its lead."""
    from .app import build_run, check_setup, merged_env, run_session
    from .coordinator import resume_session
    from .session import find_session_file
    from .team import claude_config_dir

    output = _output(json_, quiet)
    options, policy, _ = build_run(_settings(strategy, **kw))
    env = merged_env(options.env)
    find_session_file(claude_config_dir(env), session_id)  # a missing session is a usage error
    check_setup(env)
    sys.exit(
        run_session(
            lambda: resume_session(session_id, options, policy=policy),
            output=output,
            verbose=verbose,
        )
    )


# -- demo ---------------------------------------------------------------------------------
@main.command()
@click.option("--json", "json_", envvar=_env("json"), is_flag=True, help="NDJSON events on stdout.")
@click.option("--quiet", "-q", envvar=_env("quiet"), is_flag=True, help="Only the final answer.")
@click.option("--verbose", "-v", envvar=_env("verbose"), is_flag=True, help="Show the lead's text.")
@handle_errors
def demo(json_: bool, quiet: bool, verbose: bool) -> None:
    """Run a real `ask` offline: the bundled CLI against a built-in scripted model.

    Three parallel agents, an inbox teammate, and a failed synthesis that teamlead resumes.
    Needs no API key and no network.
    """
    from claude_agent_sdk import query as sdk_query

    from .app import run_session
    from .coordinator import query
    from .policy import Policy
    from .prompts import apply_strategy, load_strategy
    from .testing import OfflineClaude, ScriptedServer
    from .testing.demo import DEMO_PROMPT, DemoScript

    output = _output(json_, quiet)
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

            code = run_session(
                lambda: query(
                    DEMO_PROMPT,
                    options,
                    query_fn=first_stream_marks_end,
                    policy=Policy(wait_s=20, deadline_s=300),
                ),
                output=output,
                verbose=verbose,
            )
    sys.exit(code)


# -- prompts -------------------------------------------------------------------------------
@main.group()
def prompts() -> None:
    """Delegation strategy prompts."""


@prompts.command("list")
@handle_errors
def prompts_list() -> None:
    """List the shipped strategies."""
    from .prompts import list_strategies

    for meta in list_strategies():
        click.echo(f"{meta.name:<16} v{meta.version or '-':<6} {meta.description or ''}")


@prompts.command("show")
@click.argument("name")
@click.option(
    "--max-concurrent-agents",
    type=click.IntRange(min=1),
    envvar=_env("max_concurrent_agents"),
    help="Fill the concurrency limit with this.",
)
@click.option(
    "--max-agents-per-turn",
    type=click.IntRange(min=1),
    envvar=_env("max_agents_per_turn"),
    help="Fill the per-turn spawn limit with this.",
)
@handle_errors
def prompts_show(
    name: str, max_concurrent_agents: int | None, max_agents_per_turn: int | None
) -> None:
    """Show strategy NAME (or a path) rendered with its placeholders filled."""
    from .prompts import default_values, load_strategy

    strategy = load_strategy(name)
    kwargs = {
        k: v
        for k, v in {
            "max_concurrent_agents": max_concurrent_agents,
            "max_agents_per_turn": max_agents_per_turn,
        }.items()
        if v
    }
    text = strategy.render(default_values(**kwargs))
    meta = strategy.meta
    click.echo(
        f"# {meta.name} v{meta.version or '-'}: {meta.description or '(plain prompt file)'}\n"
        f"# sha256 {strategy.sha256}\n"
    )
    click.echo(text if text.strip() else "(this strategy adds nothing to the system prompt)")


# -- inbox ----------------------------------------------------------------------------------
@main.group()
def inbox() -> None:
    """Team-lead inboxes (read-only)."""


@inbox.command("show")
@click.option("--session", "session_id", envvar=_env("session"), help="Lead session id.")
@click.option("--team", envvar=_env("team"), help="Team name.")
@click.option("--json", "json_", is_flag=True, help="One JSON document.")
@handle_errors
def inbox_show(session_id: str | None, team: str | None, json_: bool) -> None:
    """Show a team's config and its team-lead inbox without changing anything."""
    from .inbox import read_inbox
    from .team import claude_config_dir, find_team, load_team, sanitize_team_name, validate_name

    if bool(session_id) == bool(team):
        raise UsageError("give exactly one of --session ID or --team NAME")
    config_dir = claude_config_dir()
    if session_id:
        found = find_team(session_id, config_dir=config_dir)
        if found is None:
            raise UsageError(f"no team of session {session_id} under {config_dir}/teams")
    else:
        assert team is not None
        validate_name(team, what="team")
        found = load_team(config_dir / "teams" / sanitize_team_name(team), config_dir)
        if found is None:
            raise UsageError(f"no team {team!r} under {config_dir}/teams")
    read = read_inbox(found.lead_inbox, config_dir=config_dir)
    if json_:
        click.echo(
            json.dumps(
                {
                    "version": 1,
                    "team": found.name,
                    "lead_session_id": found.config.lead_session_id,
                    "members": [m.name for m in found.config.members],
                    "inbox": str(found.lead_inbox),
                    "status": read.status,
                    "messages": [m.model_dump(mode="json") for m in read.messages],
                    "warnings": list(read.warnings),
                },
                indent=2,
            )
        )
        return
    click.echo(f"team {found.name}  lead session {found.config.lead_session_id}")
    click.echo("members: " + (", ".join(m.name for m in found.config.members) or "(none)"))
    click.echo(f"inbox: {read.status}, {len(read.messages)} message(s), {read.skipped} invalid")
    for message in read.messages:
        body = message.result or message.summary or message.text
        click.echo(f"  {message.timestamp}  {message.sender:<16} {message.kind:<10} {body[:100]!r}")
    for warning in read.warnings:
        click.echo(f"  warning: {warning}", err=True)


# -- serve-scripted -------------------------------------------------------------------------
@main.command("serve-scripted")
@click.option(
    "--scenario",
    envvar=_env("scenario"),
    default="fan-out",
    show_default=True,
    help="Named scripted model.",
)
@click.option(
    "--port",
    envvar=_env("port"),
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="Port; 0 picks a free one.",
)
@click.option(
    "--concurrency-limit",
    envvar=_env("concurrency_limit"),
    type=click.IntRange(min=1),
    help="Emulate a hidden 429 limit.",
)
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


# -- experiments -----------------------------------------------------------------------------
@main.group()
def experiment() -> None:
    """Prompt-strategy A/B experiments with honest statistics."""


@experiment.command("run")
@click.argument("spec_path", metavar="SPEC", type=click.Path(dir_okay=False))
@click.option(
    "--out",
    "out_dir",
    envvar=_env("out"),
    required=True,
    type=click.Path(file_okay=False),
    help="Directory for trials.jsonl (appended; reruns skip finished trials).",
)
@click.option("--quiet", "-q", envvar=_env("quiet"), is_flag=True, help="No progress bar.")
@handle_errors
def experiment_run(spec_path: str, out_dir: str, quiet: bool) -> None:
    """Run every task x variant x trial of SPEC as a full coordinator run."""
    from .app import check_setup, merged_env
    from .experiment.progress import run_with_progress
    from .experiment.spec import load_spec
    from .prompts import load_strategy

    def exists(name: str) -> bool:
        load_strategy(name)
        return True

    spec = load_spec(spec_path, strategy_exists=exists)
    check_setup(merged_env())
    summary = run_with_progress(spec, Path(out_dir), show=not quiet)
    click.echo(
        f"ran {summary.ran} trial(s), skipped {summary.skipped} finished, {summary.failed} failed, "
        f"{summary.retried} retried, {summary.rate_limited} rate-limited, ${summary.cost_usd:.4f}"
    )
    if summary.stopped_reason:
        click.echo(f"teamlead: stopped early: {summary.stopped_reason}", err=True)
        sys.exit(3)


@experiment.command("report")
@click.argument("out_dir", metavar="DIR", type=click.Path(file_okay=False))
@click.option("--json", "json_", is_flag=True, help="The report as JSON on stdout.")
@click.option(
    "--out",
    "out_file",
    type=click.Path(dir_okay=False),
    help="Also write the report (Markdown, or JSON with --json) here.",
)
@click.option("--control", help="Control variant (default: the spec's, recorded in the trials).")
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed for bootstrap and permutations."
)
@click.option("--no-plots", is_flag=True, help="Skip the PNG plots.")
@click.option(
    "--html",
    "html_file",
    type=click.Path(dir_okay=False),
    help="Also write a self-contained HTML report (charts, sortable tables, trial drill-down).",
)
@handle_errors
def experiment_report(
    out_dir: str,
    json_: bool,
    out_file: str | None,
    control: str | None,
    seed: int,
    no_plots: bool,
    html_file: str | None,
) -> None:
    """Statistics for the trials in DIR: rates, paired comparisons, verdicts, plots.

    Writes report.md, report.json and PNG plots into DIR (plots need the plots extra);
    with --json it writes nothing and prints the JSON, unless --out or --html ask for a file.
    """
    from .experiment.progress import report_for

    report, text, warnings = report_for(
        Path(out_dir),
        control=control,
        seed=seed,
        json_=json_,
        plots=not no_plots,
        html=Path(html_file) if html_file else None,
    )
    for warning in warnings:
        click.echo(f"teamlead: warning: {warning}", err=True)
    click.echo(text)
    if out_file:
        Path(out_file).write_text(text + "\n")
