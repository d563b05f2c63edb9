"""The governor on the real CLI: whatever the upstream's timing, across processes and machines.

Scripted upstreams with a hidden limit of 3 concurrent requests (429 with ``retry-after``
past it) and ``CLAUDE_CODE_MAX_RETRIES=0``: a 429 that reached the CLI would fail a
subagent, so every finding arriving proves the relay absorbed them. In each: every finding
arrives, there are at most as many 429s as agents, and the storm ran at the limit (the
upstream saw exactly 3 subagent streams at once: the learnt limit was the true one, not a
lower cut). Where the upstream limits the subagents alone, the storm also loses no
subagent to a second 429 but once, and the lead is never starved: each of its requests goes
before the subagent requests already queued. There the first wave holds its places for 2 s
(:class:`~teamlead.testing.scripts.FirstWaveHolds`), so the whole storm reaches the upstream
while it runs, however slowly the CLI sends it on a loaded machine: a storm spread over
longer than an agent's run lets the upstream take some of it one after another as places
free up, which the relay cannot tell from requests run at once, so it would learn a limit
too high by as many and pay one more 429 for each in the next wave. Wall time against the
ideal is measured in ``bench/limits.py``.

And an upstream that limits tokens, not concurrency: the field report's input-token bucket
(20,000 tokens refilled at 12,000 per second, described on every answer), where the old
governor lost agents to 429s that all came back on the same ``retry-after`` second.
"""

from __future__ import annotations

import collections
import contextlib
import json
import math
import os
import signal
import socket
import sqlite3
import subprocess
from pathlib import Path
from typing import Any, Literal

import pytest
from claude_agent_sdk import ResultMessage, query

from teamlead._governor.accounts.machine import MachineAccount
from teamlead._governor.aimd import Limits
from teamlead._relay import RELAY_POLICY, start_relay
from teamlead._relay.shared import account_of
from teamlead._relay.stats import RelayEvent
from teamlead.clock import SystemClock
from teamlead.events import RateLimited
from teamlead.governor import Governor, GovernorPolicy, Slot
from teamlead.testing import OfflineClaude, ScriptedServer, TokenBucket
from teamlead.testing.scripts import FanOut, FirstWaveHolds, findings_in

from ..redis_server import REDIS_SERVER, redis_server
from .conftest import TEAMLEAD, ask, start_ask
from .scripted import most_accepted_at_once

pytestmark = [pytest.mark.anyio, pytest.mark.cli, pytest.mark.slow]

LIMIT = 3
#: each subagent's answer time and the upstream's retry-after: short, as the storm's
#: shape (many at once into a limit of 3) is what the governor learns from, not the seconds
DELAY = 0.4
RETRY_AFTER = 0.5
#: the model the runs ask for (``--model``), so the bucket a test damages is the one used
MODEL = "claude-opus-5-5"
ROOT = Path(__file__).resolve().parents[2]


def _rejected(server: ScriptedServer) -> collections.Counter[str]:
    return collections.Counter(
        r.request.agent.description
        for r in server.recorded("subagent")
        if r.status == 429 and r.request.agent is not None
    )


def _all_findings(agents: int) -> list[str]:
    return sorted(f"agent-{n}" for n in range(1, agents + 1))


class TickingClock(SystemClock):
    """The system's clock, but no two readings are equal: a slot's ``acquired_at`` then
    orders the governor's grants as it made them."""

    def __init__(self) -> None:
        self._last = -math.inf

    def monotonic(self) -> float:
        self._last = max(super().monotonic(), math.nextafter(self._last, math.inf))
        return self._last


class WatchedGovernor(Governor):
    """Records, for every grant, which lower-priority callers were still waiting for one.

    A grant is counted when the governor makes it (the slot's ``acquired_at``), not when its
    caller resumes: a caller granted a slot but not yet resumed is not waiting any more.
    """

    def __init__(self, policy: GovernorPolicy) -> None:
        super().__init__(policy, clock=TickingClock())
        self.waiting: dict[int, int] = {}
        self.grants: list[tuple[int, int, set[int]]] = []  # (caller, priority, behind)
        self.arrived: dict[int, float] = {}  # caller: when it asked
        self._slots: dict[int, Slot] = {}
        self._ids = 0

    def served_first(self, me: int, other: int) -> bool:
        """``me`` was granted before ``other``, or ``other`` before ``me`` even asked."""
        granted = self._slots[other].acquired_at
        return granted > self._slots[me].acquired_at or granted < self.arrived[me]

    async def acquire(
        self,
        key: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the governor's signature
        priority: int = 0,
        **kwargs: Any,  # the rest of the governor's signature, passed on as it is
    ) -> Slot:
        self._ids += 1
        me = self._ids
        self.arrived[me] = self.clock.monotonic()
        behind = {other for other, p in self.waiting.items() if p < priority}
        self.waiting[me] = priority
        try:
            slot = await super().acquire(key, timeout=timeout, priority=priority, **kwargs)
        finally:
            del self.waiting[me]
        self._slots[me] = slot
        self.grants.append((me, priority, behind))
        return slot


