"""The governor's state shared across machines through a real Redis, and its faults.

Each test starts its own ``redis-server`` on a free loopback port (no persistence), so
parallel tests never share state. Two accounts stand for two machines.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from teamlead._governor.accounts import FallbackAccount, WarnOnce, open_account
from teamlead._governor.accounts.base import Bounds
from teamlead._governor.accounts.machine import MachineAccount
from teamlead._governor.accounts.namespaced import NamespacedAccount
from teamlead._governor.accounts.redis import RedisAccount
from teamlead._governor.aimd import Limits, Step
from teamlead._governor.retry_after import PLAUSIBLE_PAUSE_S
from teamlead.governor import Governor, Slot
from teamlead.testing import FakeClock

from .governors import OPUS as A
from .governors import close_accounts, governor_on, opened, warned
from .polling import apoll
from .redis_server import REDIS_SERVER, RedisServer, free_port, redis_server

if REDIS_SERVER is None:
    pytest.skip(
        "redis-server is not installed (Debian: apt-get install redis-server)",
        allow_module_level=True,
    )

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures(close_accounts.__name__)]


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    with redis_server(tmp_path) as server:
        yield server


def _governor(url: str, ceiling: int) -> Governor:
    return governor_on(RedisAccount(url, lease_ttl_s=30), ceiling)


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
        from teamlead._governor.accounts.base import Bounds
        from teamlead._governor.accounts.redis import RedisAccount
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
    governor = governor_on(account, 4)
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
    warnings = warned(caplog)
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
    governor = governor_on(account, 2)
    with caplog.at_level(logging.WARNING, logger="teamlead.governor"), anyio.fail_after(10):
        for _ in range(3):
            async with governor.slot(A, timeout=1):
                pass
    warnings = warned(caplog)
    assert len(warnings) == 1 and f"127.0.0.1:{url.split(':')[2]}" in warnings[0]


def test_the_password_of_a_redis_url_stays_out_of_messages() -> None:
    account = RedisAccount("redis://user:s3cret@127.0.0.1:1/0")
    assert "s3cret" not in account.describe()


# -- what Redis holds is untrusted input; every key teamlead writes expires -----------------


def _client(server: RedisServer) -> Any:
    """A plain client, as another program writing to the database would use."""
    import redis as redis_py

    return redis_py.Redis.from_url(server.url, decode_responses=True)


def _account(server: RedisServer, clock: FakeClock | None = None) -> RedisAccount:
    return opened(RedisAccount(server.url, clock=clock or FakeClock(), warnings=WarnOnce()))


async def test_every_key_teamlead_writes_in_redis_expires(redis: RedisServer) -> None:
    """Each kind of write made at once (a lease taken, answered, rejected, given back while
    an older one is live, a cut learnt), then every key teamlead holds is asked for its
    time to live: ``PTTL`` is -1 for a key that would stay for good."""
    clock = FakeClock()
    here, there = _account(redis, clock), _account(redis, clock)
    first = governor_on(here, 8, clock)
    second = governor_on(there, 8, clock)
    held = await second.acquire(A)  # older than the others: what they give back is kept
    ended, answered, rejected = [await first.acquire(A) for _ in range(3)]
    ended.success()
    ended.release()
    answered.answered()
    rejected.rate_limited(1.0, measured=True)
    here.renew()
    client = _client(redis)
    try:
        expiries = {key: client.pttl(key) for key in client.scan_iter("teamlead:*")}
    finally:
        client.close()
    shared = ["leases", "lease-keys", "lease-taken", "lease-rejected", "released", "seq"]
    assert {f"teamlead:{name}" for name in [*shared, "lease-answered", f"limits:{A}"]} == set(
        expiries
    )
    assert all(ms > 0 for ms in expiries.values()), expiries
    for slot in (held, answered, rejected):
        slot.release()


@pytest.mark.parametrize(
    "stored",
    ['{"cap": 3, "successes": "x"}', '{"cap": -1}', "not json", "a hash"],
)
async def test_learnt_limits_in_redis_that_cannot_be_read_are_dropped_not_raised(
    redis: RedisServer, stored: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    account = _account(redis, clock)
    client = _client(redis)
    try:
        if stored == "a hash":
            client.hset(f"teamlead:limits:{A}", "cap", "3")
        else:
            client.set(f"teamlead:limits:{A}", stored)  # and no expiry
    finally:
        client.close()
    governor = governor_on(account, 4, clock)
    with caplog.at_level(logging.WARNING, logger="teamlead.governor"):
        assert account.limits(A) is None
        for _ in range(3):
            async with governor.slot(A, timeout=1) as slot:
                slot.success()
    assert governor.state(A).cap == 4
    warnings = warned(caplog)
    assert len(warnings) == 1, warnings
    assert f"Redis at {redis.url}" in warnings[0] and warnings[0].startswith("shared limits: ")


async def test_a_stored_pause_in_redis_far_in_the_future_is_clamped_and_expires(
    redis: RedisServer,
) -> None:
    clock = FakeClock()
    account = opened(RedisAccount(redis.url, clock=clock, forget_after_s=300, warnings=WarnOnce()))
    client = _client(redis)
    try:
        client.set(f"teamlead:limits:{A}", '{"cap": 2, "cooldown_until": 1e18}')  # forever
        stored = account.limits(A)
        left = client.pttl(f"teamlead:limits:{A}")
    finally:
        client.close()
    assert stored is not None and stored.cap == 2
    assert stored.cooldown_until == pytest.approx(clock.monotonic() + PLAUSIBLE_PAUSE_S)
    assert 0 < left <= 300_000  # forgotten like any idle bucket
    # a run that writes the bucket keeps its own limits, not the planted pause
    governor = governor_on(account, 4, clock)
    slot = await governor.acquire(A, timeout=1, through_pause=True)
    slot.success()
    slot.release()
    client = _client(redis)
    try:
        written = json.loads(client.get(f"teamlead:limits:{A}"))
    finally:
        client.close()
    assert written["cooldown_until"] is None and written["cap"] == 2
    assert governor.state(A).cooldown_s == 0


_BAD_LEASES = {
    "an expiry far ahead": [("zadd", "teamlead:leases", {"x": 1e18}), ("hset", "x", A)],
    "an expiry of inf": [("zadd", "teamlead:leases", {"x": float("inf")}), ("hset", "x", A)],
    "no expiry at all": [("hset", "x", A)],
    "a taken number that is text": [
        ("zadd", "teamlead:leases", {"x": 4_000_000_000_000}),  # server ms: about 2096
        ("hset", "x", A),
        ("taken", "x", "abc"),
    ],
    "a leases key of the wrong type": [("set", "teamlead:leases", "oops")],
}


@pytest.mark.parametrize("shape", list(_BAD_LEASES))
async def test_a_lease_in_redis_that_cannot_be_read_is_void_and_grants_go_on(
    redis: RedisServer, shape: str, caplog: pytest.LogCaptureFixture
) -> None:
    """With a limit of 1, a foreign lease that counted would hold the only slot for good."""
    clock = FakeClock()
    account = _account(redis, clock)
    client = _client(redis)
    try:
        for op, name, value in _BAD_LEASES[shape]:
            if op == "zadd":
                client.zadd(name, value)
            elif op == "hset":
                client.hset("teamlead:lease-keys", name, value)
            elif op == "taken":
                client.hset("teamlead:lease-taken", name, value)
            else:
                client.set(name, value)
    finally:
        client.close()
    governor = governor_on(account, 1, clock)
    with caplog.at_level(logging.WARNING, logger="teamlead.governor"), anyio.fail_after(10):
        for _ in range(3):
            async with governor.slot(A, timeout=1) as slot:
                assert account.in_flight(A) == 1  # this one only
                slot.rate_limited(measured=True)
    assert len(warned(caplog)) == 1, warned(caplog)


async def test_leases_in_redis_no_renewal_set_so_far_ahead_are_told_once_when_they_hold_slots(
    redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """64 leases written by hand, 500 s ahead (under the 600 s a lease may live: they
    count): the run's requests wait for them, and it is told once, naming the store."""
    clock = FakeClock()
    account = _account(redis, clock)
    client = _client(redis)
    try:
        seconds, micros = client.time()
        ahead = int(seconds) * 1000 + int(micros) // 1000 + 500_000
        for n in range(64):
            client.zadd("teamlead:leases", {f"planted:{n}": ahead})
            client.hset("teamlead:lease-keys", f"planted:{n}", A)
    finally:
        client.close()
    governor = governor_on(account, 4, clock)
    with caplog.at_level(logging.WARNING, logger="teamlead.governor"):
        for _ in range(3):
            with pytest.raises(TimeoutError):
                await governor.acquire(A, timeout=2)
    told = warned(caplog)
    assert len(told) == 1, told
    assert told[0].startswith("shared limits: 64 slot(s) are held by leases in Redis at ")
    assert "no renewal set so far ahead" in told[0]
    assert re.search(r"\(within (4[6-9]\d|500) s\)$", told[0]), told[0]


