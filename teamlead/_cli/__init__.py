"""The ``teamlead`` command line: the click group and its commands, one module per group.

:func:`~.startup.run` is the entry point (the ``teamlead`` script and ``python -m
teamlead``): it takes the stop signals from its first instruction, then loads the click
group of :mod:`.commands` (``main``, also importable from here, for ``CliRunner``).
Every option also reads ``TEAMLEAD_<NAME>`` (see :mod:`.options`); errors print one line
and exit with a code from :mod:`.exitcodes`: 0 completed, 1 failed, 2 usage error, 3
partial, 130 interrupted. Command bodies stay thin: the work is in plain functions
(:mod:`.running`, :mod:`.progress`, the builders in each command module).

Nothing is imported here: the entry point must load only what it needs before it takes
the signals.
"""

from __future__ import annotations

import typing

if typing.TYPE_CHECKING:
    from .commands import main

__all__ = ["main"]


def __getattr__(name: str) -> object:
    """``main``, the click group, loaded on first use (it loads every command and the SDK)."""
    if name == "main":
        from .commands import main

        globals()["main"] = main
        return main
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
