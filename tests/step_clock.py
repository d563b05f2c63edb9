"""A virtual clock for in-memory tests of waits: time moves only when the test says.

:class:`StepClock` wakes each sleeper at its own time as :meth:`StepClock.advance` moves
through it, letting every woken task run (:func:`~tests.polling.settle`) before the next
step, so queue waits, staggers and timeouts are exact and nothing sleeps for real.
"""

from __future__ import annotations

import anyio

from .polling import settle

__all__ = ["StepClock"]


class StepClock:
    """Virtual time that moves only in :meth:`advance`; sleepers wake at their time."""

    def __init__(self) -> None:
        self.now = 0.0
        self._sleepers: list[tuple[float, anyio.Event]] = []

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return 1_700_000_000.0 + self.now

    async def sleep(self, seconds: float) -> None:
        wake = anyio.Event()
        self._sleepers.append((self.now + max(0.0, seconds), wake))
        await wake.wait()

    async def advance(self, seconds: float) -> None:
        """Move time in small steps, letting every woken task run at its own time."""
        target = self.now + seconds
        while True:
            await settle()
            due = [t for t, _ in self._sleepers if t <= target]
            if not due:
                break
            self.now = max(self.now, min(due))
            for item in [s for s in self._sleepers if s[0] <= self.now]:
                self._sleepers.remove(item)
                item[1].set()
        self.now = target
        await settle()
