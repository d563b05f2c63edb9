"""Waiting on the inbox: event-driven wake-ups, polling backoff, deadlines, cancel safety."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import ValidationError

from teamlead._claude.inbox import consume_inbox, wait_for_inbox
from teamlead._claude.inbox.model import InboxRead
from teamlead.policy import InboxWaitPolicy
from teamlead.testing import FakeClock
from teamlead.testing.teammate import post_to_inbox

from .polling import apoll

pytestmark = pytest.mark.anyio

ENTRY = {"from": "alpha", "text": "done", "timestamp": "t"}


@pytest.fixture
def inbox(tmp_path: Path) -> Path:
    path = tmp_path / "claude" / "teams" / "t" / "inboxes" / "team-lead.json"
    path.parent.mkdir(parents=True)
    return path


def write(path: Path, entries: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.test")
    tmp.write_text(json.dumps(entries))
    tmp.replace(path)  # as writers do: rename over the inbox


def has_messages(read: InboxRead) -> bool:
    return bool(read.messages)


class StuckClock(FakeClock):
    """A clock whose sleeps never end: only a change event can wake the waiter."""

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await anyio.sleep_forever()


def worker_threads_busy() -> int:
    return int(anyio.to_thread.current_default_thread_limiter().borrowed_tokens)


@pytest.mark.parametrize("use_events", [True, False])
async def test_default_policy_tries_five_times_over_ten_seconds(
    inbox: Path, use_events: bool
) -> None:
    clock = FakeClock()
    policy = InboxWaitPolicy(use_events=use_events)
    done = await wait_for_inbox(
        inbox,
        until=has_messages,
        clock=clock,
        policy=policy,
        deadline=clock.monotonic() + 60,  # far off: the policy ends the wait, not this
        config_dir=inbox.parents[3],
    )
    assert not done.satisfied and done.read.status == "missing"
    assert clock.sleeps == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert done.reads == 6  # the first read plus five tries
    assert clock.monotonic() >= 10.0
    assert worker_threads_busy() == 0


async def test_span_longer_than_the_tries_keeps_polling(inbox: Path) -> None:
    clock = FakeClock()
    policy = InboxWaitPolicy(tries=2, span_s=20.0, first_delay_s=1.0, max_delay_s=4.0)
    done = await wait_for_inbox(inbox, until=has_messages, clock=clock, policy=policy)
    assert not done.satisfied
    assert clock.sleeps == [1.0, 2.0, 4.0, 4.0, 4.0, 4.0, 1.0]
    assert clock.monotonic() == 20.0


async def test_deadline_cuts_the_wait_short(inbox: Path) -> None:
    clock = FakeClock(start=100.0)
    done = await wait_for_inbox(inbox, until=has_messages, clock=clock, deadline=103.0)
    assert not done.satisfied
    assert clock.sleeps == [0.5, 1.0, 1.5]
    assert clock.monotonic() == 103.0


async def test_past_deadline_reads_once(inbox: Path) -> None:
    write(inbox, [ENTRY])
    clock = FakeClock(start=5.0)
    done = await wait_for_inbox(inbox, until=lambda r: False, clock=clock, deadline=1.0)
    assert (done.satisfied, done.reads, clock.sleeps) == (False, 1, [])
    assert done.read.messages[0].text == "done"


async def test_satisfied_at_once_does_not_sleep(inbox: Path) -> None:
    write(inbox, [ENTRY])
    clock = FakeClock()
    done = await wait_for_inbox(inbox, until=has_messages, clock=clock)
    assert done.satisfied and done.reads == 1 and clock.sleeps == []
    assert done.read.messages[0].sender == "alpha"


async def test_entry_arriving_between_polls_is_seen(inbox: Path) -> None:
    clock = FakeClock()
    seen: list[int] = []

    def until(read: InboxRead) -> bool:
        seen.append(len(read.messages))
        if len(seen) == 3:
            write(inbox, [ENTRY])  # lands while the waiter sleeps
        return bool(read.messages)

    policy = InboxWaitPolicy(use_events=False)
    done = await wait_for_inbox(inbox, until=until, clock=clock, policy=policy)
    assert done.satisfied and seen == [0, 0, 0, 1]
    assert clock.sleeps == [0.5, 1.0, 2.0]


def create_empty(path: Path) -> None:
    """A writer's first step: create the inbox with flag wx; ``[]`` is written after."""
    with path.open("xb"):
        pass


def seen(read: InboxRead) -> tuple[str, list[str], tuple[str, ...]]:
    return read.status, [m.text for m in read.messages], read.warnings


