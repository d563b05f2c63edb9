"""Bench (issue #9): what the spawn gate costs per spawn, and how close a capped fan-out
gets to the ideal.

Both parts run the real bundled Claude Code CLI offline against one scripted server.

1. **Added latency per admitted spawn.** The lead sends 8 Agent calls in one message
   (nothing queues: no cap, no stagger). For each agent, the spawn latency is the time from
   the end of the lead's fan-out reply to that subagent's first request at the model.
   Runs rotate three sides, each with a fresh CLI state directory: bare (no hook), an
   empty PreToolUse hook on Agent that returns ``{}`` at once (what the SDK's hook round
   trip costs any gate), and gated (the gate's hook in the options). The target (< 5 ms per
   spawn) is judged on the p95 time spent inside the gate's hook on the real CLI: the
   latency the gate itself adds before the CLI may start the agent. The end-to-end medians
   (gated minus empty hook, gated minus bare) are printed beside it; they include the
   SDK's hook round trip and scatter by tens of ms between runs on a busy machine. The
   gate's CPU per admitted call, awaited in-process, is printed too.
2. **Fan-out wall time with a cap.** 12 agents under a cap of 3, each answering after
   1.0 s. The span is from the first admission to the last subagent reply at the model.
   The ideal is ceil(12 / 3) x the agent time, measured in the same run as the median,
   per agent, from its admission to its reply: the CLI's own spawn latency plus the 1.0 s
   answer. So the ratio charges the gate with what its queue adds between waves (the
   terminal task event reaching the stream, the slot's hand-off, the hook's answer). The
   ratio against the bare scripted 1.0 s is printed too; that one also charges the gate
   with the CLI's spawn latency of every wave. Target: <= 1.1 x ideal.

A missed target exits 1. Run: ``python bench/spawn_gate.py`` (about a minute);
``--quick`` runs one round, a capped fan-out of 6 agents of 0.3 s (two waves) and the
deadline part with a 3 s deadline (agents of 0.3 s and 12 s), and does not judge the targets.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from _common import percentile, table
from claude_agent_sdk import ClaudeAgentOptions, HookMatcher
from claude_agent_sdk import query as sdk_query

from teamlead._gate.gate import SpawnGate
from teamlead._gate.slots import SpawnCap
from teamlead._run.options import merge_hook
from teamlead.events import SpawnDecided
from teamlead.policy import SpawnPolicy
from teamlead.testing import OfflineClaude, ScriptedServer, cli_version
from teamlead.testing.scripts import FanOut, findings_in

LATENCY_AGENTS = 8
TARGET_MS, TARGET_RATIO = 5.0, 1.1


@dataclass(frozen=True)
class Sizes:
    """The capped fan-out (agents, cap, seconds per agent) and the deadline part (the
    deadline, and its quick and slow agent, in seconds)."""

    fan_agents: int = 12
    fan_cap: int = 3
    agent_s: float = 1.0
    deadline_s: float = 10.0
    agents_s: tuple[float, float] = (1.0, 40.0)


FULL = Sizes()
QUICK = Sizes(fan_agents=6, agent_s=0.3, deadline_s=3.0, agents_s=(0.3, 12.0))


class BenchFailure(Exception):
    """A run did not do the work the comparison needs."""


#: Seconds each admitted call spent inside the gate's hook, on the real CLI.
IN_HOOK: list[float] = []


async def _empty_hook(*_: Any) -> Any:
    return {}


def _timed(gate: SpawnGate) -> None:
    inner = gate.hook

    async def hook(input_data: Any, tool_use_id: Any, context: Any) -> Any:
        start = time.perf_counter()
        try:
            return await inner(input_data, tool_use_id, context)
        finally:
            IN_HOOK.append(time.perf_counter() - start)

    setattr(gate, "hook", hook)  # noqa: B010 - the bench times the very callback the CLI calls


async def run_once(
    server: ScriptedServer,
    state: Path,
    gate: SpawnGate | None,
    *,
    empty_hook: bool = False,
    timed: bool = False,
) -> None:
    with OfflineClaude(server.base_url, state_dir=state) as claude:
        options: ClaudeAgentOptions = claude.options()
        if gate is not None:
            if timed:
                _timed(gate)
            options = merge_hook(options, gate.hook_matcher())
        elif empty_hook:
            matcher = HookMatcher(matcher="Agent", hooks=[_empty_hook], timeout=60)
            options = merge_hook(options, matcher)
        try:
            with anyio.fail_after(120):
                async for message in sdk_query(prompt="Fan out.", options=options):
                    if gate is not None:
                        gate.observe(message)
        finally:
            if gate is not None:
                gate.close()
    if gate is not None and any(r.status != "admitted" for r in gate.records()):
        raise BenchFailure(f"the gate did not admit every call: {gate.records()}")


def spawn_latencies(server: ScriptedServer, since: int) -> list[float]:
    """Per agent: end of the fan-out reply -> the subagent's first request (seconds)."""
    records = server.recorded()[since:]
    fan = next(r for r in records if r.role == "lead" and r.reply and r.reply.tool_uses)
    assert fan.finished is not None
    firsts: dict[str, float] = {}
    for r in records:
        if r.role == "subagent" and r.request.agent is not None:
            firsts.setdefault(r.request.agent.description, r.started)
    if len(firsts) != LATENCY_AGENTS:
        raise BenchFailure(f"{len(firsts)} of {LATENCY_AGENTS} subagents reached the model")
    return [t - fan.finished for t in firsts.values()]


