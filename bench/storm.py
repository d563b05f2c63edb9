"""Bench: the 24-agent storm, through the relay vs the CLI's own retries.

The real bundled CLI runs offline against the scripted model: the lead sends 24 Agent calls
in one message, each subagent needs 1.5 s, and a hidden limit admits 3 concurrent subagent
streams (429 with ``retry-after: 1`` past it). ``CLAUDE_CODE_MAX_CONCURRENT_SUBAGENTS`` is
24 so the CLI's own cap does not reject any.

* **CLI retries:** the CLI talks to the server directly with its default retries (10).
* **relay:** the CLI talks to the relay with ``CLAUDE_CODE_MAX_RETRIES=0``; the relay holds
  each 429 and retries it once its governor allows.

Figures per side: findings in the final answer, 429s served, the storm's duration (first
subagent request in to last subagent reply out, at the server; the CLI's start-up is
printed apart) and its ratio to the ideal (``ceil(24 / 3) * 1.5 s``: the limit kept full).
Goals for the relay: every finding, at most one 429 per subagent, storm <= 1.2 x ideal.
Printed as ratios relay / CLI retries.

Run: ``python bench/storm.py`` (about a minute); ``--quick`` for 6 agents of 0.5 s.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import anyio
from _common import table
from claude_agent_sdk import ResultMessage, query

from teamlead._relay import start_relay
from teamlead.testing import OfflineClaude, ScriptedServer
from teamlead.testing.scripts import FanOut, findings_in

LIMIT = 3
RETRY_AFTER = 1


@dataclass
class Side:
    name: str
    findings: int
    rejected: int
    most_per_agent: int
    storm: float  # first subagent request in to last subagent reply out, at the server
    wall: float  # the whole CLI run, start-up included


async def _run(agents: int, delay: float, *, relay: bool) -> Side:
    script = FanOut.of(agents, delays=delay)
    with (
        ScriptedServer(
            script, concurrency_limit=LIMIT, retry_after=RETRY_AFTER, limit_roles={"subagent"}
        ) as server,
        tempfile.TemporaryDirectory(prefix="teamlead-storm-") as home,
    ):
        env = {"CLAUDE_CODE_MAX_CONCURRENT_SUBAGENTS": str(agents)}

        async def ask(base_url: str, retries: int) -> tuple[str, float]:
            claude = OfflineClaude(base_url, state_dir=Path(home), max_retries=retries, env=env)
            began = time.monotonic()
            result = ""
            with anyio.fail_after(300):
                async for message in query(prompt="Investigate.", options=claude.options()):
                    if isinstance(message, ResultMessage):
                        result = message.result or ""
            return result, time.monotonic() - began

        if relay:
            async with start_relay(server.base_url) as running:
                result, wall = await ask(running.base_url, 0)
        else:
            result, wall = await ask(server.base_url, 10)
        subs = server.recorded("subagent")
        ends = [r.finished for r in subs if r.finished is not None]
        storm = max(ends) - min(r.started for r in subs) if subs and ends else wall
        per_agent: dict[str, int] = {}
        for record in server.recorded("subagent"):
            if record.status == 429 and record.request.agent is not None:
                label = record.request.agent.description
                per_agent[label] = per_agent.get(label, 0) + 1
        return Side(
            "relay" if relay else "CLI retries",
            len(findings_in(result)),
            server.stats.rejected,
            max(per_agent.values(), default=0),
            storm,
            wall,
        )


async def _one(agents: int, delay: float, relay: bool) -> Side:
    return await _run(agents, delay, relay=relay)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="6 agents of 0.5 s")
    args = parser.parse_args(argv)
    agents, delay = (6, 0.5) if args.quick else (24, 1.5)
    ideal = math.ceil(agents / LIMIT) * delay
    sides = [anyio.run(_one, agents, delay, relay) for relay in (False, True)]
    rows = [
        [
            s.name,
            f"{s.findings}/{agents}",
            str(s.rejected),
            str(s.most_per_agent),
            f"{s.storm:.1f}",
            f"{s.storm / ideal:.2f}",
            f"{s.wall:.1f}",
        ]
        for s in sides
    ]
    print(f"{agents} agents of {delay:g} s, hidden limit {LIMIT}, ideal {ideal:.1f} s")
    print(table(["side", "findings", "429s", "max/agent", "storm s", "x ideal", "run s"], rows))
    base, relayed = sides
    goals = (
        relayed.findings == agents and relayed.most_per_agent <= 1 and relayed.storm <= 1.2 * ideal
    )
    print(
        f"SUMMARY: relay {relayed.findings}/{agents} findings, {relayed.rejected} 429s "
        f"({relayed.rejected / max(1, base.rejected):.2f} x the CLI's {base.rejected}), storm "
        f"{relayed.storm / ideal:.2f} x ideal vs {base.storm / ideal:.2f} x with CLI retries"
        + ("" if goals else " (a goal missed)")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
