"""The adaptive concurrency governor: AIMD rules, epochs, pauses, queues and cancel-safety.

Time is a FakeClock throughout: a wait on the governor's clock (a Retry-After pause or an
acquire timeout) advances virtual time instantly, so nothing here sleeps for real.
"""

from __future__ import annotations

import logging
import random
from datetime import datetime, timezone
from email.utils import format_datetime
from typing import Any

import anyio
import pytest

from teamlead.errors import TeamleadError, UsageError
from teamlead.events import EVENT_VERSION
from teamlead.governor import (
    ConcurrencyChanged,
    Governor,
    GovernorCleared,
    GovernorPolicy,
    Slot,
    bucket_key,
    parse_retry_after,
    retry_after_from_headers,
)
from teamlead.testing import FakeClock

from .governors import OPUS as B
from .governors import SONNET as A
from .governors import recorded_governor

pytestmark = pytest.mark.anyio

C = "openrouter/qwen3-coder"


async def hold(gov: Governor, key: str, n: int) -> list[Slot]:
    return [await gov.acquire(key) for _ in range(n)]


def release_all(slots: list[Slot]) -> None:
    for slot in slots:
        slot.release()


class Waiters:
    """Background acquirers whose grant order is recorded."""

    def __init__(self, gov: Governor, tg: anyio.abc.TaskGroup) -> None:
        self.gov = gov
        self.tg = tg
        self.granted: list[tuple[str, Slot]] = []
        self.errors: list[tuple[str, BaseException]] = []

    async def start(self, name: str, key: str, **kwargs: Any) -> None:
        async def run() -> None:
            try:
                slot = await self.gov.acquire(key, **kwargs)
            except (GovernorCleared, TimeoutError) as exc:
                self.errors.append((name, exc))
                return
            self.granted.append((name, slot))

        self.tg.start_soon(run)
        await anyio.wait_all_tasks_blocked()

    def names(self) -> list[str]:
        return [name for name, _ in self.granted]

    def slot(self, name: str) -> Slot:
        return next(slot for n, slot in self.granted if n == name)


async def settle() -> None:
    await anyio.wait_all_tasks_blocked()


# -- policy and helpers -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"ceiling": 0}, "ceiling"),
        ({"ceiling": 4, "floor": 5}, "floor"),
        ({"floor": 0}, "floor"),
        ({"decrease": 1.0}, "decrease"),
        ({"decrease": 0.0}, "decrease"),
        ({"successes_to_grow": 0}, "successes_to_grow"),
        ({"idle_reset_s": 0}, "idle_reset_s"),
        ({"max_total": 0}, "max_total"),
        ({"reprobe_after_s": -1}, "reprobe_after_s"),
    ],
)
def test_policy_rejects_bad_values_with_a_usage_error(
    kwargs: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(UsageError, match=fragment):
        GovernorPolicy(**kwargs)


def test_policy_defaults_are_the_documented_ones() -> None:
    policy = GovernorPolicy()
    assert (policy.floor, policy.decrease, policy.successes_to_grow) == (1, 0.75, 4)
    assert (policy.idle_reset_s, policy.max_total, policy.reprobe_after_s) == (300.0, None, 60.0)


def test_bucket_key_joins_provider_and_model() -> None:
    assert bucket_key("anthropic", "claude-sonnet-5-5") == A
    with pytest.raises(UsageError):
        bucket_key("", "x")


def test_parse_retry_after_reads_seconds_and_http_dates() -> None:
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after("0") == 0.0
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=timezone.utc).timestamp()
    later = format_datetime(datetime(2025, 1, 1, 12, 0, 7, tzinfo=timezone.utc), usegmt=True)
    assert parse_retry_after(later, now=now) == 7.0
    earlier = format_datetime(datetime(2025, 1, 1, 11, 0, 0, tzinfo=timezone.utc), usegmt=True)
    assert parse_retry_after(earlier, now=now) == 0.0
    for bad in (None, "", "soon", "-3", "nan", "inf"):
        assert parse_retry_after(bad) is None


