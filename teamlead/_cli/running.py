"""What ``teamlead ask``, ``resume`` and ``demo`` do, as typed functions the commands call.

:func:`build_run` turns an :class:`~.settings.AskSettings` into SDK options (with the
strategy prompt appended); :func:`run_session` drives the run with progress
output and stop handling and returns the exit code.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import IO, Any

import anyio
from claude_agent_sdk import ClaudeAgentOptions
from claude_agent_sdk.types import CanUseTool

from .._claude import ensure_loopback
from .._gate.prompt_limits import prompt_limits
from .._ndjson import JsonProgress
from .._procs import descendants, stop_descendants
from .._redact import redact, replace_surrogates, terminal_safe
from .._run import default_process_state
from ..clock import SYSTEM_CLOCK
from ..coordinator import allow_workflows
from ..errors import SetupError, UsageError
from ..events import Finished, WorkflowDenied
from ..prompts import apply_strategy, load_strategy
from ..tracker import StreamParse
from .controls import Controls
from .exitcodes import EXIT_CODES, EXIT_FAILED, EXIT_INTERRUPTED
from .keys import cbreak
from .options import Output
from .output import is_terminal
from .settings import AskSettings, find_cli
from .signals import defer_stop_signals, receive_stop_signals
from .team_view import LiveTeamView, PlainProgress

__all__ = ["answer_for", "build_run", "check_setup", "merged_env", "run_session"]


#: After a stop signal, how long the run may take to end with its ``Finished``.
_STOP_GRACE_S = 10.0
#: The one line a run whose lead could not run a workflow ends with (on stderr).
WORKFLOW_DENIED_LINE = (
    "teamlead: the lead's Workflow call was denied (the permission mode asks for approval); "
    "run again with --allow-workflows (or TEAMLEAD_ALLOW_WORKFLOWS=1) to let workflows run"
)


def check_setup(env: Mapping[str, str], *, config_dir: bool = True) -> None:
    """Fail with one clear line when the CLI has no way to reach a model, or (with
    ``config_dir``; not for runs that give each CLI a config dir of its own) cannot write
    its config dir.

    Raises:
        SetupError: no API key, token or login is configured; the config dir cannot be
            written.
    """
    configured = (env.get("CLAUDE_CONFIG_DIR") or "").strip()
    home = Path(env.get("HOME") or "~").expanduser()
    config = Path(configured).expanduser() if configured else home / ".claude"
    _check_model_access(env, config)
    if config_dir:
        _check_config_dir(config, configured)


def _check_config_dir(config: Path, configured: str) -> None:
    """Refuse a config dir the CLI cannot write (``configured``: the ``CLAUDE_CONFIG_DIR``
    it came from, if any): no resume could find the session's transcript. Made when
    missing, as the CLI does."""
    try:
        config.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=config):
            pass
    except OSError as exc:
        if config.exists() and not config.is_dir():
            why = "it is not a directory"
        else:
            why = (exc.strerror or type(exc).__name__).lower()
        if configured:
            where = f"{configured} (CLAUDE_CONFIG_DIR)"
            fix = "set CLAUDE_CONFIG_DIR to a directory you can write, or unset it for ~/.claude"
        else:
            where = str(config)
            fix = "make it writable, or set CLAUDE_CONFIG_DIR to a directory you can write"
        raise SetupError(
            f"the Claude config dir {where} cannot be created or written ({why}), so no "
            f"session could be resumed: {fix}"
        ) from None


def _check_model_access(env: Mapping[str, str], config: Path) -> None:
    """Fail unless an API key, token, login (in the config dir ``config``) or a loopback
    gateway is configured."""
    if env.get("ANTHROPIC_BASE_URL", "").strip():
        try:
            ensure_loopback(env["ANTHROPIC_BASE_URL"])
            return  # a local gateway or scripted server needs no real key
        except SetupError:
            pass
    keys = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")
    if any(env.get(k, "").strip() for k in keys):
        return
    for flag in ("CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX"):
        if env.get(flag, "").strip() in ("1", "true"):
            return
    if (config / ".credentials.json").exists():
        return
    raise SetupError(
        "no model access configured: set ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL and "
        "ANTHROPIC_AUTH_TOKEN for a gateway), or try `teamlead demo`, which needs neither"
    )


def build_run(
    settings: AskSettings, *, can_use_tool: CanUseTool | None = None
) -> ClaudeAgentOptions:
    """SDK options with the strategy appended for ``settings``; the options ask
    ``can_use_tool`` (the run's :class:`~.controls.Controls`) for permission.

    Raises:
        UsageError: unknown strategy, a cwd that does not exist, a session store URL that
            is none.
    """
    if settings.cwd is not None and not Path(settings.cwd).is_dir():
        raise UsageError(f"--cwd {settings.cwd!r} is not a directory")
    strategy = load_strategy(settings.strategy)
    cli_path = find_cli(settings.cli_path)
    store = None
    if settings.session_store is not None:
        from ..sessions import open_session_store

        store = open_session_store(settings.session_store)
    options = ClaudeAgentOptions(
        model=settings.model,
        cwd=settings.cwd,
        allowed_tools=list(settings.allowed_tools),
        permission_mode=settings.permission_mode,  # type: ignore[arg-type]
        cli_path=cli_path,
        can_use_tool=can_use_tool,
        session_store=store,
    )
    if settings.allow_workflows:
        options = allow_workflows(options)
    values = prompt_limits(settings.policy.spawn, options.env)
    return apply_strategy(options, strategy, values=values)


def _progress(
    output: Output,
    verbose: bool,
    stderr: IO[str],
    stdout: IO[str],
    run: StreamParse,
    *,
    scripted: bool = False,
) -> Any:
    if output == "json":
        return JsonProgress(stdout, run)
    if output == "quiet":
        return None
    if output == "live" or (output == "auto" and stderr.isatty()):
        from rich.console import Console

        return LiveTeamView(Console(file=stderr), run, verbose=verbose, scripted=scripted)
    return PlainProgress(stderr, run, verbose=verbose, scripted=scripted)


def run_session(
    items: Callable[[], AsyncIterator[Any]],
    run: StreamParse,
    *,
    output: Output = "auto",
    verbose: bool = False,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    scripted: bool = False,
    controls: Controls | None = None,
    resumable: bool = True,
) -> int:
    """Drive ``items()`` to its :class:`Finished` event with progress output; returns the exit code.

    ``run`` is the parse of the run ``items()`` reads (the progress, the focus and the
    approvals' labels read its tracker). The answer goes to stdout (with ``--json``, the
    ``finished`` line); progress to stderr, ending on a terminal with the result cards. A
    stop signal stops the run and the CLI tree, prints how to resume (if ``resumable``)
    and returns 130. ``scripted`` shows the cost as an estimate. ``controls`` (the
    approvals and keys the options ask) show their prompt and hint in the progress and
    read keys in cbreak mode while the run goes.
    """
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    progress = _progress(output, verbose, err, out, run, scripted=scripted)
    if controls is not None:
        controls.attach(progress, run, err)
    state: dict[str, Any] = {
        "finished": None,
        "interrupted": False,
        "session": None,
        "workflow_denied": False,
    }

    async def consume(scope: anyio.CancelScope) -> None:
        async for item in items():
            if progress is not None:
                progress.handle(item)
            if controls is not None:
                controls.feed(item)
            session = getattr(item, "session_id", None)
            if isinstance(session, str) and session and state["session"] is None:
                state["session"] = session
            if isinstance(item, Finished):
                state["finished"] = item
            elif isinstance(item, WorkflowDenied):
                state["workflow_denied"] = True
        scope.cancel()

    async def watch_signals(scope: anyio.CancelScope) -> None:
        with receive_stop_signals() as signals:
            received = await anext(signals)
            state["interrupted"] = True
            if controls is not None:  # a prompt on the screen is answered: no
                controls.close()
            # the run stops itself, so it still ends with its Finished (every call in it,
            # the queued ones rejected at once); the CLI tree is stopped meanwhile
            default_process_state().stop_every_run(received.name)
            await anyio.to_thread.run_sync(stop_descendants)
            with anyio.move_on_after(_STOP_GRACE_S):
                async for _ in signals:  # a second signal: stop waiting for it
                    break
            scope.cancel()

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch_signals, tg.cancel_scope)
            tg.start_soon(consume, tg.cancel_scope)
            if controls is not None:
                tg.start_soon(controls.read_keys)
        if state["interrupted"]:
            # the stopped CLI tree ends while this loop runs, so each child's transport
            # sees its end here, not on a closed loop
            with anyio.move_on_after(_STOP_GRACE_S):
                while descendants():  # noqa: ASYNC110 - a process ending has no event
                    await SYSTEM_CLOCK.sleep(0.05)

    keys_from = controls.stdin if controls is not None and controls.interactive else None
    try:
        with cbreak(keys_from):
            defer_stop_signals()  # from here a stop is the run's (see .signals)
            anyio.run(main)
    finally:
        if controls is not None:
            controls.close()
        if progress is not None:
            progress.close()
    if state["workflow_denied"]:  # once per run, after the live view has gone
        err.write(WORKFLOW_DENIED_LINE + "\n")
        err.flush()
    finished: Finished | None = state["finished"]
    if finished is not None and output in ("auto", "live") and is_terminal(err):
        from rich.console import Console

        from .cards import print_cards

        print_cards(Console(file=err), finished.tasks)  # the result cards, one row per agent
    fallback = finished.fallback_answer() if finished is not None else None
    if fallback is not None and output != "json":  # the lead wrote none: the results
        out.write(answer_for(out, fallback).rstrip() + "\n")
        out.flush()
    if state["interrupted"]:
        err.write(f"teamlead: interrupted{_resume_hint(state['session'], resumable)}\n")
        err.flush()
        return EXIT_INTERRUPTED
    if finished is None:
        hint = _resume_hint(state["session"], resumable)
        err.write(f"teamlead: error: the run ended without an outcome{hint}\n")
        return EXIT_FAILED
    if output != "json":
        if finished.result:
            out.write(answer_for(out, finished.result).rstrip() + "\n")
            out.flush()
        if finished.status != "completed":
            reasons = "; ".join(finished.reasons) or "see the progress log"
            err.write(terminal_safe(f"teamlead: {finished.status}: {reasons}") + "\n")
            if finished.session_id:
                err.write(f"teamlead: session {finished.session_id}\n")
    return EXIT_CODES[finished.status]


def _resume_hint(session: str | None, resumable: bool) -> str:
    """How to go on with a run cut short: the command that resumes its session, or why
    there is none."""
    if not resumable:
        return "; nothing to resume (its session and scripted model are gone)"
    return f"; resume with: teamlead resume {session}" if session else ""


def answer_for(stream: IO[str], text: str) -> str:
    """The final answer as it is written to ``stream``: secrets redacted always; on a
    terminal, every control character but newline and tab escaped too (piped, the answer
    keeps its characters, for the next program, but for a lone surrogate, as U+FFFD)."""
    if not is_terminal(stream):  # half a surrogate pair (a JavaScript cut) cannot be written
        return replace_surrogates(redact(text))
    parts = redact(text).split("\t")
    return "\t".join(terminal_safe(part, keep_newlines=True) for part in parts)


def merged_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment the CLI child will see."""
    return {**os.environ, **dict(extra or {})}
