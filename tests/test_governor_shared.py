"""The governor's state shared by several processes: the machine's SQLite file, and faults.

Two governors on one file stand for two processes (each has its own account object, as
each process would); a real child process stands in where a process must die or hang.
Every test has its own file (``tmp_path``), so parallel tests never share state.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import psutil
import pydantic
import pytest

from teamlead._governor.accounts import (
    AccountError,
    FallbackAccount,
    ProcessAccount,
    WarnOnce,
    check_limits_spec,
    open_account,
)
from teamlead._governor.accounts.base import Bounds
from teamlead._governor.accounts.codecs import MAX_LEASE_S
from teamlead._governor.accounts.machine import MachineAccount, default_path
from teamlead._governor.aimd import Limits
from teamlead._governor.retry_after import PLAUSIBLE_PAUSE_S
from teamlead._relay import start_relay
from teamlead.clock import SYSTEM_CLOCK, Clock
from teamlead.errors import UsageError
from teamlead.governor import Governor, Slot
from teamlead.policy import LimitsPolicy
from teamlead.testing import FakeClock, Reply, ScriptedServer

from .governors import OPUS as A
from .governors import close_accounts, governor_on, opened, warned
from .polling import apoll

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures(close_accounts.__name__)]


def _governor(path: Path, clock: Clock | None = None, ceiling: int = 8) -> Governor:
    clock = clock or FakeClock()
    return governor_on(MachineAccount(path, clock=clock, lease_ttl_s=30), ceiling, clock)


async def test_two_processes_on_one_file_share_the_limit_and_the_slots(tmp_path: Path) -> None:
    db = tmp_path / "limits.sqlite3"
    # the system clock: a waiter re-checks the shared file every 50 ms of real time
    first, second = _governor(db, SYSTEM_CLOCK, 3), _governor(db, SYSTEM_CLOCK, 3)
    held = [await first.acquire(A) for _ in range(2)]
    held.append(await second.acquire(A))
    assert second.state(A).account_in_flight == 3
    with pytest.raises(TimeoutError):
        await second.acquire(A, timeout=0)  # the account is full, though second holds one
    got: list[Slot] = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:

            async def wait() -> None:
                got.append(await second.acquire(A))

            tg.start_soon(wait)
            assert await apoll(lambda: second.state(A).waiting == 1, within_s=10)
            assert not got  # queued: the account is still full
            held[0].release()  # first gives one back: second's waiter sees it at its next check
    for slot in [*held[1:], *got]:
        slot.release()
    assert first.state(A).account_in_flight == 0


async def test_the_next_waiter_keeps_watching_the_account_once_the_head_is_served(
    tmp_path: Path,
) -> None:
    """The head of a queue re-checks a shared account for slots other processes give back.
    Once it is served, the next in line must take that over: here nothing in the first
    process ever gives a slot back, so without it the second waiter would wait forever."""
    db = tmp_path / "limits.sqlite3"
    first, second = _governor(db, SYSTEM_CLOCK, 2), _governor(db, SYSTEM_CLOCK, 2)
    held = [await second.acquire(A) for _ in range(2)]  # the account is full
    got: list[Slot] = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:

            async def wait() -> None:
                got.append(await first.acquire(A))

            tg.start_soon(wait)
            tg.start_soon(wait)
            assert await apoll(lambda: first.state(A).waiting == 2, within_s=10)
            held[0].release()  # the head sees it and is served; the other is head now
            assert await apoll(lambda: len(got) == 1, within_s=10)
            held[1].release()  # only the new head's own re-checks can find this one
    assert len(got) == 2
    for slot in got:
        slot.release()


async def test_a_cut_learnt_in_one_process_holds_in_the_other(tmp_path: Path) -> None:
    db = tmp_path / "limits.sqlite3"
    first, second = _governor(db, ceiling=24), _governor(db, ceiling=24)
    burst = [await first.acquire(A) for _ in range(2)] + [await second.acquire(A)]
    burst[2].rate_limited(1.0, measured=True)  # two others in flight on the account
    assert (first.state(A).cap, second.state(A).cap) == (2, 2)
    assert second.state(A).cooldown_s == pytest.approx(1.0)
    for slot in burst:
        slot.release()


async def test_an_overload_met_in_one_process_pauses_and_cuts_every_process_on_the_account(
    tmp_path: Path,
) -> None:
    db = tmp_path / "limits.sqlite3"
    clock = FakeClock()
    first, second = _governor(db, clock, ceiling=8), _governor(db, clock, ceiling=8)
    slot = await first.acquire(A)
    slot.overloaded(5.0)  # a 529 with Retry-After: 5 met by the first process
    slot.release()
    assert second.state(A).cap < 8  # the cut holds in the other process too
    assert second.state(A).cooldown_s == pytest.approx(5.0)
    with pytest.raises(TimeoutError):  # and so does the pause: it backs off as well
        await second.acquire(A, timeout=1.0)
    clock.advance(5.0)
    (await second.acquire(A, timeout=0)).release()


def _holder(db: Path, ttl: float = 30.0) -> subprocess.Popen[str]:
    """A child process that takes three leases on ``db``, says so, and waits."""
    code = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from teamlead._governor.accounts.base import Bounds
        from teamlead._governor.accounts.machine import MachineAccount
        account = MachineAccount(Path({str(db)!r}), lease_ttl_s={ttl})
        for _ in range(3):
            assert account.take(Bounds({A!r}, limit=3)) is not None
        print("held", flush=True)
        time.sleep(600)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    return child


def _end(child: subprocess.Popen[str]) -> None:
    child.kill()
    child.wait(timeout=10)
    if child.stdout is not None:
        child.stdout.close()


@pytest.mark.slow  # a fresh interpreter or child process: seconds
def test_processes_that_make_the_store_file_together_all_share_it(tmp_path: Path) -> None:
    """Three processes open a store file nobody made yet, at once, fifteen times: SQLite
    refuses some at once as the new file turns to WAL (it does not wait where waiting could
    deadlock), and each tries again; none falls back to limits of its own (before, two
    ``teamlead ask`` started together lost the shared limits about one time in three)."""
    code = textwrap.dedent(
        f"""
        import multiprocessing
        from pathlib import Path
        from teamlead._governor.accounts.machine import MachineAccount

        def open_at_once(path, barrier, answers):
            account = MachineAccount(Path(path))
            barrier.wait()
            try:
                account.in_flight("x")
                answers.put("shared")
            except Exception as exc:
                answers.put(str(exc))
            finally:
                account.close()

        fork = multiprocessing.get_context("fork")  # this interpreter has one thread
        for n in range(15):
            barrier, answers = fork.Barrier(3), fork.Queue()
            args = (str(Path({str(tmp_path)!r}) / f"limits-{{n}}.sqlite3"), barrier, answers)
            children = [fork.Process(target=open_at_once, args=args) for _ in range(3)]
            for child in children:
                child.start()
            print(*sorted(answers.get(timeout=30) for _ in children), sep="\\n")
            for child in children:
                child.join(timeout=30)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["shared"] * 45