def test_retry_after_from_headers_prefers_milliseconds_and_ignores_case() -> None:
    assert retry_after_from_headers({"Retry-After": "3"}) == 3.0
    assert retry_after_from_headers({"retry-after-ms": "250", "retry-after": "3"}) == 0.25
    assert retry_after_from_headers({"x-other": "1"}) is None


# -- multiplicative decrease and epochs -----------------------------------------------------


async def test_starts_at_the_ceiling_and_cuts_a_quarter_down_to_the_floor() -> None:
    gov, _, _ = recorded_governor(ceiling=8)
    assert gov.state(A).cap == 8
    caps = []
    for _ in range(6):
        slot = await gov.acquire(A)
        slot.rate_limited()
        slot.release()
        caps.append(gov.state(A).cap)
    # floor(8*.75)=6, floor(6*.75)=4, floor(4*.75)=3, floor(3*.75)=2, floor(2*.75)=1, floor 1
    assert caps == [6, 4, 3, 2, 1, 1]
    assert [e.reason for e in gov.journal] == ["rate_limited"] * 5


async def test_cut_never_goes_below_the_configured_floor() -> None:
    gov, _, _ = recorded_governor(ceiling=4, floor=3)
    for _ in range(3):
        async with gov.slot(A) as slot:
            slot.rate_limited()
    assert gov.state(A).cap == 3


async def test_rejections_sent_before_the_cut_count_once() -> None:
    gov, _, _ = recorded_governor(ceiling=8)
    burst = await hold(gov, A, 8)
    assert {s.epoch for s in burst} == {0}
    for slot in burst:
        slot.rate_limited()
    state = gov.state(A)
    assert (state.cap, state.epoch) == (6, 1)
    assert len(gov.journal) == 1
    release_all(burst)
    fresh = await gov.acquire(A)
    assert fresh.epoch == 1
    fresh.rate_limited()
    assert gov.state(A).cap == 4
    fresh.release()


# -- additive increase ------------------------------------------------------------------------


async def cut_once(gov: Governor, key: str = A) -> None:
    async with gov.slot(key) as slot:
        slot.rate_limited()


async def test_grows_by_one_after_four_consecutive_successes_while_callers_queue() -> None:
    gov, _, seen = recorded_governor(ceiling=8)
    await cut_once(gov)  # 8 -> 6
    running = await hold(gov, A, 6)
    async with anyio.create_task_group() as tg:
        waiters = Waiters(gov, tg)
        await waiters.start("w", A)
        for slot in running[:3]:
            slot.success()
        assert gov.state(A).cap == 6
        running[3].success()
        state = gov.state(A)
        assert (state.cap, state.last_good, state.in_flight) == (7, 6, 7)
        await settle()
        assert waiters.names() == ["w"]  # the new room went to the queued caller at once
        assert seen[-1].reason == "increase"
        assert (seen[-1].previous_cap, seen[-1].cap) == (6, 7)
        release_all(running)
        waiters.slot("w").release()
    assert gov.total_in_flight == 0


async def test_no_growth_without_queued_callers_and_growth_once_they_queue() -> None:
    gov, _, _ = recorded_governor(ceiling=8)
    await cut_once(gov)
    running = await hold(gov, A, 6)
    for _ in range(5):
        running[0].success()
    assert gov.state(A).cap == 6  # nobody waits: growing would only invite a 429
    async with anyio.create_task_group() as tg:
        waiters = Waiters(gov, tg)
        await waiters.start("w", A)
        running[1].success()  # the earned credit is used as soon as someone queues
        assert gov.state(A).cap == 7
        await settle()
        release_all([*running, waiters.slot("w")])


