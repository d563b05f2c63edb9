"""Bench (P3): what ``teamlead.run`` costs on top of bare ``claude_agent_sdk.query``.

The workload is a scripted fan-out run by the real bundled Claude Code CLI, offline:
the lead sends three ``Agent`` calls in one message, the subagents answer after 0.3,
0.5 and 0.7 s, and the lead synthesizes every finding in the turns the CLI injects after
each task notification. ``teamlead.run`` wraps ``claude_agent_sdk.query``, so both
sides start the same CLI with the same options (teamlead's own environment addition,
``CLAUDE_CODE_PRINT_BG_WAIT_CEILING_MS``, is set on both), against one scripted server.

N pairs (default 15) run alternately (bare first in even pairs, teamlead first in odd
ones), after one warm-up pair that is not counted; each run gets its own fresh CLI state
directory. A run takes about 1.5 s and single pairs scatter by +-15% on a busy 2-core
machine, so 5 pairs cannot resolve a 5% target; 15 fit in about a minute.
Both sides must end with the lead's synthesis quoting all three findings, and teamlead
must finish ``completed`` without a resume, so the two sides did the same work.

Figures: wall time per run (the whole iteration, CLI start and exit included), as the
median over pairs of teamlead / bare and the overhead in %; medians of the phases, from
the scripted server's request log (CLI start-up to the first model request, the
conversation to the last reply, and the tail from there to the end: CLI exit, then
teamlead's post-stream checks); CPU time of this process (``time.process_time``)
per run. Targets: overhead <= 5% (the median of the pair ratios) and a tail (last reply to
done) within 30 ms of the bare run's (the medians' difference); a missed target exits 1.

Run: ``python bench/coordinator_overhead.py`` (about a minute); ``--quick`` runs one
pair without warm-up and does not judge the target.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
from _common import table
from claude_agent_sdk import ClaudeAgentOptions, ResultMessage
from claude_agent_sdk import query as sdk_query

import teamlead
from teamlead.events import Finished
from teamlead.policy import Policy
from teamlead.testing import OfflineClaude, ScriptedServer, cli_version
from teamlead.testing.scripts import FanOut, findings_in

PROMPT = "Investigate the three parts in parallel, then synthesize the findings."
EXPECTED = ["agent-1", "agent-2", "agent-3"]
TARGET = 0.05
TAIL_TARGET_S = 0.030  # teamlead's median tail minus bare's
SIDES = ("bare", "teamlead")


class BenchFailure(Exception):
    """A run did not do the work the comparison needs."""


@dataclass
class Run:
    """One timed run. The phases come from the scripted server's request log."""

    side: str
    wall: float = 0.0
    cpu: float = 0.0
    requests: int = 0
    boot: float = 0.0  # start -> the first model request: the CLI starts up
    model: float = 0.0  # first request -> last reply sent: the conversation itself
    tail: float = 0.0  # last reply -> end of the iteration: CLI exit, then teamlead's checks


async def bare(options: ClaudeAgentOptions) -> None:
    final: str | None = None
    async for message in sdk_query(prompt=PROMPT, options=options):
        if isinstance(message, ResultMessage) and not message.is_error:
            final = message.result
    _check_findings("bare", final)


async def coordinated(options: ClaudeAgentOptions) -> None:
    done: Finished | None = None
    async for item in teamlead.run(PROMPT, options):
        if isinstance(item, Finished):
            done = item
    if done is None or done.status != "completed" or done.resumes:
        status = "no Finished event" if done is None else f"{done.status}, {done.resumes} resume(s)"
        raise BenchFailure(f"teamlead run ended {status}: {done.reasons if done else ''}")
    _check_findings("teamlead", done.result)


def _check_findings(side: str, final: str | None) -> None:
    found = sorted(findings_in(final or ""))
    if found != EXPECTED:
        raise BenchFailure(f"{side} run's final answer quotes findings {found}, not {EXPECTED}")


RUNNERS: dict[str, Callable[[ClaudeAgentOptions], Awaitable[None]]] = {
    "bare": bare,
    "teamlead": coordinated,
}


async def timed(side: str, server: ScriptedServer) -> Run:
    with OfflineClaude(server.base_url) as claude:
        options = teamlead.prepare_options(claude.options(), Policy())
        before = len(server.recorded())
        mono, wall, cpu = time.monotonic(), time.perf_counter(), time.process_time()
        with anyio.fail_after(120):
            await RUNNERS[side](options)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        end = time.monotonic()
    records = server.recorded()[before:]
    first = min(r.started for r in records)
    last = max(r.finished or end for r in records)
    return Run(side, wall, cpu, len(records), first - mono, last - first, end - last)