@pytest.mark.slow  # a fresh interpreter or child process: seconds
def test_a_process_killed_while_holding_leases_gives_its_slots_back(tmp_path: Path) -> None:
    db = tmp_path / "limits.sqlite3"
    child = _holder(db)
    account = MachineAccount(db)
    try:
        assert account.in_flight(A) == 3
        assert account.take(Bounds(A, limit=3)) is None
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        lease = account.take(Bounds(A, limit=3))  # the dead holder's leases are dropped
        assert lease is not None and account.in_flight(A) == 1
    finally:
        _end(child)
        account.close()


@pytest.mark.slow  # a fresh interpreter or child process: seconds
def test_a_hung_holder_s_leases_expire_after_their_time_to_live(tmp_path: Path) -> None:
    db = tmp_path / "limits.sqlite3"
    child = _holder(db, ttl=30.0)
    child.send_signal(signal.SIGSTOP)  # alive, but renews nothing
    clock = FakeClock(wall_start=__import__("time").time())
    account = MachineAccount(db, clock=clock)
    try:
        assert account.in_flight(A) == 3
        clock.advance(29)
        assert account.take(Bounds(A, limit=3)) is None
        clock.advance(2)  # past the lease time
        assert account.take(Bounds(A, limit=3)) is not None
    finally:
        _end(child)
        account.close()


