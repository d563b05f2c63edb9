"""Bench: teamlead's governor vs fixed concurrency vs Inspect's adaptive rules, side by side.

The same workload runs against the same hidden-limit upstream (the scripted model server
admits 3 concurrent requests and answers 429 with ``retry-after: 1`` past that) in four
timing shapes, each strategy against a fresh server:

* ``at once``     response headers as soon as a request is admitted (as the API does);
* ``late``        headers 1.5 s after the request came (a long prefill);
* ``answer``      headers only with the whole answer (a buffering gateway);
* ``lead counts`` headers at once, and three requests of the lead (0.5 s each, at 0, 4
  and 8 s) count against the same limit.

The workload: 24 agents start together, each needing one 1.5 s streamed answer; an agent
whose request meets a 429 waits the Retry-After and sends it again. Strategies:

* ``teamlead``    every request goes through the real loopback relay and its governor
  (starting at 32; 429s are held and retried inside the relay, as for the CLI);
* ``fixed N``     at most N requests at once (1, 3, 8); a rejected request keeps its place
  while it waits, as a client semaphore around a call with retries does;
* ``inspect``     Inspect's adaptive connections, reimplemented from its documentation
  (``docs/models-concurrency.qmd``): start 20, bounds 4-100, slow-start doubling after each
  clean round until the first rate-limit episode, then +5% (at least 1) per clean round,
  x0.8 per rate-limit episode with a 15 s debounce (extended by Retry-After); a clean
  round is as many successes as the limit with no 429 in between.

Then two processes on one account (two relays with a governor each, 12 agents each, all
together): their governors sharing the machine's store, against each learning alone, with
headers at once and with headers only with the whole answer (where a 429 is read while
the other process's requests end: the shape that once made a shared pair learn 2 under a
limit of 3); each row says the limit each governor learnt (the goal: 3 and 3, shared).

Figures per shape and strategy: wall time (first request sent to last answer read) over
the ideal (the work kept at exactly the limit: ``ceil(24 / 3) * 1.5 s``, or the lead's work
added over 3 slots), 429s served per agent, and the time to converge (when the last 429
was served; 0 when none was). Goals for ``teamlead`` in every shape: <= 1.2 x ideal, <= 1
429 per agent, and ahead of the Inspect rules.

Run: ``python bench/limits.py`` (about 7 minutes); ``--quick`` for a smoke run of every
shape and strategy with 6 agents of 0.05 s, every other time scaled alike (retry-after
and late headers 0.05 s, the lead's 0.05 s requests at 0, 0.1 and 0.2 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import aiohttp
from _common import table

from teamlead._governor.sqlite_account import MachineAccount
from teamlead._relay import RELAY_POLICY, start_relay
from teamlead.governor import Governor
from teamlead.testing import Reply, ScriptedRequest, ScriptedServer

LIMIT = 3


@dataclass(frozen=True)
class Pace:
    """The workload's sizes and times: ``agents`` answers of ``work`` seconds each, the
    hidden limit's ``retry_after``, the late shape's ``late_s`` and the lead's requests
    (``lead_work`` seconds each, sent ``lead_at`` seconds after the start)."""

    agents: int = 24
    work: float = 1.5
    retry_after: float = 1.0
    late_s: float = 1.5
    lead_at: tuple[float, ...] = (0.0, 4.0, 8.0)
    lead_work: float = 0.5


FULL = Pace()
QUICK = Pace(
    agents=6, work=0.05, retry_after=0.05, late_s=0.05, lead_at=(0.0, 0.1, 0.2), lead_work=0.05
)


@dataclass(frozen=True)
class Shape:
    name: str
    headers_after: float | Literal["answer"]
    lead_counts: bool


def shapes(pace: Pace) -> list[Shape]:
    return [
        Shape("at once", 0.0, False),
        Shape("late", pace.late_s, False),
        Shape("answer", "answer", False),
        Shape("lead counts", 0.0, True),
    ]


@dataclass
class Outcome:
    wall: float
    rejected: int
    converged: float
    answered: int


def _script(request: ScriptedRequest) -> Reply:
    work = float(request.first_user_text.split()[-1])
    return Reply.text("done", delay=work)


def _body(work: float, lead: bool) -> bytes:
    body: dict[str, object] = {
        "model": "claude-opus-5-5",
        "max_tokens": 16,
        "stream": True,
        "messages": [{"role": "user", "content": f"work {work}"}],
    }
    if lead:  # the scripted server (and the relay) tell the lead by its tools
        body["tools"] = [{"name": "Agent", "input_schema": {"type": "object"}}]
    return json.dumps(body).encode()


Send = Callable[[bytes], Awaitable[tuple[int, float]]]


def _sender(session: aiohttp.ClientSession, base_url: str, pace: Pace) -> Send:
    async def send(body: bytes) -> tuple[int, float]:
        headers = {"content-type": "application/json", "x-api-key": "bench"}
        async with session.post(f"{base_url}/v1/messages", data=body, headers=headers) as r:
            await r.read()
            retry = float(r.headers.get("retry-after", pace.retry_after))
            return r.status, retry

    return send


class _Inspect:
    """Inspect's adaptive connections, from its documentation (see the module docstring)."""

    def __init__(self, start: int = 20, low: int = 4, high: int = 100) -> None:
        self.limit, self.low, self.high = start, low, high
        self.slow_start = True
        self.clean = 0
        self.no_cut_before = -math.inf
        self.running = 0
        self.changed = asyncio.Condition()

    async def acquire(self) -> None:
        async with self.changed:
            await self.changed.wait_for(lambda: self.running < self.limit)
            self.running += 1

    async def release(self) -> None:
        async with self.changed:
            self.running -= 1
            self.changed.notify_all()

    async def success(self) -> None:
        self.clean += 1
        if self.clean >= self.limit:
            self.clean = 0
            grown = (
                self.limit * 2 if self.slow_start else self.limit + max(1, round(0.05 * self.limit))
            )
            async with self.changed:
                self.limit = min(self.high, grown)
                self.changed.notify_all()

    def rate_limited(self, now: float, retry_after: float) -> None:
        self.clean = 0
        if now < self.no_cut_before:
            return  # the same episode: one cut per debounce
        self.slow_start = False
        self.limit = max(self.low, math.floor(self.limit * 0.8))
        self.no_cut_before = now + max(15.0, retry_after)


