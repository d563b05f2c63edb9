"""``teamlead ask`` and ``teamlead resume``: one coordinator run from the command line.

Both share the run options (:func:`run_options`), which map one to one onto
:class:`~teamlead._cli.settings.AskSettings`; the run itself is
:func:`~teamlead._cli.running.run_session`.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from functools import partial
from inspect import signature
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from ..errors import UsageError
from ..policy import MAX_SECONDS
from .exitcodes import handle_errors
from .help import RUN_SECTIONS, SectionedCommand
from .options import (
    FiniteFloatRange,
    limits_from_options,
    limits_options,
    no_relay_option,
    option,
    output_mode,
    session_store_option,
    stacked,
)

if TYPE_CHECKING:
    from .._run import RunStream
    from .settings import AskSettings

__all__ = ["ask", "resume", "run_options"]

_F = TypeVar("_F", bound=Callable[..., Any])

_PERMISSION_MODES = ["default", "acceptEdits", "plan", "bypassPermissions", "dontAsk", "auto"]


def run_options(func: _F) -> _F:
    """The options every coordinator run takes (model, limits, output, CLI path)."""
    return stacked(
        option("--model", help="Model for the lead (SDK `model`)."),
        option("--cwd", type=click.Path(file_okay=False), help="Working directory."),
        option(
            "--max-resumes",
            type=click.IntRange(min=0),
            default=3,
            show_default=True,
            help="Re-queries with resume=session at most.",
        ),
        option(
            "--wait",
            "wait_s",
            type=FiniteFloatRange(min=0, limit=MAX_SECONDS),
            default=60.0,
            show_default=True,
            help="Seconds to wait for teammates and the inbox.",
        ),
        option(
            "--deadline",
            "deadline_s",
            type=FiniteFloatRange(min=0, min_open=True, limit=MAX_SECONDS),
            default=1800.0,
            show_default=True,
            help="Seconds for the whole run.",
        ),
        option(
            "--max-cost",
            "max_cost",
            type=FiniteFloatRange(min=0, min_open=True),
            help="Stop resuming at this many USD.",
        ),
        option(
            "--allowed-tools",
            help="Comma-separated tools that run without approval, e.g. 'Edit,Bash(npm test:*)' "
            "(passed to the SDK) [default: none; every tool is offered, and one that needs "
            "approval is asked at the terminal, or refused when nobody is there].",
        ),
        option(
            "--allow-workflows",
            is_flag=True,
            help="Let the lead run Workflow scripts (adds Workflow to the allowed tools); the "
            "run's limits apply to their agents [default: in the default permission mode "
            "Claude Code refuses them].",
        ),
        option(
            "--permission-mode",
            type=click.Choice(_PERMISSION_MODES),
            help="Passed to the SDK [default: Claude Code's `default`: reading tools run; "
            "edits and changing commands wait in the approval queue on a terminal (y/n/a), "
            "and are refused when piped or with --json].",
        ),
        option(
            "--json",
            "json_",
            is_flag=True,
            help="NDJSON events on stdout; the last line is `finished`.",
        ),
        option("--quiet", "-q", is_flag=True, help="Only the final answer."),
        option(
            "--cli-path",
            type=click.Path(dir_okay=False),
            help="Claude Code CLI to run (default: the one claude-agent-sdk bundles).",
        ),
        option("--verbose", "-v", is_flag=True, help="Show the lead's text as it streams."),
        session_store_option(),
        option(
            "--no-history",
            is_flag=True,
            help="Do not keep this run in the run history (`teamlead ps --all`, `show`).",
        ),
        # the spawn gate's (see the docs' "Runtime control", docs/runtime-control.md)
        option(
            "--max-concurrent-agents",
            type=click.IntRange(1, 1000),
            help="Agents running at once; more wait in FIFO order "
            "[default: the CLI's cap, CLAUDE_CODE_MAX_CONCURRENT_SUBAGENTS or 20].",
        ),
        option(
            "--max-agents-per-turn",
            type=click.IntRange(1, 1000),
            help="Agent calls admitted from one lead message [default: no limit].",
        ),
        option(
            "--spawn-budget",
            type=click.IntRange(0, 100_000),
            help="Agents admitted in the whole run; later calls are denied [default: no limit].",
        ),
        option(
            "--stagger",
            "stagger_s",
            type=FiniteFloatRange(0, 600),
            default=0.0,
            show_default=True,
            help="Seconds between the starts of a burst's agents (Agent calls and workflow "
            "agents alike).",
        ),
        option(
            "--max-depth",
            type=click.IntRange(1, 10),
            default=1,
            show_default=True,
            help="1: only the lead spawns agents; 2: its agents may spawn once more.",
        ),
        option(
            "--wrap-up-reserve",
            "wrap_up_reserve_s",
            type=FiniteFloatRange(min=0, limit=MAX_SECONDS),
            help="Seconds before the deadline when agents are stopped and the lead answers "
            "without tools [default: 20% of the deadline, at least 10 or half the deadline "
            "(room for one turn), at most 30].",
        ),
        option(
            "--agent-timeout",
            "agent_timeout_s",
            type=FiniteFloatRange(min=0, min_open=True, limit=MAX_SECONDS),
            help="Seconds an agent (Agent-tool, nested or workflow) may run before it is "
            "stopped; the lead goes on without it [default: no limit].",
        ),
        option(
            "--subagent-model",
            help="Model every subagent runs on, Agent-tool and workflow agents alike, e.g. "
            "'claude-haiku-5-5' or the CLI's alias 'haiku' [default: what the lead or the "
            "script asks for].",
        ),
        option(
            "--token-budget",
            type=click.IntRange(1, 10**12),
            help="Input plus output tokens for the whole run, counted at the relay; at the "
            "budget no new agent starts and the lead wraps up [default: no limit].",
        ),
        option(
            "--request-budget",
            type=click.IntRange(2, 10**9),
            help="API requests for the whole run, counted at the relay (one is kept for the "
            "wrap-up) [default: no limit].",
        ),
        option(
            "--no-spawn-gate",
            is_flag=True,
            help="Do not queue, budget or stop the lead's Agent calls.",
        ),
        no_relay_option,
        option(
            "--overload-hold",
            "overload_hold_s",
            type=click.FloatRange(0, 86_400),
            default=300.0,
            show_default=True,
            help="Seconds the relay holds one request through an overload burst (529s, 503s, "
            "a dropped connection), retrying it with backoff while the CLI waits; 0 passes "
            "overloads on at once.",
        ),
        limits_options,
    )(func)


def settings_from_options(strategy: str, **options: Any) -> AskSettings:
    """The :class:`AskSettings` and its policy for the parsed :func:`run_options` (each by
    its parameter name; one left out keeps the default of its setting or policy field).

    Raises:
        UsageError: options that cannot work together (a wrap-up reserve that is not
            shorter than the deadline would end the run as it starts), or a limit the
            policy refuses (its first line says which).
    """
    from ..policy import Policy, SpawnPolicy
    from .settings import AskSettings

    given = dict(options)
    limits = {k: given.pop(k) for k in signature(limits_from_options).parameters if k in given}
    model = (given.pop("subagent_model", None) or "").strip()
    # the options named as a field of the spawn policy or the run's policy are its values
    spawn = {name: given.pop(name) for name in list(given) if name in SpawnPolicy.model_fields}
    run = {name: given.pop(name) for name in list(given) if name in Policy.model_fields}
    reserve = spawn.get("wrap_up_reserve_s")
    deadline = run.get("deadline_s", Policy.model_fields["deadline_s"].default)
    if reserve is not None and reserve >= deadline:
        raise UsageError(
            f"--wrap-up-reserve {reserve:g} is not shorter than --deadline "
            f"{deadline:g}, so the run would wrap up as it starts: give a reserve under the "
            "deadline, or leave --wrap-up-reserve out for its default (20 % of the deadline, "
            "at most 30 s)"
        )
    try:
        policy = Policy(
            **run,
            max_cost_usd=given.pop("max_cost", None),
            spawn=SpawnPolicy(
                enabled=not given.pop("no_spawn_gate", False),
                subagent_model=model or None,
                **spawn,
            ),
            relay=not given.pop("no_relay", False),
            limits=limits_from_options(**limits),
        )
    except ValueError as exc:
        first = str(exc).splitlines()
        raise UsageError(f"bad limit: {first[1] if len(first) > 1 else first[0]}") from None
    tools = given.pop("allowed_tools", None) or ""
    store = (given.pop("session_store", None) or "").strip()
    return AskSettings(
        strategy=strategy,
        allowed_tools=[t.strip() for t in tools.split(",") if t.strip()],
        session_store=store or None,
        policy=policy,
        **given,
    )


@click.command(cls=SectionedCommand, sections=RUN_SECTIONS)
@click.argument("prompt")
@option(
    "--strategy",
    default="delegation",
    show_default=True,
    help="Strategy prompt: a name from `teamlead prompts list` or a path.",
)
@run_options
@handle_errors
def ask(prompt: str, **kw: Any) -> None:
    """Ask the lead; resume it until its answer uses every result.

    PROMPT is the task; `-` reads it from stdin.
    """
    from ..coordinator import run_stream

    if prompt == "-":
        prompt = sys.stdin.read()
    if not prompt.strip():
        raise UsageError("the prompt is empty")
    _run_at_the_terminal(partial(run_stream, prompt), kw)


@click.command(cls=SectionedCommand, sections=RUN_SECTIONS)
@click.argument("session_id")
@option(
    "--strategy",
    default="delegation",
    show_default=True,
    help="Strategy prompt for the resumed turns (use the original run's; ask's default too).",
)
@run_options
@handle_errors
def resume(session_id: str, **kw: Any) -> None:
    """Collect a session's unused results and resume its lead.

    With --session-store, a session that ran on another machine is brought here from the
    store: run it in the directory the session ran in.
    """
    from ..coordinator import resume_stream

    _run_at_the_terminal(partial(resume_stream, session_id), kw, resumes=session_id)


def _run_at_the_terminal(
    start: Callable[..., RunStream], kw: dict[str, Any], *, resumes: str | None = None
) -> NoReturn:
    """Run what ``start`` begins (with the options, policy and live control) to its end
    with the terminal's controls and the live view, and exit with its code; ``resumes``
    is the session a resume continues (a missing one is a usage error, unless a session
    store brings it).

    The terminal's part (live control keys, the approval queue, the focus on one agent) is
    made first: the options carry its ``can_use_tool``.
    """
    from .._claude import claude_config_dir, find_session_file
    from .._otel import run_labels
    from .._run import default_process_state
    from .._sessions import close_store
    from ..control import RunControl
    from .controls import controls_for
    from .running import build_run, check_setup, merged_env, run_session

    output = output_mode(kw.pop("json_"), kw.pop("quiet"))
    verbose = kw.pop("verbose")
    default_process_state().keep_history(not kw.pop("no_history"))
    settings = settings_from_options(**kw)
    control = RunControl()  # the run's live cap and subagent model
    controls = controls_for(
        settings.permission_mode,
        output,
        wait_limit_s=settings.policy.deadline_s,
        control=control,
        config_dir=claude_config_dir(merged_env()),
    )
    options = build_run(settings, can_use_tool=controls.can_use_tool())
    env = merged_env(options.env)
    if resumes is not None and options.session_store is None:
        find_session_file(claude_config_dir(env), resumes)
    check_setup(env)
    run = start(options, policy=settings.policy, control=control)

    async def items() -> AsyncIterator[Any]:
        try:
            async with aclosing(run):
                async for item in run:
                    yield item
        finally:  # the store's connections belong to this event loop: closed in it
            await close_store(options.session_store)

    with run_labels(strategy=settings.strategy):  # the run's span names its strategy
        sys.exit(run_session(items, run, output=output, verbose=verbose, controls=controls))
