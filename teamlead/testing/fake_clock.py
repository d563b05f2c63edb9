"""Virtual time for tests: :class:`FakeClock`, a :class:`~teamlead.clock.Clock` that never waits.

Pass it as ``clock=`` to :func:`teamlead.run`, :func:`teamlead.receive_all`,
:class:`teamlead.ClientRun` or anything else that takes a clock: sleeps, backoffs and
deadlines then run in virtual time, while the real CLI and the scripted server run as
usual.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import anyio

__all__ = ["FakeClock"]


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