async def _agent(
    strategy: str, send: Send, work: float, lead: bool, limiter: asyncio.Semaphore | _Inspect | None
) -> bool:
    body = _body(work, lead)
    for _ in range(100):
        if isinstance(limiter, asyncio.Semaphore):
            async with limiter:
                while True:
                    status, retry = await send(body)
                    if status != 429:
                        return status == 200
                    await asyncio.sleep(retry)
        elif isinstance(limiter, _Inspect):
            await limiter.acquire()
            try:
                status, retry = await send(body)
                if status == 200:
                    await limiter.success()
                    return True
                if status != 429:
                    return False
                limiter.rate_limited(time.monotonic(), retry)
                await asyncio.sleep(retry)  # a retry keeps its connection, as in Inspect
                while True:
                    status, retry = await send(body)
                    if status != 429:
                        return status == 200  # a success after a retry is neutral
                    limiter.rate_limited(time.monotonic(), retry)
                    await asyncio.sleep(retry)
            finally:
                await limiter.release()
        else:  # teamlead: the relay holds and retries 429s; one passed on is retried here
            status, retry = await send(body)
            if status != 429:
                return status == 200
            await asyncio.sleep(retry)
    return False


async def _lead(
    strategy: str, send: Send, limiter: asyncio.Semaphore | _Inspect | None, pace: Pace
) -> int:
    began = time.monotonic()
    done = 0
    for at in pace.lead_at:
        await asyncio.sleep(max(0.0, began + at - time.monotonic()))
        done += await _agent(strategy, send, pace.lead_work, True, limiter)
    return done


async def _run(strategy: str, shape: Shape, pace: Pace) -> Outcome:
    agents, work = pace.agents, pace.work
    roles = None if shape.lead_counts else {"other"}
    with ScriptedServer(
        _script,
        concurrency_limit=LIMIT,
        retry_after=pace.retry_after,
        limit_roles=roles,  # type: ignore[arg-type]
        headers_after=shape.headers_after,
    ) as server:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            limiter: asyncio.Semaphore | _Inspect | None = None
            if strategy.startswith("fixed"):
                limiter = asyncio.Semaphore(int(strategy.split()[1]))
            elif strategy == "inspect":
                limiter = _Inspect()

            async def workload(base_url: str) -> tuple[int, float]:
                send = _sender(session, base_url, pace)
                began = time.monotonic()
                jobs: list[Coroutine[Any, Any, int]] = [
                    _agent(strategy, send, work, False, limiter) for _ in range(agents)
                ]
                if shape.lead_counts:
                    jobs.append(_lead(strategy, send, limiter, pace))
                results = await asyncio.gather(*jobs)
                answered = sum(int(r) for r in results[:agents])
                return answered, began

            if strategy == "teamlead":
                async with start_relay(server.base_url, Governor(RELAY_POLICY)) as relay:
                    answered, began = await workload(relay.base_url)
            else:
                answered, began = await workload(server.base_url)
        ended = time.monotonic()
        rejections = [r.started for r in server.recorded() if r.status == 429]
        converged = max(rejections) - began if rejections else 0.0
        return Outcome(ended - began, len(rejections), converged, answered)


