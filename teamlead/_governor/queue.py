"""The governor's local per-bucket state: the waiters' queue and the held-slot counts.

Only what a process can know about itself lives here; what a bucket has *learnt* lives in
the :class:`~teamlead._governor.store.LimitStore`.
"""

from __future__ import annotations

from bisect import insort

import anyio

from .slot import Slot

__all__ = ["Bucket", "Waiter"]


class Waiter:
    """One caller waiting for a slot; woken by ``wake`` once granted, cleared or timed out."""

    __slots__ = ("error", "key", "order", "slot", "wake")

    def __init__(self, key: str, priority: int, seq: int) -> None:
        self.key = key
        self.order = (-priority, seq)  # higher priority first, then arrival
        self.wake = anyio.Event()
        self.slot: Slot | None = None
        self.error: BaseException | None = None

    def __lt__(self, other: Waiter) -> bool:
        return self.order < other.order


class Bucket:
    """What stays local to this process: the queue and the held slots."""

    __slots__ = ("in_flight", "key", "last_activity", "streaming", "waiters")

    def __init__(self, key: str, now: float) -> None:
        self.key = key
        self.in_flight = 0
        self.streaming = 0
        self.waiters: list[Waiter] = []  # sorted by Waiter.order
        self.last_activity = now

    def enqueue(self, waiter: Waiter) -> None:
        """Queue ``waiter`` by priority then arrival; a displaced head hands over its timer."""
        was_head = self.waiters[0] if self.waiters else None
        insort(self.waiters, waiter)
        if was_head is not None and self.waiters[0] is not was_head:
            was_head.wake.set()

    def remove(self, waiter: Waiter) -> bool:
        """Take ``waiter`` off the queue; ``False`` if it was not queued (cleared)."""
        was_head = bool(self.waiters) and self.waiters[0] is waiter
        try:
            self.waiters.remove(waiter)
        except ValueError:
            return False
        if was_head and self.waiters:
            self.waiters[0].wake.set()  # the new head may need to keep the pause timer
        return True