SIDES = ("bare", "empty hook", "gated")


async def latency_part(rounds: int, root: Path) -> tuple[float, float, list[list[str]]]:
    samples: dict[str, list[float]] = {side: [] for side in SIDES}
    with ScriptedServer(FanOut.of(LATENCY_AGENTS, delays=0.2)) as server:
        for n in range(rounds):
            for k in range(len(SIDES)):
                side = SIDES[(n + k) % len(SIDES)]
                since = len(server.recorded())
                gate = SpawnGate(cap=SpawnCap(20), deadline_s=300) if side == "gated" else None
                state = root / f"{side.replace(' ', '-')}-{n}"
                await run_once(server, state, gate, empty_hook=side == "empty hook", timed=True)
                samples[side].extend(spawn_latencies(server, since))
    rows = [
        [side, str(len(v)), f"{1000 * statistics.median(v):.1f}", f"{1000 * percentile(v, 95):.1f}"]
        for side, v in samples.items()
    ]
    med = {side: 1000 * statistics.median(v) for side, v in samples.items()}
    return med["gated"] - med["empty hook"], med["gated"] - med["bare"], rows


async def hook_cpu_us(calls: int = 2000) -> float:
    """The gate's own cost per admitted call, awaited in-process (no CLI, no queue)."""
    gate = SpawnGate(SpawnPolicy(), cap=SpawnCap(20), env={})
    payload: dict[str, Any] = {"tool_input": {"description": "d", "prompt": "p"}}
    start = time.perf_counter()
    for i in range(calls):
        await gate.hook(payload, f"t{i}", {})
        gate.task_ended(f"t{i}")
    return 1e6 * (time.perf_counter() - start) / calls


async def fan_out_part(root: Path, sizes: Sizes) -> tuple[float, float, float]:
    admitted: dict[str, float] = {}

    def on_event(event: SpawnDecided) -> None:
        if event.outcome == "admitted":
            admitted[event.description] = time.monotonic()

    fan_agents, fan_cap = sizes.fan_agents, sizes.fan_cap
    with ScriptedServer(FanOut.of(fan_agents, delays=sizes.agent_s)) as server:
        policy = SpawnPolicy(max_concurrent_agents=fan_cap)
        gate = SpawnGate(policy, cap=SpawnCap(20), deadline_s=300, on_event=on_event)
        await run_once(server, root / "fan", gate)
        subs = [r for r in server.recorded("subagent") if r.request.agent is not None]
        ended = {r.request.agent.description: r.finished or 0.0 for r in subs if r.request.agent}
        if set(ended) != set(admitted) or len(ended) != fan_agents:
            raise BenchFailure("not every capped subagent reached the model")
        if server.max_concurrent("subagent") > fan_cap:
            raise BenchFailure(f"{server.max_concurrent('subagent')} subagents ran at once")
        seen = {x for r in server.recorded("lead") for x in findings_in(r.request.all_text)}
        if len(seen) != fan_agents:
            raise BenchFailure(f"the lead saw {len(seen)} of {fan_agents} findings")
    # agent time as the CLI delivers it: admission -> reply (its spawn latency included)
    agent_time = statistics.median(ended[d] - admitted[d] for d in ended)
    span = max(ended.values()) - min(admitted.values())
    waves = math.ceil(fan_agents / fan_cap)
    return span, waves * agent_time, waves * sizes.agent_s


