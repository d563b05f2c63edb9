"""The tests' one way to wait for a state another thread or process changes: poll it,
with a deadline.

Use it only where there is no event to wait on (a child process, a server thread, the
kernel's descriptor table); an in-process wait uses an event or the injected clock.
:func:`poll` returns the first truthy value ``check()`` gave, or ``None`` when the deadline
came first (or ``unless()`` said to stop, e.g. the process being watched has exited), so a
caller asserts with its own message.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

import anyio

__all__ = ["apoll", "poll", "settle"]

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


async def settle(*, within_s: float = 10.0) -> None:
    """Return once every other task of the running asyncio loop waits on something.

    What :func:`anyio.wait_all_tasks_blocked` checks, without its 0.1 s nap each time a
    task is still runnable: a test that wakes one queued waiter per step paid a nap per
    step. For in-memory tests (the loop does no I/O of its own); a task still runnable
    after ``within_s`` fails the test.
    """
    await anyio.lowlevel.checkpoint()
    me = asyncio.current_task()
    deadline = time.monotonic() + within_s
    while True:
        # the test the asyncio backend of anyio itself makes: a task waits on a future
        runnable = [t for t in asyncio.all_tasks() if t is not me and _runnable(t)]
        if not runnable:
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"{len(runnable)} task(s) still runnable after {within_s} s")
        await asyncio.sleep(0)


def _runnable(task: asyncio.Task[object]) -> bool:
    waiter = getattr(task, "_fut_waiter", None)
    return waiter is None or bool(waiter.done())
