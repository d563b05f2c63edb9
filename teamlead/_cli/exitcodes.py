"""The process exit codes of every ``teamlead`` command, defined once, and the error mapping.

0 completed, 1 failed, 2 usage error, 3 partial (or an experiment stopped early), 4 no
such run (``stop``, ``pause`` and the other verbs on a run named no live run of the
user's), 74 output lost (stdout or stderr could not be written, see :mod:`.output`), 130
interrupted (SIGINT, and SIGTERM or SIGHUP too: every stop signal exits 130,
from the command's first instant: see :mod:`.startup`).
:func:`handle_errors` turns teamlead's errors into one line on stderr and the matching
code, never a traceback, also when a task group wraps them in an exception group.
:class:`SafeErrorsGroup` gives click's own usage errors (which quote what was typed) the
same terminal-safe escaping.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from .._redact import terminal_safe
from ..errors import NoSuchRun, TeamleadError, UsageError
from .signals import StoppedAtStartup

if sys.version_info < (3, 11):  # pragma: no cover - the backport anyio installs there
    from exceptiongroup import BaseExceptionGroup  # type: ignore[import-not-found,unused-ignore]
if TYPE_CHECKING:  # the events load pydantic: `teamlead ps` and `--help` must start fast
    from ..events import Finished

__all__ = [
    "EXIT_CODES",
    "EXIT_COMPLETED",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_NO_RUN",
    "EXIT_OUTPUT_LOST",
    "EXIT_PARTIAL",
    "EXIT_USAGE",
    "SafeErrorsGroup",
    "exit_code_for",
    "fail",
    "handle_errors",
]

EXIT_COMPLETED = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_PARTIAL = 3
#: ``stop``, ``pause`` and the other verbs on a run: no live run of the user's is named so.
EXIT_NO_RUN = 4
#: The command's output could not be written (stdout or stderr closed, full, or a reader
#: gone): said in one line on the stream that still works (see :mod:`.output`).
EXIT_OUTPUT_LOST = 74
EXIT_INTERRUPTED = 130

#: ``Finished.status`` -> process exit code.
EXIT_CODES: dict[str, int] = {
    "completed": EXIT_COMPLETED,
    "failed": EXIT_FAILED,
    "partial": EXIT_PARTIAL,
}

_F = TypeVar("_F", bound=Callable[..., Any])


def exit_code_for(finished: Finished | None) -> int:
    """The process exit code for a run's outcome (no outcome at all counts as failed)."""
    if finished is None:
        return EXIT_FAILED
    return EXIT_CODES[finished.status]


def fail(message: str, code: int) -> NoReturn:
    """Print ``teamlead: <message>`` on stderr and exit with ``code``."""
    click.echo(f"teamlead: {terminal_safe(message)}", err=True)
    sys.exit(code)


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside ``exc``, exception groups (nested too) flattened."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _known(exc: BaseException) -> BaseException | None:
    """The one error to report for ``exc``: a stop at start-up or an interrupt first, then
    a usage error, then any teamlead error; ``None`` when a group holds something else as
    well (a real bug)."""
    leaves = _leaves(exc)
    for kind in (StoppedAtStartup, KeyboardInterrupt, UsageError, TeamleadError):
        found = [leaf for leaf in leaves if isinstance(leaf, kind)]
        if found:
            return found[0]
    return None


def handle_errors(func: _F) -> _F:
    """Turn teamlead errors into one line and an exit code, never a traceback.

    Errors raised inside a task group arrive wrapped in a (possibly nested)
    ``BaseExceptionGroup``; the teamlead error inside is reported the same way.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (TeamleadError, KeyboardInterrupt, BaseExceptionGroup) as exc:
            known = _known(exc)
            if known is None or isinstance(known, StoppedAtStartup):
                raise  # a stop at start-up is the entry point's to report (.startup)
            if isinstance(known, KeyboardInterrupt):
                fail("interrupted", EXIT_INTERRUPTED)
            if isinstance(known, NoSuchRun):
                fail(str(known), EXIT_NO_RUN)
            code = EXIT_USAGE if isinstance(known, UsageError) else EXIT_FAILED
            fail(f"error: {known}", code)

    return wrapper  # type: ignore[return-value]


class SafeErrorsGroup(click.Group):
    """A click group whose usage errors print what was typed with control characters escaped.

    Click quotes the offending input in its messages (an unexpected extra argument, an
    unknown option, a bad value); those go through
    :func:`~teamlead._redact.terminal_safe` like every other line teamlead prints, so
    an argument holding an OSC or CSI sequence cannot retitle or clear the terminal.
    Exit code and wording are click's (2, ``Error: ...``).
    """

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.ClickException as exc:
            _escape(exc)
            raise

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.ClickException as exc:  # a subcommand's parse error, or a callback's
            _escape(exc)
            raise


def _escape(exc: click.ClickException) -> None:
    """Make ``exc``'s message terminal-safe when it is shown (newlines kept); once only."""
    if getattr(exc, "_teamlead_escaped", False):
        return
    formatted = exc.format_message

    def format_message() -> str:
        return terminal_safe(formatted(), keep_newlines=True)

    exc.format_message = format_message  # type: ignore[method-assign]
    exc._teamlead_escaped = True  # type: ignore[attr-defined]
