"""Bench: teamlead's governor vs fixed concurrency vs Inspect's adaptive rules, side by side.

The same workload runs against the same hidden-limit upstream (the scripted model server
admits 3 concurrent requests and answers 429 with ``retry-after: 1`` past that) in four
timing shapes and an overload burst, each strategy against a fresh server:

* ``at once``     response headers as soon as a request is admitted (as the API does);
* ``late``        headers 1.5 s after the request came (a long prefill);
* ``answer``      headers only with the whole answer (a buffering gateway);
* ``lead counts`` headers at once, and three requests of the lead (0.5 s each, at 0, 4
  and 8 s) count against the same limit;
* ``529 burst``   headers at once, and every request of the first 10 s (from the first
  request on) answered 529 ``overloaded_error`` (the scripted ``OverloadBurst``).

The workload: 24 agents start together, each needing one 1.5 s streamed answer; an agent
whose request meets a 429 waits the Retry-After and sends it again; one that meets a 529
retries it :data:`CLIENT_RETRIES` times after the Anthropic SDK's backoff (0.5 s doubling
up to 8 s, less up to a quarter at random), then its agent is lost. Strategies:

* ``teamlead``    every request goes through the real loopback relay and its governor
  (starting at 32; 429s are held and retried inside the relay, and so is a 529 through
  its overload hold, as for the CLI; the client behind it has no retries of a 529);
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
added over 3 slots, or after the burst), 429s served per agent, the time to converge (when
the last 429 was served; 0 when none was) and the 529s served. Goals for ``teamlead`` in
every shape: every agent answered, <= 1.2 x ideal (1.3 x in the burst: its end is met
within one backoff), <= 1 429 per agent, and ahead of the Inspect rules (more answered,
or as many sooner).

Then upstreams that limit tokens, not concurrency: the scripted server's token buckets,
enforced per second as Anthropic's per-minute limits may be (an input-token bucket of
20,000 refilled at 12,000 per second, as in the field report, and a requests bucket of 5
refilled at 4 per second, both described by ``anthropic-ratelimit-*`` headers on every
answer), in three shapes: ``input tokens`` (24 agents each sending one 6,000-token request
of 0.5 s: the input tokens bind), ``requests`` (24 agents of 400 tokens: the request count
binds) and ``input tokens, no headers`` (the first shape behind a gateway that strips the
headers: only 429 and ``retry-after`` remain, the window must be learnt). Every client has
3 tries of a 429 before it gives its agent up, as a client with retries does: teamlead's
relay holds and retries them (its own 3) and the client behind it has none (as the CLI
with ``CLAUDE_CODE_MAX_RETRIES=0``); ``fixed N`` and ``inspect`` retry after the
``retry-after`` themselves. Figures: wall time over the bucket's own minimum (the time the
buckets need to let through what was drawn, ``(drawn - capacity) / refill`` for the one
that binds, plus one request's work), 429s served per agent, and agents lost. Goals for
``teamlead`` with headers: <= 1.3 x the bucket's minimum, <= 1 429 per agent, none lost.

Last, the field report on the real CLI (full mode only): 12 Agent calls, each subagent's
answer 0.4 s, against the input-token bucket alone, through teamlead's relay
(``CLAUDE_CODE_MAX_RETRIES=0``) and, beside it, the bare CLI talking to the upstream with
its default retries; its figures are the same (wall from the first request's arrival
to the last answer, over ``(drawn - capacity) / refill``; the goal for teamlead is 1.3 x,
every finding, at most one 429 per agent and no more 429s in all than agents, the lead's
included).

Run: ``python bench/limits.py`` (about 13 minutes); ``--quick`` for a smoke run of every
shape and strategy with 6 agents of 0.05 s, every other time scaled alike (retry-after
and late headers 0.05 s, the lead's 0.05 s requests at 0, 0.1 and 0.2 s, a 0.2 s burst;
the token buckets and requests scaled to a minimum of about half a second).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import aiohttp
import anyio
from _common import table
from claude_agent_sdk import ResultMessage, query

from teamlead._governor.accounts.machine import MachineAccount
from teamlead._relay import RELAY_POLICY, start_relay
from teamlead.governor import Governor
from teamlead.testing import OfflineClaude, Reply, ScriptedRequest, ScriptedServer, TokenBucket
from teamlead.testing.rate_buckets import input_tokens_of
from teamlead.testing.scripts import FanOut, OverloadBurst, findings_in

LIMIT = 3

#: tries of a 429 (token buckets) or a 529 (the burst) a client gives a request before it
#: gives its agent up (teamlead's relay has as many of its own for a 429,
#: ``RelayConfig.max_retries``, and holds a 529 for ``overload_hold_s``; the client behind
#: it has none)
CLIENT_RETRIES = 3


@dataclass(frozen=True)
class Pace:
    """The workload's sizes and times: ``agents`` answers of ``work`` seconds each, the
    hidden limit's ``retry_after``, the late shape's ``late_s``, the lead's requests
    (``lead_work`` seconds each, sent ``lead_at`` seconds after the start) and the 529
    burst's length ``burst_s``."""

    agents: int = 24
    work: float = 1.5
    retry_after: float = 1.0
    late_s: float = 1.5
    lead_at: tuple[float, ...] = (0.0, 4.0, 8.0)
    lead_work: float = 0.5
    burst_s: float = 10.0