@pytest.mark.parametrize(
    ("headers_after", "lead_counts"),
    [("answer", False), (1.5, True)],
    ids=["headers-with-the-answer", "headers-late-and-the-lead-counts"],
)
async def test_a_24_agent_storm_learns_the_true_limit_whatever_the_header_timing(
    tmp_path: Path, headers_after: float | Literal["answer"], lead_counts: bool
) -> None:
    agents = 24
    governor = WatchedGovernor(RELAY_POLICY)
    events: list[RelayEvent] = []
    script = FanOut.of(agents, delays=DELAY)
    if not lead_counts:  # the lead-priority checks below judge the storm as it arrives
        script = FirstWaveHolds(script, replies=LIMIT, seconds=2.0)
    with ScriptedServer(
        script,
        concurrency_limit=LIMIT,
        retry_after=RETRY_AFTER,
        limit_roles=None if lead_counts else {"subagent"},
        headers_after=headers_after,
    ) as server:
        async with start_relay(server.base_url, governor, on_event=events.append) as relay:
            env = {"CLAUDE_CODE_MAX_CONCURRENT_SUBAGENTS": str(agents)}
            claude = OfflineClaude(relay.base_url, state_dir=tmp_path, max_retries=0, env=env)
            results = [
                m
                async for m in query(prompt="Investigate 24 parts.", options=claude.options())
                if isinstance(m, ResultMessage)
            ]
            summary = relay.summary()
        most_at_once = most_accepted_at_once(server.recorded("subagent"))
    # every subagent's finding reached the lead's final answer
    assert sorted(findings_in(results[-1].result or "")) == _all_findings(agents)
    rejected = _rejected(server)
    assert sum(rejected.values()) <= agents and summary.passed == 0
    # the limit learnt is the true one (the old estimator cut to 1 here: one at a time)
    assert summary.buckets[0].limit == LIMIT
    assert most_at_once == LIMIT
    assert not [e for e in governor.journal if e.cap < LIMIT]
    if not lead_counts:
        # an upstream that limits the subagents alone: nothing is lost and the lead never waits
        assert not results[-1].is_error
        # at most one 429 per subagent, none passed on to the CLI; but for one: the lead's
        # answer, still streaming as its agents' requests went out, is counted among the
        # requests the upstream ran (an upper bound: this upstream's limit leaves the lead
        # out, the API's does not), so the next wave may try one level too high, once
        assert max(rejected.values(), default=0) <= 2
        assert sum(1 for n in rejected.values() if n > 1) <= 1
        assert summary.absorbed == sum(rejected.values())
        limited = [e for e in events if isinstance(e, RateLimited)]
        assert all(e.outcome == "absorbed" and e.role == "subagent" for e in limited)
        # the lead was never starved: each of its requests went before every subagent request
        # that was already queued when it arrived
        lead_grants = [(me, behind) for me, priority, behind in governor.grants if priority >= 2]
        assert len(lead_grants) >= 2
        assert any(behind for _, behind in lead_grants), "no lead request came during the storm"
        for me, behind in lead_grants:
            assert all(governor.served_first(me, other) for other in behind)
        assert all(r.status == 200 for r in server.recorded("lead"))


#: the field report's bucket; the CLI's own requests (about 7,000 input tokens a subagent,
#: 10,000 to 19,000 the lead's turns) draw from it; sized above the largest request
FIELD_BUCKET = TokenBucket(capacity=20_000, refill_per_s=12_000, kind="input-tokens")


