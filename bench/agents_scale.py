"""Bench: what teamlead spends per agent, from 10 to 1,000 agents in one run.

Two shapes, each run end to end by the real bundled Claude Code CLI against the scripted
model server, offline, through ``teamlead.run``: a ``Workflow`` of N agents (the scripted
``WorkflowFanOut``; the CLI runs 50 at once), and N ``Agent`` calls in the lead's first
message under teamlead's cap of 50 running agents (``FanOut`` with
``SpawnPolicy(max_concurrent_agents=50)``: the spawn gate holds the rest). Every agent
answers at once (no model delay), so the run is as dense as the CLI can make it. Nothing
is replayed: every agent is a real CLI subagent whose requests go through teamlead's relay.

The scripted server runs in a process of its own (``--serve``), as the API is elsewhere,
so the calling process holds only the SDK and teamlead (its relay included). Each shape
runs in a fresh interpreter (``--shape``), its sizes in turn after a 3-agent warm-up run,
so imports and first-use caches land outside the figures.

Figures, per shape and size:

- CPU per agent: ``time.process_time`` of the calling process over the run (from the
  ``teamlead.run`` call to its ``Finished`` event), over N: an upper bound on teamlead's,
  since the SDK in the same process reads the same stream (it reads each line of the
  CLI's output, parses its JSON and builds its message objects). To take that out, the
  bare ``claude_agent_sdk.query`` of the same script with the same options runs first in
  the same interpreter, against a scripted server of its own, and its CPU (the SDK's
  reading of its stream, the CLI's start and end included) is subtracted: teamlead's own
  CPU per agent is the teamlead run's minus the bare run's, over N. The bare run has to
  carry the same stream. The bare CLI has no queue (over its cap of concurrent
  subagents it refuses an Agent call), and uncapped its messages that list the running
  tasks grow with N (1.6 MB of them at 100 agents at once), so the bare fan-out is capped
  as an app would cap it itself: a PreToolUse hook on Agent that waits on a semaphore of
  50, given back at each task notification. That hook's round trips through the SDK are
  thus subtracted too, as any hook-based cap pays them; what teamlead's gate decides in
  its hook, its relay and its bookkeeping stay in teamlead's figure. Each run's model
  requests (lead and agents) are counted at its server and printed side by side, and a
  bare fan-out whose answers quote fewer than N findings fails the bench. For the
  workflow, the bare answer may quote fewer findings (the CLI cuts the workflow's result
  and only teamlead delivers the rest), so its stream may be a little shorter than the
  teamlead run's: a little of the SDK's cost then stays in teamlead's figure.
- peak memory per agent: a second run of the same size under ``tracemalloc``, the peak
  of traced Python allocations over what was held when it began, over N (allocations of
  C libraries, such as SQLite's, are not traced).
- tail: from the end of the last agent's last reply (the server's log; ``time.monotonic``
  is one clock for the whole machine) to ``teamlead.run``'s ``Finished`` event.

Each is printed as a ratio against the 10-agent run of its shape. Targets: from 10 to
1,000 agents, teamlead's own CPU and its memory per agent grow by at most 1.5x, and at
1,000 agents teamlead's own CPU stays under 5 ms per agent (the upper bound is printed
beside it); a missed target exits 1. The marginal cost
(what the 100 to 1,000 step adds, per added agent) is printed beside, since a per-agent
figure at 10 agents carries the run's fixed costs.

Run: ``python bench/agents_scale.py`` (several minutes); ``--quick`` runs 2 and 5
agents per shape, both shapes at once, after a 1-agent warm-up, without the bare run and
with memory measured in the same (traced) run as the CPU, and does not judge the targets.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Literal

from _common import table

Shape = Literal["workflow", "agents"]
SHAPES: tuple[Shape, ...] = ("workflow", "agents")
CAP = 50
MS_PER_AGENT = 5.0
GROWTH = 1.5
LIMIT_S = 900
CLI_CAP_VAR = "CLAUDE_CODE_MAX_CONCURRENT_SUBAGENTS"


@dataclass
class Sample:
    """One size of one shape, as its ``--shape`` process measured it."""

    shape: str
    agents: int
    cpu_s: float  # the calling process over the teamlead run
    bare_cpu_s: float | None  # the bare SDK over the same work (None in a quick run)
    requests: int  # the model requests of the teamlead run (lead and agents)
    bare_requests: int | None  # those of the bare run
    peak_bytes: int  # tracemalloc peak over the run, above what it began with
    tail_s: float  # the last agent's last reply -> Finished
    wall_s: float
    resumes: int

    @property
    def teamlead_cpu_s(self) -> float:
        return self.cpu_s - (self.bare_cpu_s or 0.0)


def script_for(shape: str, agents: int) -> Any:
    from teamlead.testing.scripts import FanOut, WorkflowFanOut

    if shape == "workflow":
        return WorkflowFanOut([f"k{i:04d}" for i in range(agents)], delay=0.0)
    return FanOut.of(agents, delays=0.0)


def serve(shape: str, agents: int) -> None:
    """``--serve``: the scripted server in this process; print its URL, then, once stdin
    closes, the time its last agent request finished."""
    from teamlead.testing import ScriptedServer
    from teamlead.testing.scripts import workflow_key

    with ScriptedServer(script_for(shape, agents)) as server:
        print(server.base_url, flush=True)
        sys.stdin.read()
        ends = [
            r.finished
            for r in server.recorded()
            if r.finished and (r.request.role == "subagent" or workflow_key(r.request))
        ]
        done = {"last_agent_end": max(ends, default=0.0), "requests": len(server.recorded())}
        print(json.dumps(done), flush=True)


@contextmanager
def server_process(shape: str, agents: int) -> Iterator[tuple[str, dict[str, float]]]:
    """A ``--serve`` process; yield its base URL and a dict that holds, once the block
    ends, the monotonic time its last agent reply finished (``last_agent_end``) and how
    many model requests it answered (``requests``)."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", shape, str(agents)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    seen: dict[str, float] = {}
    try:
        url = proc.stdout.readline().strip()
        if not url.startswith("http://"):
            raise SystemExit("FAILED: the scripted server process did not start")
        yield url, seen
        proc.stdin.close()
        seen.update(json.loads(proc.stdout.readline()))
    finally:
        if proc.poll() is None:
            proc.stdin.close()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@dataclass