FULL = Pace()
QUICK = Pace(
    agents=6,
    work=0.05,
    retry_after=0.05,
    late_s=0.05,
    lead_at=(0.0, 0.1, 0.2),
    lead_work=0.05,
    burst_s=0.2,
)


@dataclass(frozen=True)
class Shape:
    name: str
    headers_after: float | Literal["answer"]
    lead_counts: bool
    burst_s: float = 0.0


def shapes(pace: Pace) -> list[Shape]:
    return [
        Shape("at once", 0.0, False),
        Shape("late", pace.late_s, False),
        Shape("answer", "answer", False),
        Shape("lead counts", 0.0, True),
        Shape("529 burst", 0.0, False, pace.burst_s),
    ]


@dataclass
class Outcome:
    wall: float
    rejected: int
    converged: float
    answered: int
    overloaded: int = 0


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


#: a request sent: its status and its Retry-After (``None`` when it had none)
Send = Callable[[bytes], Awaitable[tuple[int, float | None]]]


def _sender(session: aiohttp.ClientSession, base_url: str) -> Send:
    async def send(body: bytes) -> tuple[int, float | None]:
        headers = {"content-type": "application/json", "x-api-key": "bench"}
        async with session.post(f"{base_url}/v1/messages", data=body, headers=headers) as r:
            await r.read()
            retry = r.headers.get("retry-after")
            return r.status, float(retry) if retry is not None else None

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


def _client_backoff(pace: Pace, tries: int) -> float:
    """A client's pause before its ``tries``-th retry of a 529 that gave no Retry-After:
    the Anthropic SDK's (0.5 s doubling up to 8 s, up to a quarter less at random),
    scaled with the pace's Retry-After."""
    unit = pace.retry_after / 2
    return min(unit * 2 ** (tries - 1), 16 * unit) * (1 - 0.25 * random.random())


class _Retries:
    """One agent's retries: a 429 after its Retry-After, always (the hidden limit's shapes
    judge pacing, not giving up); a 529 within :data:`CLIENT_RETRIES` tries, after the
    client's backoff, and then the agent is lost."""

    def __init__(self, pace: Pace) -> None:
        self.pace, self.overloads = pace, 0

    def again(self, status: int, retry: float | None) -> float | None:
        """How long to wait before sending again after ``status`` (``None``: give up)."""
        if status == 429:
            return retry if retry is not None else self.pace.retry_after
        if status == 529 and self.overloads < CLIENT_RETRIES:
            self.overloads += 1
            return retry if retry is not None else _client_backoff(self.pace, self.overloads)
        return None


async def _agent(
    send: Send, work: float, lead: bool, limiter: asyncio.Semaphore | _Inspect | None, pace: Pace
) -> bool:
    body = _body(work, lead)
    retries = _Retries(pace)
    if isinstance(limiter, asyncio.Semaphore):
        async with limiter:  # a rejected request keeps its place while it waits
            while True:
                status, retry = await send(body)
                if status == 200:
                    return True
                pause = retries.again(status, retry)
                if pause is None:
                    return False
                await asyncio.sleep(pause)
    if isinstance(limiter, _Inspect):
        await limiter.acquire()
        try:
            first = True
            while True:
                status, retry = await send(body)
                if status == 200:
                    if first:  # a success after a retry is neutral
                        await limiter.success()
                    return True
                pause = retries.again(status, retry)
                if pause is None:
                    return False
                limiter.rate_limited(time.monotonic(), pause)  # Inspect retries 529s alike
                first = False
                await asyncio.sleep(pause)  # a retry keeps its connection, as in Inspect
        finally:
            await limiter.release()
    # teamlead: the relay holds and retries 429s and 529s; the client has no retries of a
    # 529 (as the CLI with ``CLAUDE_CODE_MAX_RETRIES=0``); a 429 passed on is retried here
    while True:
        status, retry = await send(body)
        if status != 429:
            return status == 200
        await asyncio.sleep(retry if retry is not None else pace.retry_after)


