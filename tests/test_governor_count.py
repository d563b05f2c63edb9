"""What a 429 counts as accepted, on every account: the requests the upstream may have run.

A measured cut goes to the requests the upstream was running when it rejected. What the
governor can see is its leases, and a 429 is read some time after the upstream sent it:
a request that ended meanwhile (in another process above all) was running at the upstream,
so the count is every lease of the provider, not marked rejected, whose request ran at any
moment since the rejected one was taken: until it was given back, or answered (its last
event came, while its last bytes may still be on their way). That is an upper bound, so
the cut never lands below the true limit, and the burst's late rejections settle it down
to it. Each test runs on the
account of one process, on two accounts over one SQLite file (two processes), and on two
accounts over one real Redis (two machines).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from teamlead._governor import aimd
from teamlead._governor.accounts import Account, ProcessAccount
from teamlead._governor.accounts.base import Bounds, Lease
from teamlead._governor.accounts.machine import MachineAccount
from teamlead._governor.aimd import Limits, Step
from teamlead.governor import Governor, GovernorPolicy
from teamlead.testing import FakeClock

from .governors import HAIKU as B
from .governors import OPUS as A
from .redis_server import REDIS_SERVER, redis_server

OTHER = "openai/gpt-7"

#: two accounts of one account kind: the same object for one process
Pair = tuple[Account, Account]


@pytest.fixture(params=["process", "machine", "redis"])
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Pair]:
    clock = FakeClock()
    if request.param == "process":
        one = ProcessAccount()
        yield one, one
        return
    if request.param == "machine":
        db = tmp_path / "limits.sqlite3"
        accounts: list[Account] = [MachineAccount(db, clock=clock) for _ in range(2)]
        try:
            yield accounts[0], accounts[1]
        finally:
            for account in accounts:
                account.close()
        return
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server)")
    from teamlead._governor.accounts.redis import RedisAccount

    with redis_server(tmp_path) as server:
        accounts = [RedisAccount(server.url, clock=clock) for _ in range(2)]
        try:
            yield accounts[0], accounts[1]
        finally:
            for account in accounts:
                account.close()


def _take(account: Account, key: str = A) -> Lease:
    lease = account.take(Bounds(key, limit=64))
    assert lease is not None
    return lease


def _counted(account: Account, lease: Lease, prefix: str = "anthropic/") -> int:
    seen: list[int] = []

    def rule(stored: Limits | None, accepted: int) -> Step:
        seen.append(accepted)
        return stored or Limits(cap=32), None

    account.update_rejected(lease, prefix, rule)
    return seen[-1]


def test_a_rejection_counts_every_lease_live_since_it_was_taken_less_the_rejected(
    pair: Pair,
) -> None:
    here, there = pair
    before = _take(there)
    there.give_back(before)  # ended before the rejected request was sent: not counted
    ended = _take(there)  # running when it was sent, ended before its 429 was read
    mine = _take(here)
    there.give_back(ended)
    later = _take(here, B)  # sent after it, another model of the provider, ended
    here.give_back(later)
    live = _take(there)  # still running
    refused = _take(there)  # rejected too, then given back: never counted
    _counted(there, refused)
    there.give_back(refused)
    elsewhere = _take(there, OTHER)  # another provider's
    assert _counted(here, mine) == 3  # ended, later and live
    # a lease rejected is not counted by a later rejection either, live or not
    also = _take(there)
    assert _counted(there, also) == 1  # live: mine was rejected
    assert _counted(here, mine, prefix=A) == 2  # one key only: ended and live, not later
    for lease in (mine, live, elsewhere, also):
        (here if lease.origin is here else there).give_back(lease)


def test_an_answer_complete_before_the_rejected_request_was_sent_is_not_counted(
    pair: Pair,
) -> None:
    here, there = pair
    done = _take(there)  # the lead's answer: complete, its last bytes still being read
    there.answered(done)
    gone = _take(there)  # answered, then given back
    there.answered(gone)
    there.give_back(gone)
    mine = _take(here)  # a subagent's request, sent once the lead's answer came
    late = _take(there)  # running when mine was sent, answered while its 429 was on its way
    there.answered(late)
    there.answered(late)  # idempotent: still counted as answered after mine was taken
    ended = _take(there)
    there.answered(ended)
    there.give_back(ended)  # answered after mine was taken, then given back
    assert _counted(here, mine) == 2  # late and ended; neither done nor gone
    for lease in (done, late):
        there.give_back(lease)


def test_a_lease_the_account_does_not_know_counts_the_live_ones(pair: Pair) -> None:
    here, there = pair
    gone = _take(here)
    here.give_back(gone)
    running = [_take(there) for _ in range(2)]
    assert _counted(here, gone) == 2
    for lease in running:
        there.give_back(lease)


def test_a_lease_carries_the_limits_read_when_it_was_taken(pair: Pair) -> None:
    here, there = pair
    assert _take(here).limits is None  # never seen
    there.update(A, lambda _: (Limits(cap=5, epoch=3), None))
    lease = _take(here)
    assert lease.limits is not None and (lease.limits.cap, lease.limits.epoch) == (5, 3)


@pytest.mark.anyio
async def test_the_lead_s_answer_read_to_its_end_during_its_agents_burst_is_not_counted(
    pair: Pair,
) -> None:
    """The shape of every fan-out: the lead's answer comes (its last event, its slot still
    held while its last bytes are read), its agents' requests go out together, the upstream
    runs 3 and rejects the rest. Counting the lead's slot, the cut would land one above the
    limit and cost the next wave a 429."""
    here, there = pair
    clock = FakeClock()
    first = Governor(GovernorPolicy(ceiling=32), clock=clock, account=here)
    second = Governor(GovernorPolicy(ceiling=32), clock=clock, account=there)
    lead = await first.acquire(A)
    lead.answered()
    burst = [await (first if n % 2 else second).acquire(A) for n in range(8)]
    lead.success()
    lead.release()
    for slot in burst[3:]:
        slot.rate_limited(0.5, measured=True)
        slot.release()
    assert (first.state(A).cap, second.state(A).cap) == (3, 3)
    journal = [e.reason for e in sorted([*first.journal, *second.journal], key=lambda e: e.at)]
    assert journal == ["rate_limited"] + ["settled"] * 4
    for slot in burst[:3]:
        slot.release()


@pytest.mark.anyio
async def test_a_request_that_ends_while_another_s_429_is_on_its_way_keeps_the_true_limit(
    pair: Pair,
) -> None:
    """The shape that cut a two-process storm to 2 under a limit of 3: the upstream runs
    a1, a2 and b1 and rejects b2 and a3; b1 ends (its process gives its slot back) before
    a3's 429 is read. Counting only the leases live then, a3's cut lands on 3 and b2's
    late 429 settles it to 2; counting b1 too, it lands on 4 and settles on 3."""
    here, there = pair
    clock = FakeClock()
    first = Governor(GovernorPolicy(ceiling=32), clock=clock, account=here)
    second = Governor(GovernorPolicy(ceiling=32), clock=clock, account=there)
    a1, a2 = await first.acquire(A), await first.acquire(A)
    b1, b2 = await second.acquire(A), await second.acquire(A)
    a3 = await first.acquire(A)
    b1.success()
    b1.release()
    a3.rate_limited(0.5, measured=True)
    a3.release()
    assert first.state(A).cap == 4
    b2.rate_limited(0.5, measured=True)
    b2.release()
    assert (first.state(A).cap, second.state(A).cap) == (3, 3)
    journal = [(e.reason, e.cap) for e in [*first.journal, *second.journal]]
    assert journal == [("rate_limited", 4), ("settled", 3)]
    for slot in (a1, a2):
        slot.release()


def test_two_rejections_read_at_once_on_two_machines_keep_the_true_limit(
    tmp_path: Path,
) -> None:
    """The upstream runs two requests (a limit of 2) and rejects mine and theirs; mine's
    429 is counted on one machine while theirs is counted and written on the other. Redis
    counts in one step and writes in the next: mine was marked rejected as it was counted,
    so theirs' count left it out (2), yet mine's rule, read again after that cut, settled
    it one lower (1). A rejection is marked in the step that writes its rule: theirs counts
    mine (3), and mine settles the cut to 2. (The other accounts count and write in one
    transaction: no other step can come in between.)"""
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server)")
    from teamlead._governor.accounts.redis import RedisAccount

    knobs = GovernorPolicy(ceiling=32)

    def cut(lease: Lease) -> Callable[[Limits | None, int], Step]:
        def rule(stored: Limits | None, accepted: int) -> Step:
            epoch = 0 if lease.limits is None else lease.limits.epoch
            return aimd.rate_limited(
                stored or aimd.initial(knobs), knobs, slot_epoch=epoch, now=1.0, accepted=accepted
            )

        return rule

    with redis_server(tmp_path) as server:
        here, there = (RedisAccount(server.url, clock=FakeClock()) for _ in range(2))
        try:
            accepted = [_take(here), _take(there)]
            mine, theirs = _take(here), _take(there)
            counted: list[int] = []

            def mine_then_theirs(stored: Limits | None, n: int) -> Step:
                counted.append(n)
                if len(counted) == 1:  # between mine's count and write: theirs
                    there.update_rejected(theirs, "anthropic/", cut(theirs))
                return cut(mine)(stored, n)

            _, change = here.update_rejected(mine, "anthropic/", mine_then_theirs)
            assert counted == [3, 2]  # theirs ran as mine was counted; mine read again after
            assert change is not None and change.reason == "settled"
            learnt = here.limits(A)
            assert learnt is not None and learnt.cap == 2
            # both stay out of every later count, and the leases still run
            assert _counted(there, _take(there)) == 2
            for lease in [*accepted, mine]:
                here.give_back(lease)
        finally:
            here.close()
            there.close()


def _released_rows(account: Account) -> int:
    if isinstance(account, MachineAccount):
        with sqlite3.connect(account.path) as db:
            return int(db.execute("SELECT COUNT(*) FROM released").fetchone()[0])
    from teamlead._governor.accounts.redis import RedisAccount

    assert isinstance(account, RedisAccount)
    return int(account._redis.zcard("teamlead:released"))


@pytest.mark.parametrize("kind", ["machine", "redis"])
def test_what_was_given_back_is_kept_only_while_a_live_lease_may_count_it(
    kind: str, tmp_path: Path
) -> None:
    clock = FakeClock()

    def check(account: Account, tick: Callable[[], None]) -> None:
        keep = _take(account)
        for _ in range(20):
            account.give_back(_take(account))
        assert _released_rows(account) == 20  # keep may still count them
        account.give_back(keep)
        tick()
        account.give_back(_take(account))  # nothing live is older: all dropped
        assert _released_rows(account) <= 1

    if kind == "machine":
        machine = MachineAccount(tmp_path / "limits.sqlite3", clock=clock)
        try:
            check(machine, lambda: clock.advance(2.0))  # the file is tidied once a second
        finally:
            machine.close()
        return
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server)")
    from teamlead._governor.accounts.redis import RedisAccount

    with redis_server(tmp_path) as server:
        redis = RedisAccount(server.url, clock=clock)
        try:
            check(redis, lambda: None)
        finally:
            redis.close()


_OLD_SCHEMA = """
CREATE TABLE limits (key TEXT PRIMARY KEY, data TEXT NOT NULL, updated REAL NOT NULL);
CREATE TABLE leases (
    token TEXT PRIMARY KEY, key TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL,
    started REAL NOT NULL, expires REAL NOT NULL);
"""


def test_a_file_of_an_older_teamlead_gets_the_new_columns_and_its_leases_count(
    tmp_path: Path,
) -> None:
    db = tmp_path / "limits.sqlite3"
    clock = FakeClock()
    with sqlite3.connect(db) as old:
        old.executescript(_OLD_SCHEMA)
        old.execute(  # a lease of an older process still running (this one stands for it)
            "INSERT INTO leases VALUES ('old:1', ?, 'elsewhere', 1, 0, ?)",
            (A, clock.time() + 30),
        )
    account = MachineAccount(db, clock=clock)
    try:
        mine = _take(account)
        assert account.in_flight(A) == 2
        assert _counted(account, mine) == 1  # the old process's request
        account.give_back(mine)
    finally:
        account.close()
    with sqlite3.connect(db) as check:
        columns = {row[1] for row in check.execute("PRAGMA table_info(leases)")}
    assert {"taken", "rejected"} <= columns