class Run:
    """One run's figures: CPU s, last agent end -> answer s, model requests, and the
    Finished event (teamlead) or the last result's text (bare)."""

    cpu_s: float
    tail_s: float
    requests: int
    done: Any


def _slot_hook(slots: Any) -> Any:
    """A PreToolUse hook on Agent calls that waits for one of ``slots`` (the bare run's
    loop gives one back at each task notification)."""
    from claude_agent_sdk import HookMatcher

    async def hold(_input: Any, _tool_use_id: str | None, _context: Any) -> Any:
        await slots.acquire()
        return {}

    return HookMatcher(matcher="Agent", hooks=[hold], timeout=LIMIT_S)


async def one_run(shape: str, agents: int, *, bare: bool = False) -> Run:
    """One run of ``agents``. Checks the run did the whole work."""
    import anyio
    from claude_agent_sdk import ResultMessage, TaskNotificationMessage
    from claude_agent_sdk import query as sdk_query

    import teamlead
    from teamlead.events import Finished
    from teamlead.policy import Policy, SpawnPolicy
    from teamlead.testing import OfflineClaude
    from teamlead.testing.scripts import findings_in

    spawn = SpawnPolicy(max_concurrent_agents=CAP) if shape == "agents" else SpawnPolicy()
    policy = Policy(wait_s=5, deadline_s=LIMIT_S, spawn=spawn)
    found: set[str] = set()
    failed: list[str] = []  # the CLI's summaries of tasks that did not complete
    with server_process(shape, agents) as (url, seen), OfflineClaude(url) as claude:
        options = claude.options()
        options.env["CLAUDE_CODE_WORKFLOW_MAX_CONCURRENT_AGENTS"] = str(CAP)
        options.env[CLI_CAP_VAR] = str(CAP)
        done: Any = None
        cpu = time.process_time()
        with anyio.fail_after(LIMIT_S):
            if bare:
                options = teamlead.prepare_options(options, policy)
                slots = anyio.Semaphore(CAP)
                if shape == "agents":  # the smallest cap an app could write itself
                    options.hooks = {"PreToolUse": [_slot_hook(slots)]}
                async for message in sdk_query(prompt="Investigate.", options=options):
                    if isinstance(message, TaskNotificationMessage) and shape == "agents":
                        slots.release()
                    if isinstance(message, ResultMessage) and not message.is_error:
                        done = message.result
                        found.update(findings_in(done or ""))
            else:
                async for item in teamlead.run("Investigate.", options, policy=policy):
                    if isinstance(item, Finished):
                        done = item
                    elif isinstance(item, TaskNotificationMessage) and item.status != "completed":
                        failed.append(f"{item.status}: {item.summary}")  # the CLI's why
        answered, cpu = time.monotonic(), time.process_time() - cpu  # before the clean-up
    if not bare:
        found.update(findings_in((done.result if done is not None else None) or ""))
    if not bare and (done is None or done.status != "completed"):
        why = "no Finished event" if done is None else f"{done.status}: {done.reasons}"
        said = f"; the CLI's notifications: {failed[:3]}" if failed else ""
        raise SystemExit(f"FAILED: {shape} x{agents}: {why}{said}")
    if bare and done is None:
        raise SystemExit(f"FAILED: {shape} x{agents}: the bare run ended without a result")
    if (not bare or shape == "agents") and len(found) != agents:
        side = "the bare run's answers quote" if bare else "the answer quotes"
        raise SystemExit(f"FAILED: {shape} x{agents}: {side} {len(found)} findings")
    return Run(cpu, answered - seen["last_agent_end"], int(seen["requests"]), done)


