"""Adaptive concurrency governor: find and keep the concurrency a provider really allows.

An account's concurrency limit is hidden: fan out five or six agents and a 429 can lose
the whole run. The governor keeps one AIMD *bucket* per ``provider/model`` key and a
global cap across all buckets, and hands out *slots*. Each slot stands for one piece of
work (one request, or one CLI process) and reports how it went.

The rules, per bucket (defaults from :class:`GovernorPolicy`; the pure functions, with
their details, are in ``teamlead._governor.aimd``):

* **Start** at the ceiling; the effective limit is ``min(cap, ceiling, max_total)``.
* **Decrease.** A rate limit cuts ``cap = max(floor, floor(cap * 0.75))``, or, when the
  caller says how many requests the upstream was *accepting* when the 429 came
  (``Slot.rate_limited(accepted=n)``), straight to ``n``; a request of that burst that
  starts streaming later (:meth:`Slot.streaming`) corrects the cut up to what streams. The
  limit is then learnt within about one Retry-After instead of over many epochs.
* **Epochs.** Every cut opens a new epoch; a 429 from a slot of an older epoch was sent
  before the cut that already counted it, and does not cut again.
* **Additive increase.** 4 consecutive successes of the current epoch earn ``cap += 1``,
  only while callers queue on this bucket's cap; the level left becomes ``last_good``.
* **Failed probe returns to last_good** instead of cutting from the probe level.
* **No immediate re-probe.** A level that drew a 429 is not climbed back to for
  ``reprobe_after_s`` (60 s); each further rejection of the cutting burst lowers it by one.
* **Retry-After** pauses new acquisitions of the bucket; running slots are unaffected.
* **Overload (529)** pauses and cuts once per epoch but marks no level as bad.
* **Pacing** (:meth:`Governor.pace`): the ``anthropic-ratelimit-*`` response headers pause
  new grants before a window runs dry (see ``teamlead._governor.ratelimit_headers``).
* **Idle reset.** After 5 idle minutes a bucket returns to the ceiling and forgets, pause too.
* **Bounded pauses.** No pause is longer than ``MAX_PAUSE_S`` (10 minutes); a caller whose
  ``timeout`` ends before the pause does gets its ``TimeoutError`` at once.

Waiters are served by priority, then FIFO, per key: a caller that must not starve (the
lead's requests, a retried request) asks with a higher ``priority``. A released slot goes
to the next waiter of the same key first, else to the best waiter of another key that was
blocked only by the global cap (``max_total``).

Every change is a :class:`~teamlead.events.ConcurrencyChanged` in :attr:`Governor.journal`
(the last :data:`JOURNAL_SIZE`), also passed to ``on_change``. What a bucket learnt lives in a
:class:`~teamlead._governor.store.LimitStore` (in memory by default), so a shared store can
stand in for one account used from several processes. Release a slot only after the work
it stood for has really ended (for a CLI process: after it exited). The governor belongs to
one event loop and is not thread-safe.

Example:
    >>> governor = Governor(GovernorPolicy(ceiling=6, max_total=10))
    >>> async def call(client, key="anthropic/claude-sonnet-5-5"):  # doctest: +SKIP
    ...     while True:
    ...         async with governor.slot(key, timeout=600) as slot:
    ...             try:
    ...                 reply = await client.messages.create(...)
    ...             except anthropic.RateLimitError as exc:
    ...                 slot.rate_limited(retry_after_from_headers(exc.response.headers))
    ...                 continue
    ...             slot.success()
    ...             return reply
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager

import anyio
import anyio.lowlevel

from ._governor import aimd
from ._governor.policy import BucketState, GovernorPolicy, bucket_key
from ._governor.queue import Bucket, Waiter
from ._governor.ratelimit_headers import pace_pause, read_windows
from ._governor.retry_after import parse_retry_after, retry_after_from_headers
from ._governor.slot import Slot
from ._governor.store import LimitStore, MemoryStore
from .clock import SYSTEM_CLOCK, Clock, wait_event
from .errors import GovernorCleared, UsageError
from .events import ChangeReason, ConcurrencyChanged

__all__ = [
    "BucketState",
    "ChangeReason",
    "ConcurrencyChanged",
    "Governor",
    "GovernorCleared",
    "GovernorPolicy",
    "LimitStore",
    "Slot",
    "bucket_key",
    "parse_retry_after",
    "retry_after_from_headers",
]

log = logging.getLogger("teamlead.governor")

#: Changes kept in :attr:`Governor.journal`, oldest dropped first (``on_change`` sees all).
JOURNAL_SIZE = 1000


class Governor:
    """Adaptive per-``provider/model`` concurrency with a global cap. See the module docstring.

    Args:
        policy: the knobs; default :class:`GovernorPolicy` ().
        clock: time source for pauses, timeouts and the idle reset.
        on_change: called with every :class:`ConcurrencyChanged`, after the state changed.
        store: where the learnt limits live; default in this process.
    """

    def __init__(
        self,
        policy: GovernorPolicy | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        on_change: Callable[[ConcurrencyChanged], None] | None = None,
        store: LimitStore | None = None,
    ) -> None:
        self.policy = policy or GovernorPolicy()
        self.journal: deque[ConcurrencyChanged] = deque(maxlen=JOURNAL_SIZE)
        self._clock = clock
        self._listeners = [on_change] if on_change is not None else []
        self._store: LimitStore = store if store is not None else MemoryStore()
        self._buckets: dict[str, Bucket] = {}
        self._total = 0
        self._seq = 0

    # -- public API -----------------------------------------------------------------------
    @property
    def clock(self) -> Clock:
        """The clock the governor reads: pauses, timeouts and a slot's ``acquired_at``."""
        return self._clock

    @asynccontextmanager
    async def slot(
        self,
        key: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - runs on the injected clock
        priority: int = 0,
    ) -> AsyncIterator[Slot]:
        """Hold a slot of ``key`` for the block; released when the block exits.

        ``timeout`` (governor's clock; ``None``: until cancelled) and ``priority`` (higher
        is served first) are as for :meth:`acquire`.
        """
        acquired = await self.acquire(key, timeout=timeout, priority=priority)
        try:
            yield acquired
        finally:
            acquired.release()

    async def acquire(
        self,
        key: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - runs on the injected clock
        priority: int = 0,
    ) -> Slot:
        """Wait for a slot of ``key``; the caller must :meth:`Slot.release` it.

        Use this form when the work outlives a block, e.g. a CLI process. Cancellation is
        safe: a waiter cancelled at the very moment it was granted gives the slot back.

        Args:
            key: the bucket, ``provider/model`` (see :func:`bucket_key`).
            timeout: most seconds to wait (governor's clock); ``None`` waits until cancelled.
            priority: waiters with a higher priority are served first (then FIFO).

        Raises:
            TimeoutError: no slot within ``timeout``.
            GovernorCleared: :meth:`clear` ran while waiting.
            UsageError: empty key or negative timeout.
        """
        if not key:
            raise UsageError("a governor key must be a non-empty 'provider/model' string")
        if timeout is not None and not timeout >= 0:
            raise UsageError(f"acquire timeout must be zero or more seconds, got {timeout}")
        await anyio.lowlevel.checkpoint_if_cancelled()
        bucket = self._bucket(key)
        if not bucket.waiters and self._can_grant(bucket):
            return self._grant(bucket)
        deadline = None if timeout is None else self._clock.monotonic() + timeout
        self._seq += 1
        waiter = Waiter(key, priority, self._seq)
        bucket.enqueue(waiter)
        try:
            return await self._wait_for_grant(bucket, waiter, deadline, timeout)
        except BaseException:
            if waiter.slot is not None:
                waiter.slot.release()  # granted as we were cancelled: give it back
            else:
                self._forget(bucket, waiter)
            raise

    def pace(self, key: str, headers: Mapping[str, str]) -> float:
        """Read the ``anthropic-ratelimit-*`` headers of a response; pause ``key`` if needed.

        Returns the pause in seconds (0 when the windows have room).
        """
        pause = pace_pause(
            read_windows(headers), now=self._clock.time(), pace_below=self.policy.pace_below
        )
        if pause > 0:
            bucket = self._bucket(key)
            self._apply(
                bucket, aimd.paced(self._limits(key), now=self._clock.monotonic(), seconds=pause)
            )
        return pause

    def subscribe(self, listener: Callable[[ConcurrencyChanged], None]) -> Callable[[], None]:
        """Also call ``listener`` with every change; returns the call that unsubscribes."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def clear(self) -> None:
        """Reject every waiter with :class:`GovernorCleared`.

        Slots already held stay accounted and are released as usual; the governor stays
        usable for new acquisitions.
        """
        for bucket in self._buckets.values():
            waiters, bucket.waiters = bucket.waiters, []
            for waiter in waiters:
                waiter.error = GovernorCleared(
                    f"the concurrency governor was cleared while waiting for {waiter.key!r}"
                )
                waiter.wake.set()

    def state(self, key: str) -> BucketState:
        """A snapshot of ``key``'s bucket (applying a due idle reset first)."""
        bucket = self._bucket(key)
        limits = self._limits(key)
        return BucketState(
            key=key,
            cap=limits.cap,
            effective=self._effective(limits),
            in_flight=bucket.in_flight,
            waiting=len(bucket.waiters),
            epoch=limits.epoch,
            last_good=limits.last_good,
            cooldown_s=max(0.0, limits.cooldown_until - self._clock.monotonic()),
            streaming=bucket.streaming,
        )

    @property
    def total_in_flight(self) -> int:
        """Slots held across all buckets."""
        return self._total

    @property
    def keys(self) -> list[str]:
        """The buckets seen so far."""
        return list(self._buckets)

    # -- waiting --------------------------------------------------------------------------
    async def _wait_for_grant(
        self, bucket: Bucket, waiter: Waiter, deadline: float | None, asked: float | None
    ) -> Slot:
        while True:
            if waiter.error is not None:
                raise waiter.error
            if waiter.slot is not None:
                # Cancelled in the same step as the grant: raise here, and the caller's
                # cleanup gives the slot back instead of returning it to a dead caller.
                await anyio.lowlevel.checkpoint_if_cancelled()
                return waiter.slot
            now = self._clock.monotonic()
            if deadline is not None and now >= deadline:
                raise TimeoutError(
                    f"no concurrency slot for {bucket.key!r} within {asked:g}s "
                    f"(limit {self._effective(self._limits(bucket.key))}, "
                    f"{bucket.in_flight} running, {len(bucket.waiters)} waiting, "
                    f"{self._total} running in total)"
                )
            cooldown_until = self._limits(bucket.key).cooldown_until
            if deadline is not None and cooldown_until > deadline:
                raise TimeoutError(f"{bucket.key!r} is paused longer than {asked:g}s allowed")
            # Only the head of a paused bucket keeps the timer; the others are woken by it.
            sleep_for = None
            if bucket.waiters and bucket.waiters[0] is waiter and cooldown_until > now:
                sleep_for = cooldown_until - now
            if deadline is not None:
                left = deadline - now
                sleep_for = left if sleep_for is None else min(sleep_for, left)
            waiter.wake = anyio.Event()
            await self._wait(waiter.wake, sleep_for)
            if waiter.slot is None and waiter.error is None:
                self._dispatch(bucket.key)

    async def _wait(self, event: anyio.Event, seconds: float | None) -> None:
        """Wait for ``event``, or at most ``seconds`` on the governor's clock."""
        await wait_event(event, seconds, self._clock)

    def _forget(self, bucket: Bucket, waiter: Waiter) -> None:
        if bucket.remove(waiter):
            self._dispatch(bucket.key)

    # -- state ----------------------------------------------------------------------------
    def _limits(self, key: str) -> aimd.Limits:
        limits = self._store.get(key)
        if limits is None:
            limits = aimd.initial(self.policy)
            self._store.put(key, limits)
        return limits

    def _bucket(self, key: str) -> Bucket:
        now = self._clock.monotonic()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = Bucket(key, now)
            self._limits(key)
        elif (
            bucket.in_flight == 0
            and not bucket.waiters
            and now - bucket.last_activity >= self.policy.idle_reset_s
        ):
            bucket.last_activity = now
            self._apply(bucket, aimd.idle_reset(self._limits(key), self.policy, now=now))
        return bucket

    def _apply(self, bucket: Bucket, step: aimd.Step) -> None:
        """Store a rule's result, wake the head on a new pause, journal the change."""
        limits, change = step
        before = self._limits(bucket.key).cooldown_until
        self._store.put(bucket.key, limits)
        if limits.cooldown_until > before and bucket.waiters:
            bucket.waiters[0].wake.set()  # the head starts the pause timer
        if change is not None:
            self._record(bucket, change)
            self._dispatch(bucket.key)  # an increase or a correction may make room

    # -- granting -------------------------------------------------------------------------
    def _effective(self, limits: aimd.Limits) -> int:
        limit = min(limits.cap, self.policy.ceiling)
        if self.policy.max_total is not None:
            limit = min(limit, self.policy.max_total)
        return limit

    def _global_room(self) -> bool:
        return self.policy.max_total is None or self._total < self.policy.max_total

    def _bucket_room(self, bucket: Bucket) -> bool:
        limits = self._limits(bucket.key)
        return (
            bucket.in_flight < self._effective(limits)
            and limits.cooldown_until <= self._clock.monotonic()
        )

    def _can_grant(self, bucket: Bucket) -> bool:
        return self._bucket_room(bucket) and self._global_room()

    def _grant(self, bucket: Bucket) -> Slot:
        now = self._clock.monotonic()
        bucket.in_flight += 1
        bucket.last_activity = now
        self._total += 1
        return Slot(self, bucket.key, self._limits(bucket.key).epoch, now)

    def _dispatch(self, preferred: str) -> None:
        """Grant what can be granted: ``preferred``'s queue first, then the best heads."""
        bucket = self._buckets[preferred]
        while bucket.waiters and self._can_grant(bucket):
            self._hand_to(bucket, bucket.waiters.pop(0))
        while self._global_room():
            heads = [b for b in self._buckets.values() if b.waiters and self._bucket_room(b)]
            if not heads:
                return
            best = min(heads, key=lambda b: b.waiters[0].order)
            self._hand_to(best, best.waiters.pop(0))

    def _hand_to(self, bucket: Bucket, waiter: Waiter) -> None:
        waiter.slot = self._grant(bucket)
        waiter.wake.set()

    def _release(self, slot: Slot) -> None:
        bucket = self._buckets[slot.key]
        bucket.in_flight -= 1
        if slot._streaming:
            bucket.streaming -= 1
        bucket.last_activity = self._clock.monotonic()
        self._total -= 1
        self._dispatch(slot.key)

    # -- outcomes -------------------------------------------------------------------------
    def _touch(self, key: str) -> tuple[Bucket, float]:
        bucket = self._buckets[key]
        now = self._clock.monotonic()
        bucket.last_activity = now
        return bucket, now

    def _on_success(self, slot: Slot) -> None:
        bucket, now = self._touch(slot.key)
        limits = self._limits(slot.key)
        # Growing helps only callers held back by this bucket's own cap (not by the global
        # cap, nor by a pause).
        queued = (
            bool(bucket.waiters)
            and bucket.in_flight >= min(limits.cap, self.policy.ceiling)
            and limits.cooldown_until <= now
        )
        step = aimd.success(limits, self.policy, slot_epoch=slot.epoch, now=now, queued=queued)
        self._apply(bucket, step)

    def _on_streaming(self, slot: Slot) -> None:
        bucket, _ = self._touch(slot.key)
        bucket.streaming += 1
        step = aimd.started(
            self._limits(slot.key), self.policy, slot_epoch=slot.epoch, streaming=bucket.streaming
        )
        self._apply(bucket, step)

    def _on_rate_limited(self, slot: Slot, retry_after: float | None, accepted: int | None) -> None:
        bucket, now = self._touch(slot.key)
        limits, epoch = self._limits(slot.key), slot.epoch
        step = aimd.rate_limited(
            limits,
            self.policy,
            slot_epoch=epoch,
            now=now,
            retry_after=retry_after,
            accepted=accepted,
        )
        self._apply(bucket, step)

    def _on_overloaded(self, slot: Slot, retry_after: float | None) -> None:
        bucket, now = self._touch(slot.key)
        limits, epoch = self._limits(slot.key), slot.epoch
        step = aimd.overloaded(
            limits, self.policy, slot_epoch=epoch, now=now, retry_after=retry_after
        )
        self._apply(bucket, step)

    def _record(self, bucket: Bucket, change: aimd.Change) -> None:
        limits = self._limits(bucket.key)
        event = ConcurrencyChanged(
            key=bucket.key,
            reason=change.reason,
            cap=limits.cap,
            previous_cap=change.previous_cap,
            effective=self._effective(limits),
            epoch=limits.epoch,
            retry_after_s=change.retry_after,
            at=self._clock.time(),
        )
        self.journal.append(event)
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:  # a broken view must not break the accounting
                log.exception("concurrency on_change callback failed for %s", bucket.key)