async def bench(pairs: int, warmup: bool) -> list[tuple[Run, Run]]:
    results: list[tuple[Run, Run]] = []
    # A full collection over the imported packages can pause this process for ~100 ms and
    # lands in whichever run crosses the threshold; freeze them so it cannot skew one side.
    gc.collect()
    gc.freeze()
    with ScriptedServer(FanOut.of(3, delays=[0.3, 0.5, 0.7])) as server:
        if warmup:
            for side in SIDES:
                await timed(side, server)
        for i in range(pairs):
            order = SIDES if i % 2 == 0 else SIDES[::-1]
            runs = {side: await timed(side, server) for side in order}
            results.append((runs["bare"], runs["teamlead"]))
    return results


def report(results: list[tuple[Run, Run]], quick: bool) -> bool:
    rows = [
        [
            str(i + 1),
            "bare first" if i % 2 == 0 else "teamlead first",
            f"{b.wall:.3f}",
            f"{t.wall:.3f}",
            f"x{t.wall / b.wall:.3f}",
            f"{b.cpu * 1e3:.0f}",
            f"{t.cpu * 1e3:.0f}",
            f"{b.requests}/{t.requests}",
        ]
        for i, (b, t) in enumerate(results)
    ]
    headers = [
        "pair",
        "order",
        "bare s",
        "teamlead s",
        "ratio",
        "bare cpu ms",
        "tl cpu ms",
        "requests",
    ]
    print(table(headers, rows))
    ratios = [t.wall / b.wall for b, t in results]
    ratio = statistics.median(ratios)
    overhead = ratio - 1

    def med(side: int, attr: str) -> float:
        return float(statistics.median(getattr(pair[side], attr) for pair in results))

    spread = ""
    if len(ratios) >= 4:
        q1, _, q3 = statistics.quantiles(ratios, n=4)
        spread = f", interquartile x{q1:.3f}..x{q3:.3f}"
    slower = sum(r > 1 for r in ratios)
    print(
        f"pair ratio teamlead/bare: median x{ratio:.3f} ({overhead:+.1%}){spread}; "
        f"teamlead slower in {slower} of {len(ratios)} pairs"
    )
    print(
        table(
            ["median per run, ms", "bare", "teamlead", "added"],
            [
                [
                    label,
                    f"{med(0, attr) * 1e3:.0f}",
                    f"{med(1, attr) * 1e3:.0f}",
                    f"{(med(1, attr) - med(0, attr)) * 1e3:+.0f}",
                ]
                for label, attr in [
                    ("wall, whole run", "wall"),
                    ("  start -> first model request", "boot"),
                    ("  first request -> last reply", "model"),
                    ("  last reply -> done", "tail"),
                    ("CPU of this process", "cpu"),
                ]
            ],
        )
    )
    tl_cpu, bare_cpu = med(1, "cpu"), med(0, "cpu")
    print(
        f"teamlead's added CPU, {(tl_cpu - bare_cpu) * 1e3:+.1f} ms, is "
        f"{(tl_cpu - bare_cpu) / med(0, 'wall'):.2%} of a bare run's wall time"
    )
    tail = med(1, "tail") - med(0, "tail")
    wall_met, tail_met = overhead <= TARGET, tail <= TAIL_TARGET_S

    def verdict(met: bool) -> str:
        return "not judged (--quick)" if quick else ("met" if met else "MISSED")

    print(
        f"SUMMARY: teamlead.run overhead {overhead:+.1%} wall (x{ratio:.3f} bare query, "
        f"median of {len(results)} pairs{spread}) and x{tl_cpu / bare_cpu:.2f} CPU in this process "
        f"on a 3-agent scripted fan-out; target <= {TARGET:.0%}: {verdict(wall_met)}; "
        f"tail after the last reply {tail * 1e3:+.0f} ms over bare's "
        f"({med(1, 'tail') * 1e3:.0f} vs {med(0, 'tail') * 1e3:.0f} ms), "
        f"target <= {TAIL_TARGET_S * 1e3:.0f} ms: {verdict(tail_met)}"
    )
    return (wall_met and tail_met) or quick


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one pair, no warm-up: a smoke run")
    parser.add_argument(
        "--pairs", type=int, default=15, help="alternating pairs to time (default 15)"
    )
    args = parser.parse_args()
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")
    pairs = 1 if args.quick else args.pairs
    print(
        f"coordinator overhead bench{' (quick)' if args.quick else ''}: real CLI "
        f"{cli_version()}, FanOut.of(3, delays=[0.3, 0.5, 0.7]), {pairs} "
        f"alternating pair(s){'' if args.quick else ' after 1 warm-up pair'}"
    )
    try:
        results = anyio.run(bench, pairs, not args.quick)
    except (BenchFailure, TimeoutError) as exc:
        print(f"FAILED: {exc or 'a run took longer than 120 s'}", file=sys.stderr)
        raise SystemExit(1) from None
    raise SystemExit(0 if report(results, args.quick) else 1)


if __name__ == "__main__":
    main()
