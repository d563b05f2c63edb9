"""The tests' :class:`~tests.skip_clock.SkipClock`: a skip ends exactly the waits it passes,
and a held clock spends no time until it is released."""

from __future__ import annotations

import time

import anyio
import pytest

from teamlead.clock import DeadlineClock, move_on_at, wait_event

from .polling import apoll
from .skip_clock import SkipClock, holding, skip_once, skipping

pytestmark = pytest.mark.anyio


async def test_a_skip_ends_the_waits_it_passes_and_re_times_the_others() -> None:
    clock = SkipClock()
    assert isinstance(clock, DeadlineClock)  # teamlead's move_on_at runs on its timers
    start = clock.monotonic()
    ended: list[str] = []

    async def sleeper() -> None:
        await clock.sleep(3600)
        ended.append("sleep")

    async def bounded() -> None:
        with move_on_at(clock, start + 7200) as scope:
            await anyio.sleep_forever()
        ended.append("scope" if scope.cancelled_caught else "?")

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(sleeper)
            tg.start_soon(bounded)
            await anyio.wait_all_tasks_blocked()
            clock.skip_to(start + 1800)  # past neither: both re-timed, neither ends
            clock.skip_to(start + 3600)  # past the sleep only
            assert await apoll(lambda: ended, within_s=10) == ["sleep"]
            clock.skip_to(start + 7200)
    assert ended == ["sleep", "scope"]
    assert clock.monotonic() - start >= 7200


async def test_a_skip_never_moves_time_back_and_leaves_the_wall_clock() -> None:
    clock = SkipClock()
    now = clock.monotonic()
    clock.skip_to(now + 60)
    skipped = clock.skipped
    clock.skip_to(now)  # already past it: nothing moves
    assert clock.skipped == skipped
    assert abs(clock.time() - time.time()) < 60  # not moved by the skip


async def test_skipping_skips_once_ready_and_an_event_still_wins() -> None:
    clock = SkipClock()
    start = clock.monotonic()
    flag: list[bool] = []
    event = anyio.Event()

    async def work() -> bool:
        with move_on_at(clock, start + 3600) as scope:
            flag.append(True)  # what ready() waits for, once the wait is armed
            await event.wait()
        return not scope.cancelled_caught

    with anyio.fail_after(30):
        assert await skipping(clock, lambda: bool(flag), start + 3600, work()) is False
        assert clock.monotonic() - start >= 3600
        event.set()
        assert await wait_event(event, 3600, clock) is True
        assert await skip_once(clock, lambda: False, start, within_s=0.1) is False


async def test_a_held_clock_ends_no_wait_until_released_then_runs_on_from_there() -> None:
    clock = SkipClock(held=True)
    start = clock.monotonic()
    ended: list[str] = []
    waited = anyio.Event()

    async def sleeper() -> None:
        await clock.sleep(0.05)
        ended.append("sleep")

    async def work() -> float:
        async with anyio.create_task_group() as tg:
            tg.start_soon(sleeper)
            await clock.sleep(0)  # a wait already due ends while held
            await anyio.sleep(1.0)  # twenty times the sleep: on real time it would have ended
            assert (ended, clock.monotonic()) == ([], start)
            waited.set()
        return clock.monotonic() - start  # once the sleeper has ended

    with anyio.fail_after(30):
        elapsed, ready = await holding(clock, waited.is_set, work(), within_s=20)
    assert ready and not clock.held and ended == ["sleep"]
    # its time ran on from where it stood at the release: the held second is not in it
    assert 0.05 <= elapsed < 1.0