async def test_no_growth_at_the_ceiling() -> None:
    gov, _, seen = recorded_governor(ceiling=2)
    running = await hold(gov, A, 2)
    async with anyio.create_task_group() as tg:
        waiters = Waiters(gov, tg)
        await waiters.start("w", A)
        for _ in range(8):
            running[0].success()
        assert gov.state(A).cap == 2
        assert seen == []
        release_all(running)
        await settle()
        waiters.slot("w").release()


async def test_growth_needs_successes_of_the_current_epoch() -> None:
    gov, _, _ = recorded_governor(ceiling=8)
    old = await hold(gov, A, 6)  # epoch 0
    old[0].rate_limited()  # cut to 6, epoch 1: the other five are from before the cut
    async with anyio.create_task_group() as tg:
        waiters = Waiters(gov, tg)
        await waiters.start("w", A)
        for slot in old[1:]:
            slot.success()
        assert gov.state(A).cap == 6
        old[0].release()
        await settle()
        new = waiters.slot("w")
        assert new.epoch == 1
        await waiters.start("w2", A)
        for _ in range(4):
            new.success()
        assert gov.state(A).cap == 7
        await settle()
        release_all([*old, new, waiters.slot("w2")])


async def test_a_rate_limit_resets_the_run_of_successes() -> None:
    gov, _, _ = recorded_governor(ceiling=8)
    await cut_once(gov)  # 6, epoch 1
    running = await hold(gov, A, 6)
    async with anyio.create_task_group() as tg:
        waiters = Waiters(gov, tg)
        await waiters.start("w", A)
        for _ in range(3):
            running[0].success()
        running[1].rate_limited()  # 6 -> 4, epoch 2
        release_all(running[:3])  # 3 still run; the waiter gets a slot of the new epoch
        await settle()
        fresh = waiters.slot("w")
        await waiters.start("w2", A)
        for _ in range(3):
            fresh.success()
        assert gov.state(A).cap == 4
        fresh.success()
        assert gov.state(A).cap == 5
        release_all([*running, fresh])
        await settle()
        waiters.slot("w2").release()
    assert gov.total_in_flight == 0


# -- last good, re-probing ---------------------------------------------------------------------


async def probe_to_seven(gov: Governor) -> tuple[list[Slot], Slot]:
    """Cut 8 -> 6, then earn a probe to 7; return the six slots and the probing slot."""
    await cut_once(gov)
    running = await hold(gov, A, 6)
    async with anyio.create_task_group() as tg:
        waiters = Waiters(gov, tg)
        await waiters.start("probe", A)
        for slot in running[:4]:
            slot.success()
        await settle()
    return running, waiters.slot("probe")


async def test_a_failed_probe_returns_to_last_good_instead_of_cutting() -> None:
    gov, _, seen = recorded_governor(ceiling=8)
    running, probe = await probe_to_seven(gov)
    assert (gov.state(A).cap, gov.state(A).last_good) == (7, 6)
    probe.rate_limited()
    state = gov.state(A)
    assert state.cap == 6  # back to last good, not floor(7 * 0.75) = 5
    assert seen[-1].reason == "probe_failed"
    assert (seen[-1].previous_cap, seen[-1].cap, seen[-1].epoch) == (7, 6, 2)
    release_all([*running, probe])
    async with gov.slot(A) as slot:  # at last good, a rate limit is a real cut again
        slot.rate_limited()
    assert gov.state(A).cap == 4
    assert gov.journal[-1].reason == "rate_limited"
    assert gov.state(A).last_good is None


async def test_a_level_that_failed_is_not_probed_again_before_reprobe_after() -> None:
    gov, clock, _ = recorded_governor(ceiling=8, reprobe_after_s=60)
    running, probe = await probe_to_seven(gov)
    probe.rate_limited()  # back to 6; 7 is remembered as bad
    release_all([*running, probe])
    running = await hold(gov, A, 6)
    async with anyio.create_task_group() as tg:
        waiters = Waiters(gov, tg)
        await waiters.start("w", A)
        for _ in range(12):
            running[0].success()
        assert gov.state(A).cap == 6
        clock.advance(60)
        running[0].success()
        assert gov.state(A).cap == 7
        await settle()
        release_all([*running, waiters.slot("w")])


