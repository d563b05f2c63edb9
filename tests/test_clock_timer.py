"""The clock's one timer helper: wait for an event, or for a span on an injected clock."""

from __future__ import annotations

import anyio
import pytest

from teamlead.clock import wait_event
from teamlead.testing import FakeClock

pytestmark = pytest.mark.anyio


class StuckClock(FakeClock):
    """A clock whose sleeps never end: only the event can end the wait."""

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await anyio.sleep_forever()


async def test_the_timer_ends_the_wait_on_the_injected_clock() -> None:
    clock = FakeClock()
    event = anyio.Event()
    assert await wait_event(event, 7.5, clock) is False
    assert clock.sleeps == [7.5] and clock.monotonic() == 7.5


async def test_the_event_ends_the_wait_and_cancels_the_timer() -> None:
    clock = StuckClock()
    event = anyio.Event()
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait_event, event, 1.0, clock)
            await anyio.lowlevel.checkpoint()
            event.set()
    assert clock.sleeps == [1.0]  # the timer started, and was cancelled with the wait


async def test_an_event_already_set_returns_without_a_timer() -> None:
    clock = FakeClock()
    event = anyio.Event()
    event.set()
    assert await wait_event(event, 5.0, clock) is True
    assert clock.sleeps == []


async def test_no_limit_waits_for_the_event_only() -> None:
    clock = FakeClock()
    event = anyio.Event()
    results: list[bool] = []

    async def waiter() -> None:
        results.append(await wait_event(event, None, clock))

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await anyio.lowlevel.checkpoint()
            assert results == []
            event.set()
    assert results == [True] and clock.sleeps == []


async def test_cancelling_the_caller_cancels_the_wait() -> None:
    with anyio.CancelScope() as scope:
        scope.cancel()
        await wait_event(anyio.Event(), 5.0, StuckClock())
    assert scope.cancelled_caught
