"""A real clock a test can move forward: :class:`SkipClock`.

A run on the real CLI waits for its deadline or an agent's timeout on the injected clock.
With the system clock a test waits out those seconds, all of them, even once the state the
deadline is meant to cut (some agents done, one hung) is there. A :class:`SkipClock` runs at
real speed, so everything else (the CLI, the scripted server, the relay) keeps its timing,
and :meth:`SkipClock.skip_to` moves its time forward at once: every wait on it (its
:meth:`~SkipClock.sleep` and :meth:`~SkipClock.move_on_at` scopes) is re-timed, so the ones
now past their deadline end. Only ``monotonic()`` moves: ``time()`` stays the wall clock,
as file times are compared with it.

A clock made with ``held=True`` stands still until :meth:`~SkipClock.release`: a run on it
spends none of its deadline while the CLI starts (which takes seconds on a loaded machine),
and from the release on its time runs at real speed, so what comes after (a wrap-up turn
within its reserve) is timed for real. :func:`holding` releases it once a state is reached.

Call :meth:`~SkipClock.skip_to` and :meth:`~SkipClock.release` from the event loop the run
uses (e.g. a task that polls the scripted server with :func:`tests.polling.apoll`, then
skips): anyio's scopes are not thread-safe.

Example:
    >>> clock = SkipClock()
    >>> start = clock.monotonic()
    >>> clock.skip_to(start + 60)
    >>> clock.monotonic() - start >= 60
    True
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import anyio

from tests.polling import apoll

__all__ = ["SkipClock", "holding", "skip_once", "skipping"]

T = TypeVar("T")


class SkipClock:
    """The system clock plus the seconds skipped (less the seconds it was held, if made
    ``held``); a :class:`teamlead.clock.DeadlineClock`."""

    def __init__(self, *, held: bool = False) -> None:
        self.skipped = 0.0
        self._held_at: float | None = time.monotonic() if held else None
        self._timers: list[tuple[float, anyio.CancelScope]] = []

    @property
    def held(self) -> bool:
        """Whether time stands still (until :meth:`release`)."""
        return self._held_at is not None

    def monotonic(self) -> float:
        if self._held_at is not None:
            return self._held_at + self.skipped
        return time.monotonic() + self.skipped

    def time(self) -> float:
        return time.time()

    def skip_to(self, when: float) -> None:
        """Move ``monotonic()`` forward to ``when`` (never back); waits past it end."""
        self.skipped += max(0.0, when - self.monotonic())
        self._rearm()

    def release(self) -> None:
        """A held clock runs on from where it stands, at real speed (no-op if not held)."""
        if self._held_at is None:
            return
        now = self.monotonic()
        self._held_at = None
        self.skipped = now - time.monotonic()
        self._rearm()

    def _rearm(self) -> None:
        for deadline, scope in self._timers:
            self._arm(scope, deadline)

    def _arm(self, scope: anyio.CancelScope, deadline: float) -> None:
        left = deadline - self.monotonic()
        if self._held_at is not None and left > 0:
            scope.deadline = math.inf  # held: only a skip or the release brings it nearer
        else:
            scope.deadline = anyio.current_time() + max(0.0, left)

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


async def holding(
    clock: SkipClock, ready: Callable[[], bool], work: Awaitable[T], *, within_s: float = 120.0
) -> tuple[T, bool]:
    """Await ``work`` (a run on the held ``clock``), releasing the clock once ``ready()``
    holds (polled); returns ``work``'s value and whether ``ready()`` held. If it never held
    within ``within_s`` the clock is released anyway, so the run's own waits still end."""
    reached: list[bool] = []

    async def release_once() -> None:
        reached.append(await apoll(ready, within_s=within_s, every_s=0.05) is not None)
        clock.release()

    async with anyio.create_task_group() as tg:
        tg.start_soon(release_once)
        value = await work
        tg.cancel_scope.cancel()
    return value, bool(reached and reached[0])