async def grow_attempt(gov: Governor, successes: int = 8) -> int:
    """Fill the bucket, queue a caller, report successes; return the cap afterwards."""
    running = await hold(gov, A, gov.state(A).cap)
    async with anyio.create_task_group() as tg:
        waiters = Waiters(gov, tg)
        await waiters.start("w", A)
        for _ in range(successes):
            running[0].success()
        cap = gov.state(A).cap
        release_all(running)
        await settle()
        waiters.slot("w").release()
    return cap


@pytest.mark.parametrize(("rejected", "cap_after"), [(1, 10), (2, 10), (3, 9)])
async def test_each_rejection_of_the_cutting_burst_lowers_the_level_not_to_probe(
    rejected: int, cap_after: int
) -> None:
    # 12 sent together; the first rejection cuts to 9 and marks 12 as bad. Each further
    # rejection of that burst lowers the bad level by one (not below cap + 1 = 10).
    gov, _, _ = recorded_governor(ceiling=12)
    burst = await hold(gov, A, 12)
    for slot in burst[:rejected]:
        slot.rate_limited()
    release_all(burst)
    assert gov.state(A).cap == 9
    # bad level 12 - (rejected - 1): growth to 10 stays allowed unless 10 is the bad level
    assert await grow_attempt(gov) == cap_after


async def test_a_burst_that_found_the_limit_is_not_probed_right_again() -> None:
    # Hidden limit 6: 9 sent together, 3 rejected -> cut to 6, and 7 is not probed.
    gov, clock, seen = recorded_governor(ceiling=9)
    burst = await hold(gov, A, 9)
    for slot in burst[6:]:
        slot.rate_limited()
    release_all(burst)
    assert gov.state(A).cap == 6
    assert await grow_attempt(gov) == 6
    clock.advance(60)
    assert await grow_attempt(gov) == 7
    assert [e.reason for e in seen] == ["rate_limited", "increase"]


async def test_reprobe_after_zero_is_plain_aimd() -> None:
    gov, _, _ = recorded_governor(ceiling=8, reprobe_after_s=0)
    running, probe = await probe_to_seven(gov)
    probe.rate_limited()
    release_all([*running, probe])
    running = await hold(gov, A, 6)
    async with anyio.create_task_group() as tg:
        waiters = Waiters(gov, tg)
        await waiters.start("w", A)
        for _ in range(4):
            running[0].success()
        assert gov.state(A).cap == 7
        await settle()
        release_all([*running, waiters.slot("w")])


# -- Retry-After -----------------------------------------------------------------------------


async def test_retry_after_pauses_new_acquisitions_of_that_bucket_only() -> None:
    gov, clock, seen = recorded_governor(ceiling=4)
    other_running = await gov.acquire(A)
    slot = await gov.acquire(A)
    slot.rate_limited(2.0)
    slot.release()
    assert seen[-1].retry_after_s == 2.0
    assert gov.state(A).cooldown_s == 2.0
    other = await gov.acquire(B)  # another bucket is not paused
    assert clock.monotonic() == 0.0
    paused = await gov.acquire(A)  # waits out the pause on the governor's clock
    assert clock.monotonic() == pytest.approx(2.0)
    assert clock.sleeps == [2.0]
    assert gov.state(A).in_flight == 2  # the slot running during the pause was untouched
    release_all([other_running, other, paused])
    assert gov.total_in_flight == 0


