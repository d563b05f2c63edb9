"""Retries, backoff and deadlines on frozen time (freezegun), with no real sleeping.

``FrozenClock`` is the project's one clock seam driven by freezegun: ``monotonic`` and
``time`` read the patched ``time`` module, and ``sleep`` ticks the frozen clock instead
of sleeping, so a 10-second retry schedule runs in microseconds and is exact.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from freezegun import freeze_time
from freezegun.api import FrozenDateTimeFactory, StepTickTimeFactory, TickingDateTimeFactory

import teamlead
from teamlead._claude.inbox import consume_inbox
from teamlead.policy import Policy, RetryPolicy

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


def _failing_synthesis(calls: list[dict[str, Any]]) -> Any:
    async def query_fn(*, prompt: str, options: Any) -> AsyncIterator[dict[str, Any]]:
        calls.append({"prompt": prompt, "resume": options.resume, "at": time.monotonic()})
        sid = "11111111-2222-3333-4444-555555555555"
        if options.resume is None:
            yield {
                "type": "system",
                "subtype": "task_started",
                "task_id": "t1",
                "description": "probe",
                "session_id": sid,
            }
            yield {
                "type": "system",
                "subtype": "task_notification",
                "task_id": "t1",
                "status": "completed",
                "summary": "FINDING[probe]",
                "session_id": sid,
            }
        yield {
            "type": "result",
            "subtype": "success",
            "is_error": True,
            "api_error_status": 529,
            "result": "API Error: 529",
            "session_id": sid,
            "total_cost_usd": 0.01,
        }

    return query_fn


async def test_resume_backoff_follows_the_policy_on_frozen_time(frozen: FrozenClock) -> None:
    calls: list[dict[str, Any]] = []
    policy = Policy(resume_retry=RetryPolicy(attempts=3, base_s=2, factor=3), deadline_s=100)
    items = [
        i
        async for i in teamlead.query(
            "go", query_fn=_failing_synthesis(calls), policy=policy, clock=frozen
        )
    ]
    done = items[-1]
    assert isinstance(done, teamlead.Finished) and done.status == "failed"
    assert frozen.slept == [2.0, 6.0]
    starts = [c["at"] for c in calls[1:]]
    assert [round(b - a, 6) for a, b in zip(starts, starts[1:], strict=False)] == [2.0, 6.0]


async def test_a_retry_past_the_deadline_is_not_attempted(frozen: FrozenClock) -> None:
    calls: list[dict[str, Any]] = []
    policy = Policy(resume_retry=RetryPolicy(attempts=5, base_s=2, factor=3), deadline_s=7)
    items = [
        i
        async for i in teamlead.query(
            "go", query_fn=_failing_synthesis(calls), policy=policy, clock=frozen
        )
    ]
    failures = [i for i in items if isinstance(i, teamlead.ResumeFailed)]
    assert frozen.slept == [2.0]  # 2 s then 6 s more would pass the 7 s deadline
    assert [f.retry_in_s for f in failures] == [2.0, None]
    assert len(calls) == 3  # the first run and two resume attempts


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