async def measure_shape(shape: str, sizes: list[int], quick: bool) -> list[Sample]:
    """Every size of ``shape`` in turn, after a 3-agent warm-up run of each side (imports
    and first-use caches; 1 agent and teamlead only in a quick run)."""
    if not quick:
        await one_run(shape, 3, bare=True)
    await one_run(shape, 1 if quick else 3)
    samples = []
    for agents in sizes:
        samples.append(await measure_one(shape, agents, quick))
        print(json.dumps(asdict(samples[-1])), flush=True)  # kept if a later size fails
    return samples


async def measure_one(shape: str, agents: int, quick: bool) -> Sample:
    gc.collect()
    bare = None
    if not quick:
        bare = await one_run(shape, agents, bare=True)
        gc.collect()
        wall = time.perf_counter()
        run = await one_run(shape, agents)
        wall = time.perf_counter() - wall
        gc.collect()
    tracemalloc.start()
    began = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    traced = time.perf_counter()
    traced_run = await one_run(shape, agents)
    traced = time.perf_counter() - traced
    peak = tracemalloc.get_traced_memory()[1] - began
    tracemalloc.stop()
    if quick:
        run, wall = traced_run, traced
    return Sample(
        shape,
        agents,
        run.cpu_s,
        None if bare is None else bare.cpu_s,
        run.requests,
        None if bare is None else bare.requests,
        peak,
        run.tail_s,
        wall,
        run.done.resumes,
    )


