"""A real clock a test can move forward: :class:`SkipClock`.

A run on the real CLI waits for its deadline or an agent's timeout on the injected clock.
With the system clock a test waits out those seconds, all of them, even once the state the
deadline is meant to cut (some agents done, one hung) is there. A :class:`SkipClock` runs at
real speed, so everything else (the CLI, the scripted server, the relay) keeps its timing,
and :meth:`SkipClock.skip_to` moves its time forward at once: every wait on it (its
:meth:`~SkipClock.sleep` and :meth:`~SkipClock.move_on_at` scopes) is re-timed, so the ones
now past their deadline end. Only ``monotonic()`` moves: ``time()`` stays the wall clock,
as file times are compared with it.

Call :meth:`~SkipClock.skip_to` from the event loop the run uses (e.g. a task that polls
the scripted server with :func:`tests.polling.apoll`, then skips): anyio's scopes are not
thread-safe.

Example:
    >>> clock = SkipClock()
    >>> start = clock.monotonic()
    >>> clock.skip_to(start + 60)
    >>> clock.monotonic() - start >= 60
    True
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import anyio

from tests.polling import apoll

__all__ = ["SkipClock", "skip_once", "skipping"]

T = TypeVar("T")


class SkipClock:
    """The system clock plus the seconds skipped; a :class:`teamlead.clock.DeadlineClock`."""

    def __init__(self) -> None:
        self.skipped = 0.0
        self._timers: list[tuple[float, anyio.CancelScope]] = []

    def monotonic(self) -> float:
        return time.monotonic() + self.skipped

    def time(self) -> float:
        return time.time()

    def skip_to(self, when: float) -> None:
        """Move ``monotonic()`` forward to ``when`` (never back); waits past it end."""
        self.skipped += max(0.0, when - self.monotonic())
        for deadline, scope in self._timers:
            self._arm(scope, deadline)

    def _arm(self, scope: anyio.CancelScope, deadline: float) -> None:
        scope.deadline = anyio.current_time() + max(0.0, deadline - self.monotonic())

    @contextlib.contextmanager
    def move_on_at(self, deadline: float) -> Iterator[anyio.CancelScope]:
        """A cancel scope cancelled once this clock's time reaches ``deadline``."""
        with anyio.CancelScope() as scope:
            timer = (deadline, scope)
            self._arm(scope, deadline)
            self._timers.append(timer)
            try:
                yield scope
            finally:
                self._timers.remove(timer)

    async def sleep(self, seconds: float) -> None:
        with self.move_on_at(self.monotonic() + max(0.0, seconds)):
            await anyio.sleep_forever()


async def skip_once(
    clock: SkipClock,
    ready: Callable[[], bool],
    to: float | Callable[[], float],
    *,
    within_s: float = 120.0,
) -> bool:
    """Once ``ready()`` holds (polled), skip ``clock`` to ``to`` (or to what ``to()`` says
    then); ``False`` if it never held within ``within_s`` (the clock then keeps real time:
    the run's own waits still end, only later)."""
    if await apoll(ready, within_s=within_s, every_s=0.05) is None:
        return False
    clock.skip_to(to() if callable(to) else to)
    return True


async def skipping(
    clock: SkipClock, ready: Callable[[], bool], to: float | Callable[[], float], work: Awaitable[T]
) -> T:
    """Await ``work`` (a run on ``clock``) while :func:`skip_once` watches ``ready``."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(skip_once, clock, ready, to)
        value = await work
        tg.cancel_scope.cancel()
    return value