async def test_an_unreadable_counter_in_redis_is_set_past_the_numbers_in_use(
    redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    account = _account(redis, clock)
    held = [account.take(Bounds(A, limit=8)) for _ in range(3)]
    client = _client(redis)
    try:
        highest = max(int(v) for v in client.hvals("teamlead:lease-taken"))
        client.set("teamlead:seq", "abc")
        governor = governor_on(account, 8, clock)
        with caplog.at_level(logging.WARNING, logger="teamlead.governor"):
            slot = await governor.acquire(A, timeout=1)
            slot.rate_limited(measured=True)  # the three held were running: a cut to 3
            slot.release()
        seq = client.get("teamlead:seq")
    finally:
        client.close()
    assert governor.state(A).cap == 3
    assert seq is not None and int(seq) > highest
    assert len(warned(caplog)) == 1 and "sequence number" in warned(caplog)[0]
    for lease in held:
        assert lease is not None
        account.give_back(lease)


async def test_an_unreadable_record_of_an_ended_request_in_redis_is_dropped(
    redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    account = _account(redis, clock)
    client = _client(redis)
    try:
        client.zadd("teamlead:released", {"no bar in it": 1, f"9|{A}": 1e15})
        governor = governor_on(account, 8, clock)
        with caplog.at_level(logging.WARNING, logger="teamlead.governor"):
            slot = await governor.acquire(A, timeout=1)
            slot.rate_limited(measured=True)  # nothing else ran: the floor
            slot.release()
        left = client.zcard("teamlead:released")
    finally:
        client.close()
    assert governor.state(A).cap == 1 and left == 0
    assert len(warned(caplog)) == 1 and "ended request" in warned(caplog)[0]


@pytest.mark.parametrize("given", ["no password", "a wrong password"])
async def test_a_redis_that_needs_a_password_says_how_to_give_it(
    tmp_path: Path, given: str, caplog: pytest.LogCaptureFixture
) -> None:
    with redis_server(tmp_path, password="s3cret-pass") as server:
        port = server.port
        url = server.url if given == "no password" else f"redis://:wrong@127.0.0.1:{port}/0"
        account = open_account(url, machine_path=tmp_path / "machine.sqlite3")
        governor = governor_on(account, 2)
        with caplog.at_level(logging.WARNING, logger="teamlead.governor"):
            async with governor.slot(A, timeout=1):
                pass
    warnings = warned(caplog)
    assert len(warnings) == 1, warnings
    if given == "no password":
        assert warnings[0].startswith(
            f"shared limits: Redis at 127.0.0.1:{port} needs a password: put it in the URL, "
            f"redis://:PASSWORD@127.0.0.1:{port}/0; going on with "
        ), warnings[0]
    else:
        assert f"Redis at 127.0.0.1:{port} refused the user name or password" in warnings[0]
        assert "wrong" not in warnings[0]


def test_closing_an_account_whose_redis_hangs_waits_a_bounded_time(redis: RedisServer) -> None:
    """A stopped server answers nothing: the leases are left to expire by themselves, and
    the process exits a moment later, not when the server comes back."""
    account = RedisAccount(redis.url, lease_ttl_s=0.3, timeout_s=0.2, warnings=WarnOnce())
    leases = [account.take(Bounds(A, limit=4)) for _ in range(2)]
    assert all(leases)
    redis.pause()
    try:
        started = time.monotonic()
        account.close()  # a renewal may be under way too (every 0.1 s)
        took = time.monotonic() - started
    finally:
        redis.resume()
    assert took < 4 * 0.2 + 4 * 0.2 + 1.0  # the renewer's wait and the close's, with room


def test_teamlead_limits_lists_and_clears_what_redis_holds_per_account(
    redis: RedisServer,
) -> None:
    store = opened(RedisAccount(redis.url))
    for name, cap in (("api#1", 3), ("api#2", 5)):

        def learnt(_: Limits | None, cap: int = cap) -> Step:
            return Limits(cap=cap), None

        for bucket in ("anthropic/opus", "anthropic/haiku"):
            NamespacedAccount(store, name).update(bucket, learnt)
    listed = [(entry.account, entry.bucket, entry.limits.cap) for entry in store.stored()]
    assert listed == [
        ("api#1", "anthropic/haiku", 3),
        ("api#1", "anthropic/opus", 3),
        ("api#2", "anthropic/haiku", 5),
        ("api#2", "anthropic/opus", 5),
    ]
    assert store.forget("api#1") == 2  # an account: all its buckets
    assert store.forget("api#2/anthropic/opus") == 1  # one stored key
    assert [entry.key for entry in store.stored()] == ["api#2/anthropic/haiku"]
    assert store.forget() == 1 and store.stored() == []