async def test_twelve_agents_against_an_input_token_bucket_finish_near_its_own_minimum(
    tmp_path: Path,
) -> None:
    agents = 12
    with ScriptedServer(FanOut.of(agents, delays=DELAY), token_bucket=FIELD_BUCKET) as server:
        governor = Governor(RELAY_POLICY)
        async with start_relay(server.base_url, governor) as relay:
            env = {"CLAUDE_CODE_MAX_CONCURRENT_SUBAGENTS": str(agents)}
            claude = OfflineClaude(relay.base_url, state_dir=tmp_path, max_retries=0, env=env)
            results = [
                m
                async for m in query(prompt="Investigate 12 parts.", options=claude.options())
                if isinstance(m, ResultMessage)
            ]
            summary = relay.summary()
        records = server.recorded()
        drawn = server.drawn()
    assert sorted(findings_in(results[-1].result or "")) == _all_findings(agents)
    assert summary.passed == 0
    refused = collections.Counter(
        r.request.agent.description if r.request.agent is not None else r.role
        for r in records
        if r.status == 429
    )
    assert max(refused.values(), default=0) <= 1, refused  # at most one 429 per agent
    assert sum(refused.values()) <= agents, refused  # the lead's included
    # the bucket, not the agents' work, sets the pace (the time it takes against the
    # bucket's own minimum, 1.3 x at most, is measured in bench/limits.py)
    assert FIELD_BUCKET.minimum_s(drawn) > 5
    assert max(r.drawn.get("input-tokens", 0.0) for r in records) <= FIELD_BUCKET.capacity
    assert not [e for e in governor.journal if e.reason == "rate_limited"]  # no concurrency cut


def test_teamlead_ask_with_twelve_agents_meets_at_most_one_429_per_agent_on_the_bucket(
    tmp_path: Path,
) -> None:
    """``teamlead ask``'s lead turns grow past the bucket (up to about 23,000 tokens): each
    leaves the window in debt, which its answer shows only by a reset further away than a
    full refill (``remaining`` stops at 0). The relay waits the debt out too, so no agent
    meets more than one 429, nor the lead."""
    agents = 12
    with ScriptedServer(FanOut.of(agents, delays=DELAY), token_bucket=FIELD_BUCKET) as server:
        env = {"CLAUDE_CODE_MAX_CONCURRENT_SUBAGENTS": str(agents)}
        claude = OfflineClaude(server.base_url, state_dir=tmp_path, max_retries=0, env=env)
        proc = ask(
            claude,
            "--json",
            "--max-concurrent-agents",
            str(agents),
            prompt="Investigate 12 parts.",
            extra={"PYTHONPATH": str(ROOT)},
            timeout=300,
        )
        records = server.recorded()
    assert proc.returncode == 0, proc.stderr
    finished = json.loads(proc.stdout.splitlines()[-1])
    assert sorted(findings_in(finished["result"] or "")) == _all_findings(agents)
    refused = collections.Counter(
        r.request.agent.description if r.request.agent is not None else r.role
        for r in records
        if r.status == 429
    )
    assert max(refused.values(), default=0) <= 1, refused  # the lead's included
    assert sum(refused.values()) <= agents, refused
    assert finished["relay"]["passed"] == 0


def _ask(claude: OfflineClaude, cache: Path, *args: str) -> subprocess.Popen[str]:
    machine = {"XDG_CACHE_HOME": str(cache), "PYTHONPATH": str(ROOT)}
    return start_ask(claude, "--json", "--wait", "5", *args, extra=machine)


