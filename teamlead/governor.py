"""Adaptive concurrency governor: find and keep the concurrency a provider really allows.

An account's concurrency limit is hidden: fan out five or six agents and a 429 can lose
the whole run. The governor keeps one AIMD *bucket* per ``provider/model`` key and a
global cap across all buckets, and hands out *slots*. Each slot stands for one piece of
work (one request, or one CLI process) and reports how it went.

A bucket starts at its ceiling (see :class:`GovernorPolicy`). A rate limit cuts it
(multiplicatively, or to the requests the upstream was running: see
:meth:`Slot.rate_limited`); successes while callers queue grow it by one, but not soon
again to a level that drew a 429; a Retry-After or a 529 pauses new grants (never running
slots, never longer than ``MAX_PAUSE_S``); an idle bucket returns to its ceiling. The rules
are pure functions in ``teamlead._governor.aimd``. A caller whose ``timeout`` ends first
gets its ``TimeoutError`` at once. When the upstream's answers describe token windows
(``anthropic-ratelimit-*``), :meth:`Governor.pace` makes them the bucket's token budget: a
slot asked for with the request's ``estimate`` is granted only when every window covers
it, and a 429 a window explains is the budget's (see ``teamlead._governor.token_budget``).

Waiters are served by priority, then FIFO, per key: a caller that must not starve (the
lead's requests, a retried request) asks with a higher ``priority``. A released slot goes
to the next waiter of the same key first, else to the best waiter of another key that was
blocked only by the global cap (``max_total``).

Every change is a :class:`~teamlead.events.ConcurrencyChanged` in :attr:`Governor.journal`
(the last :data:`JOURNAL_SIZE`), also passed to ``on_change``. What a bucket learnt, and one
*lease* per slot held, live in an :class:`~teamlead._governor.accounts.base.Account`: this
process alone by default, or shared by every process of the account (see
:func:`teamlead._governor.accounts.open_account`), so several processes together stay
under one limit; a lease dies with its process. Release a slot only after the work it
stood for has really ended (for a CLI process: after it exited). The governor belongs to
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

import contextlib
import logging
import math
from bisect import insort
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import anyio.lowlevel

from ._governor import (
    Account,
    AccountError,
    Bounds,
    BucketState,
    Budget,
    GovernorPolicy,
    InputEstimate,
    Lease,
    ProcessAccount,
    Usage,
    aimd,
    bucket_key,
    check_seconds,
    pace_pause,
    parse_retry_after,
    provider_of,
    read_windows,
    retry_after_from_headers,
)
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
    "InputEstimate",
    "Slot",
    "Usage",
    "bucket_key",
    "parse_retry_after",
    "retry_after_from_headers",
]

log = logging.getLogger("teamlead.governor")

#: Changes kept in :attr:`Governor.journal`, oldest dropped first (``on_change`` sees all).
JOURNAL_SIZE = 1000
_Rule = Callable[[aimd.Limits], aimd.Step]
#: How often a waiter re-checks a shared account (other processes give slots back unseen).
_SHARED_POLL_S = 0.05


@dataclass(eq=False, repr=False, slots=True)
class Slot:
    """Permission to run one piece of work in a bucket; report its outcome, then release.

    Get one from :meth:`Governor.slot` or :meth:`Governor.acquire`. Report each outcome
    with :meth:`success`, :meth:`rate_limited` or :meth:`overloaded` (reports after release
    still count). :meth:`release` is idempotent.
    """

    _governor: Governor
    key: str
    epoch: int
    acquired_at: float
    _lease: Lease
    _ticket: int | None = None
    _released: bool = field(default=False, init=False)
    _streaming: bool = field(default=False, init=False)
    _answered: bool = field(default=False, init=False)
    _rejected: bool = field(default=False, init=False)

    @property
    def released(self) -> bool:
        """Whether the slot was given back."""
        return self._released

    def success(self) -> None:
        """Report that the work went through: counts toward the additive increase."""
        self._governor._on_success(self)

    def streaming(self) -> None:
        """Report that the upstream accepted the request (its response is streaming)."""
        if not self._streaming and not self._released:
            self._streaming = True
            self._governor._on_streaming(self)

    def answered(self) -> None:
        """Report that the upstream has finished the answer (its last event came), while
        its last bytes may still be on their way: a measured 429 from now on does not
        count this slot among the requests the upstream was running. Hold the slot until
        the work has really ended all the same; idempotent."""
        if not self._answered and not self._released:
            self._answered = True
            self._governor._on_answered(self)

    def rate_limited(self, retry_after: float | None = None, *, measured: bool = False) -> None:
        """Report a rate limit (429), with the Retry-After pause in seconds if it had one.

        Args:
            retry_after: the pause the upstream asked for.
            measured: the slots are the requests the upstream counts against its limit (as
                in the relay): the cut goes straight to the requests in flight and not
                rejected, and the burst's later 429s settle it. Leave it off when a slot
                stands for more than one request (e.g. a CLI process): the cut is then
                multiplicative.

        Raises:
            UsageError: a negative or non-finite ``retry_after``.

        Example:
            >>> slot.rate_limited(parse_retry_after(response.headers.get("retry-after")))
            ... # doctest: +SKIP
        """
        check_seconds("retry_after", retry_after)
        self._governor._on_rate_limited(self, retry_after, measured)

    def used(self, usage: Usage) -> None:
        """Report the ``usage`` the upstream counted for this request (``message_start``
        has the input, ``message_delta`` the output; report each as it comes): the token
        budget learns how its estimates compare and which prompt prefixes are cached."""
        if not self._released:
            self._governor._on_used(self, usage)

    def overloaded(self, retry_after: float | None = None) -> None:
        """Report an overload (529): a pause and a cut, but no level marked bad.

        Raises:
            UsageError: a negative or non-finite ``retry_after``.
        """
        check_seconds("retry_after", retry_after)
        self._governor._on_overloaded(self, retry_after)

    def release(self) -> None:
        """Give the slot back; only once the work it stood for has really ended."""
        if not self._released:
            self._released = True
            self._governor._release(self)

    def __repr__(self) -> str:
        state = "released" if self._released else "held"
        return f"Slot(key={self.key!r}, epoch={self.epoch}, {state})"


@dataclass(eq=False, slots=True)
class _Waiter:
    """One caller waiting for a slot; woken by ``wake`` once granted, cleared or timed out.
    ``order``: higher priority first, then arrival."""

    key: str
    order: tuple[int, int]
    through_pause: bool = False
    estimate: InputEstimate | None = None
    wake: anyio.Event = field(default_factory=anyio.Event)
    slot: Slot | None = None
    error: BaseException | None = None


@dataclass(eq=False, slots=True)
class _Bucket:
    """What stays local to this process: the queue and the slots it holds.

    Attributes:
        proven: the most requests seen streaming at once (the upstream ran them).
        budget: the token windows (this process's model of them).
        rejected: held slots that reported a 429 (not accepted by the upstream).
        answered: held slots whose answer is complete (the upstream is done).
        waiters: sorted by ``_Waiter.order``.
    """

    key: str
    last_activity: float
    in_flight: int = 0
    streaming: int = 0
    proven: int = 0
    budget: Budget = field(default_factory=Budget)
    rejected: int = 0
    answered: int = 0
    waiters: list[_Waiter] = field(default_factory=list)

    def enqueue(self, waiter: _Waiter) -> None:
        """Queue ``waiter`` by priority then arrival; a displaced head hands over its timer."""
        was_head = self.waiters[0] if self.waiters else None
        insort(self.waiters, waiter, key=lambda w: w.order)
        if was_head is not None and self.waiters[0] is not was_head:
            was_head.wake.set()

    def remove(self, waiter: _Waiter) -> bool:
        """Take ``waiter`` off the queue; ``False`` if it was not queued (cleared)."""
        was_head = bool(self.waiters) and self.waiters[0] is waiter
        try:
            self.waiters.remove(waiter)
        except ValueError:
            return False
        if was_head and self.waiters:
            self.waiters[0].wake.set()  # the new head may need to keep the pause timer
        return True


class Governor:
    """Adaptive per-``provider/model`` concurrency with a global cap. See the module docstring.

    Args:
        policy: the knobs; default :class:`GovernorPolicy` ().
        clock: time source for pauses, timeouts and the idle reset.
        on_change: called with every :class:`ConcurrencyChanged`, after the state changed.
        account: where the learnt limits and the in-flight leases live, shared with the
            account's other processes (see :func:`teamlead._governor.open_account`);
            default: this process alone, in memory.
    """

    def __init__(
        self,
        policy: GovernorPolicy | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        on_change: Callable[[ConcurrencyChanged], None] | None = None,
        account: Account | None = None,
    ) -> None:
        self.policy = policy or GovernorPolicy()
        self.journal: deque[ConcurrencyChanged] = deque(maxlen=JOURNAL_SIZE)
        #: The clock the governor reads: pauses, timeouts and a slot's ``acquired_at``.
        self.clock = clock
        self._listeners = [on_change] if on_change is not None else []
        #: Where the learnt limits and the leases live.
        self.account: Account = account if account is not None else ProcessAccount()
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
        priority: int = 0,
        estimate: InputEstimate | None = None,
    ) -> AsyncIterator[Slot]:
        """Hold a slot of ``key`` for the block; it is released when the block exits.

        The arguments and errors are :meth:`acquire`'s.
        """
        acquired = await self.acquire(key, timeout=timeout, priority=priority, estimate=estimate)
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
        through_pause: bool = False,
        estimate: InputEstimate | None = None,
    ) -> Slot:
        """Wait for a slot of ``key``; the caller must :meth:`Slot.release` it.

        Use this form when the work outlives a block, e.g. a CLI process. Cancellation is
        safe: a waiter cancelled at the very moment it was granted gives the slot back.

        Args:
            key: the bucket, ``provider/model`` (see :func:`bucket_key`).
            timeout: most seconds to wait (governor's clock); ``None`` waits until cancelled.
            priority: waiters with a higher priority are served first (then FIFO).
            through_pause: the caller's own lane: the bucket's pause does not hold it back
                (its concurrency limit still does). The relay gives it to the lead's first
                try of each request, so a pause another request met never starves the
                lead's synthesis; a 429 it meets itself is held like any other.
            estimate: the request's estimated input
                (:func:`~teamlead._governor.token_estimate.estimate_input`): once the
                upstream's answers described its rate-limit windows, the slot also waits
                until they can cover the request (see ``teamlead._governor.token_budget``).

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
        if not bucket.waiters or through_pause:
            granted = self._try_grant(bucket, through_pause, estimate)
            if granted is not None:
                return granted
        deadline = None if timeout is None else self.clock.monotonic() + timeout
        self._seq += 1
        waiter = _Waiter(key, (-priority, self._seq), through_pause, estimate)
        bucket.enqueue(waiter)
        try:
            return await self._wait_for_grant(bucket, waiter, deadline, timeout)
        except BaseException:
            if waiter.slot is not None:
                waiter.slot.release()  # granted as we were cancelled: give it back
            elif bucket.remove(waiter):
                self._dispatch(key)
            raise

    def pace(self, key: str, headers: Mapping[str, str], slot: Slot | None = None) -> float:
        """Read the ``anthropic-ratelimit-*`` headers of a response (to ``slot``'s request,
        if given: read them before reporting a 429, so the budget can tell whether a window
        explains it).

        A window that gives its limit becomes (or updates) the bucket's token budget: new
        grants wait until it can cover them. A window without a limit pauses ``key`` when
        it runs dry, until its reset. Returns that pause in seconds (0: none).
        """
        windows = read_windows(headers)
        bucket = self._bucket(key)
        now = self.clock.monotonic()
        ticket = slot._ticket if slot is not None and slot.key == key else None
        kept = bucket.budget.observe(ticket, windows, now=now, wall_now=self.clock.time())
        if kept:
            self._budget_changed(bucket)
        pause = pace_pause(
            [w for w in windows if w.name not in kept],
            now=self.clock.time(),
            pace_below=self.policy.pace_below,
        )
        if pause > 0:
            self._apply(bucket, lambda limits: aimd.paced(limits, now=now, seconds=pause))
        return pause

    def token_budget(self, key: str) -> Budget:
        """``key``'s token budget: its model of the upstream's windows (for views, tests)."""
        return self._bucket(key).budget

    def subscribe(self, listener: Callable[[ConcurrencyChanged], None]) -> Callable[[], None]:
        """Also call ``listener`` with every change; returns the call that unsubscribes."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def connect_account(self) -> None:
        """Open the account's store (a machine's file, a Redis connection) now, not at the
        first request: the relay does this while its CLI starts. A store that fails is left
        for that request to report."""
        with contextlib.suppress(AccountError):
            self.account.in_flight("")

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
            effective=self._effective(key, limits),
            in_flight=bucket.in_flight,
            waiting=len(bucket.waiters),
            epoch=limits.epoch,
            last_good=limits.last_good,
            cooldown_s=max(0.0, limits.cooldown_until - self.clock.monotonic()),
            streaming=bucket.streaming,
            account_in_flight=self.account.in_flight(key),
        )

    @property
    def total_in_flight(self) -> int:
        """Slots held across all buckets (by this process)."""
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
            now = self.clock.monotonic()
            limits = self._limits(bucket.key)
            if deadline is not None and now >= deadline:
                raise TimeoutError(
                    f"no concurrency slot for {bucket.key!r} within {asked:g}s "
                    f"(limit {self._effective(bucket.key, limits)}, "
                    f"{bucket.in_flight} running, {len(bucket.waiters)} waiting, "
                    f"{self._total} running in total)"
                )
            # its own lane: only the concurrency limit holds it
            cooldown_until = now if waiter.through_pause else limits.cooldown_until
            if deadline is not None and cooldown_until > deadline:
                raise TimeoutError(f"{bucket.key!r} is paused longer than {asked:g}s allowed")
            # Only the head of a bucket keeps a timer (a pause, or re-checking a shared
            # account); the others are woken by it.
            sleep_for = None
            if bucket.waiters and bucket.waiters[0] is waiter:
                if cooldown_until > now:
                    sleep_for = cooldown_until - now
                # the token windows: until they cover this request (an oversized one that
                # waits for the others to be answered is woken by their answers)
                ready = self._ready_at(bucket, waiter.estimate, now, waiter.through_pause)
                if now < ready < math.inf:
                    sleep_for = max(sleep_for or 0.0, ready - now)
                if self.account.shared:
                    sleep_for = min(sleep_for or _SHARED_POLL_S, _SHARED_POLL_S)
            if deadline is not None:
                left = deadline - now
                sleep_for = left if sleep_for is None else min(sleep_for, left)
            waiter.wake = anyio.Event()
            await wait_event(waiter.wake, sleep_for, self.clock)
            if waiter.slot is None and waiter.error is None:
                self._dispatch(bucket.key)

    # -- state ----------------------------------------------------------------------------
    def _knobs(self, key: str) -> GovernorPolicy:
        """The policy with ``key``'s own ceiling (its floor never above it)."""
        ceiling = self.policy.ceiling_for(key)
        if ceiling == self.policy.ceiling:
            return self.policy
        floor = min(self.policy.floor, ceiling)
        return self.policy.model_copy(update={"ceiling": ceiling, "floor": floor})

    def _limits(self, key: str) -> aimd.Limits:
        limits = self.account.limits(key)
        return limits if limits is not None else aimd.initial(self._knobs(key))

    def _bucket(self, key: str) -> _Bucket:
        now = self.clock.monotonic()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(key, now)
        elif (
            bucket.in_flight == 0
            and not bucket.waiters
            and now - bucket.last_activity >= self.policy.idle_reset_s
            and self.account.in_flight(key) == 0  # idle here, and nowhere else busy
        ):
            bucket.last_activity = now
            knobs = self._knobs(key)
            self._apply(bucket, lambda limits: aimd.idle_reset(limits, knobs, now=now))
        return bucket

    def _apply(self, bucket: _Bucket, rule: _Rule) -> None:
        """Apply ``rule`` to the stored limits atomically (see :meth:`_commit`)."""
        self._commit(bucket, lambda _: rule)

    def _commit(
        self, bucket: _Bucket, rule_for: Callable[[int], _Rule], rejected: Slot | None = None
    ) -> None:
        """Apply ``rule_for(accepted)`` to the stored limits (a fresh bucket's when none)
        atomically, then wake the head on a new pause and journal the change.

        ``rejected``: the slot whose lease is marked rejected in the same step, ``accepted``
        being what the account counts over its provider (see ``Account.update_rejected``);
        ``None``: a plain update (``accepted`` is 0).
        """
        knobs = self._knobs(bucket.key)
        before: list[float] = []

        def step(stored: aimd.Limits | None, accepted: int = 0) -> aimd.Step:
            limits = stored if stored is not None else aimd.initial(knobs)
            before.append(limits.cooldown_until)
            return rule_for(accepted)(limits)

        if rejected is None:
            limits, change = self.account.update(bucket.key, step)
        else:
            lease, provider = rejected._lease, provider_of(rejected.key)
            limits, change = self.account.update_rejected(lease, provider, step)
        if before and limits.cooldown_until > before[-1] and bucket.waiters:
            bucket.waiters[0].wake.set()  # the head starts the pause timer
        if change is not None:
            self._record(bucket, limits, change)
            self._dispatch(bucket.key)  # an increase or a correction may make room

    # -- granting -------------------------------------------------------------------------
    def _effective(self, key: str, limits: aimd.Limits) -> int:
        limit = min(limits.cap, self.policy.ceiling_for(key))
        if self.policy.max_total is not None:
            limit = min(limit, self.policy.max_total)
        return limit

    def _global_room(self) -> bool:
        return self.policy.max_total is None or self._total < self.policy.max_total

    def _ready_at(
        self, bucket: _Bucket, estimate: InputEstimate | None, now: float, through_pause: bool
    ) -> float:
        """When ``bucket``'s token windows cover a request of ``estimate``; a caller
        ``through_pause`` is not held by a window learnt without headers (a guess, like a
        pause), only by those the upstream described."""
        budget = bucket.budget
        if not budget.windows:
            return now
        charge = budget.charge(estimate, now)
        return budget.ready_at(
            charge, now, headroom=self.policy.pace_below, learnt=not through_pause
        )

    def _try_grant(
        self, bucket: _Bucket, through_pause: bool, estimate: InputEstimate | None
    ) -> Slot | None:
        """A slot of ``bucket`` if this process and the whole account have room (and the
        bucket is not paused, unless ``through_pause``, and its token windows cover
        ``estimate``), else None."""
        limits = self._limits(bucket.key)
        limit = self._effective(bucket.key, limits)
        now = self.clock.monotonic()
        room = (
            bucket.in_flight < limit
            and (through_pause or limits.cooldown_until <= now)
            and self._ready_at(bucket, estimate, now, through_pause) <= now
        )
        if not (room and self._global_room()):
            return None
        lease = self.account.take(
            Bounds(
                bucket.key,
                limit=limit,
                provider_limit=self.policy.provider_ceiling(bucket.key),
                total_limit=self.policy.max_total,
            )
        )
        if lease is None:
            return None
        # The epoch of the limits read in the step that took the lease: another process may
        # have cut since the read above, without counting this slot.
        limits = lease.limits if lease.limits is not None else aimd.initial(self._knobs(bucket.key))
        now = self.clock.monotonic()
        bucket.in_flight += 1
        bucket.last_activity = now
        self._total += 1
        ticket = bucket.budget.grant(bucket.budget.charge(estimate, now), estimate, now)
        return Slot(self, bucket.key, limits.epoch, now, lease, ticket)

    def _dispatch(self, preferred: str) -> None:
        """Grant what can be granted: ``preferred``'s queue first, then the best heads."""
        refused: set[str] = set()
        while self._global_room():
            heads = [b for b in self._buckets.values() if b.waiters and b.key not in refused]
            if not heads:
                return
            best = min(heads, key=lambda b: (b.key != preferred, b.waiters[0].order))
            head = best.waiters[0]
            granted = self._try_grant(best, head.through_pause, head.estimate)
            if granted is None:
                refused.add(best.key)  # no room for it (a full account: its head polls)
                continue
            best.waiters.pop(0)
            head.slot = granted
            head.wake.set()
            # The head kept the bucket's timer (a pause, or re-checking a shared account):
            # the next in line takes it over. Else, with the account full of other
            # processes' slots, nothing here would look again when they give theirs back.
            if best.waiters:
                best.waiters[0].wake.set()

    def _release(self, slot: Slot) -> None:
        bucket = self._buckets[slot.key]
        bucket.in_flight -= 1
        if slot._answered:
            bucket.answered -= 1
        if slot._streaming:
            bucket.streaming -= 1
        if slot._rejected:
            bucket.rejected -= 1
        bucket.last_activity = self.clock.monotonic()
        self._total -= 1
        self.account.give_back(slot._lease)
        if slot._ticket is not None:
            bucket.budget.release(slot._ticket, bucket.last_activity)
        if bucket.budget.windows:
            self._budget_changed(bucket)  # an oversized request may wait for this one
        else:
            self._dispatch(slot.key)

    def _budget_changed(self, bucket: _Bucket) -> None:
        """The token windows moved: grant what they now cover, and let the head of the
        queue set its timer again."""
        if bucket.waiters:
            bucket.waiters[0].wake.set()
        self._dispatch(bucket.key)

    # -- outcomes -------------------------------------------------------------------------
    def _touch(self, key: str) -> tuple[_Bucket, float]:
        bucket = self._buckets[key]
        now = self.clock.monotonic()
        bucket.last_activity = now
        return bucket, now

    def _on_success(self, slot: Slot) -> None:
        bucket, now = self._touch(slot.key)
        knobs = self._knobs(slot.key)
        # Growing helps only callers held back by this bucket's own cap (not by the global
        # cap, nor by a pause).
        in_flight = bucket.in_flight
        if self.account.shared:
            in_flight = max(in_flight, self.account.in_flight(slot.key))

        def rule(limits: aimd.Limits) -> aimd.Step:
            queued = (
                bool(bucket.waiters)
                and in_flight >= min(limits.cap, knobs.ceiling)
                and limits.cooldown_until <= now
            )
            return aimd.success(limits, knobs, slot_epoch=slot.epoch, now=now, queued=queued)

        self._apply(bucket, rule)

    def _on_answered(self, slot: Slot) -> None:
        self._buckets[slot.key].answered += 1
        self.account.answered(slot._lease)

    def _on_streaming(self, slot: Slot) -> None:
        bucket, now = self._touch(slot.key)
        bucket.streaming += 1
        bucket.proven = max(bucket.proven, bucket.streaming)
        if slot._ticket is not None:
            bucket.budget.accepted(slot._ticket, now)
        knobs, streaming = self._knobs(slot.key), bucket.streaming
        self._apply(
            bucket,
            lambda limits: aimd.started(limits, knobs, slot_epoch=slot.epoch, streaming=streaming),
        )

    def _on_used(self, slot: Slot, usage: Usage) -> None:
        bucket, now = self._touch(slot.key)
        if slot._ticket is not None:
            bucket.budget.used(slot._ticket, usage, now)
            if bucket.budget.windows:
                self._budget_changed(bucket)

    def _window_refused(self, bucket: _Bucket, slot: Slot, retry_after: float | None) -> bool:
        """Whether a token window explains ``slot``'s 429 (see ``Budget.refused``). A 429
        with no headers at all is the window's to learn only when no concurrency limit
        can explain it: the upstream refused while running at least two requests fewer
        than it was seen running at once, or while nothing else ran on the account."""
        if slot._ticket is None or slot._rejected:
            return False
        others = bucket.in_flight - bucket.rejected - bucket.answered - 1
        held_here = 1 + bucket.rejected + bucket.answered
        alone = others <= 0 and self.account.in_flight(provider_of(slot.key)) <= held_here
        return bucket.budget.refused(
            slot._ticket,
            now=self.clock.monotonic(),
            retry_after=retry_after,
            learn_window=alone or others + 2 <= bucket.proven,
        )

    def _on_rate_limited(self, slot: Slot, retry_after: float | None, measured: bool) -> None:
        bucket, now = self._touch(slot.key)
        knobs = self._knobs(slot.key)
        explained = self._window_refused(bucket, slot, retry_after)
        if measured and not slot._rejected and not slot._released:
            slot._rejected = True
            bucket.rejected += 1
        if explained:
            # the token budget paces the retry (its own time slot at the refill rate): no
            # concurrency cut, no pause for the whole bucket; the lease is marked refused,
            # so a later measured cut does not count it as accepted
            if measured and not slot._released:
                self._commit(bucket, lambda _: lambda lim: (lim, None), rejected=slot)
            self._budget_changed(bucket)
            return

        def rule(accepted: int | None) -> Callable[[aimd.Limits], aimd.Step]:
            return lambda limits: aimd.rate_limited(
                limits,
                knobs,
                slot_epoch=slot.epoch,
                now=now,
                retry_after=retry_after,
                accepted=accepted,
            )

        if not measured:
            self._apply(bucket, rule(None))
            return
        # The upstream counts every request of the provider on the account: the account
        # counts those it may have been running (see Account.update_rejected). This
        # process's own count stands when the account lost sight of its slots (a shared
        # store that failed mid-run).
        provider = provider_of(slot.key)
        mine = [b for b in self._buckets.values() if b.key.startswith(provider)]
        own = sum(b.in_flight - b.rejected - b.answered for b in mine)
        self._commit(bucket, lambda counted: rule(max(0, counted, own)), rejected=slot)

    def _on_overloaded(self, slot: Slot, retry_after: float | None) -> None:
        bucket, now = self._touch(slot.key)
        knobs = self._knobs(slot.key)
        if slot._ticket is not None:
            bucket.budget.dropped(slot._ticket)
        self._apply(
            bucket,
            lambda limits: aimd.overloaded(
                limits, knobs, slot_epoch=slot.epoch, now=now, retry_after=retry_after
            ),
        )

    def _record(self, bucket: _Bucket, limits: aimd.Limits, change: aimd.Change) -> None:
        event = ConcurrencyChanged(
            key=bucket.key,
            reason=change.reason,
            cap=limits.cap,
            previous_cap=change.previous_cap,
            effective=self._effective(bucket.key, limits),
            epoch=limits.epoch,
            retry_after_s=change.retry_after,
            at=self.clock.time(),
        )
        self.journal.append(event)
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:  # a broken view must not break the accounting
                log.exception("concurrency on_change callback failed for %s", bucket.key)
