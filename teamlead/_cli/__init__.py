"""The ``teamlead`` command line: the click group and its commands, one module per group.

:func:`~.startup.run` is the entry point (the ``teamlead`` script and ``python -m
teamlead``): it takes the stop signals from its first instruction, then loads the click
group of :mod:`.commands` (``main``, also importable from here, for ``CliRunner``).
Every option also reads ``TEAMLEAD_<NAME>`` (see :mod:`.options`); errors print one line
and exit with a code from :mod:`.exitcodes`: 0 completed, 1 failed, 2 usage error, 3
partial, 130 interrupted. Command bodies stay thin: the work is in plain functions
(:mod:`.running`, :mod:`.progress`, the builders in each command module).

Each name here is loaded on first use (:mod:`teamlead._door`): the entry point must load
only what it needs before it takes the signals.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._door import lazy_exports

if TYPE_CHECKING:
    from .ask import run_options, settings_from_options
    from .commands import main
    from .settings import find_cli
    from .startup import run

__all__ = [
    "find_cli",
    "main",
    "run",
    "run_options",
    "settings_from_options",
]

__getattr__ = lazy_exports(__name__)
