"""FIFO slots with hand-off, and the process-wide cap on running subagents.

:class:`FifoSlots` is the one queueing primitive of the spawn gate: ``limit`` slots, waiters
served strictly in arrival order, a released slot handed straight to the oldest waiter (so
a newcomer can never overtake the queue). Waits run on the injected clock
(:func:`teamlead.clock.wait_event`) and are bounded by ``until``.

:class:`SpawnCap` is the :class:`FifoSlots` shared by every run in the process: experiment
trials run many leads at once, and each CLI enforces its cap of concurrent subagents by
*rejecting* calls, so the sum must stay under it. Like the governor it belongs to one event
loop and is not thread-safe.
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from collections.abc import Mapping

import anyio

from ..clock import Clock, wait_event

__all__ = ["CLI_DEFAULT_CAP", "CLI_CAP_VAR", "FifoSlots", "SpawnCap", "Waiter", "cli_subagent_cap"]

CLI_CAP_VAR = "CLAUDE_CODE_MAX_CONCURRENT_SUBAGENTS"
CLI_DEFAULT_CAP = 20


def cli_subagent_cap(env: Mapping[str, str] | None = None) -> int:
    """The CLI's own concurrent-subagent cap: ``env`` first, then this process, else 20.

    A value that is not a positive integer is ignored (the CLI would not honour it either).
    """
    for source in (env or {}, os.environ):
        raw = source.get(CLI_CAP_VAR)
        if raw is None:
            continue
        try:
            value = int(str(raw).strip())
        except ValueError:
            continue
        if value >= 1:
            return value
    return CLI_DEFAULT_CAP


class Waiter:
    """One waiter in a first-come-first-served line: woken once granted (of ``key``, for a
    line of several keys)."""

    __slots__ = ("granted", "key", "wake")

    def __init__(self, key: str = "") -> None:
        self.key = key
        self.granted = False
        self.wake = anyio.Event()


class FifoSlots:
    """``limit`` slots served first come, first served.

    Example:
        >>> slots = FifoSlots(2)
        >>> slots.try_take(), slots.try_take(), slots.try_take()
        (True, True, False)
    """

    def __init__(self, limit: int) -> None:
        self.held = 0
        self._queue: deque[Waiter] = deque()
        self.set_limit(limit)

    @property
    def waiting(self) -> int:
        """Waiters in line."""
        return len(self._queue)

    def try_take(self) -> bool:
        """Take a slot now if one is free and nobody is queued before us."""
        if not self._queue and self.held < self.limit:
            self.held += 1
            return True
        return False

    async def take(self, until: float | None, clock: Clock) -> bool:
        """Wait in line for a slot; ``False`` if ``until`` came first.

        Cancellation is safe: a slot granted to a cancelled waiter is passed on.
        """
        if self.try_take():
            return True
        waiter = Waiter()
        self._queue.append(waiter)
        try:
            seconds = None if until is None else max(0.0, until - clock.monotonic())
            await wait_event(waiter.wake, seconds, clock)
        except BaseException:
            if waiter.granted:
                self.release()
            else:
                self._drop(waiter)
            raise
        if waiter.granted:
            return True
        self._drop(waiter)
        return False

    def release(self) -> None:
        """Free one slot: hand it to the oldest waiter, else return it to the pool.

        After a cut (:meth:`set_limit`) a released slot is handed on only once the holders
        are back under the new limit.
        """
        if self._queue and self.held <= self.limit:
            self._grant()
            return
        self.held = max(0, self.held - 1)

    def set_limit(self, limit: int) -> None:
        """Change the limit now: a raise grants the oldest waiters the new room at once; a
        cut stops no holder, the slots over it are simply not handed on when released.

        Example:
            >>> slots = FifoSlots(1)
            >>> slots.try_take(), slots.try_take()
            (True, False)
            >>> slots.set_limit(2)
            >>> slots.try_take()
            True
        """
        if limit < 1:
            raise ValueError(f"a slot limit must be at least 1, not {limit}")
        self.limit = limit
        while self._queue and self.held < self.limit:
            self.held += 1
            self._grant()

    def _grant(self) -> None:
        """Hand a slot (already counted in :attr:`held`) to the oldest waiter."""
        waiter = self._queue.popleft()
        waiter.granted = True
        waiter.wake.set()

    def _drop(self, waiter: Waiter) -> None:
        with contextlib.suppress(ValueError):
            self._queue.remove(waiter)


class SpawnCap(FifoSlots):
    """The cap on subagents running at once across every run that shares it (a process's
    runs share their :class:`~teamlead.ProcessState`'s).

    Args:
        limit: at most this many; never above the CLI's cap (:func:`cli_subagent_cap`).

    Example:
        >>> cap = SpawnCap(8)         # one cap for all trials of an experiment
        >>> gate_a = SpawnGate(policy, cap=cap)  # doctest: +SKIP
        >>> gate_b = SpawnGate(policy, cap=cap)  # doctest: +SKIP
    """

    def __init__(self, limit: int | None = None, *, env: Mapping[str, str] | None = None) -> None:
        cli = cli_subagent_cap(env)
        if limit is not None and limit < 1:
            raise ValueError(f"a spawn cap must be at least 1, not {limit}")
        super().__init__(min(limit, cli) if limit is not None else cli)

    @property
    def running(self) -> int:
        """Slots held now: subagents running in this process."""
        return self.held
