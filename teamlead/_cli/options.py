"""The one way a ``teamlead`` command declares an option, plus the shared output switch.

:func:`option` is ``click.option`` that also reads ``TEAMLEAD_<NAME>``, the long flag
upper-cased with dashes as underscores (``--max-resumes`` reads ``TEAMLEAD_MAX_RESUMES``,
``--no-plots`` reads ``TEAMLEAD_NO_PLOTS``). Every command builds its options with it, so
no option can forget its variable; a test walks the command tree to keep it so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar

import click

from ..errors import UsageError

__all__ = ["ENV_PREFIX", "Output", "envvar_for", "option", "output_mode"]

ENV_PREFIX = "TEAMLEAD_"

#: Where a run's progress goes: a live view, plain lines, NDJSON, or only the answer.
Output = Literal["auto", "live", "plain", "json", "quiet"]

_F = TypeVar("_F", bound=Callable[..., Any])


def envvar_for(flag: str) -> str:
    """``--max-resumes`` -> ``TEAMLEAD_MAX_RESUMES``."""
    return ENV_PREFIX + flag.lstrip("-").upper().replace("-", "_")


def option(*param_decls: str, **attrs: Any) -> Callable[[_F], _F]:
    """``click.option`` whose value may also come from ``TEAMLEAD_<NAME>``.

    ``<NAME>`` is the first long flag in ``param_decls``; passing ``envvar`` is an error,
    so the naming cannot drift.
    """
    if "envvar" in attrs:
        raise TypeError("option() derives envvar from the long flag; do not pass it")
    long_flags = [d for d in param_decls if d.startswith("--")]
    if not long_flags:
        raise TypeError(f"option {param_decls!r} needs a --long flag to name its variable")
    return click.option(*param_decls, envvar=envvar_for(long_flags[0]), **attrs)


def output_mode(json_: bool, quiet: bool) -> Output:
    """The output for ``--json`` / ``--quiet`` (default: live on a terminal, else plain).

    Raises:
        UsageError: both were given.
    """
    if json_ and quiet:
        raise UsageError("--json and --quiet cannot be combined")
    return "json" if json_ else ("quiet" if quiet else "auto")
