"""``teamlead-claude``: teamlead in the place of the Claude Code CLI, for any SDK app.

Both Agent SDKs let an app name the CLI they run (``cli_path`` in Python,
``pathToClaudeCodeExecutable`` in TypeScript). Named there, ``teamlead-claude`` takes the
CLI's argv and speaks its stream-json protocol to the app, runs the real CLI (the one
``claude_agent_sdk`` bundles, or ``TEAMLEAD_CLAUDE_PATH``) and puts teamlead's run in
between (:mod:`.bridge`): the app's code is unchanged, and its first ``result`` is the one
answer that used every agent's result. A command line that is not a stream-json session
(``--version``, a ``-p`` run with text output) runs the real CLI as it is.

What it runs with comes from the environment the app's SDK started it with
(:func:`read_setup`), read the way the ``teamlead`` command reads it, so one
``TEAMLEAD_*`` variable means the same in both: the policy from the run options'
variables (``TEAMLEAD_DEADLINE``, ``TEAMLEAD_MAX_RESUMES``, ``TEAMLEAD_NO_RELAY``, ...,
see :func:`teamlead._cli.ask.run_options`), the CLI from ``TEAMLEAD_CLAUDE_PATH``
(default: the one ``claude_agent_sdk`` bundles, else ``claude`` on ``PATH``). What the CLI
itself is told (model, tools, permission mode, prompts) is the app's, in its argv: those
variables of ``teamlead ask`` are not read here. Reading them loads neither the SDK nor
the terminal views.

Bad configuration is one line on stderr and exit code 2 (a bad value) or 1 (no CLI), before
anything reads the app's input, so the SDK reports the CLI's failure instead of waiting.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from .._claude import bundled_cli_path
from .._cli import find_cli, known_error, run_options, settings_from_options
from ..errors import SetupError, TeamleadError, UsageError
from ..policy import Policy

__all__ = [
    "CLAUDE_PATH_VAR",
    "ShimSetup",
    "finish",
    "main",
    "read_policy",
    "read_setup",
    "session",
]

#: Names the Claude Code CLI ``teamlead-claude`` runs (default: the bundled one).
CLAUDE_PATH_VAR = "TEAMLEAD_CLAUDE_PATH"
# the run options that say what the CLI is asked, not how the run is coordinated
_NOT_POLICY = ("json_", "quiet", "verbose", "no_history")

_EXIT_FAILED = 1
_EXIT_USAGE = 2
# each set of TEAMLEAD_* variables parsed once: their policy and whether to keep history
_PARSED: dict[frozenset[tuple[str, str]], tuple[Policy, bool]] = {}


def _is_stream_session(argv: list[str]) -> bool:
    """Whether ``argv`` asks for a stream-json session (the SDKs' way to run the CLI)."""
    pairs = zip(argv, argv[1:], strict=False)
    spaced = any(pair == ("--input-format", "stream-json") for pair in pairs)
    return spaced or "--input-format=stream-json" in argv


@dataclass(frozen=True)
class ShimSetup:
    """The real CLI to run and the policy of each run.

    Attributes:
        cli: the Claude Code CLI's path.
        policy: the run's limits and waits.
        history: keep the runs in the run history (``TEAMLEAD_NO_HISTORY`` turns it off).
    """

    cli: str
    policy: Policy
    history: bool = True


@click.command()
@run_options
def _run_variables(**params: Any) -> None:
    """The ``teamlead ask`` run options, parsed from their variables alone."""


def read_setup() -> ShimSetup:
    """The setup this process's environment describes (its ``TEAMLEAD_*`` variables are
    read as options, the way click reads an option's variable: from ``os.environ``).

    Raises:
        UsageError: a ``TEAMLEAD_*`` variable holds a value its option refuses.
        SetupError: ``TEAMLEAD_CLAUDE_PATH`` names no executable file, or there is no CLI.
    """
    policy, history = read_policy(os.environ)
    cli = _cli_path(os.environ.get(CLAUDE_PATH_VAR, "").strip())
    return ShimSetup(cli=cli, policy=policy, history=history)


def read_policy(env: Mapping[str, str]) -> tuple[Policy, bool]:
    """The policy of :func:`read_setup`, and whether to keep history; ``env`` is this
    process's environment (``os.environ``, or a plain copy of it: quicker to read). Parsed
    once per set of ``TEAMLEAD_*`` variables (a warm process has parsed its own already).

    Raises:
        UsageError: a ``TEAMLEAD_*`` variable holds a value its option refuses.
    """
    variables = frozenset((k, v) for k, v in env.items() if k.startswith("TEAMLEAD_"))
    if variables not in _PARSED:
        _PARSED[variables] = _policy()
    return _PARSED[variables]


def _policy() -> tuple[Policy, bool]:
    """The policy the ``TEAMLEAD_*`` variables describe, and whether to keep history."""
    try:
        params = _run_variables.make_context(
            "teamlead-claude", [], default_map=None, resilient_parsing=False
        ).params
    except click.BadParameter as exc:
        source = exc.param.envvar if exc.param is not None else None
        where = f"{source}: " if isinstance(source, str) else ""
        raise UsageError(f"{where}{exc.format_message()}") from None
    except click.ClickException as exc:
        raise UsageError(exc.format_message()) from None
    kept = {k: v for k, v in params.items() if k not in _NOT_POLICY}
    return settings_from_options("delegation", **kept).policy, not params["no_history"]


def _cli_path(named: str) -> str:
    """The CLI ``named`` (``TEAMLEAD_CLAUDE_PATH``), else the bundled one, else ``claude``
    on ``PATH``."""
    try:
        found = find_cli(named or None)
    except SetupError as exc:
        raise SetupError(f"{exc} ({CLAUDE_PATH_VAR})" if named else str(exc)) from None
    return found if found is not None else str(bundled_cli_path())


def main() -> None:
    """Run ``teamlead-claude`` with this process's argv, stdin and stdout; exits."""
    code = session(sys.argv[1:])
    finish()
    os._exit(code)


def session(argv: list[str]) -> int:
    """Run one ``teamlead-claude`` command (``argv`` without the program name) on this
    process's environment and standard streams; returns its exit code. A command line that
    is not a stream-json session becomes the real CLI (``exec``)."""
    import anyio

    try:
        setup = read_setup()
    except UsageError as exc:
        print(f"teamlead-claude: {exc}", file=sys.stderr)
        return _EXIT_USAGE
    except SetupError as exc:
        print(f"teamlead-claude: {exc}", file=sys.stderr)
        return _EXIT_FAILED
    if not _is_stream_session(argv):
        os.execv(setup.cli, [setup.cli, *argv])
    from .._run import default_process_state
    from .bridge import serve

    default_process_state().keep_history(setup.history)
    try:
        return anyio.run(serve, setup.cli, argv, setup.policy, dict(os.environ), str(Path.cwd()))
    except Exception as exc:  # a run that cannot go on (inside its task group too): one line
        known = known_error(exc)
        if not isinstance(known, TeamleadError):
            raise
        print(f"teamlead-claude: {known}", file=sys.stderr)
        return _EXIT_USAGE if isinstance(known, UsageError) else _EXIT_FAILED


def finish() -> None:
    """Make ready to end the process once the session is over, without the interpreter's
    teardown of its modules (``os._exit``): the SDK's module graph takes a second or more
    to tear down, and the app waits for the CLI's exit. Every child has been reaped by
    then; the exit handlers (telemetry's flush) run and the streams are flushed here."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
