"""The tests' one way to wait for a state another thread or process changes: poll it,
with a deadline.

Use it only where there is no event to wait on (a child process, a server thread, the
kernel's descriptor table); an in-process wait uses an event or the injected clock.
:func:`poll` returns the first truthy value ``check()`` gave, or ``None`` when the deadline
came first (or ``unless()`` said to stop, e.g. the process being watched has exited), so a
caller asserts with its own message.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import anyio

__all__ = ["apoll", "poll"]

T = TypeVar("T")


def poll(
    check: Callable[[], T | None],
    *,
    within_s: float = 30.0,
    every_s: float = 0.05,
    unless: Callable[[], bool] | None = None,
) -> T | None:
    """``check()`` every ``every_s`` until it is truthy (returned) or ``within_s`` passed."""
    deadline = time.monotonic() + within_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline or (unless is not None and unless()):
            return None
        time.sleep(every_s)


async def apoll(
    check: Callable[[], T | None], *, within_s: float = 30.0, every_s: float = 0.01
) -> T | None:
    """:func:`poll` for async tests: the event loop keeps running between checks."""
    deadline = time.monotonic() + within_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            return None
        await anyio.sleep(every_s)
