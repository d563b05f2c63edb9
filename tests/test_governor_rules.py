"""The governor's pure parts as tables: AIMD rules, rate-limit headers, the account, priority."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import anyio
import pytest
from freezegun import freeze_time

from teamlead._governor import ProcessAccount, aimd
from teamlead._governor.ratelimit_headers import RateWindow, pace_pause, read_windows
from teamlead._governor.retry_after import retry_after_from_headers
from teamlead.governor import Governor, GovernorPolicy, Slot
from teamlead.testing import FakeClock

from .governors import OPUS as A

P = GovernorPolicy(ceiling=24)
P32 = GovernorPolicy(ceiling=32)
L = aimd.Limits


@pytest.mark.parametrize(
    ("limits", "kwargs", "cap", "reason", "bad_level"),
    [
        # no measure: the multiplicative cut
        (L(cap=24), {}, 18, "rate_limited", 24),
        # measured: straight to what the upstream accepted
        (L(cap=24), {"accepted": 3}, 3, "rate_limited", 4),
        (L(cap=24), {"accepted": 0}, 1, "rate_limited", 1),
        (L(cap=4), {"accepted": 9}, 3, "rate_limited", 4),  # never above cap - 1
        # a failed probe returns to last_good, measured or not
        (L(cap=7, last_good=6), {}, 6, "probe_failed", 7),
        (L(cap=7, last_good=6), {"accepted": 6}, 6, "probe_failed", 7),
        # ... unless the upstream accepted less than last_good: the limit moved
        (L(cap=7, last_good=6), {"accepted": 2}, 2, "rate_limited", 3),
        # at the floor nothing changes, and nothing is journalled
        (L(cap=1), {}, 1, None, 1),
    ],
)
def test_rate_limited_table(
    limits: aimd.Limits, kwargs: dict[str, Any], cap: int, reason: str | None, bad_level: int
) -> None:
    new, change = aimd.rate_limited(limits, P, slot_epoch=limits.epoch, now=10.0, **kwargs)
    assert new.cap == cap
    assert (change.reason if change else None) == reason
    assert new.bad_level == bad_level
    if reason is not None:
        assert (new.epoch, new.cut_epoch) == (limits.epoch + 1, limits.epoch)


def test_a_stale_rate_limit_only_pauses_and_lowers_the_bad_level() -> None:
    limits = L(cap=3, epoch=1, cut_epoch=0, bad_level=6, bad_at=0.0)
    new, change = aimd.rate_limited(limits, P, slot_epoch=0, now=1.0, retry_after=2.0)
    assert (new.cap, new.epoch, new.bad_level, new.cooldown_until) == (3, 1, 5, 3.0)
    assert change == aimd.Change("retry_after", 3, 2.0)
    lowest, _ = aimd.rate_limited(replace(new, bad_level=4), P, slot_epoch=0, now=1.0)
    assert lowest.bad_level == 4  # never below cap + 1


@pytest.mark.parametrize(
    ("cap", "accepted", "late", "settled", "bad_level"),
    [
        # 24 in flight, no response headers yet: the first 429 counts 23 not rejected, and
        # each later 429 of the burst takes one off, down to the 3 the upstream accepted
        (32, 23, 20, 3, 4),
        # the others had answered already: the first count is the answer
        (32, 3, 0, 3, 4),
        # more late rejections than counted: never below the floor
        (32, 23, 40, 1, 2),
        # a burst at a level below the cap
        (8, 5, 2, 3, 4),
    ],
)
def test_a_burst_whose_headers_come_late_settles_on_its_answers(
    cap: int, accepted: int, late: int, settled: int, bad_level: int
) -> None:
    limits, change = aimd.rate_limited(L(cap=cap), P32, slot_epoch=0, now=1.0, accepted=accepted)
    assert change is not None and change.reason == "rate_limited"
    first = min(cap - 1, accepted)
    assert (limits.cap, limits.epoch, limits.measured) == (first, 1, True)
    reasons: list[str | None] = []
    for _ in range(late):
        limits, change = aimd.rate_limited(limits, P32, slot_epoch=0, now=1.1, accepted=0)
        reasons.append(change.reason if change else None)
    assert (limits.cap, limits.bad_level, limits.epoch) == (settled, bad_level, 1)
    # each late rejection settles the cap one lower, down to the floor; then none changes it
    assert reasons == ["settled"] * (first - settled) + [None] * (late - first + settled)


def test_late_rejections_of_an_unmeasured_cut_do_not_settle_it() -> None:
    limits, _ = aimd.rate_limited(L(cap=8), P, slot_epoch=0, now=1.0)
    assert (limits.cap, limits.measured) == (6, False)
    for _ in range(4):
        limits, _ = aimd.rate_limited(limits, P, slot_epoch=0, now=1.1)
    assert (limits.cap, limits.bad_level) == (6, 7)


@pytest.mark.parametrize(
    ("limits", "successes", "now", "cap"),
    [
        # a measured cut found 4 bad, but something cut lower: back up a level per success
        (L(cap=1, bad_level=4, bad_at=0.0, measured=True), 1, 1.0, 2),
        (L(cap=1, bad_level=4, bad_at=0.0, measured=True), 2, 1.0, 3),
        # ... and no further: the level found is not probed before reprobe_after_s
        (L(cap=1, bad_level=4, bad_at=0.0, measured=True), 9, 1.0, 3),
        (L(cap=3, bad_level=4, bad_at=0.0, measured=True), 4, 61.0, 4),
        # an unmeasured cut keeps the slow additive increase
        (L(cap=1, bad_level=4, bad_at=0.0), 3, 1.0, 1),
        (L(cap=1, bad_level=4, bad_at=0.0), 4, 1.0, 2),
    ],
)
def test_a_cut_that_proved_too_low_is_undone_promptly(
    limits: aimd.Limits, successes: int, now: float, cap: int
) -> None:
    for _ in range(successes):
        limits, _change = aimd.success(limits, P, slot_epoch=0, now=now, queued=True)
    assert limits.cap == cap


@pytest.mark.anyio
async def test_a_measured_storm_with_no_headers_yet_learns_the_true_limit() -> None:
    """24 requests in flight, none streaming (the upstream sends headers with the answer):
    21 rejections arrive one by one and the cap lands on the 3 the upstream accepted."""
    gov = Governor(GovernorPolicy(ceiling=32), clock=FakeClock())
    burst = [await gov.acquire(A) for _ in range(24)]
    for slot in burst[3:]:
        slot.rate_limited(1.0, measured=True)
        slot.release()
    state = gov.state(A)
    assert (state.cap, state.in_flight, state.epoch) == (3, 3, 1)
    assert [e.reason for e in gov.journal] == ["rate_limited"] + ["settled"] * 20
    for slot in burst[:3]:
        slot.release()


@pytest.mark.anyio
async def test_a_measured_cut_counts_the_other_buckets_of_the_provider() -> None:
    """An upstream limit may count every model of the provider (the lead's requests too):
    the accepted level counts the provider's requests in flight, not only this bucket's."""
    gov = Governor(GovernorPolicy(ceiling=32), clock=FakeClock())
    lead = await gov.acquire("anthropic/lead-model")
    subs = [await gov.acquire(A) for _ in range(5)]
    subs[4].rate_limited(measured=True)
    assert gov.state(A).cap == 5  # the lead and four subagents were accepted
    assert gov.state("anthropic/lead-model").cap == 32  # the other bucket is not cut
    for slot in [lead, *subs]:
        slot.release()


@pytest.mark.parametrize(
    ("limits", "slot_epoch", "streaming", "cap", "bad_level"),
    [
        (L(cap=1, epoch=1, cut_epoch=0, bad_level=1), 0, 2, 2, 3),  # corrected up
        (L(cap=3, epoch=1, cut_epoch=0, bad_level=4), 0, 3, 3, 4),  # already there
        (L(cap=1, epoch=1, cut_epoch=0, bad_level=1), 1, 5, 1, 1),  # not the cutting burst
        (L(cap=2, epoch=1, cut_epoch=0), 0, 99, 24, None),  # not above the ceiling
    ],
)
def test_started_corrects_a_cut_to_what_streams(
    limits: aimd.Limits, slot_epoch: int, streaming: int, cap: int, bad_level: int | None
) -> None:
    new, change = aimd.started(limits, P, slot_epoch=slot_epoch, streaming=streaming)
    assert (new.cap, new.bad_level) == (cap, bad_level)
    assert (change is not None) == (cap != limits.cap)
    if change:
        assert change.reason == "accepted"


@pytest.mark.parametrize(
    ("limits", "slot_epoch", "retry_after", "cap", "reason"),
    [
        (L(cap=8), 0, None, 6, "overloaded"),
        (L(cap=8), 0, 5.0, 6, "overloaded"),
        (L(cap=8, epoch=2), 1, 5.0, 8, "retry_after"),  # stale: pause only
        (L(cap=1), 0, None, 1, None),
    ],
)
def test_overloaded_table(
    limits: aimd.Limits, slot_epoch: int, retry_after: float | None, cap: int, reason: str | None
) -> None:
    new, change = aimd.overloaded(
        limits, P, slot_epoch=slot_epoch, now=0.0, retry_after=retry_after
    )
    assert new.cap == cap
    assert (change.reason if change else None) == reason
    assert new.bad_level is None  # overload marks no level as bad


@pytest.mark.parametrize(
    ("limits", "successes", "queued", "now", "cap"),
    [
        (L(cap=6), 4, True, 0.0, 7),
        (L(cap=6), 3, True, 0.0, 6),
        (L(cap=6), 4, False, 0.0, 6),
        (L(cap=24), 4, True, 0.0, 24),
        (L(cap=6, bad_level=7, bad_at=0.0), 4, True, 59.0, 6),
        (L(cap=6, bad_level=7, bad_at=0.0), 4, True, 60.0, 7),
    ],
)
def test_success_table(
    limits: aimd.Limits, successes: int, queued: bool, now: float, cap: int
) -> None:
    for _ in range(successes):
        limits, _change = aimd.success(limits, P, slot_epoch=0, now=now, queued=queued)
    assert limits.cap == cap


def test_paced_pauses_once_and_journals_only_a_new_pause() -> None:
    first, change = aimd.paced(L(cap=5), now=10.0, seconds=3.0)
    assert first.cooldown_until == 13.0 and change == aimd.Change("paced", 5, 3.0)
    again, change = aimd.paced(first, now=11.0, seconds=4.0)
    assert again.cooldown_until == 15.0 and change is None


def test_idle_reset_table() -> None:
    assert aimd.idle_reset(L(cap=24), P) == (L(cap=24), None)
    new, change = aimd.idle_reset(L(cap=3, epoch=2, last_good=2, bad_level=4), P)
    assert (new.cap, new.epoch, new.last_good, new.bad_level) == (24, 3, None, None)
    assert change == aimd.Change("idle_reset", 3)


# -- rate-limit headers ------------------------------------------------------------------------


def test_read_windows_takes_the_documented_headers() -> None:
    headers = {
        "Anthropic-RateLimit-Requests-Limit": "50",
        "anthropic-ratelimit-requests-remaining": "2",
        "anthropic-ratelimit-requests-reset": "2026-01-01T00:00:30Z",
        "anthropic-ratelimit-output-tokens-remaining": "0",
        "anthropic-ratelimit-output-tokens-reset": "2026-01-01T00:00:10+00:00",
        "anthropic-ratelimit-tokens-remaining": "junk",
        "anthropic-ratelimit-tokens-reset": "2026-01-01T00:00:10Z",
        "anthropic-ratelimit-input-tokens-remaining": "5",  # no reset: unusable
        "retry-after": "3",
    }
    windows = read_windows(headers)
    assert [(w.name, w.remaining, w.limit) for w in windows] == [
        ("requests", 2.0, 50.0),
        ("output-tokens", 0.0, None),
    ]
    assert read_windows({"content-type": "application/json"}) == []


@pytest.mark.parametrize(
    ("window", "pace_below", "pause"),
    [
        (RateWindow("requests", 40, reset_at=160.0, limit=50), 0.05, 0.0),  # plenty left
        (RateWindow("requests", 0, reset_at=160.0, limit=50), 0.05, 60.0),  # empty: to reset
        (RateWindow("tokens", 0, reset_at=160.0), 0.05, 60.0),  # no limit given, empty
        (RateWindow("tokens", 10, reset_at=160.0), 0.05, 0.0),  # no limit given, not empty
        # 1 of 50 left, refill to 5 of 50: 60 s * (5 - 1) / (50 - 1)
        (RateWindow("requests", 1, reset_at=160.0, limit=50), 0.1, 60 * 4 / 49),
        (RateWindow("requests", 1, reset_at=50.0, limit=50), 0.1, 0.0),  # reset passed
        (RateWindow("requests", 1, reset_at=160.0, limit=50), 0.0, 0.0),  # pacing off
    ],
)
def test_pace_pause_table(window: RateWindow, pace_below: float, pause: float) -> None:
    assert math.isclose(pace_pause([window], now=100.0, pace_below=pace_below), pause)


@pytest.mark.anyio
async def test_governor_pace_holds_new_grants_on_its_clock() -> None:
    clock = FakeClock(start=0.0, wall_start=100.0)
    gov = Governor(GovernorPolicy(ceiling=4), clock=clock)
    headers = {
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": "1970-01-01T00:01:50Z",  # wall 110: 10 s away
    }
    assert gov.pace(A, headers) == pytest.approx(10.0)
    assert gov.journal[-1].reason == "paced"
    async with gov.slot(A):
        assert clock.monotonic() == pytest.approx(10.0)
    assert gov.pace(A, {}) == 0.0


# -- priority and the store --------------------------------------------------------------------


@pytest.mark.anyio
async def test_higher_priority_waiters_are_served_first_then_fifo() -> None:
    gov = Governor(GovernorPolicy(ceiling=1), clock=FakeClock())
    running = await gov.acquire(A)
    granted: list[str] = []

    async def wait(name: str, priority: int) -> None:
        slot = await gov.acquire(A, priority=priority)
        granted.append(name)
        await anyio.lowlevel.checkpoint()
        slot.release()

    async with anyio.create_task_group() as tg:
        for name, priority in [("sub-1", 0), ("sub-2", 0), ("retry", 1), ("lead", 2), ("sub-3", 0)]:
            tg.start_soon(wait, name, priority)
            await anyio.wait_all_tasks_blocked()
        running.release()
    assert granted == ["lead", "retry", "sub-1", "sub-2", "sub-3"]


@pytest.mark.anyio
async def test_a_shared_account_carries_what_was_learnt_to_another_governor() -> None:
    account = ProcessAccount()
    first = Governor(GovernorPolicy(ceiling=24), clock=FakeClock(), account=account)
    slots: list[Slot] = [await first.acquire(A) for _ in range(4)]
    slots[0].rate_limited(measured=True)  # three others in flight, not rejected
    for slot in slots:
        slot.release()
    second = Governor(GovernorPolicy(ceiling=24), clock=FakeClock(), account=account)
    assert second.state(A).cap == 3


@pytest.mark.anyio
async def test_streaming_is_counted_and_released() -> None:
    gov = Governor(GovernorPolicy(ceiling=8), clock=FakeClock())
    slots = [await gov.acquire(A) for _ in range(3)]
    for slot in slots[:2]:
        slot.streaming()
        slot.streaming()  # idempotent
    assert gov.state(A).streaming == 2
    slots[2].rate_limited(measured=True)
    assert gov.state(A).cap == 2
    for slot in slots:
        slot.release()
    assert (gov.state(A).streaming, gov.total_in_flight) == (0, 0)


def test_policy_is_a_frozen_pydantic_model() -> None:
    policy = GovernorPolicy(ceiling=4)
    assert GovernorPolicy.model_validate(policy.model_dump()) == policy
    with pytest.raises(Exception, match="frozen"):
        policy.ceiling = 5  # type: ignore[misc]


# -- wall-clock times in headers, on frozen time (freezegun) -----------------------------------


def test_http_dates_and_window_resets_are_read_against_the_wall_clock() -> None:
    """``retry-after`` as an HTTP date and the ``anthropic-ratelimit-*-reset`` times are
    absolute: what they mean depends on the wall clock at the moment they are read."""
    with freeze_time("2026-12-01 12:00:00"):
        assert retry_after_from_headers({"Retry-After": "Tue, 01 Dec 2026 12:00:30 GMT"}) == 30.0
        assert retry_after_from_headers({"retry-after": "Tue, 01 Dec 2026 11:59:00 GMT"}) == 0.0
        governor = Governor(GovernorPolicy(ceiling=8))  # the system clock, frozen
        empty = {
            "anthropic-ratelimit-requests-remaining": "0",
            "anthropic-ratelimit-requests-reset": "2026-12-01T12:00:45Z",
        }
        assert governor.pace(A, empty) == 45.0
        assert governor.journal[-1].reason == "paced"
    with freeze_time("2026-12-01 12:00:40"):
        assert retry_after_from_headers({"Retry-After": "Tue, 01 Dec 2026 12:00:30 GMT"}) == 0.0
        assert Governor(GovernorPolicy(ceiling=8)).pace(A, empty) == 5.0
