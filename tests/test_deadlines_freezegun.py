"""Inbox waits and lock ages on frozen time (freezegun), with no real sleeping.

``FrozenClock`` is the project's one clock seam driven by freezegun: ``monotonic`` and
``time`` read the patched ``time`` module, and ``sleep`` ticks the frozen clock instead
of sleeping, so a 10-second wait runs in microseconds and is exact. File ages (a stale
lock) read the wall clock, which only freezegun moves.

The coordinator's backoff and deadlines run on :class:`~teamlead.clock.FakeClock` in
tests/test_coordinator_unit.py.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from freezegun import freeze_time
from freezegun.api import FrozenDateTimeFactory, StepTickTimeFactory, TickingDateTimeFactory

import teamlead
from teamlead._claude.inbox import consume_inbox

pytestmark = pytest.mark.anyio

Factory = FrozenDateTimeFactory | StepTickTimeFactory | TickingDateTimeFactory


class FrozenClock:
    def __init__(self, frozen: Factory) -> None:
        self.frozen = frozen
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.frozen.tick(seconds)  # type: ignore[union-attr]
        await anyio.lowlevel.checkpoint()


@pytest.fixture
def frozen() -> Iterator[FrozenClock]:
    with freeze_time("2026-11-30 12:00:00", real_asyncio=True) as factory:
        yield FrozenClock(factory)


@pytest.mark.slow
async def test_a_lock_older_than_ten_seconds_is_stale(tmp_path: Path, frozen: FrozenClock) -> None:
    inbox = tmp_path / "teams" / "t" / "inboxes" / "team-lead.json"
    inbox.parent.mkdir(parents=True)
    inbox.write_text(json.dumps([{"from": "a", "text": "hi", "timestamp": "1", "msg_id": "m1"}]))
    lock = inbox.with_name(inbox.name + ".lock")
    lock.mkdir()
    os.utime(lock, (time.time() - 5, time.time() - 5))
    with pytest.raises(teamlead.InboxError):  # 5 s old, 2 s budget: a live holder
        await consume_inbox(inbox, ["m1"], config_dir=tmp_path, clock=frozen)
    assert lock.exists()
    frozen.frozen.tick(4)  # type: ignore[union-attr]  # now over 10 s old: stale
    done = await consume_inbox(inbox, ["m1"], config_dir=tmp_path, clock=frozen)
    assert done.removed == 1 and not lock.exists()
    assert json.loads(inbox.read_text()) == []
