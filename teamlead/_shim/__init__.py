"""``teamlead-claude``: teamlead in the place of the Claude Code CLI, for any SDK app.

Both Agent SDKs let an app name the CLI they run (``cli_path`` in Python,
``pathToClaudeCodeExecutable`` in TypeScript). Named there, ``teamlead-claude`` takes the
CLI's argv and speaks its stream-json protocol to the app, runs the real CLI (the one
``claude_agent_sdk`` bundles, or ``TEAMLEAD_CLAUDE_PATH``) and puts teamlead's run in
between (:mod:`.bridge`): the app's code is unchanged, and its first ``result`` is the one
answer that used every agent's result. The policy comes from the ``TEAMLEAD_*`` variables
(:mod:`.setup`). A command line that is not a stream-json session (``--version``, a
``-p`` run with text output) runs the real CLI as it is.

Bad configuration is one line on stderr and exit code 2 (a bad value) or 1 (no CLI), before
anything reads the app's input, so the SDK reports the CLI's failure instead of waiting.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from pathlib import Path

__all__ = ["main"]

_EXIT_FAILED = 1
_EXIT_USAGE = 2


def _is_stream_session(argv: list[str]) -> bool:
    """Whether ``argv`` asks for a stream-json session (the SDKs' way to run the CLI)."""
    pairs = zip(argv, argv[1:], strict=False)
    spaced = any(pair == ("--input-format", "stream-json") for pair in pairs)
    return spaced or "--input-format=stream-json" in argv


def main() -> None:
    """Run ``teamlead-claude`` with this process's argv, stdin and stdout; exits."""
    import anyio

    from ..errors import SetupError, UsageError
    from .setup import read_setup

    argv = sys.argv[1:]
    try:
        setup = read_setup(os.environ)
    except UsageError as exc:
        print(f"teamlead-claude: {exc}", file=sys.stderr)
        sys.exit(_EXIT_USAGE)
    except SetupError as exc:
        print(f"teamlead-claude: {exc}", file=sys.stderr)
        sys.exit(_EXIT_FAILED)
    if not _is_stream_session(argv):
        os.execv(setup.cli, [setup.cli, *argv])
    from .._run import default_process_state
    from .bridge import serve

    default_process_state().keep_history(setup.history)
    code = anyio.run(serve, setup.cli, argv, setup.policy, dict(os.environ), str(Path.cwd()))
    _exit_now(code)


def _exit_now(code: int) -> None:
    """End the process with ``code`` once the session is over, skipping the interpreter's
    teardown of its modules: the SDK's module graph takes a second or more to tear down,
    and the app waits for the CLI's exit. Every child has been reaped by then; the exit
    handlers (telemetry's flush) run and the streams are flushed first."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
