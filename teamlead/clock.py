"""The clock: the one place teamlead reads time and sleeps.

Waits, retries and timeouts that a test must control take a :class:`Clock`. A run has one:
its deadline, its gate, its pause and its relay (the relay's governor, deadline and
ceilings: the process's relays are shared only between runs on the same clock) all read
it. Production uses :data:`SYSTEM_CLOCK`; tests pass a :class:`teamlead.testing.FakeClock`
(virtual time that advances only when something sleeps) or run under freezegun with
``real_asyncio=True``. Where the real time is the point (a timestamp shown to a person or
an exporter, a terminal's refresh, a child process's end) code reads :data:`SYSTEM_CLOCK`,
:func:`wall_ns` or :func:`block_until`.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable
from typing import Protocol, cast, runtime_checkable

import anyio

__all__ = [
    "SYSTEM_CLOCK",
    "Clock",
    "DeadlineClock",
    "SystemClock",
    "block_until",
    "move_on_at",
    "wait_event",
    "wall_ns",
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


def wall_ns() -> int:
    """Nanoseconds since the epoch on the system clock, for a timestamp an exporter keeps
    (an OpenTelemetry span's start and end)."""
    return time.time_ns()


def block_until(
    done: Callable[[], bool], within_s: float, *, first_s: float, most_s: float
) -> bool:
    """Ask ``done`` until it says yes or ``within_s`` real seconds passed, sleeping the
    thread between asks (``first_s``, doubling up to ``most_s``): for code with no event
    loop to wait on, such as stopping child processes on the way out.

    Returns:
        Whether ``done`` said yes.

    Example:
        >>> block_until(lambda: False, 0.01, first_s=0.001, most_s=0.005)
        False
    """
    deadline = time.monotonic() + within_s
    pause = first_s
    while not done():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(pause, left))
        pause = min(pause * 2, most_s)
    return True


async def wait_event(
    event: anyio.Event, seconds: float | None, clock: Clock = SYSTEM_CLOCK
) -> bool:
    """Wait for ``event``, or at most ``seconds`` on ``clock`` (``None``: no limit).

    The timer sleeps on ``clock``, so a fake clock ends the wait at once in virtual time
    while the event still wins when it is set first.

    Returns:
        True when ``event`` is set.

    Example:
        >>> from teamlead.testing import FakeClock
        >>> async def nobody_sets_it() -> bool:
        ...     return await wait_event(anyio.Event(), 5.0, FakeClock())
        >>> anyio.run(nobody_sets_it)
        False
    """
    if seconds is None or event.is_set():
        await event.wait()  # a checkpoint even when already set
        return True
    if type(clock) is SystemClock:  # its sleep is the event loop's timer: a scope's, no task
        with anyio.move_on_after(seconds):
            await event.wait()
        return event.is_set()
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

    A :class:`DeadlineClock` (such as :class:`teamlead.testing.FakeClock`) runs the timer
    on its own time, so a hung stream is cut as soon as virtual time passes the deadline;
    any other clock gets anyio's event-loop timer for the seconds left.

    Example:
        >>> with move_on_at(clock, clock.monotonic() + 5) as scope:  # doctest: +SKIP
        ...     message = await stream.__anext__()
        >>> scope.cancelled_caught  # doctest: +SKIP
    """
    if _has_own_timers(type(clock)):
        return cast(DeadlineClock, clock).move_on_at(deadline)
    return anyio.move_on_after(max(0.0, deadline - clock.monotonic()))


@functools.cache
def _has_own_timers(kind: type) -> bool:
    """Whether a clock of class ``kind`` is a :class:`DeadlineClock`, asked once per class:
    a protocol's ``isinstance`` walks its members each time (tens of microseconds), and a
    run bounds each message it reads with :func:`move_on_at`."""
    return issubclass(kind, DeadlineClock)
