"""The ``teamlead`` command line: the click group and its commands, one module per group.

:func:`~.startup.run` is the entry point (the ``teamlead`` script and ``python -m
teamlead``); :mod:`.commands` holds the click group (``main``). Every option also reads
``TEAMLEAD_<NAME>`` (:mod:`.options`); errors are one line and an exit code from
:mod:`.exitcodes`. Each name here is loaded on first use (:mod:`teamlead._door`): the entry
point loads only what it needs before it takes the signals.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._door import lazy_exports

if TYPE_CHECKING:
    from .ask import run_options, settings_from_options
    from .commands import main
    from .exitcodes import known_error
    from .settings import find_cli
    from .startup import run

__all__ = [
    "find_cli",
    "known_error",
    "main",
    "run",
    "run_options",
    "settings_from_options",
]

__getattr__ = lazy_exports(__name__)
