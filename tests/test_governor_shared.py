"""The governor's state shared by several processes: the machine's SQLite file, and faults.

Two governors on one file stand for two processes (each has its own account object, as
each process would); a real child process stands in where a process must die or hang.
Every test has its own file (``tmp_path``), so parallel tests never share state.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from teamlead._governor.account import Bounds, FallbackAccount, ProcessAccount
from teamlead._governor.accounts import check_limits_spec, open_account
from teamlead._governor.aimd import Limits
from teamlead._governor.sqlite_account import MachineAccount, default_path
from teamlead.clock import SYSTEM_CLOCK, Clock
from teamlead.errors import UsageError
from teamlead.governor import Governor, GovernorPolicy, Slot
from teamlead.testing import FakeClock

from .polling import apoll

A = "anthropic/claude-opus-5-5"
pytestmark = pytest.mark.anyio


_opened: list[MachineAccount] = []


@pytest.fixture(autouse=True)
def _close_accounts() -> Iterator[None]:
    yield
    while _opened:
        _opened.pop().close()


def _governor(path: Path, clock: Clock | None = None, ceiling: int = 8) -> Governor:
    clock = clock or FakeClock()
    account = MachineAccount(path, clock=clock, lease_ttl_s=30)
    _opened.append(account)
    return Governor(GovernorPolicy(ceiling=ceiling), clock=clock, account=account)


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


def _holder(db: Path, ttl: float = 30.0) -> subprocess.Popen[str]:
    """A child process that takes three leases on ``db``, says so, and waits."""
    code = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from teamlead._governor.account import Bounds
        from teamlead._governor.sqlite_account import MachineAccount
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


@pytest.mark.parametrize("damage", ["corrupt", "a directory"])
async def test_a_broken_store_file_warns_once_and_the_run_goes_on(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "limits.sqlite3"
    if damage == "corrupt":
        db.write_bytes(b"this is not an SQLite database" * 100)
    else:
        db.mkdir()
    account = open_account("machine", machine_path=db)
    governor = Governor(GovernorPolicy(ceiling=2), account=account)
    _opened.append(account)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="teamlead.governor"):
        slots = [await governor.acquire(A, timeout=1) for _ in range(2)]
        slots[0].rate_limited(measured=True)
        for slot in slots:
            slot.release()
        async with governor.slot(A, timeout=1):
            pass
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert str(db) in warnings[0] and "this process alone" in warnings[0]
    assert "\n" not in warnings[0]
    assert isinstance(account, FallbackAccount) and isinstance(account.current, ProcessAccount)
    assert governor.state(A).cap == 1 and governor.total_in_flight == 0


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


def test_the_lease_renewer_tries_again_after_a_failed_renewal_and_stops_for_good() -> None:
    import threading

    from teamlead._governor.account import AccountError, LeaseRenewer

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
