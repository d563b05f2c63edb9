"""Adaptive concurrency governor: find and keep the concurrency a provider really allows.

An account's concurrency limit is hidden: fan out five or six agents and a 429 can lose
the whole run. The governor keeps one AIMD *bucket* per ``provider/model`` key and a
global cap across all buckets, and hands out *slots*. Each slot stands for one piece of
work (one request, or one CLI process) and reports how it went.

The rules, per bucket (defaults from :class:`GovernorPolicy`):

* **Start** at the ceiling (the run's ``concurrency``). The effective limit of a bucket is
  ``min(cap, ceiling, max_total)``.
* **Multiplicative decrease.** A rate limit cuts ``cap = max(floor, floor(cap * 0.75))``.
* **Epochs.** Every cut increments the bucket's epoch and each slot remembers the epoch it
  was acquired in. A rate limit reported by a slot from an older epoch was sent before the
  cut that already accounted for it: it counts once and does not cut again.
* **Additive increase.** After 4 consecutive successes (of slots from the current epoch;
  a cut starts the count again), ``cap += 1``, but only while callers are queued on this
  bucket's cap and ``cap < ceiling``; earned successes wait for such a caller. The level
  that earned the increase becomes ``last_good``.
* **Failed probe returns to last_good.** A cap above ``last_good`` is a probe. A rate limit
  (from the current epoch) during a probe sets ``cap = last_good`` instead of the
  multiplicative cut from the probe level, because ``last_good`` was just proven to work.
  A multiplicative cut forgets ``last_good``: the limit moved.
* **No immediate re-probe.** The level that drew a rate limit is remembered for
  ``reprobe_after_s`` (60 s): the increase rule does not climb back to it before then. Without
  this, a bucket sitting just under the hidden limit would probe (and draw a 429 plus a
  Retry-After pause) after every 4 successes. Each further rejection from the burst that
  caused the cut (a slot of the epoch the cut closed) lowers that level by one, down to
  ``cap + 1``: when r of L requests sent together are rejected, the server took about
  ``L - r``. ``reprobe_after_s=0`` gives plain AIMD.
* **Retry-After** pauses the bucket completely: no new acquisitions until it passes. Slots
  already running are unaffected.
* **Idle reset.** A bucket with nothing running or queued for 5 minutes returns to the
  ceiling and forgets what it learned, since account limits change over time.

The global cap (``max_total``) bounds slots across all buckets. Waiters are served FIFO per
key; a released slot goes to the next waiter of the same key first, else to the oldest
waiter of another key that was blocked only by the global cap.

Every change of a bucket is recorded as a :class:`ConcurrencyChanged` event in
:attr:`Governor.journal` and passed to the optional ``on_change`` callback.

Release rule: a slot must be released only after the work it stood for has really ended.
``async with governor.slot(key)`` does that for work done inside the block; a caller that
starts a CLI process releases the slot after the process has exited, not when its result
arrived (the process may still be sending requests).

The governor belongs to one event loop (anyio, asyncio backend or any other) and is not
thread-safe.

Example:
    >>> governor = Governor(GovernorPolicy(ceiling=6, max_total=10))
    >>> async def call(client, key="anthropic/claude-sonnet-5-5"):
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

import json
import logging
import math
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Literal

import anyio
import anyio.lowlevel
from pydantic import BaseModel, ConfigDict

from .clock import SYSTEM_CLOCK, Clock, wait_event
from .errors import TeamleadError, UsageError

__all__ = [
    "BucketState",
    "ChangeReason",
    "ConcurrencyChanged",
    "Governor",
    "GovernorCleared",
    "GovernorPolicy",
    "Slot",
    "bucket_key",
    "parse_retry_after",
    "retry_after_from_headers",
]

log = logging.getLogger("teamlead.governor")

_EVENT_VERSION = 1  # of the ConcurrencyChanged record; readers accept older versions

ChangeReason = Literal["rate_limited", "probe_failed", "increase", "retry_after", "idle_reset"]
"""Why a bucket changed: a multiplicative cut, a failed probe back to ``last_good``, an
additive increase, a Retry-After pause (cap unchanged), or the idle reset to the ceiling."""


class GovernorCleared(TeamleadError):
    """Raised in every caller still waiting for a slot when :meth:`Governor.clear` runs.

    Example:
        >>> try:
        ...     slot = await governor.acquire("anthropic/claude-opus-5-5")
        ... except GovernorCleared:
        ...     return  # the run is shutting down
    """


@dataclass(frozen=True)
class GovernorPolicy:
    """The governor's knobs, with the defaults the experiment runner uses.

    Args:
        ceiling: the run's ``concurrency``: where a bucket starts, and the most it grows to.
        floor: the least a bucket is cut to.
        decrease: factor of the multiplicative cut on a rate limit.
        successes_to_grow: consecutive successes that earn ``cap + 1``.
        idle_reset_s: idle seconds after which a bucket returns to the ceiling.
        max_total: cap on slots across all buckets; ``None`` for no global cap.
        reprobe_after_s: seconds a level that drew a rate limit is not probed again.

    Raises:
        UsageError: a value is out of range.

    Example:
        >>> GovernorPolicy(ceiling=8, max_total=12).floor
        1
    """

    ceiling: int = 8
    floor: int = 1
    decrease: float = 0.75
    successes_to_grow: int = 4
    idle_reset_s: float = 300.0
    max_total: int | None = None
    reprobe_after_s: float = 60.0

    def __post_init__(self) -> None:
        if self.ceiling < 1:
            raise UsageError(f"governor ceiling must be at least 1, got {self.ceiling}")
        if not 1 <= self.floor <= self.ceiling:
            raise UsageError(
                f"governor floor must be between 1 and the ceiling ({self.ceiling}), "
                f"got {self.floor}"
            )
        if not 0.0 < self.decrease < 1.0:
            raise UsageError(f"governor decrease must be between 0 and 1, got {self.decrease}")
        if self.successes_to_grow < 1:
            raise UsageError(
                f"governor successes_to_grow must be at least 1, got {self.successes_to_grow}"
            )
        if not self.idle_reset_s > 0:
            raise UsageError(f"governor idle_reset_s must be positive, got {self.idle_reset_s}")
        if self.max_total is not None and self.max_total < 1:
            raise UsageError(f"governor max_total must be at least 1, got {self.max_total}")
        if not self.reprobe_after_s >= 0:
            raise UsageError(
                f"governor reprobe_after_s must be zero or more, got {self.reprobe_after_s}"
            )


class ConcurrencyChanged(BaseModel):
    """One change of a bucket's limit, for the journal and the progress view.

    Attributes:
        key: the bucket, ``provider/model``.
        reason: why it changed (see :data:`ChangeReason`).
        cap: the bucket's cap after the change.
        previous_cap: the cap before it.
        effective: ``min(cap, ceiling, max_total)``: what the bucket may run at once.
        epoch: the bucket's epoch after the change.
        retry_after_s: the pause asked for by a Retry-After, if any.
        at: wall-clock seconds (the governor's clock) when it happened.
    """

    model_config = ConfigDict(frozen=True, extra="allow")

    type: Literal["concurrency_changed"] = "concurrency_changed"
    version: int = _EVENT_VERSION
    key: str
    reason: ChangeReason
    cap: int
    previous_cap: int
    effective: int
    epoch: int
    retry_after_s: float | None = None
    at: float

    def to_json(self) -> str:
        """One NDJSON line, like the other teamlead events."""
        return json.dumps(self.model_dump(mode="json"), ensure_ascii=False)


@dataclass(frozen=True)
class BucketState:
    """A snapshot of one bucket, for views and tests.

    ``cooldown_s`` is how long the current Retry-After pause still lasts (0 when none).
    """

    key: str
    cap: int
    effective: int
    in_flight: int
    waiting: int
    epoch: int
    last_good: int | None
    cooldown_s: float


def bucket_key(provider: str, model: str) -> str:
    """The bucket key for a provider and model: ``"provider/model"``.

    Example:
        >>> bucket_key("anthropic", "claude-sonnet-5-5")
        'anthropic/claude-sonnet-5-5'
    """
    if not provider or not model:
        raise UsageError("a governor bucket needs both a provider and a model name")
    return f"{provider}/{model}"


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header value, or ``None`` if absent or invalid.

    The header holds either seconds (``"2"``, ``"1.5"``) or an HTTP date; a date is turned
    into seconds from ``now`` (wall-clock seconds; default: the system clock). A date in the
    past gives 0.

    Example:
        >>> parse_retry_after("1.5")
        1.5
        >>> parse_retry_after("Wed, 21 Oct 2015 07:28:05 GMT", now=1445412480.0)
        5.0
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP date is always GMT
        return None
    current = SYSTEM_CLOCK.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def retry_after_from_headers(
    headers: Mapping[str, str], *, now: float | None = None
) -> float | None:
    """Seconds to wait from response headers: ``retry-after-ms`` first, then ``retry-after``.

    Header names are matched case-insensitively, so an ``httpx.Headers`` or a plain dict
    both work.

    Example:
        >>> retry_after_from_headers({"Retry-After": "2"})
        2.0
    """
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    millis = parse_retry_after(lowered.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000.0
    return parse_retry_after(lowered.get("retry-after"), now=now)


class Slot:
    """Permission to run one piece of work in a bucket; report its outcome, then release.

    Get one from :meth:`Governor.slot` or :meth:`Governor.acquire`. Report each outcome
    with :meth:`success` or :meth:`rate_limited` (reports after release still count).
    :meth:`release` is idempotent.
    """

    __slots__ = ("_governor", "_released", "acquired_at", "epoch", "key")

    def __init__(self, governor: Governor, key: str, epoch: int, acquired_at: float) -> None:
        self._governor = governor
        self._released = False
        self.key = key
        self.epoch = epoch
        self.acquired_at = acquired_at

    @property
    def released(self) -> bool:
        """Whether the slot was given back."""
        return self._released

    def success(self) -> None:
        """Report that the work went through: counts toward the additive increase."""
        self._governor._on_success(self)

    def rate_limited(self, retry_after: float | None = None) -> None:
        """Report a rate limit (429), with the Retry-After pause in seconds if the reply had one.

        Example:
            >>> slot.rate_limited(parse_retry_after(response.headers.get("retry-after")))
        """
        if retry_after is not None and not (math.isfinite(retry_after) and retry_after >= 0):
            raise UsageError(
                f"retry_after must be a non-negative number of seconds, got {retry_after}"
            )
        self._governor._on_rate_limited(self, retry_after)

    def release(self) -> None:
        """Give the slot back; only once the work it stood for has really ended."""
        if not self._released:
            self._released = True
            self._governor._release(self)

    def __repr__(self) -> str:
        state = "released" if self._released else "held"
        return f"Slot(key={self.key!r}, epoch={self.epoch}, {state})"


class _Waiter:
    __slots__ = ("error", "key", "seq", "slot", "wake")

    def __init__(self, key: str, seq: int) -> None:
        self.key = key
        self.seq = seq
        self.wake = anyio.Event()
        self.slot: Slot | None = None
        self.error: BaseException | None = None


class _Bucket:
    __slots__ = (
        "bad_at",
        "bad_level",
        "cap",
        "cooldown_until",
        "cut_epoch",
        "epoch",
        "in_flight",
        "key",
        "last_activity",
        "last_good",
        "successes",
        "waiters",
    )

    def __init__(self, key: str, cap: int, now: float) -> None:
        self.key = key
        self.cap = cap
        self.epoch = 0
        self.last_good: int | None = None
        self.successes = 0
        self.in_flight = 0
        self.waiters: deque[_Waiter] = deque()
        self.cooldown_until = -math.inf
        self.last_activity = now
        self.bad_level: int | None = None  # lowest level that drew a rate limit recently
        self.bad_at = -math.inf
        self.cut_epoch = -1  # the epoch the last cut closed


class Governor:
    """Adaptive per-``provider/model`` concurrency with a global cap. See the module docstring.

    Args:
        policy: the knobs; default :class:`GovernorPolicy` ().
        clock: time source for cooldowns, timeouts and the idle reset.
        on_change: called with every :class:`ConcurrencyChanged`, after the state changed.

    Example:
        >>> governor = Governor(GovernorPolicy(ceiling=4))
        >>> async with governor.slot("anthropic/claude-sonnet-5-5") as slot:
        ...     ...  # one request
        ...     slot.success()
    """

    def __init__(
        self,
        policy: GovernorPolicy | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        on_change: Callable[[ConcurrencyChanged], None] | None = None,
    ) -> None:
        self.policy = policy or GovernorPolicy()
        self.journal: list[ConcurrencyChanged] = []
        self._clock = clock
        self._on_change = on_change
        self._buckets: dict[str, _Bucket] = {}
        self._total = 0
        self._seq = 0

    # -- public API -----------------------------------------------------------------------
    @asynccontextmanager
    async def slot(
        self,
        key: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - runs on the injected clock
    ) -> AsyncIterator[Slot]:
        """Hold a slot of ``key`` for the block; it is released when the block exits.

        Args:
            key: the bucket, ``provider/model`` (see :func:`bucket_key`).
            timeout: most seconds to wait for the slot (governor's clock); ``None`` waits
                until cancelled, e.g. by an enclosing ``anyio.fail_after``.

        Raises:
            TimeoutError: no slot within ``timeout``.
            GovernorCleared: :meth:`clear` ran while waiting.
        """
        acquired = await self.acquire(key, timeout=timeout)
        try:
            yield acquired
        finally:
            acquired.release()

    async def acquire(
        self,
        key: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - runs on the injected clock
    ) -> Slot:
        """Wait for a slot of ``key``; the caller must :meth:`Slot.release` it.

        Use this form when the work outlives a block, e.g. a CLI process: release only after
        the process has exited. Cancellation is safe: a waiter cancelled at the very moment
        it was granted gives the slot back.

        Raises:
            TimeoutError: no slot within ``timeout`` seconds (governor's clock).
            GovernorCleared: :meth:`clear` ran while waiting.
            UsageError: empty key or negative timeout.

        Example:
            >>> slot = await governor.acquire("anthropic/claude-opus-5-5", timeout=300)
            >>> try:
            ...     await run_cli_and_wait_for_exit()
            ...     slot.success()
            ... finally:
            ...     slot.release()
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
        waiter = _Waiter(key, self._seq)
        bucket.waiters.append(waiter)
        try:
            return await self._wait_for_grant(bucket, waiter, deadline, timeout)
        except BaseException:
            if waiter.slot is not None:
                waiter.slot.release()  # granted as we were cancelled: give it back
            else:
                self._forget(bucket, waiter)
            raise

    def clear(self) -> None:
        """Reject every waiter with :class:`GovernorCleared`.

        Slots already held stay accounted and are released as usual; the governor stays
        usable for new acquisitions.
        """
        for bucket in self._buckets.values():
            while bucket.waiters:
                waiter = bucket.waiters.popleft()
                waiter.error = GovernorCleared(
                    f"the concurrency governor was cleared while waiting for {waiter.key!r}"
                )
                waiter.wake.set()

    def state(self, key: str) -> BucketState:
        """A snapshot of ``key``'s bucket (applying a due idle reset first)."""
        bucket = self._bucket(key)
        return BucketState(
            key=key,
            cap=bucket.cap,
            effective=self._effective(bucket),
            in_flight=bucket.in_flight,
            waiting=len(bucket.waiters),
            epoch=bucket.epoch,
            last_good=bucket.last_good,
            cooldown_s=max(0.0, bucket.cooldown_until - self._clock.monotonic()),
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
        self, bucket: _Bucket, waiter: _Waiter, deadline: float | None, asked: float | None
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
                    f"(limit {self._effective(bucket)}, {bucket.in_flight} running, "
                    f"{len(bucket.waiters)} waiting, {self._total} running in total)"
                )
            # Only the head of a paused bucket keeps the timer; the others are woken by it.
            sleep_for = None
            if bucket.waiters and bucket.waiters[0] is waiter and bucket.cooldown_until > now:
                sleep_for = bucket.cooldown_until - now
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

    def _forget(self, bucket: _Bucket, waiter: _Waiter) -> None:
        was_head = bool(bucket.waiters) and bucket.waiters[0] is waiter
        try:
            bucket.waiters.remove(waiter)
        except ValueError:
            return  # already taken off by clear()
        if was_head and bucket.waiters:
            bucket.waiters[0].wake.set()  # the new head may need to keep the pause timer
        self._dispatch(bucket.key)

    # -- granting -------------------------------------------------------------------------
    def _bucket(self, key: str) -> _Bucket:
        now = self._clock.monotonic()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(key, self.policy.ceiling, now)
        elif (
            bucket.in_flight == 0
            and not bucket.waiters
            and now - bucket.last_activity >= self.policy.idle_reset_s
        ):
            self._idle_reset(bucket, now)
        return bucket

    def _idle_reset(self, bucket: _Bucket, now: float) -> None:
        previous = bucket.cap
        forgot = bucket.last_good is not None or bucket.bad_level is not None
        bucket.cap = self.policy.ceiling
        bucket.last_good = None
        bucket.bad_level = None
        bucket.successes = 0
        bucket.last_activity = now
        if previous != bucket.cap or forgot:
            bucket.epoch += 1  # late reports from before the idle spell must not cut
            self._record(bucket, "idle_reset", previous)

    def _effective(self, bucket: _Bucket) -> int:
        limit = min(bucket.cap, self.policy.ceiling)
        if self.policy.max_total is not None:
            limit = min(limit, self.policy.max_total)
        return limit

    def _global_room(self) -> bool:
        return self.policy.max_total is None or self._total < self.policy.max_total

    def _bucket_room(self, bucket: _Bucket) -> bool:
        return (
            bucket.in_flight < self._effective(bucket)
            and bucket.cooldown_until <= self._clock.monotonic()
        )

    def _can_grant(self, bucket: _Bucket) -> bool:
        return self._bucket_room(bucket) and self._global_room()

    def _grant(self, bucket: _Bucket) -> Slot:
        now = self._clock.monotonic()
        bucket.in_flight += 1
        bucket.last_activity = now
        self._total += 1
        return Slot(self, bucket.key, bucket.epoch, now)

    def _dispatch(self, preferred: str) -> None:
        """Grant what can be granted: ``preferred``'s queue first, then the oldest heads."""
        bucket = self._buckets[preferred]
        while bucket.waiters and self._can_grant(bucket):
            self._hand_to(bucket, bucket.waiters.popleft())
        while self._global_room():
            heads = [b for b in self._buckets.values() if b.waiters and self._bucket_room(b)]
            if not heads:
                return
            oldest = min(heads, key=lambda b: b.waiters[0].seq)
            self._hand_to(oldest, oldest.waiters.popleft())

    def _hand_to(self, bucket: _Bucket, waiter: _Waiter) -> None:
        waiter.slot = self._grant(bucket)
        waiter.wake.set()

    def _release(self, slot: Slot) -> None:
        bucket = self._buckets[slot.key]
        bucket.in_flight -= 1
        bucket.last_activity = self._clock.monotonic()
        self._total -= 1
        self._dispatch(slot.key)

    # -- outcomes -------------------------------------------------------------------------
    def _on_success(self, slot: Slot) -> None:
        bucket = self._buckets[slot.key]
        now = self._clock.monotonic()
        bucket.last_activity = now
        if slot.epoch != bucket.epoch:
            return  # a success from before the last cut says nothing about the new level
        bucket.successes += 1
        policy = self.policy
        if bucket.successes < policy.successes_to_grow or bucket.cap >= policy.ceiling:
            return
        # Growing helps only callers held back by this bucket's own cap (not by the global
        # cap, nor by a Retry-After pause).
        queued_on_cap = (
            bool(bucket.waiters)
            and bucket.in_flight >= min(bucket.cap, policy.ceiling)
            and bucket.cooldown_until <= now
        )
        if not queued_on_cap:
            return
        if bucket.bad_level is not None and now - bucket.bad_at >= policy.reprobe_after_s:
            bucket.bad_level = None
        if bucket.bad_level is not None and bucket.cap + 1 >= bucket.bad_level:
            return  # that level drew a rate limit recently; do not probe it again yet
        previous = bucket.cap
        bucket.last_good = bucket.cap
        bucket.cap += 1
        bucket.successes = 0
        self._record(bucket, "increase", previous)
        self._dispatch(bucket.key)

    def _on_rate_limited(self, slot: Slot, retry_after: float | None) -> None:
        bucket = self._buckets[slot.key]
        now = self._clock.monotonic()
        bucket.last_activity = now
        paused = False
        if (
            retry_after is not None
            and retry_after > 0
            and now + retry_after > bucket.cooldown_until
        ):
            bucket.cooldown_until = now + retry_after
            paused = True
            if bucket.waiters:
                bucket.waiters[0].wake.set()  # the head starts the pause timer
        if slot.epoch != bucket.epoch:
            # Sent before the last cut, which already counted this overload: no new cut.
            # But each further rejection of the burst that cut says the server took one
            # request fewer, so the level not to probe again is one lower.
            if slot.epoch == bucket.cut_epoch and bucket.bad_level is not None:
                bucket.bad_level = max(bucket.cap + 1, bucket.bad_level - 1)
            if paused:
                self._record(bucket, "retry_after", bucket.cap, retry_after)
            return
        previous = bucket.cap
        bucket.successes = 0
        remembered = (
            bucket.bad_level is not None and now - bucket.bad_at < self.policy.reprobe_after_s
        )
        if bucket.bad_level is None or not remembered or previous < bucket.bad_level:
            bucket.bad_level = previous
        bucket.bad_at = now
        if bucket.last_good is not None and previous > bucket.last_good:
            bucket.cap = bucket.last_good
            reason: ChangeReason = "probe_failed"
        else:
            bucket.cap = max(self.policy.floor, math.floor(previous * self.policy.decrease))
            bucket.last_good = None  # the limit moved; what was proven no longer holds
            reason = "rate_limited"
        if bucket.cap != previous:
            bucket.cut_epoch = bucket.epoch
            bucket.epoch += 1
            self._record(bucket, reason, previous, retry_after if paused else None)
        elif paused:
            self._record(bucket, "retry_after", previous, retry_after)

    def _record(
        self, bucket: _Bucket, reason: ChangeReason, previous: int, retry_after: float | None = None
    ) -> None:
        event = ConcurrencyChanged(
            key=bucket.key,
            reason=reason,
            cap=bucket.cap,
            previous_cap=previous,
            effective=self._effective(bucket),
            epoch=bucket.epoch,
            retry_after_s=retry_after,
            at=self._clock.time(),
        )
        self.journal.append(event)
        if self._on_change is not None:
            try:
                self._on_change(event)
            except Exception:  # a broken view must not break the accounting
                log.exception("concurrency on_change callback failed for %s", bucket.key)