async def test_pause_holds_back_callers_already_queued() -> None:
    gov, clock, _ = recorded_governor(ceiling=1)
    running = await gov.acquire(A)
    async with anyio.create_task_group() as tg:
        waiters = Waiters(gov, tg)
        await waiters.start("w1", A)
        await waiters.start("w2", A)
        granted_at: list[float] = []
        running.rate_limited(3.0)
        running.release()  # the slot is free, but the bucket is paused
        await settle()
        granted_at.append(clock.monotonic())
        assert waiters.names() == ["w1"]
        assert granted_at[0] >= 3.0
        waiters.slot("w1").release()
        await settle()
        assert waiters.names() == ["w1", "w2"]
        waiters.slot("w2").release()
    assert gov.total_in_flight == 0


async def test_a_stale_rejection_still_extends_the_pause_but_does_not_cut() -> None:
    gov, clock, seen = recorded_governor(ceiling=4)
    first, second = await hold(gov, A, 2)
    first.rate_limited(1.0)
    second.rate_limited(5.0)
    assert gov.state(A).cap == 3
    assert [e.reason for e in seen] == ["rate_limited", "retry_after"]
    assert (seen[-1].cap, seen[-1].retry_after_s) == (3, 5.0)
    release_all([first, second])
    async with gov.slot(A):
        assert clock.monotonic() == pytest.approx(5.0)


# -- idle reset ------------------------------------------------------------------------------


async def test_five_idle_minutes_reset_the_bucket_to_the_ceiling() -> None:
    gov, clock, seen = recorded_governor(ceiling=8)
    late = await gov.acquire(A)
    await cut_once(gov)
    await cut_once(gov)  # 8 -> 6 -> 4
    late.release()
    clock.advance(299)
    assert gov.state(A).cap == 4
    clock.advance(1)
    state = gov.state(A)
    assert state.cap == 8
    assert seen[-1].reason == "idle_reset"
    assert (seen[-1].previous_cap, seen[-1].cap, seen[-1].effective) == (4, 8, 8)
    late.rate_limited()  # a report from before the idle spell does not cut the fresh bucket
    assert gov.state(A).cap == 8


async def test_a_bucket_with_work_running_is_not_idle() -> None:
    gov, clock, _ = recorded_governor(ceiling=8)
    await cut_once(gov)
    running = await gov.acquire(A)
    clock.advance(1000)
    assert gov.state(A).cap == 6
    running.release()
    clock.advance(300)
    assert gov.state(A).cap == 8


# -- queues and the global cap ---------------------------------------------------------------


async def test_waiters_of_one_key_are_served_in_arrival_order() -> None:
    gov, _, _ = recorded_governor(ceiling=1)
    running = await gov.acquire(A)
    async with anyio.create_task_group() as tg:
        waiters = Waiters(gov, tg)
        for name in ("w1", "w2", "w3"):
            await waiters.start(name, A)
        assert gov.state(A).waiting == 3
        running.release()
        for expected in (["w1"], ["w1", "w2"], ["w1", "w2", "w3"]):
            await settle()
            assert waiters.names() == expected
            assert gov.state(A).in_flight == 1
            waiters.granted[-1][1].release()
    assert gov.total_in_flight == 0


async def test_a_fresh_caller_does_not_jump_the_queue() -> None:
    gov, _, _ = recorded_governor(ceiling=1)
    running = await gov.acquire(A)
    async with anyio.create_task_group() as tg:
        waiters = Waiters(gov, tg)
        await waiters.start("queued", A)
        running.release()  # handed to the queued caller in the same step
        await waiters.start("late", A)
        assert waiters.names() == ["queued"]
        waiters.slot("queued").release()
        await settle()
        assert waiters.names() == ["queued", "late"]
        waiters.slot("late").release()


async def test_global_cap_hands_a_release_to_the_same_key_first() -> None:
    gov, _, _ = recorded_governor(ceiling=4, max_total=2)
    a1, a2 = await hold(gov, A, 2)
    async with anyio.create_task_group() as tg:
        waiters = Waiters(gov, tg)
        await waiters.start("b1", B)  # blocked only by the global cap, and first in line
        await waiters.start("a3", A)
        a1.release()
        await settle()
        assert waiters.names() == ["a3"]  # same key first, although b1 waited longer
        a2.release()
        await settle()
        assert waiters.names() == ["a3", "b1"]  # no same-key waiter: another key's
        assert gov.total_in_flight == 2
        release_all([s for _, s in waiters.granted])
    assert gov.total_in_flight == 0


