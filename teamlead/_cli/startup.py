"""The ``teamlead`` entry point: stop signals taken from its first instruction.

:func:`run` takes SIGINT, SIGTERM and SIGHUP before it loads anything else
(:func:`~.signals.stop_at_startup`): a stop while the command loads ends it as an
interrupted run ends (``teamlead: interrupted``, exit 130, no traceback, and for ``ask
--json`` / ``resume --json`` the ``finished`` line), with whether NDJSON was asked for
read from the words before click parses them (:func:`wants_ndjson`). stdout and stderr are
guarded first too (:mod:`.output`): output that cannot be written exits 74. Only
:mod:`.signals` and :mod:`.output` load with this module.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import NoReturn

from .output import guard_streams, report_lost
from .signals import (
    StoppedAtStartup,
    mute_stop_signals,
    release_stop_signals,
    stop_at_startup,
    stop_raised,
)

__all__ = ["run", "wants_ndjson"]

#: The commands whose ``--json`` ends with a ``finished`` line.
_RUN_COMMANDS = ("ask", "resume")
#: What click takes for "on" in a boolean flag's variable (``TEAMLEAD_JSON=1``).
_TRUE = ("1", "true", "t", "yes", "y", "on")


def run() -> None:
    """Run the ``teamlead`` command line in this process; it ends by exiting.

    A stop before the command watches for the signals ends it here, whatever it was
    wrapped in on its way out; any other way out gives the signals back to the
    interpreter first, for its shutdown.
    """
    stop_at_startup()
    guard_streams()
    try:
        from .commands import main

        main()
    except BaseException as exc:  # the stop is one leaf of whatever it unwound through
        stopped = _stopped_at_startup(exc) or stop_raised()
        if stopped is not None:
            _exit_interrupted(stopped, sys.argv[1:], os.environ)
        if isinstance(exc, SystemExit) and report_lost():
            _exit_output_lost(exc.code)
        release_stop_signals()
        raise
    if report_lost():
        _exit_output_lost(0)


def wants_ndjson(args: Sequence[str], env: Mapping[str, str]) -> bool:
    """Whether the command line ``args`` runs ``ask`` or ``resume`` with NDJSON output.

    Read as click reads it: the group's own options take no value, so the first word
    that is not an option names the command; after it ``--json`` is the flag up to a
    ``--`` (a word after that is the prompt); without the flag, ``TEAMLEAD_JSON`` decides.

    Example:
        >>> wants_ndjson(["ask", "Fix it.", "--json"], {})
        True
        >>> wants_ndjson(["ask", "--", "--json"], {}), wants_ndjson(["relay", "--json"], {})
        (False, False)
    """
    command = next((i for i, word in enumerate(args) if not word.startswith("-")), None)
    if command is None or args[command] not in _RUN_COMMANDS:
        return False
    rest = list(args[command + 1 :])
    if "--" in rest:
        rest = rest[: rest.index("--")]
    if "--json" in rest:
        return True
    return env.get("TEAMLEAD_JSON", "").strip().lower() in _TRUE


def _exit_output_lost(code: object) -> NoReturn:
    """Exit after the command's output was lost (said in one line already): 74, or the
    command's own code when it failed on its own (its error line is on stderr)."""
    from .exitcodes import EXIT_OUTPUT_LOST

    release_stop_signals()
    own = code if isinstance(code, int) else 0 if code is None else 1
    raise SystemExit(own or EXIT_OUTPUT_LOST)


def _stopped_at_startup(exc: BaseException) -> StoppedAtStartup | None:
    """The :class:`StoppedAtStartup` ``exc`` is or holds (a task group wraps what its
    tasks raise), or ``None``."""
    if isinstance(exc, StoppedAtStartup):
        return exc
    for inner in getattr(exc, "exceptions", ()):  # a BaseExceptionGroup, on 3.10 too
        found = _stopped_at_startup(inner)
        if found is not None:
            return found
    context = exc.__context__  # click turns what it catches into its own exit
    return _stopped_at_startup(context) if context is not None else None


def _exit_interrupted(
    stopped: StoppedAtStartup, args: Sequence[str], env: Mapping[str, str]
) -> NoReturn:
    """End as an interrupted run ends (see the module docstring), the record built
    without the SDK.

    The process ends at once once its lines are out (``os._exit``): what the interpreter
    would tear down is what the stop cut in half, and a worker thread it would wait for
    may never end. Any child process is stopped all the same.
    """
    mute_stop_signals()
    from .._procs import stop_descendants
    from .exitcodes import EXIT_INTERRUPTED

    stop_descendants()
    if wants_ndjson(args, env):
        from .._redact import ndjson_line
        from .._run import stopped_before_start

        finished = stopped_before_start(stopped.received.name)
        sys.stdout.write(ndjson_line(finished.to_json()) + "\n")
    sys.stdout.flush()
    sys.stderr.write("teamlead: interrupted\n")
    sys.stderr.flush()
    os._exit(EXIT_INTERRUPTED)
