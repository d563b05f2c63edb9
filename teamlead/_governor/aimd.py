"""The AIMD rules of one bucket, as pure synchronous functions over a frozen :class:`Limits`.

Each rule takes the bucket's learnt :class:`Limits`, the knobs and what happened, and
returns the new limits plus the :class:`Change` to journal (or ``None``). No clock, no
event loop, no queue: the rules are tested as tables, and a shared store can hold
:class:`Limits` for several processes. Times are the governor clock's monotonic seconds.

The rules: :func:`rate_limited` (a 429), :func:`started` (a request streams),
:func:`overloaded` (a 529), :func:`success`, :func:`paced` (the rate-limit headers ask for
a pause) and :func:`idle_reset`. No pause is longer than
:data:`~teamlead._governor.retry_after.MAX_PAUSE_S`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..events import ChangeReason
from .knobs import GovernorPolicy
from .retry_after import bounded_pause

__all__ = [
    "Change",
    "Limits",
    "Step",
    "idle_reset",
    "initial",
    "overloaded",
    "paced",
    "rate_limited",
    "started",
    "success",
]


@dataclass(frozen=True)
class Limits:
    """What one bucket has learnt; the only state a shared store needs to hold.

    Attributes:
        cap: the bucket's current limit (the effective one also obeys the ceiling and the
            global cap).
        epoch: incremented by every cut and idle reset; slots remember theirs.
        last_good: the level proven by the last increase, while probing above it.
        successes: consecutive successes of the current epoch.
        bad_level: the lowest level that drew a 429 recently (not probed again yet).
        bad_at: when ``bad_level`` was set.
        cut_epoch: the epoch the last cut closed (its late 429s are the same burst).
        cooldown_until: no new grants before this (Retry-After, overload, pacing).
        measured: the last cut counted the requests in flight (``accepted``), so the
            late rejections of its burst settle it.
    """

    cap: int
    epoch: int = 0
    last_good: int | None = None
    successes: int = 0
    bad_level: int | None = None
    bad_at: float = -math.inf
    cut_epoch: int = -1
    cooldown_until: float = -math.inf
    measured: bool = False


@dataclass(frozen=True)
class Change:
    """A change worth a journal entry: why, the cap before it, and the pause if any."""

    reason: ChangeReason
    previous_cap: int
    retry_after: float | None = None


Step = tuple[Limits, "Change | None"]


def initial(knobs: GovernorPolicy) -> Limits:
    """A fresh bucket: at the ceiling, knowing nothing."""
    return Limits(cap=knobs.ceiling)


def idle_reset(limits: Limits, knobs: GovernorPolicy, *, now: float | None = None) -> Step:
    """Back to the ceiling after an idle spell; a new epoch if anything was forgotten.

    The pause is forgotten too: a bucket nobody asked for during the idle spell starts
    fresh, so no pause outlives it (``now`` tells whether one was still running).
    """
    paused = now is not None and limits.cooldown_until > now
    forgot = limits.last_good is not None or limits.bad_level is not None or paused
    reset = replace(
        limits,
        cap=knobs.ceiling,
        last_good=None,
        bad_level=None,
        successes=0,
        cooldown_until=-math.inf,
    )
    if limits.cap == knobs.ceiling and not forgot:
        return reset, None
    # late reports from before the idle spell must not cut the fresh bucket
    return replace(reset, epoch=limits.epoch + 1), Change("idle_reset", limits.cap)


def _pause(limits: Limits, now: float, seconds: float | None) -> tuple[Limits, bool]:
    if seconds is None or seconds <= 0:
        return limits, False
    seconds = bounded_pause(seconds)
    if now + seconds <= limits.cooldown_until:
        return limits, False
    return replace(limits, cooldown_until=now + seconds), True


def success(
    limits: Limits, knobs: GovernorPolicy, *, slot_epoch: int, now: float, queued: bool
) -> Step:
    """A request went through. ``queued``: callers wait on this bucket's own cap.

    Successes of the current epoch earn ``cap + 1`` while callers queue, except towards a
    level that drew a 429 less than ``reprobe_after_s`` ago; below the level a measured cut
    found, each success earns it, so a cut that proved too low is undone within a round of
    requests.
    """
    if slot_epoch != limits.epoch:
        return limits, None  # from before the last cut: says nothing about the new level
    limits = replace(limits, successes=limits.successes + 1)
    below_found = (
        limits.measured and limits.bad_level is not None and limits.cap + 1 < limits.bad_level
    )
    needed = 1 if below_found else knobs.successes_to_grow
    if limits.successes < needed or limits.cap >= knobs.ceiling or not queued:
        return limits, None
    if limits.bad_level is not None and now - limits.bad_at >= knobs.reprobe_after_s:
        limits = replace(limits, bad_level=None)
    if limits.bad_level is not None and limits.cap + 1 >= limits.bad_level:
        return limits, None  # that level drew a rate limit recently; do not probe it yet
    grown = replace(limits, last_good=limits.cap, cap=limits.cap + 1, successes=0)
    return grown, Change("increase", limits.cap)


def rate_limited(
    limits: Limits,
    knobs: GovernorPolicy,
    *,
    slot_epoch: int,
    now: float,
    retry_after: float | None = None,
    accepted: int | None = None,
) -> Step:
    """A 429: a Retry-After pauses the bucket; a 429 of the current epoch cuts ``cap`` (back
    to ``last_good`` after a failed probe; else to ``accepted``; else to ``floor(cap *
    decrease)``), opens a new epoch and remembers the level that drew it.

    ``accepted``: the requests the upstream may have been running when it rejected (this
    one not counted; never fewer than it really ran, so the cut never lands below the
    limit); ``None`` when the caller cannot count them.

    A 429 of the cutting burst, sent before the cut (which counted it as accepted), *settles*
    a measured cut one lower: the upstream took one fewer, so the limit is learnt from the
    burst's answers whenever they come. After a multiplicative cut only the level not to
    probe goes down.
    """
    limits, paused = _pause(limits, now, retry_after)
    pause_only = Change("retry_after", limits.cap, retry_after) if paused else None
    if slot_epoch != limits.epoch:
        if slot_epoch != limits.cut_epoch:
            return limits, pause_only
        previous = limits.cap
        if limits.measured:
            limits = replace(limits, cap=max(knobs.floor, previous - 1))
        if limits.bad_level is not None:
            limits = replace(limits, bad_level=max(limits.cap + 1, limits.bad_level - 1))
        if limits.cap == previous:
            return limits, pause_only
        return limits, Change("settled", previous, retry_after if paused else None)
    previous = limits.cap
    drew = previous if accepted is None else max(1, min(previous, accepted + 1))
    remembered = limits.bad_level is not None and now - limits.bad_at < knobs.reprobe_after_s
    bad = limits.bad_level
    if bad is None or not remembered or drew < bad:
        bad = drew
    limits = replace(limits, successes=0, bad_level=bad, bad_at=now, measured=accepted is not None)
    if accepted is None:
        target = max(knobs.floor, math.floor(previous * knobs.decrease))
    else:
        target = max(knobs.floor, min(previous - 1, accepted))
    last_good = limits.last_good  # above it, the cut level was a probe that failed
    if last_good is not None and previous > last_good and (accepted is None or target >= last_good):
        limits = replace(limits, cap=last_good)
        reason: ChangeReason = "probe_failed"
    else:
        limits = replace(limits, cap=target, last_good=None)  # the limit moved
        reason = "rate_limited"
    if limits.cap == previous:
        return limits, pause_only
    limits = replace(limits, cut_epoch=limits.epoch, epoch=limits.epoch + 1)
    return limits, Change(reason, previous, retry_after if paused else None)


def started(limits: Limits, knobs: GovernorPolicy, *, slot_epoch: int, streaming: int) -> Step:
    """A request of ``slot_epoch`` began streaming; ``streaming`` run successfully now.

    Only a request of the burst that drew the last cut corrects that cut: the cut was
    measured when fewer of them had started, and the upstream proves it takes more.
    """
    if slot_epoch != limits.cut_epoch or streaming <= limits.cap:
        return limits, None
    level = min(streaming, knobs.ceiling)
    if level <= limits.cap:
        return limits, None
    bad = limits.bad_level
    if bad is not None and bad <= level:
        bad = level + 1
    return replace(limits, cap=level, bad_level=bad), Change("accepted", limits.cap)


def overloaded(
    limits: Limits,
    knobs: GovernorPolicy,
    *,
    slot_epoch: int,
    now: float,
    retry_after: float | None = None,
) -> Step:
    """A 529: pause for its Retry-After and cut once per epoch; no level is marked bad
    (overload is the provider's state, not the account's limit)."""
    limits, paused = _pause(limits, now, retry_after)
    pause_only = Change("retry_after", limits.cap, retry_after) if paused else None
    if slot_epoch != limits.epoch:
        return limits, pause_only
    previous = limits.cap
    target = max(knobs.floor, math.floor(previous * knobs.decrease))
    if target == previous:
        return limits, pause_only
    limits = replace(
        limits, cap=target, successes=0, cut_epoch=limits.epoch, epoch=limits.epoch + 1
    )
    return limits, Change("overloaded", previous, retry_after if paused else None)


def paced(limits: Limits, *, now: float, seconds: float) -> Step:
    """Hold new grants for ``seconds`` because a rate-limit window runs low.

    Journalled only when the bucket was not paused already, so a run of low-window
    responses does not flood the journal.
    """
    was_paused = limits.cooldown_until > now
    limits, extended = _pause(limits, now, seconds)
    if not extended or was_paused:
        return limits, None
    return limits, Change("paced", limits.cap, seconds)