async def test_global_cap_wakes_the_oldest_waiter_of_another_key() -> None:
    gov, _, _ = recorded_governor(ceiling=4, max_total=1)
    a = await gov.acquire(A)
    async with anyio.create_task_group() as tg:
        waiters = Waiters(gov, tg)
        await waiters.start("b1", B)
        await waiters.start("c1", C)
        await waiters.start("b2", B)
        a.release()
        await settle()
        assert waiters.names() == ["b1"]
        waiters.slot("b1").release()
        await settle()
        assert waiters.names() == ["b1", "b2"]  # same key before the older c1
        waiters.slot("b2").release()
        await settle()
        assert waiters.names() == ["b1", "b2", "c1"]
        waiters.slot("c1").release()
    assert gov.total_in_flight == 0


async def test_global_cap_skips_a_waiter_whose_own_bucket_is_full() -> None:
    gov, _, _ = recorded_governor(ceiling=1, max_total=2)
    a = await gov.acquire(A)
    b = await gov.acquire(B)
    async with anyio.create_task_group() as tg:
        waiters = Waiters(gov, tg)
        await waiters.start("a2", A)  # blocked by A's own cap
        await waiters.start("c1", C)  # blocked only by the global cap
        b.release()
        await settle()
        assert waiters.names() == ["c1"]
        a.release()
        await settle()
        assert waiters.names() == ["c1", "a2"]
        release_all([s for _, s in waiters.granted])
    assert gov.total_in_flight == 0


async def test_effective_limit_is_capped_by_the_global_cap() -> None:
    gov, _, _ = recorded_governor(ceiling=8, max_total=3)
    assert gov.state(A).effective == 3


# -- cancellation, timeouts, clear -------------------------------------------------------------


async def test_a_waiter_cancelled_as_it_is_granted_gives_the_slot_back() -> None:
    gov, _, _ = recorded_governor(ceiling=1)
    running = await gov.acquire(A)
    got: list[Slot] = []
    scope = anyio.CancelScope()

    async def doomed() -> None:
        with scope:
            got.append(await gov.acquire(A))

    async with anyio.create_task_group() as tg:
        tg.start_soon(doomed)
        await settle()
        waiters = Waiters(gov, tg)
        await waiters.start("next", A)
        running.release()  # grants the doomed waiter its slot...
        scope.cancel()  # ...and cancels it in the same step, before it runs
        assert gov.state(A).in_flight == 1
        await settle()
        assert got == []
        assert waiters.names() == ["next"]  # the slot went on instead of leaking
        assert gov.state(A).in_flight == 1
        waiters.slot("next").release()
    assert (gov.state(A).in_flight, gov.state(A).waiting, gov.total_in_flight) == (0, 0, 0)


async def test_a_cancelled_queued_waiter_is_skipped() -> None:
    gov, _, _ = recorded_governor(ceiling=1)
    running = await gov.acquire(A)
    async with anyio.create_task_group() as tg:
        scope = anyio.CancelScope()

        async def doomed() -> None:
            with scope:
                await gov.acquire(A)

        tg.start_soon(doomed)
        await settle()
        waiters = Waiters(gov, tg)
        await waiters.start("next", A)
        scope.cancel()
        await settle()
        assert gov.state(A).waiting == 1
        running.release()
        await settle()
        assert waiters.names() == ["next"]
        waiters.slot("next").release()
    assert gov.total_in_flight == 0


