"""teamlead: never lose a subagent's or teammate's result with the Claude Agent SDK."""

from __future__ import annotations

from ._version import __version__
from .clock import SYSTEM_CLOCK, Clock, FakeClock, SystemClock
from .errors import BudgetExceeded, InboxError, ResumeError, SetupError, TeamleadError, UsageError

__all__ = [
    "SYSTEM_CLOCK",
    "BudgetExceeded",
    "Clock",
    "FakeClock",
    "InboxError",
    "ResumeError",
    "SetupError",
    "SystemClock",
    "TeamleadError",
    "UsageError",
    "__version__",
]
