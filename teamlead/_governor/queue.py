"""The governor's local per-bucket state: the waiters' queue and the held-slot counts.

Only what a process can know about itself lives here; what a bucket has *learnt* lives in
the :class:`~teamlead._governor.store.LimitStore`.
"""

from __future__ import annotations

import anyio

from .slot import Slot

__all__ = ["Bucket", "Waiter"]


class Waiter:
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