async def test_cancelling_the_head_of_a_paused_bucket_passes_the_timer_on() -> None:
    gov, clock, _ = recorded_governor(ceiling=2)
    running = await gov.acquire(A)
    running.rate_limited(4.0)  # 2 -> 1, paused for 4 s
    running.release()
    async with anyio.create_task_group() as tg:
        scope = anyio.CancelScope()

        async def doomed() -> None:
            with scope:
                await gov.acquire(A)

        scope.cancel()  # cancelled before it could even queue
        tg.start_soon(doomed)
        waiters = Waiters(gov, tg)
        await waiters.start("next", A)
        await settle()
        assert waiters.names() == ["next"]
        assert clock.monotonic() >= 4.0
        waiters.slot("next").release()
    assert gov.total_in_flight == 0


async def test_acquire_timeout_runs_on_the_governor_clock() -> None:
    gov, clock, _ = recorded_governor(ceiling=1)
    running = await gov.acquire(A)
    with pytest.raises(TimeoutError, match="no concurrency slot for 'anthropic/claude-sonnet-5-5'"):
        await gov.acquire(A, timeout=5)
    assert clock.monotonic() == pytest.approx(5.0)
    assert gov.state(A).waiting == 0
    running.release()
    assert gov.total_in_flight == 0
    with pytest.raises(UsageError):
        await gov.acquire(A, timeout=-1)
    with pytest.raises(UsageError):
        await gov.acquire("")


async def test_acquire_works_inside_fail_after() -> None:
    gov = Governor(GovernorPolicy(ceiling=1))  # the real clock: fail_after uses real time
    running = await gov.acquire(A)
    with pytest.raises(TimeoutError), anyio.fail_after(0.05):
        await gov.acquire(A)
    assert gov.state(A).waiting == 0
    running.release()
    assert gov.total_in_flight == 0


async def test_clear_rejects_every_waiter_with_a_clear_error() -> None:
    gov, _, _ = recorded_governor(ceiling=1, max_total=1)
    running = await gov.acquire(A)
    async with anyio.create_task_group() as tg:
        waiters = Waiters(gov, tg)
        await waiters.start("a", A)
        await waiters.start("b", B)
        gov.clear()
        await settle()
    assert [name for name, _ in waiters.errors] == ["a", "b"]
    error = waiters.errors[0][1]
    assert isinstance(error, GovernorCleared)
    assert isinstance(error, TeamleadError)
    assert "cleared while waiting for 'anthropic/claude-sonnet-5-5'" in str(error)
    assert gov.state(A).waiting == gov.state(B).waiting == 0
    running.release()  # held slots are still accounted and released as usual
    assert gov.total_in_flight == 0
    async with gov.slot(B):  # and the governor stays usable
        assert gov.total_in_flight == 1


async def test_the_slot_context_releases_on_error() -> None:
    gov, _, _ = recorded_governor(ceiling=2)
    with pytest.raises(RuntimeError):
        async with gov.slot(A) as slot:
            raise RuntimeError("work failed")
    assert slot.released
    slot.release()  # idempotent
    assert gov.total_in_flight == 0


async def test_rate_limited_rejects_a_negative_retry_after() -> None:
    gov, _, _ = recorded_governor()
    async with gov.slot(A) as slot:
        with pytest.raises(UsageError):
            slot.rate_limited(-1.0)


# -- the journal -------------------------------------------------------------------------------


async def test_journal_records_every_change_with_its_fields() -> None:
    gov, clock, seen = recorded_governor(ceiling=4, max_total=3)
    clock.advance(10)
    async with gov.slot(A) as slot:
        slot.rate_limited(1.5)
    assert seen == list(gov.journal)
    event = gov.journal[0]
    assert event.model_dump() == {
        "type": "concurrency_changed",
        "version": EVENT_VERSION,
        "key": A,
        "reason": "rate_limited",
        "cap": 3,
        "previous_cap": 4,
        "effective": 3,
        "epoch": 1,
        "retry_after_s": 1.5,
        "at": clock.time(),
    }
    again = ConcurrencyChanged.model_validate_json(event.to_json())
    assert again == event
    with pytest.raises(ValueError):
        event.cap = 9  # records are frozen