async def deadline_part(root: Path, sizes: Sizes, *, gate: bool) -> tuple[float, str]:
    """A quick and a slow agent (1 s and 40 s) under a deadline (10 s), through ``teamlead.run``:
    the wall time to ``Finished`` and its status (the gate wraps up; without it the
    deadline cuts the stream and the quick result reaches no answer)."""
    import teamlead
    from teamlead.policy import Policy
    from teamlead.testing import Reply, ScriptedRequest
    from teamlead.testing.scripts import synthesize

    fan = FanOut.of(2, delays=list(sizes.agents_s))

    def script(req: ScriptedRequest) -> Reply:  # the wrap-up turn offers no tools
        if req.role == "other" and "<teamlead-results" in req.last_user_text:
            return synthesize(req)
        return fan(req)

    policy = Policy(deadline_s=sizes.deadline_s, spawn=SpawnPolicy(enabled=gate))
    status = "none"
    with ScriptedServer(script) as server:
        claude = OfflineClaude(server.base_url, state_dir=root / f"deadline-{gate}")
        started = time.monotonic()
        async for item in teamlead.run("Investigate.", claude.options(), policy=policy):
            if isinstance(item, teamlead.Finished):
                status = item.status
        return time.monotonic() - started, status


async def main(quick: bool) -> int:
    pairs = 1 if quick else 10
    sizes = QUICK if quick else FULL
    print(f"spawn gate bench: bundled CLI {cli_version()}, {pairs} round(s) of {len(SIDES)} runs\n")
    with tempfile.TemporaryDirectory(prefix="teamlead-bench-") as tmp:
        root = Path(tmp)
        if not quick:  # warm-up: the first CLI runs of a process are slower
            await latency_part(1, root / "warm")
        added_ms, vs_bare_ms, rows = await latency_part(pairs, root)
        cpu_us = await hook_cpu_us(200 if quick else 2000)
        span, ideal, naive = await fan_out_part(root, sizes)
        wrapped, wrapped_status = await deadline_part(root, sizes, gate=True)
        cut, cut_status = (
            (0.0, "not run") if quick else await deadline_part(root, sizes, gate=False)
        )
    print(f"1. spawn latency (fan-out reply end -> subagent's first request), {LATENCY_AGENTS}/run")
    print(table(["side", "spawns", "p50 ms", "p95 ms"], rows))
    print(
        f"added by the gate over an empty hook: {added_ms:+.1f} ms per spawn (median); "
        f"over no hook at all: {vs_bare_ms:+.1f} ms\n"
        f"time inside the gate's hook on the real CLI: p50 {percentile(IN_HOOK, 50) * 1e6:.0f} us, "
        f"p95 {percentile(IN_HOOK, 95) * 1e6:.0f} us; gate CPU in-process {cpu_us:.0f} us/call\n"
    )
    ratio = span / ideal
    print(f"2. fan-out of {sizes.fan_agents} x {sizes.agent_s:g} s under a cap of {sizes.fan_cap}")
    print(
        f"span (first admission -> last reply) {span:.2f} s, ideal {ideal:.2f} s "
        f"(measured agent time), ratio {ratio:.3f}"
    )
    print(
        f"against the scripted {sizes.agent_s:g} s alone: ideal {naive:.2f} s, "
        f"ratio {span / naive:.3f}\n"
    )
    deadline = sizes.deadline_s
    quick_s, slow_s = sizes.agents_s
    print(f"3. deadline {deadline:g} s, agents of {quick_s:g} s and {slow_s:g} s, via teamlead.run")
    print(
        f"with the gate: {wrapped_status} after {wrapped:.2f} s ({wrapped / deadline:.2f}x the "
        f"deadline); without it: {cut_status} after {cut:.2f} s ({cut / deadline:.2f}x)\n"
    )
    in_hook_ms = 1000 * percentile(IN_HOOK, 95)
    ok = in_hook_ms < TARGET_MS and ratio <= TARGET_RATIO
    verdict = "not judged (--quick)" if quick else ("met" if ok else "MISSED")
    print(
        f"SUMMARY: gate holds a spawn {in_hook_ms:.2f} ms (p95, target < {TARGET_MS:g}; end to "
        f"end {added_ms:+.1f} ms vs an empty hook, {vs_bare_ms:+.1f} vs none), capped fan-out "
        f"{ratio:.3f}x ideal (target <= {TARGET_RATIO:g}); deadline wrap-up {wrapped_status} at "
        f"{wrapped / deadline:.2f}x the deadline; targets {verdict}"
    )
    return 0 if quick or ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one pair; targets not judged")
    args = parser.parse_args()
    try:
        sys.exit(anyio.run(main, args.quick))
    except BenchFailure as exc:
        print(f"SUMMARY: FAILED: {exc}")
        sys.exit(1)