def _finished(proc: subprocess.Popen[str], within_s: float = 90) -> dict[str, Any]:
    """The run's Finished line; within the test's own timeout, so a run that hangs fails
    with what it printed (a fallback from the shared store says why on stderr)."""
    try:
        out, err = proc.communicate(timeout=within_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate(timeout=30)
        tail = f"stdout ends:\n{out[-3000:]}\nstderr ends:\n{err[-3000:]}"
        raise AssertionError(f"ask ran past {within_s:g} s; its {tail}") from None
    assert proc.returncode == 0, err
    assert "shared limits:" not in err, err  # the shared store held for the whole run
    finished: dict[str, Any] = json.loads(out.splitlines()[-1])
    assert finished["type"] == "finished" and finished["status"] == "completed", err
    return finished


def _two_runs_together(
    tmp_path: Path, *, shared_cache: bool, args: tuple[str, ...] = ()
) -> tuple[list[dict[str, Any]], ScriptedServer]:
    agents = 12
    with ScriptedServer(
        FanOut.of(agents, delays=DELAY),
        concurrency_limit=LIMIT,
        retry_after=RETRY_AFTER,
        limit_roles={"subagent"},
        headers_after="answer",
    ) as server:
        procs = []
        for n in (1, 2):
            claude = OfflineClaude(
                server.base_url,
                state_dir=tmp_path / f"machine-{n}",
                max_retries=0,
                env={"CLAUDE_CODE_MAX_CONCURRENT_SUBAGENTS": str(agents)},
            )
            cache = tmp_path / ("cache" if shared_cache else f"cache-{n}")
            procs.append(_ask(claude, cache, *args))
        try:
            finished = [_finished(p) for p in procs]
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate(timeout=30)
    for done in finished:
        assert sorted(findings_in(done["result"] or "")) == _all_findings(agents)
        assert done["relay"]["passed"] == 0
    return finished, server


def test_two_ask_processes_on_one_machine_share_one_limit(tmp_path: Path) -> None:
    finished, server = _two_runs_together(tmp_path, shared_cache=True)
    # alone, each process would learn 3 for itself and the pair would keep running 6 at
    # once into a limit of 3, a 429 per extra request every round; together they stay
    # under it after the first burst
    assert sum(_rejected(server).values()) <= 24
    assert [done["relay"]["buckets"][0]["limit"] for done in finished] == [LIMIT, LIMIT]
    assert (tmp_path / "cache" / "teamlead" / "limits.sqlite3").is_file()


@pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed")
def test_two_machines_share_one_limit_through_redis_only(tmp_path: Path) -> None:
    with redis_server(tmp_path) as redis:
        finished, server = _two_runs_together(
            tmp_path, shared_cache=False, args=("--limits", redis.url)
        )
    assert sum(_rejected(server).values()) <= 24
    assert [done["relay"]["buckets"][0]["limit"] for done in finished] == [LIMIT, LIMIT]
    # nothing went through either machine's own file
    assert not list(tmp_path.glob("cache-*/teamlead/limits.sqlite3"))


async def test_a_bare_cli_through_teamlead_relay_loses_no_subagent(tmp_path: Path) -> None:
    agents = 12
    with ScriptedServer(
        FanOut.of(agents, delays=DELAY),
        concurrency_limit=LIMIT,
        retry_after=RETRY_AFTER,
        limit_roles={"subagent"},
        headers_after=1.5,
    ) as server:
        env = {
            **os.environ,
            "XDG_CACHE_HOME": str(tmp_path / "cache"),
            "PYTHONPATH": str(ROOT),
        }
        relay = subprocess.Popen(  # noqa: ASYNC220 - read line by line, as a user's script does
            [*TEAMLEAD, "relay", "--upstream", server.base_url],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert relay.stdout is not None
            first = relay.stdout.readline().strip()
            name, _, base_url = first.partition("=")
            assert name == "ANTHROPIC_BASE_URL" and base_url.startswith("http://127.0.0.1:")
            claude = OfflineClaude(
                base_url,
                state_dir=tmp_path / "bare",
                max_retries=0,  # a bare CLI with no retries: the relay alone absorbs 429s
                env={"CLAUDE_CODE_MAX_CONCURRENT_SUBAGENTS": str(agents)},
            )
            results = [
                m
                async for m in query(prompt="Investigate.", options=claude.options())
                if isinstance(m, ResultMessage)
            ]
            relay.send_signal(signal.SIGTERM)
            _, err = relay.communicate(timeout=30)
        finally:
            if relay.poll() is None:
                relay.kill()
                relay.communicate(timeout=30)
    assert sorted(findings_in(results[-1].result or "")) == _all_findings(agents)
    assert sum(_rejected(server).values()) <= agents
    assert most_accepted_at_once(server.recorded("subagent")) == LIMIT
    assert relay.returncode == 0, err
    port = int(base_url.split(":")[2].split("/")[0])
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass  # the port is closed


def test_a_text_timestamp_in_the_machine_store_costs_one_warning_not_the_run(
    tmp_path: Path,
) -> None:
    """A row another program left with ``updated = 'abc'`` used to crash every run on the
    machine, for good: the check that would forget the row was the line that raised."""
    cache = tmp_path / "cache"
    db = cache / "teamlead" / "limits.sqlite3"
    agents = 4
    with ScriptedServer(FanOut.of(agents, delays=DELAY)) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "machine", max_retries=0)
        # the row of this upstream's account, as an earlier run left it, then damaged
        key = f"{account_of(server.base_url, claude.env)}/anthropic/{MODEL}"
        past = MachineAccount(db)
        past.update(key, lambda _: (Limits(cap=3), None))
        past.close()
        with contextlib.closing(sqlite3.connect(db)) as other:
            other.execute("UPDATE limits SET updated = 'abc'")
            other.commit()
        proc = _ask(claude, cache, "--model", MODEL)
        try:
            out, err = proc.communicate(timeout=90)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err
    assert [line for line in err.splitlines() if line.strip()] == [
        f"teamlead: warning: shared limits: dropped the unreadable learnt limits of {key!r} in {db}"
    ]
    finished = json.loads(out.splitlines()[-1])
    assert finished["type"] == "finished" and finished["status"] == "completed", err
    assert sorted(findings_in(finished["result"] or "")) == _all_findings(agents)
    assert finished["relay"]["passed"] == 0  # every request went through the governor
    with contextlib.closing(sqlite3.connect(db)) as after:
        assert after.execute("SELECT typeof(updated) FROM limits").fetchall() == [("real",)]