def _unrepairable(db: Path, damage: str) -> None:
    """Make ``db`` a store file teamlead cannot use, nor move aside."""
    if damage == "a directory":
        db.mkdir()
    elif damage == "a FIFO":
        os.mkfifo(db)
    elif damage == "a symlink to a corrupt file":
        target = db.with_name("elsewhere.sqlite3")
        target.write_bytes(b"this is not an SQLite database" * 100)
        db.symlink_to(target)
    elif damage == "a corrupt file in a read-only folder":
        db.write_bytes(b"this is not an SQLite database" * 100)
        db.parent.chmod(0o500)


def _set_aside(folder: Path) -> list[str]:
    """The store files moved aside in ``folder``."""
    return sorted(p.name for p in folder.glob("*.corrupt-*"))


_UNREPAIRABLE = [
    "a directory",
    "a FIFO",
    "a symlink to a corrupt file",
    pytest.param(
        "a corrupt file in a read-only folder",
        marks=pytest.mark.skipif(
            sys.platform == "win32" or os.geteuid() == 0, reason="root writes any folder"
        ),
    ),
]


@pytest.mark.parametrize("damage", _UNREPAIRABLE)
async def test_a_store_file_that_cannot_be_repaired_warns_once_and_the_run_goes_on(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "cache"
    folder.mkdir()
    db = folder / "limits.sqlite3"
    _unrepairable(db, damage)
    try:
        account = open_account("machine", machine_path=db, warnings=WarnOnce())
        governor = governor_on(account, 2)
        with caplog.at_level(logging.WARNING, logger="teamlead.governor"):
            slots = [await governor.acquire(A, timeout=1) for _ in range(2)]
            slots[0].rate_limited(measured=True)
            for slot in slots:
                slot.release()
            async with governor.slot(A, timeout=1):
                pass
    finally:
        folder.chmod(0o700)
    warnings = warned(caplog)
    assert len(warnings) == 1, warnings
    assert str(db) in warnings[0] and "this process alone" in warnings[0]
    assert "\n" not in warnings[0]
    assert isinstance(account, FallbackAccount) and isinstance(account.current, ProcessAccount)
    assert governor.state(A).cap == 1 and governor.total_in_flight == 0
    assert _set_aside(folder) == []


async def test_a_store_file_locked_by_another_process_warns_once_and_the_run_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "limits.sqlite3"
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as holder:
        holder.execute("CREATE TABLE other (x)")
        holder.execute("BEGIN EXCLUSIVE")  # held for the whole run
        account = open_account("machine", machine_path=db, warnings=WarnOnce())
        governor = governor_on(account, 2)
        with caplog.at_level(logging.WARNING, logger="teamlead.governor"):
            for _ in range(3):
                async with governor.slot(A, timeout=1):
                    pass
        holder.execute("ROLLBACK")
    warnings = warned(caplog)
    assert len(warnings) == 1, warnings
    assert "database is locked" in warnings[0] and "this process alone" in warnings[0]
    assert isinstance(account, FallbackAccount) and isinstance(account.current, ProcessAccount)
    assert _set_aside(tmp_path) == []


def _damaged(db: Path, damage: str) -> bytes:
    """Make ``db`` a store file that is no usable database; its bytes."""
    if damage == "not a database":
        db.write_bytes(b"this is not an SQLite database" * 100)
    elif damage == "truncated":
        account = MachineAccount(db, clock=FakeClock(), warnings=WarnOnce())
        for n in range(200):
            account.update(f"anthropic/model-{n}", lambda _: (Limits(cap=3), None))
        account.close()
        db.write_bytes(db.read_bytes()[: 3 * 4096])
    else:  # an SQLite database, but its tables are another program's
        with contextlib.closing(sqlite3.connect(db)) as other:
            other.execute("CREATE TABLE limits (name TEXT, value TEXT)")
            other.commit()
    return db.read_bytes()


@pytest.mark.parametrize("damage", ["not a database", "truncated", "tables of another program"])
async def test_a_corrupt_store_file_is_moved_aside_and_the_processes_keep_sharing(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "limits.sqlite3"
    before = _damaged(db, damage)
    clock = FakeClock(wall_start=1_750_000_000.0)  # 2025-06-15 15:06:40 UTC
    with caplog.at_level(logging.WARNING, logger="teamlead.governor"):
        first = open_account("machine", clock=clock, machine_path=db, warnings=WarnOnce())
        second = opened(open_account("machine", clock=clock, machine_path=db, warnings=WarnOnce()))
        governor = governor_on(first, 2, clock)
        async with governor.slot(A, timeout=1):
            assert second.in_flight(A) == 1  # the other process sees this one's slot
        assert second.take(Bounds(A, limit=1)) is not None
    warnings = warned(caplog)
    aside = tmp_path / "limits.sqlite3.corrupt-20250615T150640Z"
    assert len(warnings) == 1, warnings
    assert f"{db} was corrupt" in warnings[0] and f"moved it to {aside}" in warnings[0]
    assert aside.read_bytes() == before  # kept for a look, not deleted
    for account in (first, second):
        assert isinstance(account, FallbackAccount)
        assert isinstance(account.current, MachineAccount)  # no fallback: still shared
    with contextlib.closing(sqlite3.connect(db)) as fresh:
        assert fresh.execute("PRAGMA quick_check").fetchone() == ("ok",)


def test_learnt_limits_untouched_for_long_are_forgotten(tmp_path: Path) -> None:
    clock = FakeClock()
    account = MachineAccount(tmp_path / "l.sqlite3", clock=clock, forget_after_s=300)
    account.update(A, lambda limits: (Limits(cap=2, cooldown_until=clock.monotonic() + 5), None))
    stored = account.limits(A)
    assert stored is not None and stored.cap == 2
    assert stored.cooldown_until == pytest.approx(clock.monotonic() + 5)  # its own time base
    clock.advance(299)
    assert account.limits(A) is not None
    clock.advance(2)
    assert account.limits(A) is None
    account.close()


def test_the_store_lives_in_the_user_cache_directory(tmp_path: Path) -> None:
    if sys.platform == "linux":
        assert default_path({"XDG_CACHE_HOME": str(tmp_path)}) == (
            tmp_path / "teamlead" / "limits.sqlite3"
        )
        assert default_path({}) == Path.home() / ".cache" / "teamlead" / "limits.sqlite3"


@pytest.mark.parametrize("spec", ["machine", "process", "redis://127.0.0.1:6379/0"])
def test_limits_specs_are_checked(spec: str) -> None:
    assert check_limits_spec(spec) == spec


def test_a_bad_limits_spec_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--limits must be"):
        check_limits_spec("memcached://x")


@pytest.mark.parametrize(
    ("url", "fault"),
    [
        ("redis://127.0.0.1:6379/abc", "database must be a number"),
        ("redis://127.0.0.1:6379/0/1", "database must be a number"),
        ("redis://127.0.0.1:6379/?db=two", "database must be a number"),
        ("redis://127.0.0.1:port/0", "port must be a number"),
    ],
)
def test_a_redis_url_whose_database_is_not_a_number_is_refused(url: str, fault: str) -> None:
    """redis-py would read it as database 0, silently sharing with whatever uses that."""
    with pytest.raises(UsageError, match=f"^--limits {re.escape(url)}: the Redis {fault}"):
        check_limits_spec(url)
    with pytest.raises(pydantic.ValidationError, match=fault):
        LimitsPolicy(shared=url)
    with pytest.raises(UsageError, match=fault):
        open_account(url)


def test_a_refused_redis_url_keeps_its_password_out_of_the_message() -> None:
    with pytest.raises(UsageError) as refused:
        check_limits_spec("redis://:s3cret@127.0.0.1:6379/abc")
    assert "s3cret" not in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize("url", ["redis://h", "redis://h:1/", "redis://h:1/15", "rediss://h/?db=3"])
def test_a_redis_url_with_a_numbered_database_or_none_is_accepted(url: str) -> None:
    assert check_limits_spec(url) == url


def test_the_lease_renewer_tries_again_after_a_failed_renewal_and_stops_for_good() -> None:
    import threading

    from teamlead._governor.accounts.base import AccountError
    from teamlead._governor.accounts.renewer import LeaseRenewer

    calls: list[int] = []
    third = threading.Event()

    def renew() -> None:
        calls.append(len(calls))
        if len(calls) >= 3:
            third.set()
        if len(calls) == 1:
            raise AccountError("the store is away")

    renewer = LeaseRenewer(renew, 0.001, "test-renewer")
    renewer.start()
    renewer.start()  # a second start is a no-op: one thread
    assert third.wait(timeout=10), "the renewer stopped after its failed renewal"
    renewer.stop()
    stopped_at = len(calls)
    renewer.start()  # after stop: stays stopped
    assert [t.name for t in threading.enumerate()].count("test-renewer") == 0
    assert len(calls) == stopped_at


# -- the file is untrusted input: every row is read with its type, range and age checked ----


def _raw(db: Path, sql: str, *args: object) -> list[tuple[object, ...]]:
    """Run one statement on ``db`` as another program would, and return its rows."""
    with contextlib.closing(sqlite3.connect(db)) as other:
        rows = other.execute(sql, args).fetchall()
        other.commit()
        return rows


async def test_a_row_with_a_text_timestamp_is_dropped_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "limits.sqlite3"
    clock = FakeClock()
    account = MachineAccount(db, clock=clock, warnings=WarnOnce())
    governor = governor_on(account, 4, clock)
    with caplog.at_level(logging.WARNING, logger="teamlead.governor"):
        slot = await governor.acquire(A, timeout=1)
        slot.rate_limited(measured=True)  # a cut: the file holds A's limits
        slot.release()
        _raw(db, "UPDATE limits SET updated = 'abc'")
        assert account.limits(A) is None  # read as never seen
        for _ in range(5):  # every later request goes through, and warns no more
            async with governor.slot(A, timeout=1) as held:
                held.success()
        _raw(db, "UPDATE limits SET updated = 'abc'")  # again: the same kind, told once
        async with governor.slot(A, timeout=1):
            pass
    warnings = warned(caplog)
    assert len(warnings) == 1, warnings
    assert "dropped the unreadable learnt limits" in warnings[0] and str(db) in warnings[0]
    assert _raw(db, "SELECT COUNT(*) FROM limits WHERE typeof(updated) = 'text'") == [(0,)]


@pytest.mark.parametrize(
    "data",
    [
        '{"cap": 3, "successes": "x"}',
        '{"cap": 0}',
        '{"cap": 2.5}',
        '{"cap": true}',
        '{"cap": 3, "epoch": -4}',
        '{"cap": 3, "cut_epoch": 1e300}',
        '{"cap": 3, "last_good": "2"}',
        '{"cap": 3, "measured": "yes"}',
        '{"cap": 3, "cooldown_until": "soon"}',
        '{"cap": 3, "bad_at": NaN}',
        '{"successes": 2}',
        "[3]",
        "not json",
        "[" * 3000,
        '{"cap": 3, "pad": "' + "x" * 10_000 + '"}',
    ],
)
async def test_learnt_limits_of_the_wrong_type_or_range_read_as_never_seen(
    tmp_path: Path, data: str, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "limits.sqlite3"
    clock = FakeClock()
    account = opened(MachineAccount(db, clock=clock, warnings=WarnOnce()))
    account.in_flight(A)  # makes the file
    _raw(db, "INSERT INTO limits (key, data, updated) VALUES (?, ?, ?)", A, data, clock.time())
    governor = governor_on(account, 4, clock)
    with caplog.at_level(logging.WARNING, logger="teamlead.governor"):
        assert account.limits(A) is None
        for _ in range(3):
            async with governor.slot(A, timeout=1) as slot:
                slot.success()
    assert governor.state(A).cap == 4  # a fresh bucket, at the ceiling
    assert len(warned(caplog)) == 1, warned(caplog)


def _planted(
    tmp_path: Path, data: str, written: float | None = None
) -> tuple[Path, FakeClock, MachineAccount]:
    """A machine store whose row of ``A`` is ``data``, written at ``written`` (default:
    now), as something other than teamlead could have written it."""
    db = tmp_path / "limits.sqlite3"
    clock = FakeClock()
    account = opened(MachineAccount(db, clock=clock, warnings=WarnOnce()))
    account.in_flight(A)
    stamp = clock.time() if written is None else written
    _raw(db, "INSERT INTO limits (key, data, updated) VALUES (?, ?, ?)", A, data, stamp)
    return db, clock, account


async def test_a_stored_pause_far_in_the_future_is_clamped_to_the_longest_a_header_may_ask(
    tmp_path: Path,
) -> None:
    _, clock, account = _planted(tmp_path, '{"cap": 2, "cooldown_until": 1e18, "bad_at": 1e18}')
    stored = account.limits(A)
    assert stored is not None and stored.cap == 2
    assert stored.cooldown_until == pytest.approx(clock.monotonic() + PLAUSIBLE_PAUSE_S)
    assert stored.bad_at == pytest.approx(clock.monotonic())
    governor = governor_on(account, 4, clock)
    assert governor.state(A).cooldown_s == pytest.approx(PLAUSIBLE_PAUSE_S)
    clock.advance(301)  # nobody touched it since: forgotten, the pause with it
    assert account.limits(A) is None


@pytest.mark.parametrize("written_ago", [0.0, 100.0], ids=["now", "100s-ago"])
async def test_a_planted_pause_ends_within_the_plausibility_bound_and_is_never_written_back(
    tmp_path: Path, written_ago: float, caplog: pytest.LogCaptureFixture
) -> None:
    """Read again and again (a run waiting on it), the pause still ends within 180 s of
    when its row was written; the run that writes the bucket meanwhile stores its own
    limits, never the planted pause."""
    written = FakeClock().time() - written_ago
    db, clock, account = _planted(tmp_path, '{"cap": 2, "cooldown_until": 1e18}', written)
    governor = governor_on(account, 4, clock)
    left = PLAUSIBLE_PAUSE_S - max(0.0, written_ago)
    with caplog.at_level(logging.WARNING, logger="teamlead.governor"):
        for step in range(3):  # read again and again: it ends at the row's own bound
            assert governor.state(A).cooldown_s == pytest.approx(left * (1 - step / 4))
            clock.advance(left / 4)
        # the lead's own lane goes through the pause: its success writes the bucket
        slot = await governor.acquire(A, timeout=1, through_pause=True)
        slot.success()
        slot.release()
    (row,) = _raw(db, "SELECT data FROM limits WHERE key = ?", A)
    assert json.loads(row[0])["cooldown_until"] is None  # not written back as learnt
    assert governor.state(A).cooldown_s == 0
    told = warned(caplog)
    assert len(told) == 1 and "ends further ahead than any upstream asks" in told[0]
    assert str(db) in told[0]


@pytest.mark.parametrize("stamped_ahead", [0.0, 500.0], ids=["now", "ahead"])
async def test_a_planted_pause_nobody_writes_ends_within_the_bound(
    tmp_path: Path, stamped_ahead: float
) -> None:
    """A row stamped ahead of the clock (another host's skew, at most 600 s) is held 180 s
    past its stamp at most."""
    stamp = FakeClock().time() + stamped_ahead
    _, clock, account = _planted(tmp_path, '{"cap": 2, "cooldown_until": 1e18}', stamp)
    governor = governor_on(account, 4, clock)
    waited = clock.monotonic()
    async with governor.slot(A, timeout=900) as slot:  # waits the pause out, no longer
        slot.success()
    assert clock.monotonic() - waited == pytest.approx(stamped_ahead + PLAUSIBLE_PAUSE_S)


def _foreign_lease(db: Path, clock: FakeClock, **fields: object) -> None:
    """A lease of another host's process, alive for 30 s unless ``fields`` say otherwise."""
    row: dict[str, object] = {
        "token": "elsewhere:1",
        "key": A,
        "host": "elsewhere",
        "pid": 4321,
        "started": 1_699_000_000.0,
        "expires": clock.time() + 30,
        "taken": 1,
    }
    row.update(fields)
    names = ", ".join(row)
    marks = ", ".join("?" for _ in row)
    _raw(db, f"INSERT INTO leases ({names}) VALUES ({marks})", *row.values())


@pytest.mark.parametrize(
    "fields",
    [
        {"pid": "notapid"},
        {"pid": -3},
        {"started": "yesterday"},
        {"expires": "abc"},
        {"expires": 1e18},
        {"expires": float("inf")},
        {"taken": "one"},
        {"rejected": "no"},
        {"answered": 2.5},
    ],
    ids=repr,
)
async def test_a_lease_that_cannot_be_read_is_void_and_grants_go_on(
    tmp_path: Path, fields: dict[str, object], caplog: pytest.LogCaptureFixture
) -> None:
    """With a limit of 1, a foreign lease that counted would hold the only slot for good.
    (Text that SQLite can turn into the column's number, ``'1'``, is stored as a number.)"""
    db = tmp_path / "limits.sqlite3"
    clock = FakeClock()
    account = opened(MachineAccount(db, clock=clock, warnings=WarnOnce()))
    account.in_flight(A)
    _foreign_lease(db, clock, **fields)
    governor = governor_on(account, 1, clock)
    with caplog.at_level(logging.WARNING, logger="teamlead.governor"):
        for _ in range(3):
            async with governor.slot(A, timeout=1) as slot:
                assert account.in_flight(A) == 1  # this one only
                slot.rate_limited(measured=True)  # counts the account's leases
    warnings = warned(caplog)
    assert len(warnings) == 1, warnings
    assert "dropped a lease that cannot be read" in warnings[0]
    assert _raw(db, "SELECT COUNT(*) FROM leases") == [(0,)]


async def test_a_lease_from_another_host_expires_by_its_own_time(tmp_path: Path) -> None:
    db = tmp_path / "limits.sqlite3"
    clock = FakeClock()
    account = opened(MachineAccount(db, clock=clock, warnings=WarnOnce()))
    account.in_flight(A)
    _foreign_lease(db, clock, expires=clock.time() + 5)
    assert account.take(Bounds(A, limit=1)) is None  # alive: it holds the slot
    clock.advance(5)
    lease = account.take(Bounds(A, limit=1))
    assert lease is not None and account.in_flight(A) == 1


@pytest.mark.parametrize("off", [None, 1.2, -1.2])
async def test_a_lease_of_a_live_process_is_kept_though_its_start_reads_a_second_off_or_unknown(
    tmp_path: Path, off: float | None
) -> None:
    """A process that could not read its own start writes 0; and the kernel gives the boot
    time in whole seconds, moved by one when the clock is stepped, between two reads."""
    db = tmp_path / "limits.sqlite3"
    clock = FakeClock()
    account = opened(MachineAccount(db, clock=clock, warnings=WarnOnce()))
    account.in_flight(A)
    parent = psutil.Process(os.getppid())
    started = 0.0 if off is None else parent.create_time() + off
    here = {"host": socket.gethostname(), "pid": parent.pid, "started": started}
    _foreign_lease(db, clock, **here)
    assert account.take(Bounds(A, limit=1)) is None  # alive: it holds the slot
    _raw(db, "UPDATE leases SET started = ?", parent.create_time() - 100)  # its pid reused
    assert account.take(Bounds(A, limit=1)) is not None


async def test_planted_leases_of_a_live_process_expire_by_their_own_bound_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """64 leases naming a live process of this host (the test's parent, its true start
    time) with an expiry 1,100 s ahead: they hold the slots no longer than a lease may
    live (600 s), and the run is told once, naming the store."""
    db = tmp_path / "limits.sqlite3"
    clock = FakeClock()
    account = opened(MachineAccount(db, clock=clock, warnings=WarnOnce()))
    account.in_flight(A)
    parent = psutil.Process(os.getppid())
    for n in range(64):
        _foreign_lease(
            db,
            clock,
            token=f"planted:{n}",
            host=socket.gethostname(),
            pid=parent.pid,
            started=parent.create_time(),
            expires=clock.time() + 1100,
        )
    governor = governor_on(account, 4, clock)
    seen = clock.monotonic()
    with caplog.at_level(logging.WARNING, logger="teamlead.governor"):
        for _ in range(3):  # the run's requests wait for them
            with pytest.raises(TimeoutError):
                await governor.acquire(A, timeout=1)
        clock.advance(seen + MAX_LEASE_S - 1 - clock.monotonic())
        assert account.take(Bounds(A, limit=4)) is None
        clock.advance(1)
        async with governor.slot(A, timeout=1) as slot:
            slot.success()
    told = warned(caplog)
    assert len(told) == 1, told
    assert "64 slot(s) of anthropic/* are held by leases in" in told[0]
    assert str(db) in told[0] and "no renewal set so far ahead" in told[0]


async def test_an_unreadable_sequence_counter_is_set_past_the_numbers_in_use(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "limits.sqlite3"
    clock = FakeClock()
    here = opened(MachineAccount(db, clock=clock, warnings=WarnOnce()))
    held = [here.take(Bounds(A, limit=8)) for _ in range(3)]
    highest = _raw(db, "SELECT MAX(taken) FROM leases")[0][0]
    _raw(db, "UPDATE counter SET seq = 'abc'")
    first = governor_on(here, 8, clock)
    with caplog.at_level(logging.WARNING, logger="teamlead.governor"):
        slot = await first.acquire(A, timeout=1)
        slot.rate_limited(measured=True)  # the three held were running: a cut to 3
        slot.release()
    assert first.state(A).cap == 3
    (seq,) = _raw(db, "SELECT seq FROM counter")[0]
    assert isinstance(seq, int) and isinstance(highest, int) and seq > highest
    assert len(warned(caplog)) == 1 and "sequence number" in warned(caplog)[0]
    for lease in held:
        assert lease is not None
        here.give_back(lease)


async def test_an_unreadable_record_of_an_ended_request_is_dropped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "limits.sqlite3"
    clock = FakeClock()
    account = opened(MachineAccount(db, clock=clock, warnings=WarnOnce()))
    account.in_flight(A)
    _raw(db, "INSERT INTO released (key, seq) VALUES (?, 'abc')", A)
    governor = governor_on(account, 8, clock)
    with caplog.at_level(logging.WARNING, logger="teamlead.governor"):
        slot = await governor.acquire(A, timeout=1)
        slot.rate_limited(measured=True)  # nothing else ran: the floor
        slot.release()
    assert governor.state(A).cap == 1
    assert len(warned(caplog)) == 1 and "ended request" in warned(caplog)[0]
    assert _raw(db, "SELECT COUNT(*) FROM released WHERE typeof(seq) != 'integer'") == [(0,)]


async def test_a_relay_opens_its_account_store_while_no_request_has_come(tmp_path: Path) -> None:
    path = tmp_path / "limits.sqlite3"
    with ScriptedServer(lambda _request: Reply.text("hi")) as server:
        async with start_relay(server.base_url, _governor(path)):
            # the first request would wait for the file: it is opened while the CLI starts
            assert await apoll(path.exists, within_s=5)


def test_opening_a_store_that_fails_is_left_for_the_first_request_to_report(
    tmp_path: Path,
) -> None:
    (tmp_path / "not-a-folder").write_text("x")
    governor = _governor(tmp_path / "not-a-folder" / "limits.sqlite3")
    governor.connect_account()  # no error here: nothing asked for the store yet
    with pytest.raises(AccountError, match="not-a-folder"):
        governor.account.in_flight("")
