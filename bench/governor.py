"""Bench: the adaptive governor against fixed concurrency, on a server with a hidden limit.

The scripted model server emulates an account that allows K requests in flight and answers
429 + ``retry-after`` above that. The same workload (N requests, each with a seeded
0.2-0.3 s scripted delay) runs three times in one process, each against a fresh server:

* ``aimd``      the governor, starting at ceiling 12 (it must find K by itself);
* ``fixed 12``  12 at once, always (floor = ceiling = 12), honouring Retry-After;
* ``fixed 2``   2 at once: never rejected, but slow.

Each request goes through the official ``anthropic`` client (``max_retries=0``); on a 429
the worker reports ``rate_limited(retry_after)`` and retries the same request through the
governor.

Figures, per strategy:

* time / ideal: total wall time over the ideal ``sum(delay + round trip) / K`` (K always
  in flight); the round trip of a request without delay is measured first, in the same run.
* goodput: successful requests per second after warm-up, as a share of the ideal rate
  ``K / mean(delay + round trip)``. Warm-up ends when 10% of the requests have succeeded.
* rejected: 429s among the attempts started after warm-up (and over the whole run).

Target for ``aimd``: goodput >= 90% of ideal and <= 5% rejected after warm-up.

Run: ``python bench/governor.py`` (about a minute).
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import time
from dataclasses import dataclass, field

import anthropic
import anyio

from teamlead.governor import Governor, GovernorPolicy, retry_after_from_headers
from teamlead.testing import Reply, Script, ScriptedRequest, ScriptedServer

KEY = "anthropic/claude-sonnet-5-5"
_REQUEST_ID = re.compile(r"request (\d+)")


@dataclass
class Attempt:
    request: int
    started: float
    finished: float
    status: int


@dataclass
class Outcome:
    name: str
    elapsed: float
    attempts: list[Attempt] = field(default_factory=list)
    peak_in_flight: int = 0
    server_rejected: int = 0
    cap_trace: list[str] = field(default_factory=list)
    pauses: int = 0


@dataclass(frozen=True)
class Workload:
    requests: int
    limit: int
    retry_after: float
    delays: tuple[float, ...]
    overhead: float = 0.0  # measured round trip of a request with no scripted delay

    @property
    def ideal_time(self) -> float:
        return (sum(self.delays) + self.overhead * len(self.delays)) / self.limit

    @property
    def ideal_rate(self) -> float:
        return len(self.delays) / self.ideal_time


def _script(workload: Workload) -> Script:
    def script(request: ScriptedRequest) -> Reply:
        match = _REQUEST_ID.search(request.first_user_text)
        number = int(match.group(1)) if match else 0
        return Reply.text(f"answer {number}", delay=workload.delays[number])

    return script


async def _measure_overhead(samples: int = 15) -> float:
    """Median round trip of one request with no scripted delay: the ideal's baseline."""
    with ScriptedServer(lambda request: Reply.text("ok")) as server:
        client = anthropic.AsyncAnthropic(base_url=server.base_url, api_key="test", max_retries=0)
        took = []
        with anyio.fail_after(30):
            for _ in range(samples):
                began = time.monotonic()
                await client.messages.create(
                    model="claude-sonnet-5-5",
                    max_tokens=16,
                    messages=[{"role": "user", "content": "request 0"}],
                )
                took.append(time.monotonic() - began)
        await client.close()
    return statistics.median(took)


async def _run(name: str, policy: GovernorPolicy, workload: Workload) -> Outcome:
    governor = Governor(policy)
    with ScriptedServer(
        _script(workload),
        concurrency_limit=workload.limit,
        retry_after=workload.retry_after,
    ) as server:
        client = anthropic.AsyncAnthropic(
            base_url=server.base_url,
            api_key="test",
            max_retries=0,
            timeout=30.0,
        )
        outcome = Outcome(name=name, elapsed=0.0)
        start = time.monotonic()

        async def one(number: int) -> None:
            while True:
                async with governor.slot(KEY) as slot:
                    began = time.monotonic() - start
                    try:
                        await client.messages.create(
                            model="claude-sonnet-5-5",
                            max_tokens=16,
                            messages=[{"role": "user", "content": f"request {number}"}],
                        )
                    except anthropic.RateLimitError as exc:
                        ended = time.monotonic() - start
                        outcome.attempts.append(Attempt(number, began, ended, 429))
                        slot.rate_limited(retry_after_from_headers(exc.response.headers))
                        continue
                    ended = time.monotonic() - start
                    outcome.attempts.append(Attempt(number, began, ended, 200))
                    slot.success()
                    return

        with anyio.fail_after(100):
            async with anyio.create_task_group() as tg:
                for number in range(workload.requests):
                    tg.start_soon(one, number)
        outcome.elapsed = time.monotonic() - start
        await client.close()
        outcome.peak_in_flight = server.stats.max_in_flight
        outcome.server_rejected = server.stats.rejected
        outcome.cap_trace = [
            f"{e.cap} ({e.reason})" for e in governor.journal if e.cap != e.previous_cap
        ]
        outcome.pauses = sum(1 for e in governor.journal if e.retry_after_s is not None)
    return outcome