async def _lead(send: Send, limiter: asyncio.Semaphore | _Inspect | None, pace: Pace) -> int:
    began = time.monotonic()
    done = 0
    for at in pace.lead_at:
        await asyncio.sleep(max(0.0, began + at - time.monotonic()))
        done += await _agent(send, pace.lead_work, True, limiter, pace)
    return done


async def _run(strategy: str, shape: Shape, pace: Pace) -> Outcome:
    agents, work = pace.agents, pace.work
    roles = None if shape.lead_counts else {"other"}
    burst = OverloadBurst(_script, shape.burst_s, begins_on=None)
    with ScriptedServer(
        burst,
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
                send = _sender(session, base_url)
                began = time.monotonic()
                jobs: list[Coroutine[Any, Any, int]] = [
                    _agent(send, work, False, limiter, pace) for _ in range(agents)
                ]
                if shape.lead_counts:
                    jobs.append(_lead(send, limiter, pace))
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
        return Outcome(ended - began, len(rejections), converged, answered, burst.overloaded)


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
                _agent(_sender(session, relay.base_url), pace.work, False, None, pace)
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
    return shape.burst_s + math.ceil(agents / LIMIT) * work


@dataclass(frozen=True)
class TokenShape:
    """An upstream of token buckets and the workload against it: ``agents`` requests of
    ``tokens`` input tokens each, answered in ``work`` seconds."""

    name: str
    buckets: tuple[TokenBucket, ...]
    agents: int
    tokens: int
    work: float


def token_shapes(quick: bool) -> list[TokenShape]:
    if quick:  # every 429 costs a client a whole retry-after second: few of them
        tokens = TokenBucket(capacity=3_000, refill_per_s=30_000)
        requests = TokenBucket(capacity=2, refill_per_s=10, kind="requests")
        agents, big, small, work = 4, 1_500, 100, 0.05
    else:
        tokens = TokenBucket(capacity=20_000, refill_per_s=12_000)
        requests = TokenBucket(capacity=5, refill_per_s=4, kind="requests")
        agents, big, small, work = 24, 6_000, 400, 0.5
    stripped = TokenBucket(tokens.capacity, tokens.refill_per_s, headers=False)
    stripped_requests = TokenBucket(
        requests.capacity, requests.refill_per_s, kind="requests", headers=False
    )
    return [
        TokenShape("input tokens", (tokens, requests), agents, big, work),
        TokenShape("requests", (tokens, requests), agents, small, work),
        TokenShape("input tokens, no headers", (stripped, stripped_requests), agents, big, work),
    ]


def _token_body(tokens: int, work: float) -> bytes:
    """A streamed request that draws ``tokens`` input tokens and takes ``work`` seconds."""
    tail = f" work {work}"
    base = _body(work, False)
    pad = max(0, 4 * tokens - len(base) - 2)
    body: dict[str, object] = json.loads(base)
    body["messages"] = [{"role": "user", "content": "x" * pad + tail}]
    data = json.dumps(body).encode()
    assert abs(input_tokens_of(len(data)) - tokens) <= 2
    return data


@dataclass
class TokenOutcome:
    wall: float
    rejected: int
    lost: int
    minimum: float


async def _token_agent(
    send: Send, body: bytes, limiter: asyncio.Semaphore | _Inspect | None
) -> bool:
    """One agent's request; whether it was answered within its client's tries of a 429."""
    if limiter is None:  # teamlead: the relay holds and retries; the client has no retries
        status, _ = await send(body)
        return status == 200
    if isinstance(limiter, asyncio.Semaphore):
        async with limiter:
            for _ in range(CLIENT_RETRIES + 1):
                status, retry = await send(body)
                if status != 429:
                    return status == 200
                await asyncio.sleep(1.0 if retry is None else retry)
            return False
    await limiter.acquire()
    try:
        for attempt in range(CLIENT_RETRIES + 1):
            status, retry = await send(body)
            if status == 200:
                if attempt == 0:
                    await limiter.success()
                return True
            if status != 429:
                return False
            pause = 1.0 if retry is None else retry
            limiter.rate_limited(time.monotonic(), pause)
            await asyncio.sleep(pause)
        return False
    finally:
        await limiter.release()


async def _run_tokens(strategy: str, shape: TokenShape) -> TokenOutcome:
    with ScriptedServer(_script, token_bucket=shape.buckets) as server:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            limiter: asyncio.Semaphore | _Inspect | None = None
            if strategy.startswith("fixed"):
                limiter = asyncio.Semaphore(int(strategy.split()[1]))
            elif strategy == "inspect":
                limiter = _Inspect()
            body = _token_body(shape.tokens, shape.work)

            async def workload(base_url: str) -> tuple[int, float]:
                send = _sender(session, base_url)
                began = time.monotonic()
                done = await asyncio.gather(
                    *(_token_agent(send, body, limiter) for _ in range(shape.agents))
                )
                return sum(done), began

            if strategy == "teamlead":
                async with start_relay(server.base_url, Governor(RELAY_POLICY)) as relay:
                    answered, began = await workload(relay.base_url)
            else:
                answered, began = await workload(server.base_url)
        ended = time.monotonic()
        minimum = shape.work + max(b.minimum_s(server.drawn(b.kind)) for b in shape.buckets)
        rejected = sum(1 for r in server.recorded() if r.status == 429)
        return TokenOutcome(ended - began, rejected, shape.agents - answered, minimum)


def _token_table(strategies: list[str], quick: bool) -> list[tuple[str, float, float, int]]:
    """Run the token shapes; print their table; teamlead's (shape, x minimum, 429s per
    agent, lost) for the shapes with headers."""
    rows = []
    ours = []
    shapes_run = token_shapes(quick)
    for shape in shapes_run:
        for name in strategies:
            out = asyncio.run(_run_tokens(name, shape))
            rows.append(
                [
                    f"{shape.name}: {name}",
                    f"{shape.agents - out.lost}/{shape.agents}",
                    f"{out.wall:.1f}",
                    f"{out.minimum:.1f}",
                    f"{out.wall / out.minimum:.2f}",
                    f"{out.rejected / shape.agents:.2f}",
                    f"{out.lost}",
                ]
            )
            if name == "teamlead":
                ours.append(
                    (shape.name, out.wall / out.minimum, out.rejected / shape.agents, out.lost)
                )
    first = shapes_run[0]
    described = ", ".join(f"{b.kind} {b.capacity:g} + {b.refill_per_s:g}/s" for b in first.buckets)
    print(
        f"token buckets ({described}), {first.agents} agents, {CLIENT_RETRIES} tries of a "
        "429 each; x min = wall / (the buckets' own minimum for what was drawn + one "
        "request's work)"
    )
    print(
        table(
            ["shape: strategy", "answered", "wall s", "min s", "x min", "429/agent", "lost"],
            rows,
        )
    )
    return ours


@dataclass
class FieldOutcome:
    side: str
    findings: int
    agents: int
    wall: float
    minimum: float
    most_429s: int
    rejected: int


#: the field report's sides: teamlead's relay in front of the CLI (its retries off), and the
#: bare CLI talking to the upstream itself with its default retries
FIELD_SIDES = ("teamlead", "bare CLI (default retries)")


async def _field_on_cli(side: str, agents: int = 12) -> FieldOutcome:
    """The field report's run on the real CLI, on one of :data:`FIELD_SIDES`."""
    bucket = TokenBucket(capacity=20_000, refill_per_s=12_000)
    env = {"CLAUDE_CODE_MAX_CONCURRENT_SUBAGENTS": str(agents)}
    with (
        tempfile.TemporaryDirectory(prefix="teamlead-field-") as tmp,
        ScriptedServer(FanOut.of(agents, delays=0.4), token_bucket=bucket) as server,
    ):

        async def ask(base_url: str, retries: int | None) -> list[ResultMessage]:
            claude = OfflineClaude(base_url, state_dir=Path(tmp), max_retries=retries, env=env)
            with anyio.fail_after(600):
                return [
                    m
                    async for m in query(prompt="Investigate.", options=claude.options())
                    if isinstance(m, ResultMessage)
                ]

        if side == "teamlead":
            async with start_relay(server.base_url, Governor(RELAY_POLICY)) as relay:
                results = await ask(relay.base_url, 0)
        else:
            results = await ask(server.base_url, None)
        records = server.recorded()
        refused: dict[str, int] = {}
        for r in records:
            if r.status == 429:
                who = r.request.agent.description if r.request.agent else r.role
                refused[who] = refused.get(who, 0) + 1
        return FieldOutcome(
            side=side,
            findings=len(findings_in(results[-1].result or "")) if results else 0,
            agents=agents,
            wall=max(r.end for r in records) - min(r.started for r in records),
            minimum=bucket.minimum_s(server.drawn()),
            most_429s=max(refused.values(), default=0),
            rejected=sum(refused.values()),
        )


def _burst_summary(burst: dict[str, Outcome]) -> str:
    """The 529 burst's part of the summary: agents answered per strategy."""
    if not burst:
        return ""
    answered = ", ".join(f"{name} {out.answered}" for name, out in burst.items())
    return f"; the 529 burst, agents answered: {answered}"


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
    burst: dict[str, Outcome] = {}
    for shape in shapes(pace):
        ideal = _ideal(shape, pace)
        results = {s: asyncio.run(_run(s, shape, pace)) for s in strategies}
        if shape.burst_s:
            burst = results
        for name, out in results.items():
            rows.append(
                [
                    f"{shape.name}: {name}",
                    f"{out.answered}/{agents}",
                    f"{out.wall:.1f}",
                    f"{out.wall / ideal:.2f}",
                    f"{out.rejected / agents:.2f}",
                    f"{out.converged:.1f}",
                    f"{out.overloaded}",
                ]
            )
        ours, theirs = results["teamlead"], results["inspect"]
        bound = 1.3 if shape.burst_s else 1.2  # a burst's end is met within one backoff
        verdicts.append(
            (
                shape.name,
                ours.wall / ideal,
                ours.rejected / agents,
                ours.answered == agents
                and ours.wall <= bound * ideal
                and ours.rejected <= agents
                # ahead: more agents answered, or as many sooner
                and (ours.answered, -ours.wall) >= (theirs.answered, -theirs.wall),
            )
        )
    print(
        f"{agents} agents of {work:g} s, hidden limit {LIMIT}, retry-after {pace.retry_after:g} s, "
        f"the burst {pace.burst_s:g} s of 529s; x ideal = wall / (work kept at the limit, "
        "after the burst)"
    )
    print(
        table(
            ["shape: strategy", "answered", "wall s", "x ideal", "429/agent", "conv s", "529s"],
            rows,
        )
    )
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
    tokens = _token_table(strategies, args.quick)
    fields = [] if args.quick else [anyio.run(_field_on_cli, side) for side in FIELD_SIDES]
    if fields:
        print(
            f"the field report on the real CLI: {fields[0].agents} Agent calls, the input-token "
            "bucket alone; x min = wall / the bucket's own minimum for what was drawn"
        )
        print(
            table(
                ["side", "findings", "wall s", "min s", "x min", "429s", "most 429s/agent"],
                [
                    [
                        f.side,
                        f"{f.findings}/{f.agents}",
                        f"{f.wall:.1f}",
                        f"{f.minimum:.1f}",
                        f"{f.wall / f.minimum:.2f}",
                        str(f.rejected),
                        str(f.most_429s),
                    ]
                    for f in fields
                ],
            )
        )
    field, bare = (fields[0], fields[1]) if fields else (None, None)
    with_headers = [t for t in tokens if "no headers" not in t[0]]
    headerless = [t for t in tokens if "no headers" in t[0]]
    worst = max(v[1] for v in verdicts)
    most = max(v[2] for v in verdicts)
    missed = [v[0] for v in verdicts if not v[3]] + [
        name
        for name, ratio, per_agent, lost in with_headers
        if not (ratio <= 1.3 and per_agent <= 1 and lost == 0)
    ]
    if field is not None and not (
        field.findings == field.agents
        and field.wall <= 1.3 * field.minimum
        and field.most_429s <= 1
        and field.rejected <= field.agents
    ):
        missed.append("the field report on the CLI")
    print(
        f"SUMMARY: teamlead worst {worst:.2f} x ideal, at most {most:.2f} 429s per agent over "
        f"{len(verdicts)} shapes"
        + (f" (goal missed in: {', '.join(missed)})" if missed else " (every goal met)")
        + f"; two processes at worst {max(shared_x):.2f} x ideal shared vs "
        + f"{min(alone_x):.2f} x alone, shared learnt "
        + ("the true limit" if set(shared_learnt) == {LIMIT} else f"{shared_learnt}")
        + f" ({LIMIT}) in {len(pair_shapes)} shapes"
        + "; token buckets: teamlead at worst "
        + f"{max(t[1] for t in with_headers):.2f} x the buckets' minimum, "
        + f"{max(t[2] for t in with_headers):.2f} 429s per agent, "
        + f"{sum(t[3] for t in with_headers)} agents lost with headers; "
        + ", ".join(f"{t[1]:.2f} x, {t[3]} lost without" for t in headerless)
        + _burst_summary(burst)
        + (
            ""
            if field is None or bare is None
            else f"; the field report on the CLI {field.wall / field.minimum:.2f} x, "
            f"{field.findings}/{field.agents} findings, {field.rejected} 429s "
            f"(bare CLI {bare.wall / bare.minimum:.2f} x, "
            f"{bare.findings}/{bare.agents}, {bare.rejected} 429s)"
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
