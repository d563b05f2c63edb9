"""The one place teamlead reads time and sleeps.

Everything that waits, retries or times out takes a :class:`Clock`. Production uses
:data:`SYSTEM_CLOCK`; tests pass a :class:`FakeClock` (virtual time that advances only when
something sleeps) or run under freezegun with ``real_asyncio=True``.

:func:`move_on_at` bounds one await by a deadline read on the injected clock, so a
:class:`FakeClock` cuts a hung stream as soon as virtual time passes the deadline, with
no real waiting.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Protocol, runtime_checkable

import anyio

__all__ = [
    "SYSTEM_CLOCK",
    "Clock",
    "DeadlineClock",
    "FakeClock",
    "SystemClock",
    "move_on_at",
    "wait_event",
]


@runtime_checkable
class Clock(Protocol):
    """Time source used for deadlines, backoff and idle timers."""

    def monotonic(self) -> float:
        """Seconds on a monotonic clock, for deadlines and elapsed times."""
        ...

    def time(self) -> float:
        """Wall-clock seconds since the epoch, for timestamps and file ages."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Sleep for ``seconds`` (at least zero)."""
        ...


class SystemClock:
    """The real clock: ``time.monotonic``, ``time.time`` and ``anyio.sleep``.

    The functions are looked up at call time, so freezegun's patches apply.
    """

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(max(0.0, seconds))


SYSTEM_CLOCK: Clock = SystemClock()


async def wait_event(
    event: anyio.Event, seconds: float | None, clock: Clock = SYSTEM_CLOCK
) -> bool:
    """Wait for ``event``, or at most ``seconds`` on ``clock`` (``None``: no limit).

    The timer sleeps on ``clock``, so a :class:`FakeClock` ends the wait at once in
    virtual time while the event still wins when it is set first.

    Returns:
        True when ``event`` is set.

    Example:
        >>> async def nobody_sets_it() -> bool:
        ...     return await wait_event(anyio.Event(), 5.0, FakeClock())
        >>> anyio.run(nobody_sets_it)
        False
    """
    if seconds is None or event.is_set():
        await event.wait()  # a checkpoint even when already set
        return True
    async with anyio.create_task_group() as tg:

        async def _timer() -> None:
            await clock.sleep(seconds)
            tg.cancel_scope.cancel()

        tg.start_soon(_timer)
        await event.wait()
        tg.cancel_scope.cancel()
    return event.is_set()


@runtime_checkable
class DeadlineClock(Clock, Protocol):
    """A clock with its own timers: it cancels a scope when *its* time passes a deadline."""

    def move_on_at(self, deadline: float) -> contextlib.AbstractContextManager[anyio.CancelScope]:
        """A cancel scope cancelled once ``monotonic()`` reaches ``deadline``."""
        ...


def move_on_at(
    clock: Clock, deadline: float
) -> contextlib.AbstractContextManager[anyio.CancelScope]:
    """A cancel scope that ends its block once ``clock.monotonic()`` reaches ``deadline``.

    A :class:`DeadlineClock` (such as :class:`FakeClock`) runs the timer on its own time.
    Any other clock gets anyio's event-loop timer for the seconds left, which is the real
    clock's timer.

    Example:
        >>> with move_on_at(clock, clock.monotonic() + 5) as scope:  # doctest: +SKIP
        ...     message = await stream.__anext__()
        >>> scope.cancelled_caught  # doctest: +SKIP
    """
    if isinstance(clock, DeadlineClock):
        return clock.move_on_at(deadline)
    return anyio.move_on_after(max(0.0, deadline - clock.monotonic()))


class FakeClock:
    """Virtual time for tests: ``sleep`` advances the clock instantly.

    Example:
        >>> clock = FakeClock()
        >>> clock.advance(2.5)
        >>> clock.monotonic()
        2.5
    """

    def __init__(self, start: float = 0.0, wall_start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._wall_offset = wall_start - start
        self.sleeps: list[float] = []
        self._timers: list[tuple[float, anyio.CancelScope]] = []

    def monotonic(self) -> float:
        return self._now

    def time(self) -> float:
        return self._now + self._wall_offset

    def advance(self, seconds: float) -> None:
        """Move time forward without sleeping; scopes of :meth:`move_on_at` that expire end."""
        self._now += max(0.0, seconds)
        for deadline, scope in self._timers:
            if deadline <= self._now:
                scope.cancel()

    @contextlib.contextmanager
    def move_on_at(self, deadline: float) -> Iterator[anyio.CancelScope]:
        """A cancel scope cancelled once virtual time reaches ``deadline``.

        Virtual time moves only by :meth:`advance` or :meth:`sleep` (from any task), so a
        test cuts a hung await by advancing the clock past the deadline.
        """
        with anyio.CancelScope() as scope:
            timer = (deadline, scope)
            self._timers.append(timer)
            if deadline <= self._now:
                scope.cancel()
            try:
                yield scope
            finally:
                self._timers.remove(timer)

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.advance(seconds)
        await anyio.lowlevel.checkpoint()