@dataclass(frozen=True)
class Figures:
    time_ratio: float
    goodput: float
    rejected_after_warmup: float
    rejected_total: float
    warmup_end: float


def _figures(outcome: Outcome, workload: Workload) -> Figures:
    ok = sorted(a.finished for a in outcome.attempts if a.status == 200)
    warmup_end = ok[max(0, len(ok) // 10 - 1)]
    after = [a for a in outcome.attempts if a.started >= warmup_end]
    rejected_after = sum(1 for a in after if a.status == 429)
    done_after = sum(1 for t in ok if t > warmup_end)
    window = max(1e-9, outcome.elapsed - warmup_end)
    rejected_all = sum(1 for a in outcome.attempts if a.status == 429)
    return Figures(
        time_ratio=outcome.elapsed / workload.ideal_time,
        goodput=(done_after / window) / workload.ideal_rate,
        rejected_after_warmup=rejected_after / max(1, len(after)),
        rejected_total=rejected_all / max(1, len(outcome.attempts)),
        warmup_end=warmup_end,
    )


async def _main(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    delays = tuple(round(rng.uniform(0.2, 0.3), 3) for _ in range(args.requests))
    overhead = await _measure_overhead()
    workload = Workload(args.requests, args.limit, args.retry_after, delays, overhead)
    strategies = [
        ("aimd", GovernorPolicy(ceiling=12)),
        ("fixed 12", GovernorPolicy(ceiling=12, floor=12)),
        ("fixed 2", GovernorPolicy(ceiling=2, floor=2)),
    ]
    print(
        f"governor bench: {workload.requests} requests of 0.2-0.3 s, "
        f"hidden limit K={workload.limit} (429 + retry-after {workload.retry_after:g} s)"
    )
    print(
        f"measured round trip without delay {overhead * 1000:.1f} ms; "
        f"ideal (K in flight) {workload.ideal_time:.2f} s"
    )
    header = (
        f"{'strategy':<10}{'time s':>8}{'time/ideal':>12}{'goodput':>10}"
        f"{'rej after':>11}{'rej all':>9}{'429s':>6}{'peak':>6}"
    )
    print(header)
    results: dict[str, Figures] = {}
    for name, policy in strategies:
        outcome = await _run(name, policy, workload)
        figures = _figures(outcome, workload)
        results[name] = figures
        print(
            f"{name:<10}{outcome.elapsed:>8.2f}{figures.time_ratio:>12.2f}"
            f"{figures.goodput:>10.0%}{figures.rejected_after_warmup:>11.1%}"
            f"{figures.rejected_total:>9.1%}{outcome.server_rejected:>6}"
            f"{outcome.peak_in_flight:>6}"
        )
        if name == "aimd":
            trace = " -> ".join([str(policy.ceiling), *outcome.cap_trace])
            print(
                f"  aimd cap: {trace}; {outcome.pauses} Retry-After pauses started or "
                f"extended; warm-up ended at {figures.warmup_end:.2f} s"
            )
    aimd = results["aimd"]
    met = aimd.goodput >= 0.90 and aimd.rejected_after_warmup <= 0.05
    print(
        f"SUMMARY: governor: aimd goodput {aimd.goodput:.0%} of ideal, "
        f"{aimd.rejected_after_warmup:.1%} rejected after warm-up, "
        f"time x{aimd.time_ratio:.2f} ideal "
        f"(fixed 12 x{results['fixed 12'].time_ratio:.2f}, fixed 2 "
        f"x{results['fixed 2'].time_ratio:.2f}); target >=90% and <=5%: "
        f"{'met' if met else 'MISSED'}"
    )
    return 0 if met else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--limit", type=int, default=6, help="hidden concurrency limit K")
    parser.add_argument("--retry-after", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)
    raise SystemExit(anyio.run(_main, parser.parse_args()))


if __name__ == "__main__":
    main()