async def test_a_failing_callback_is_logged_and_does_not_break_accounting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(event: ConcurrencyChanged) -> None:
        raise RuntimeError("view crashed")

    gov = Governor(GovernorPolicy(ceiling=4), clock=FakeClock(), on_change=broken)
    with caplog.at_level(logging.ERROR, logger="teamlead.governor"):
        async with gov.slot(A) as slot:
            slot.rate_limited()
    assert gov.state(A).cap == 3
    assert len(gov.journal) == 1
    assert "on_change callback failed" in caplog.text
    assert gov.total_in_flight == 0


# -- a seeded storm: nothing leaks ------------------------------------------------------------


async def test_a_seeded_storm_of_callers_leaks_no_slot() -> None:
    rng = random.Random(7)
    gov, _, _ = recorded_governor(ceiling=4, max_total=5, reprobe_after_s=0)
    peak = {"total": 0}
    outcomes = {"ok": 0, "cancelled": 0, "timeout": 0}
    waiting_scopes: list[anyio.CancelScope] = []

    async def worker(key: str, actions: list[str]) -> None:
        for action in actions:
            with anyio.CancelScope() as scope:
                if action == "cancel":
                    waiting_scopes.append(scope)  # the canceller may hit it while it waits
                timeout = 0.5 if action == "timeout" else None
                try:
                    async with gov.slot(key, timeout=timeout) as slot:
                        if scope in waiting_scopes:
                            waiting_scopes.remove(scope)
                        peak["total"] = max(peak["total"], gov.total_in_flight)
                        assert gov.state(key).in_flight <= 4
                        await anyio.lowlevel.checkpoint()
                        if rng.random() < 0.3:
                            slot.rate_limited(rng.choice([None, 0.5]))
                        else:
                            slot.success()
                        outcomes["ok"] += 1
                except TimeoutError:
                    outcomes["timeout"] += 1
            if scope.cancelled_caught:
                outcomes["cancelled"] += 1

    async def canceller() -> None:
        for _ in range(400):
            await anyio.lowlevel.checkpoint()
            if waiting_scopes and rng.random() < 0.2:
                waiting_scopes.pop(rng.randrange(len(waiting_scopes))).cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(canceller)
        for _ in range(40):
            key = rng.choice([A, B, C])
            actions = rng.choices(["ok", "timeout", "cancel"], weights=[6, 1, 2], k=6)
            tg.start_soon(worker, key, actions)
    assert sum(outcomes.values()) == 240
    assert outcomes["cancelled"] > 0
    assert outcomes["timeout"] > 0
    assert peak["total"] <= 5
    assert gov.total_in_flight == 0
    for key in (A, B, C):
        state = gov.state(key)
        assert (state.in_flight, state.waiting) == (0, 0)


async def test_a_pause_another_request_met_does_not_hold_back_a_caller_through_it() -> None:
    """The lead's lane: a 120 s pause (a subagent's 429) holds ordinary callers back, but a
    caller ``through_pause`` is granted at once while the limit has room; the limit still
    holds it."""
    gov, clock, _ = recorded_governor(ceiling=2)
    slot = await gov.acquire(A)
    slot.rate_limited(120.0)  # the cut leaves a limit of 1, and a pause of 120 s
    slot.release()
    with pytest.raises(TimeoutError):  # an ordinary caller waits out the pause
        await gov.acquire(A, timeout=10)
    lead = await gov.acquire(A, timeout=0, priority=10, through_pause=True)
    assert gov.state(A).cooldown_s == 120.0 and clock.monotonic() == 0  # granted in the pause
    with pytest.raises(TimeoutError):  # the limit of 1 still holds the lane
        await gov.acquire(A, timeout=0, priority=10, through_pause=True)
    lead.release()
    again = await gov.acquire(A, timeout=0, priority=10, through_pause=True)
    again.release()