def measure(sizes: list[int], quick: bool) -> list[Sample]:
    """:func:`measure_shape` of each shape in a fresh interpreter (``--shape``): one after
    the other, or, in a quick run, both at once (its wall and tail figures then share the
    machine)."""
    procs: list[subprocess.Popen[str]] = []
    samples: list[Sample] = []
    for shape in SHAPES:
        procs.append(
            subprocess.Popen(
                [sys.executable, __file__, "--shape", shape, str(int(quick)), *map(str, sizes)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
        if not quick:
            samples += _samples(shape, procs[-1], len(sizes))
    if quick:
        for shape, proc in zip(SHAPES, procs, strict=True):
            samples += _samples(shape, proc, len(sizes))
    return samples


def _samples(shape: str, proc: subprocess.Popen[str], sizes: int) -> list[Sample]:
    try:
        out, err = proc.communicate(timeout=4 * LIMIT_S * sizes)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise SystemExit(f"FAILED: {shape}: no answer within {4 * LIMIT_S * sizes} s") from None
    if proc.returncode != 0:
        raise SystemExit(f"FAILED: {shape}: {out}{err[-800:]}")
    return [Sample(**json.loads(line)) for line in out.splitlines() if line.startswith("{")]


def own_note(s: Sample) -> str:
    """What teamlead's own CPU per agent was taken from, for the summary."""
    if s.bare_cpu_s is None:
        return "no bare run: the whole process's"
    return f"the process's, the SDK's included: {s.cpu_s / s.agents * 1e3:.2f} ms"


def report(samples: list[Sample], quick: bool) -> bool:
    rows = []
    verdicts = []
    for shape in SHAPES:
        runs = [s for s in samples if s.shape == shape]
        base, big = runs[0], runs[-1]

        def per(s: Sample, attr: str) -> float:
            value = s.teamlead_cpu_s if attr == "cpu" else float(s.peak_bytes)
            return value / s.agents

        for s in runs:
            rows.append(
                [
                    f"{shape} x{s.agents}",
                    f"{s.wall_s:.1f}",
                    f"{s.cpu_s / s.agents * 1e3:.2f}",
                    "-" if s.bare_cpu_s is None else f"{s.bare_cpu_s / s.agents * 1e3:.2f}",
                    f"{per(s, 'cpu') * 1e3:.2f}",
                    f"x{per(s, 'cpu') / per(base, 'cpu'):.2f}",
                    f"{per(s, 'mem') / 1024:.1f}",
                    f"x{per(s, 'mem') / per(base, 'mem'):.2f}",
                    f"{s.tail_s * 1e3:.0f}",
                    f"x{s.tail_s / base.tail_s:.2f}",
                    f"{s.requests}/{'-' if s.bare_requests is None else s.bare_requests}",
                    str(s.resumes),
                ]
            )
        if len(runs) >= 3:
            mid = runs[-2]
            step = (big.agents - mid.agents, mid.agents - base.agents)
            cpu_slope = (
                (big.teamlead_cpu_s - mid.teamlead_cpu_s) / step[0],
                (mid.teamlead_cpu_s - base.teamlead_cpu_s) / step[1],
            )
            mem_slope = (
                (big.peak_bytes - mid.peak_bytes) / step[0],
                (mid.peak_bytes - base.peak_bytes) / step[1],
            )
            print(
                f"{shape}: each agent added from {mid.agents} to {big.agents} costs "
                f"{cpu_slope[0] * 1e3:.2f} ms CPU and {mem_slope[0] / 1024:.1f} KiB "
                f"(from {base.agents} to {mid.agents}: {cpu_slope[1] * 1e3:.2f} ms, "
                f"{mem_slope[1] / 1024:.1f} KiB)"
            )
        cpu_growth = per(big, "cpu") / per(base, "cpu")
        mem_growth = per(big, "mem") / per(base, "mem")
        ms = per(big, "cpu") * 1e3
        verdicts.append(
            (
                f"{shape}: x{cpu_growth:.2f} CPU and x{mem_growth:.2f} memory per agent "
                f"from {base.agents} to {big.agents}, {ms:.2f} ms of teamlead's own CPU per "
                f"agent at {big.agents} ({own_note(big)}), tail x{big.tail_s / base.tail_s:.2f}",
                cpu_growth <= GROWTH and mem_growth <= GROWTH and ms < MS_PER_AGENT,
            )
        )
    headers = [
        "shape x agents",
        "wall s",
        "cpu ms/agent",
        "bare",
        "own",
        "ratio",
        "peak KiB/agent",
        "ratio",
        "tail ms",
        "ratio",
        "requests/bare",
        "resumes",
    ]
    print(table(headers, rows))
    met = all(ok for _, ok in verdicts)
    verdict = "not judged (--quick)" if quick else ("met" if met else "MISSED")
    print(
        "SUMMARY: agents scale: "
        + "; ".join(text for text, _ in verdicts)
        + f"; targets <= x{GROWTH} per agent and < {MS_PER_AGENT:.0f} ms CPU per agent: {verdict}"
    )
    return met or quick


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve"]:
        serve(argv[1], int(argv[2]))
        return 0
    if argv[:1] == ["--shape"]:
        import anyio

        sizes = [int(n) for n in argv[3:]]
        anyio.run(measure_shape, argv[1], sizes, argv[2] == "1")
        return 0
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 and 5 agents: a smoke run")
    args = parser.parse_args(argv)
    sizes = [2, 5] if args.quick else [10, 100, 1000]
    from teamlead.testing import cli_version

    print(
        f"agents scale bench{' (quick)' if args.quick else ''}: real CLI {cli_version()}, "
        f"a workflow and capped Agent calls (cap {CAP}) of {', '.join(map(str, sizes))} agents"
    )
    samples = measure(sizes, args.quick)
    return 0 if report(samples, args.quick) else 1


if __name__ == "__main__":
    sys.exit(main())