async def test_a_0_byte_inbox_keeps_the_wait_going_until_the_writer_fills_it(
    inbox: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    reads: list[tuple[str, list[str], tuple[str, ...]]] = []

    def until(read: InboxRead) -> bool:
        reads.append(seen(read))
        if len(reads) == 1:
            create_empty(inbox)  # lands while the waiter sleeps
        elif len(reads) == 2:
            post_to_inbox(inbox, ENTRY)  # the writer goes on: lock, re-read, append, rename
        return bool(read.messages)

    logged: set[str] = set()
    policy = InboxWaitPolicy(use_events=False)
    with caplog.at_level(logging.WARNING):
        done = await wait_for_inbox(inbox, until=until, clock=clock, policy=policy, logged=logged)
    assert reads == [("missing", [], ()), ("ok", [], ()), ("ok", ["done"], ())]
    assert done.satisfied and [m.text for m in done.read.messages] == ["done"]
    assert logged == set() and caplog.records == []
    result = await consume_inbox(inbox, done.read.keys)
    assert (result.removed, result.remaining) == (1, 0)
    again = await wait_for_inbox(
        inbox, until=has_messages, clock=clock, policy=InboxWaitPolicy(tries=1, span_s=0)
    )
    assert not again.satisfied and seen(again.read) == ("ok", [], ())  # delivered once


async def test_a_change_to_0_bytes_wakes_the_waiter_which_waits_on_for_the_entry(
    inbox: Path,
) -> None:
    reads: list[tuple[str, list[str], tuple[str, ...]]] = []
    first_read, saw_empty = anyio.Event(), anyio.Event()

    def until(read: InboxRead) -> bool:
        reads.append(seen(read))
        first_read.set()
        if read.status != "missing" and not read.messages:
            saw_empty.set()  # whatever the status: an assertion below names a wrong one
        return bool(read.messages)

    async def writer() -> None:
        await first_read.wait()
        await anyio.to_thread.run_sync(create_empty, inbox)
        await saw_empty.wait()  # the waiter woke on the create and read 0 bytes
        await anyio.to_thread.run_sync(post_to_inbox, inbox, ENTRY)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer)
            done = await wait_for_inbox(inbox, until=until, clock=StuckClock())
    assert done.satisfied and [m.text for m in done.read.messages] == ["done"]
    assert ("ok", [], ()) in reads and reads[-1] == ("ok", ["done"], ())
    assert all(warnings == () for _, _, warnings in reads)
    assert sum(texts == ["done"] for _, texts, _ in reads) == 1


async def write_after_first_read(inbox: Path, first_read: anyio.Event) -> None:
    await first_read.wait()
    await anyio.to_thread.run_sync(write, inbox, [ENTRY])


async def test_change_wakes_the_waiter_without_any_timer(inbox: Path) -> None:
    clock = StuckClock()
    first_read = anyio.Event()

    def until(read: InboxRead) -> bool:
        first_read.set()
        return bool(read.messages)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(write_after_first_read, inbox, first_read)
            done = await wait_for_inbox(inbox, until=until, clock=clock)
    assert done.satisfied and done.events >= 1
    assert done.read.messages[0].text == "done"
    assert worker_threads_busy() == 0


async def test_change_wakes_the_waiter_when_directories_appear_late(tmp_path: Path) -> None:
    config_dir = tmp_path / "claude"
    config_dir.mkdir()
    inbox = config_dir / "teams" / "late" / "inboxes" / "team-lead.json"
    first_read = anyio.Event()

    def until(read: InboxRead) -> bool:
        first_read.set()
        return bool(read.messages)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(write_after_first_read, inbox, first_read)
            done = await wait_for_inbox(inbox, until=until, clock=StuckClock())
    assert done.satisfied and done.events >= 1


async def test_other_files_in_the_directory_do_not_satisfy(inbox: Path) -> None:
    clock = FakeClock()
    write(inbox.with_name("alpha.json"), [ENTRY])
    policy = InboxWaitPolicy(tries=2, span_s=0)
    done = await wait_for_inbox(inbox, until=has_messages, clock=clock, policy=policy)
    assert not done.satisfied


async def test_cancelling_the_wait_stops_the_watcher(inbox: Path) -> None:
    first_read = anyio.Event()
    finished = False

    def until(read: InboxRead) -> bool:
        first_read.set()
        return False

    async def wait_forever() -> None:
        nonlocal finished
        await wait_for_inbox(inbox, until=until, clock=StuckClock())
        finished = True  # never: only a change or the clock can end it, and neither comes

    fds_before = open_fds()
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait_forever)
            await first_read.wait()
            for _ in range(20):  # let the watcher get to its wait
                await anyio.lowlevel.checkpoint()
            tg.cancel_scope.cancel()
    assert not finished
    assert worker_threads_busy() == 0
    for thread in threading.enumerate():  # the inotify descriptor closes on its own thread
        if thread.name == "inotify-close":
            thread.join(10)
    # a close handed to the inotify-close thread may still be in flight. At most, not
    # exactly: the garbage collector may close a socket an earlier test left behind
    assert await apoll(lambda: open_fds() <= fds_before, within_s=10), (open_fds(), fds_before)


def open_fds() -> int:
    fds = Path("/proc/self/fd")
    return len(list(fds.iterdir())) if fds.is_dir() else 0


async def test_an_error_in_until_stops_the_watcher(inbox: Path) -> None:
    def until(read: InboxRead) -> bool:
        raise LookupError("caller bug")

    with pytest.raises(LookupError):
        await wait_for_inbox(inbox, until=until)
    assert worker_threads_busy() == 0


async def test_inbox_outside_config_dir_is_refused_while_waiting(tmp_path: Path) -> None:
    outside = tmp_path / "outside.json"
    write(outside, [ENTRY])
    inbox = tmp_path / "claude" / "teams" / "t" / "inboxes" / "team-lead.json"
    inbox.parent.mkdir(parents=True)
    inbox.symlink_to(outside)
    clock = FakeClock()
    policy = InboxWaitPolicy(tries=1, span_s=0)
    done = await wait_for_inbox(inbox, until=has_messages, clock=clock, policy=policy)
    assert not done.satisfied and done.read.status == "refused"


@pytest.mark.parametrize(
    "bad",
    [{"tries": 0}, {"first_delay_s": 0}, {"backoff": 0.5}, {"span_s": -1}, {"step_ms": 0}],
)
def test_policy_rejects_nonsense(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        InboxWaitPolicy(**bad)
