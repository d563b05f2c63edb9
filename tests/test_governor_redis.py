"""The governor's state shared across machines through a real Redis, and its faults.

Each test starts its own ``redis-server`` on a free loopback port (no persistence), so
parallel tests never share state. Two accounts stand for two machines.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from teamlead._governor.account import Account, Bounds, FallbackAccount
from teamlead._governor.accounts import open_account
from teamlead._governor.redis_account import RedisAccount
from teamlead._governor.sqlite_account import MachineAccount
from teamlead.clock import SYSTEM_CLOCK
from teamlead.governor import Governor, GovernorPolicy, Slot

from .polling import apoll
from .redis_server import REDIS_SERVER, RedisServer, free_port, redis_server

if REDIS_SERVER is None:
    pytest.skip(
        "redis-server is not installed (Debian: apt-get install redis-server)",
        allow_module_level=True,
    )

A = "anthropic/claude-opus-5-5"
pytestmark = pytest.mark.anyio


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    with redis_server(tmp_path) as server:
        yield server


_opened: list[Account] = []


@pytest.fixture(autouse=True)
def _close_accounts() -> Iterator[None]:
    yield
    while _opened:
        _opened.pop().close()


def _governor(url: str, ceiling: int) -> Governor:
    account = RedisAccount(url, lease_ttl_s=30)
    _opened.append(account)
    return Governor(GovernorPolicy(ceiling=ceiling), clock=SYSTEM_CLOCK, account=account)


async def test_two_machines_share_the_learnt_limit_and_the_slots(redis: RedisServer) -> None:
    first, second = _governor(redis.url, 24), _governor(redis.url, 24)
    burst = [await first.acquire(A) for _ in range(2)] + [await second.acquire(A)]
    burst[2].rate_limited(0.2, measured=True)  # two others in flight, one per machine... all
    assert (first.state(A).cap, second.state(A).cap) == (2, 2)
    assert second.state(A).account_in_flight == 3
    got: list[Slot] = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:

            async def wait() -> None:
                got.append(await second.acquire(A))

            burst[2].release()  # 2 in flight on the account, at the cap of 2: it waits
            tg.start_soon(wait)
            assert await apoll(lambda: second.state(A).waiting == 1, within_s=10)
            assert not got  # queued: the account is at the cap
            burst[0].release()  # the other machine gives one back
    assert second.state(A).account_in_flight == 2
    for slot in [burst[1], *got]:
        slot.release()
    assert first.state(A).account_in_flight == 0


@pytest.mark.slow
def test_a_dead_machine_s_leases_expire_within_the_lease_time(redis: RedisServer) -> None:
    code = textwrap.dedent(
        f"""
        import time
        from teamlead._governor.account import Bounds
        from teamlead._governor.redis_account import RedisAccount
        account = RedisAccount({redis.url!r}, lease_ttl_s=1.0)
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
    account = RedisAccount(redis.url)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        assert account.take(Bounds(A, limit=3)) is None
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        killed = time.monotonic()
        lease = None
        while lease is None and time.monotonic() - killed < 10:
            lease = account.take(Bounds(A, limit=3))
            time.sleep(0.05)
        assert lease is not None
        assert time.monotonic() - killed < 5  # within the lease time, with room for load
    finally:
        child.kill()
        child.wait(timeout=10)
        if child.stdout is not None:
            child.stdout.close()
        account.close()


async def test_redis_stopped_mid_run_warns_once_and_the_run_goes_on(
    redis: RedisServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    account = open_account(redis.url, machine_path=tmp_path / "machine.sqlite3")
    _opened.append(account)
    governor = Governor(GovernorPolicy(ceiling=4), account=account)
    with caplog.at_level(logging.WARNING, logger="teamlead.governor"):
        held = [await governor.acquire(A, timeout=1) for _ in range(2)]
        redis.stop()
        with anyio.fail_after(10):  # never hangs: each Redis call is bounded
            held[0].rate_limited(measured=True)  # the other one was accepted
            assert governor.state(A).cap == 1
            for slot in held:
                slot.release()
            for _ in range(2):
                async with governor.slot(A, timeout=1):
                    assert governor.state(A).account_in_flight == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"shared limits: Redis at {redis.url}: ")
    assert warnings[0].endswith(
        f"going on with the limits shared on this machine ({tmp_path / 'machine.sqlite3'})"
    )
    assert isinstance(account, FallbackAccount)
    current = account.current
    assert isinstance(current, FallbackAccount) and isinstance(current.current, MachineAccount)
    assert governor.total_in_flight == 0 and governor.state(A).account_in_flight == 0


async def test_an_unreachable_redis_warns_once_and_never_hangs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    account = open_account(url, machine_path=tmp_path / "machine.sqlite3")
    _opened.append(account)
    governor = Governor(GovernorPolicy(ceiling=2), account=account)
    with caplog.at_level(logging.WARNING, logger="teamlead.governor"), anyio.fail_after(10):
        for _ in range(3):
            async with governor.slot(A, timeout=1):
                pass
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and f"127.0.0.1:{url.split(':')[2]}" in warnings[0]


def test_the_password_of_a_redis_url_stays_out_of_messages() -> None:
    account = RedisAccount("redis://user:s3cret@127.0.0.1:1/0")
    assert "s3cret" not in account.describe()
