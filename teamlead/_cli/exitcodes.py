"""The process exit codes of every ``teamlead`` command, defined once, and the error mapping.

:func:`handle_errors` turns teamlead's errors into one line on stderr and the matching
code, never a traceback, also when a task group wraps them in an exception group.
:class:`SafeErrorsGroup` says click's own usage errors the same way, escaped:
``teamlead: error: <what is wrong>; see 'teamlead CMD --help'``.
"""

from __future__ import annotations

import difflib
import functools
import re
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from .._redact import terminal_safe
from ..errors import NoSuchRun, TeamleadError, UsageError
from .signals import StoppedAtStartup

if sys.version_info < (3, 11):  # pragma: no cover - the backport anyio installs there
    from exceptiongroup import BaseExceptionGroup  # type: ignore[import-not-found,unused-ignore]

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
    "fail",
    "handle_errors",
    "one_line",
    "tell",
]

EXIT_COMPLETED = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
#: A run that ended partial, or an experiment stopped early.
EXIT_PARTIAL = 3
#: ``stop``, ``pause`` and the other verbs on a run: no live run of the user's is named so.
EXIT_NO_RUN = 4
#: The command's output could not be written (stdout or stderr closed, full, or a reader
#: gone): said in one line on the stream that still works (see :mod:`.output`).
EXIT_OUTPUT_LOST = 74
#: A stop signal (SIGINT, SIGTERM or SIGHUP alike), from the command's first instant
#: (see :mod:`.startup`).
EXIT_INTERRUPTED = 130

#: ``Finished.status`` -> process exit code.
EXIT_CODES: dict[str, int] = {
    "completed": EXIT_COMPLETED,
    "failed": EXIT_FAILED,
    "partial": EXIT_PARTIAL,
}

_F = TypeVar("_F", bound=Callable[..., Any])


def fail(message: str, code: int) -> NoReturn:
    """Print ``teamlead: <message>`` on stderr and exit with ``code``."""
    click.echo(f"teamlead: {terminal_safe(message)}", err=True)
    sys.exit(code)


def tell(exc: BaseException) -> int:
    """Print teamlead error ``exc`` as its one line on stderr; returns its exit code (4 no
    such run, 2 a usage error, else 1). For a command that goes on after one (``stop``
    of several runs)."""
    click.echo(f"teamlead: {terminal_safe(f'error: {exc}')}", err=True)
    if isinstance(exc, NoSuchRun):
        return EXIT_NO_RUN
    return EXIT_USAGE if isinstance(exc, UsageError) else EXIT_FAILED


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside ``exc``, exception groups (nested too) flattened."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def known_error(exc: BaseException) -> BaseException | None:
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
            known = known_error(exc)
            if known is None or isinstance(known, StoppedAtStartup):
                raise  # a stop at start-up is the entry point's to report (.startup)
            if isinstance(known, KeyboardInterrupt):
                fail("interrupted", EXIT_INTERRUPTED)
            sys.exit(tell(known))

    return wrapper  # type: ignore[return-value]


class SafeErrorsGroup(click.Group):
    """A click group whose usage errors are one ``teamlead: error: ...`` line, escaped.

    Click quotes the offending input in its messages, so they go through
    :func:`~teamlead._redact.terminal_safe` like every other line teamlead prints; the
    line ends with where the usage is (``see 'teamlead ask --help'``), the exit code is
    click's (2). An unknown command is answered with the nearest one (``did you mean``).
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
            _in_house_style(exc)
            raise

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.ClickException as exc:  # a subcommand's parse error, or a callback's
            _in_house_style(exc)
            raise

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """click's lookup, with the nearest command named when the word is none."""
        name = click.utils.make_str(args[0])
        if self.get_command(ctx, name) is None and not ctx.resilient_parsing:
            near = difflib.get_close_matches(name, self.list_commands(ctx), n=1, cutoff=0.6)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise click.UsageError(f"no such command {name!r}{hint}", ctx)
        return super().resolve_command(ctx, args)


def _in_house_style(exc: click.ClickException) -> None:
    """Show ``exc`` as one terminal-safe ``teamlead: error:`` line (set once only)."""
    if getattr(exc, "_teamlead_styled", False):
        return
    exc._teamlead_styled = True  # type: ignore[attr-defined]
    context = exc.ctx if isinstance(exc, click.UsageError) else None

    def show(file: Any = None) -> None:
        click.echo(f"teamlead: error: {one_line(exc, context)}", file=file, err=file is None)

    exc.show = show  # type: ignore[method-assign]


def one_line(exc: click.ClickException, context: click.Context | None = None) -> str:
    """``exc``'s message as teamlead says an error: one line, lower case first, no final
    full stop, control characters escaped, and then where the usage is when the error is
    about usage (``context``, the command it was met in).

    Example:
        >>> one_line(click.UsageError("Missing argument 'PROMPT'."))
        "missing argument 'PROMPT'"
    """
    text = " ".join(exc.format_message().split()).rstrip(".")
    text = re.sub(r"\. Did you mean (.+)\?$", r" (did you mean \1?)", text)
    text = terminal_safe(text[:1].lower() + text[1:])
    if context is None:
        return text
    words = []
    while context is not None:
        words.append(context.info_name or "")
        context = context.parent
    words[-1] = "teamlead"  # the program, however it was started (python -m teamlead)
    return f"{text}; see '{' '.join(reversed(words))} --help'"