async def _two_processes(
    shared: bool, agents: int, pace: Pace, db: Path, headers_after: float | Literal["answer"]
) -> tuple[float, int, list[int]]:
    """Two relays (two processes' governors) on one account, ``agents`` each, together.

    ``shared``: their governors share the machine's store (two accounts on one SQLite
    file, as two processes have); else each learns alone. Returns (wall, 429s, the limit
    each governor learnt).
    """
    with ScriptedServer(
        _script,
        concurrency_limit=LIMIT,
        retry_after=pace.retry_after,
        limit_roles={"other"},
        headers_after=headers_after,
    ) as server:
        governors = [
            Governor(RELAY_POLICY, account=MachineAccount(db) if shared else None) for _ in range(2)
        ]
        connector = aiohttp.TCPConnector(limit=0)
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            start_relay(server.base_url, governors[0]) as first,
            start_relay(server.base_url, governors[1]) as second,
        ):
            began = time.monotonic()
            jobs = [
                _agent("teamlead", _sender(session, relay.base_url, pace), pace.work, False, None)
                for relay in (first, second)
                for _ in range(agents)
            ]
            await asyncio.gather(*jobs)
            wall = time.monotonic() - began
        learnt = [governor.state(governor.keys[0]).cap for governor in governors]
        for governor in governors:
            governor.account.close()
        return wall, sum(1 for r in server.recorded() if r.status == 429), learnt


def _ideal(shape: Shape, pace: Pace) -> float:
    agents, work = pace.agents, pace.work
    if shape.lead_counts:
        lead = len(pace.lead_at) * pace.lead_work
        return max(math.ceil(agents / LIMIT) * work, (agents * work + lead) / LIMIT)
    return math.ceil(agents / LIMIT) * work


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="every shape with 6 agents of 0.05 s, times scaled"
    )
    args = parser.parse_args(argv)
    pace = QUICK if args.quick else FULL
    agents, work = pace.agents, pace.work
    strategies = ["teamlead", "fixed 1", "fixed 3", "fixed 8", "inspect"]
    rows = []
    verdicts = []
    for shape in shapes(pace):
        ideal = _ideal(shape, pace)
        results = {s: asyncio.run(_run(s, shape, pace)) for s in strategies}
        for name, out in results.items():
            rows.append(
                [
                    f"{shape.name}: {name}",
                    f"{out.answered}/{agents}",
                    f"{out.wall:.1f}",
                    f"{out.wall / ideal:.2f}",
                    f"{out.rejected / agents:.2f}",
                    f"{out.converged:.1f}",
                ]
            )
        ours, theirs = results["teamlead"], results["inspect"]
        verdicts.append(
            (
                shape.name,
                ours.wall / ideal,
                ours.rejected / agents,
                ours.answered == agents
                and ours.wall <= 1.2 * ideal
                and ours.rejected <= agents
                and ours.wall <= theirs.wall,
            )
        )
    print(
        f"{agents} agents of {work:g} s, hidden limit {LIMIT}, retry-after {pace.retry_after:g} s; "
        "x ideal = wall / (work kept at the limit)"
    )
    print(table(["shape: strategy", "answered", "wall s", "x ideal", "429/agent", "conv s"], rows))
    each = agents // 2
    pair_ideal = math.ceil(2 * each / LIMIT) * work
    pair_rows = []
    pair_shapes: list[tuple[str, float | Literal["answer"]]] = [
        ("at once", 0.0),
        ("answer", "answer"),
    ]
    shared_learnt: list[int] = []
    with tempfile.TemporaryDirectory(prefix="teamlead-limits-") as tmp:
        for shape_name, headers_after in pair_shapes:
            for shared in (False, True):
                db = Path(tmp) / f"limits-{shape_name}-{shared}.sqlite3"
                wall, rejected, learnt = asyncio.run(
                    _two_processes(shared, each, pace, db, headers_after)
                )
                if shared:
                    shared_learnt += learnt
                pair_rows.append(
                    [
                        f"{shape_name}: "
                        + ("shared (machine store)" if shared else "each alone (--limits process)"),
                        f"{wall:.1f}",
                        f"{wall / pair_ideal:.2f}",
                        f"{rejected / (2 * each):.2f}",
                        "/".join(str(n) for n in learnt),
                    ]
                )
    print(f"two processes on one account, {each} agents each, together:")
    print(table(["shape: governors", "wall s", "x ideal", "429/agent", "learnt"], pair_rows))
    shared_x = [float(row[2]) for row in pair_rows[1::2]]
    alone_x = [float(row[2]) for row in pair_rows[0::2]]
    worst = max(v[1] for v in verdicts)
    most = max(v[2] for v in verdicts)
    missed = [v[0] for v in verdicts if not v[3]]
    print(
        f"SUMMARY: teamlead worst {worst:.2f} x ideal, at most {most:.2f} 429s per agent over "
        f"{len(verdicts)} shapes"
        + (f" (goal missed in: {', '.join(missed)})" if missed else " (every goal met)")
        + f"; two processes at worst {max(shared_x):.2f} x ideal shared vs "
        + f"{min(alone_x):.2f} x alone, shared learnt "
        + ("the true limit" if set(shared_learnt) == {LIMIT} else f"{shared_learnt}")
        + f" ({LIMIT}) in {len(pair_shapes)} shapes"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
