"""The process exit codes of every ``teamlead`` command, defined once, and the error mapping.

0 completed, 1 failed, 2 usage error, 3 partial (or an experiment stopped early),
130 interrupted. :func:`handle_errors` turns teamlead's errors into one line on stderr
and the matching code, never a traceback.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from ..errors import TeamleadError, UsageError
from ..events import Finished

__all__ = [
    "EXIT_CODES",
    "EXIT_COMPLETED",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_PARTIAL",
    "EXIT_USAGE",
    "exit_code_for",
    "fail",
    "handle_errors",
]

EXIT_COMPLETED = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_PARTIAL = 3
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
    click.echo(f"teamlead: {message}", err=True)
    sys.exit(code)


def handle_errors(func: _F) -> _F:
    """Turn teamlead errors into one line and an exit code, never a traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except UsageError as exc:
            fail(f"error: {exc}", EXIT_USAGE)
        except TeamleadError as exc:
            fail(f"error: {exc}", EXIT_FAILED)
        except KeyboardInterrupt:
            fail("interrupted", EXIT_INTERRUPTED)

    return wrapper  # type: ignore[return-value]
