"""Bench: an overload burst (529s for every request), the relay's shield vs passing it on.

The real bundled CLI runs offline against the scripted model: the lead sends 4 Agent calls
in one message, each subagent needs 0.5 s. From the first subagent request on, every
request of the run (the lead's and the subagents') is answered 529 ``overloaded_error``
for the burst's length (25 s; the field reports bursts of minutes), then all is served.

* **CLI retries:** the CLI talks to the server directly with its own retries (the
  default, 10, backing off up to about 30 s a try).
* **passed on:** the CLI talks to the relay (``CLAUDE_CODE_MAX_RETRIES=0``) with no hold
  (``overload_hold_s=0``): each 529 goes on to the CLI at once, as before the shield.
* **shield:** the same with the relay's hold (300 s): each held request is retried with
  jittered backoff while a streaming one is kept alive with ``ping`` events.

Figures per side: findings in the final answer, subagents lost (their job got no 200),
529s served, the run's wall time and its ratio to the ideal: the same run with no burst,
measured first in the same process (CLI start-up and all), plus the burst's length.
Goals for the shield: every finding, no agent lost, <= 1.3 x ideal. Printed as the
shield's figures beside the others'.

Run: ``python bench/overload.py`` (about 2 minutes); ``--quick`` for a 2 s burst.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import anyio
from _common import table
from claude_agent_sdk import ClaudeSDKError, ResultMessage, query

from teamlead._relay import RELAY_POLICY, RelayConfig, start_relay
from teamlead.governor import Governor
from teamlead.testing import OfflineClaude, ScriptedServer
from teamlead.testing.scripts import FanOut, OverloadBurst, findings_in

AGENTS = 4
DELAY = 0.5


@dataclass
class Side:
    name: str
    findings: int
    lost: int
    overloaded: int
    wall: float


async def _run(name: str, burst_s: float) -> Side:
    burst = OverloadBurst(FanOut.of(AGENTS, delays=DELAY), burst_s)
    with (
        ScriptedServer(burst) as server,
        tempfile.TemporaryDirectory(prefix="teamlead-overload-") as home,
    ):

        async def ask(base_url: str, retries: int | None) -> str:
            # ``None``: the CLI's own default retries
            options = OfflineClaude(base_url, state_dir=Path(home), max_retries=retries).options()
            result = ""
            with anyio.move_on_after(600):
                try:
                    async for message in query(prompt="Investigate.", options=options):
                        if isinstance(message, ResultMessage) and not message.is_error:
                            result = message.result or result
                except ClaudeSDKError:  # the run ended in an API error: what it had stands
                    pass
            return result

        began = time.monotonic()
        if name == "CLI retries":
            result = await ask(server.base_url, None)
        else:
            hold = 0.0 if name == "passed on" else 300.0
            config = RelayConfig(overload_hold_s=hold)
            async with start_relay(server.base_url, Governor(RELAY_POLICY), config=config) as relay:
                result = await ask(relay.base_url, 0)
        wall = time.monotonic() - began
        served = {
            r.request.agent.description
            for r in server.recorded("subagent")
            if r.status == 200 and r.request.agent is not None
        }
    return Side(name, len(findings_in(result)), AGENTS - len(served), burst.overloaded, wall)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 2 s burst")
    args = parser.parse_args(argv)
    burst_s = 2.0 if args.quick else 25.0
    calm = anyio.run(_run, "shield", 0.0)
    ideal = calm.wall + burst_s
    sides = [anyio.run(_run, name, burst_s) for name in ("CLI retries", "passed on", "shield")]
    rows = [
        [
            s.name,
            f"{s.findings}/{AGENTS}",
            str(s.lost),
            str(s.overloaded),
            f"{s.wall:.1f}",
            f"{s.wall / ideal:.2f}",
        ]
        for s in sides
    ]
    print(
        f"{AGENTS} agents of {DELAY:g} s, a {burst_s:g} s burst of 529s; no burst: "
        f"{calm.wall:.1f} s, so the ideal is {ideal:.1f} s"
    )
    print(table(["side", "findings", "lost", "529s", "wall s", "x ideal"], rows))
    retries, passed, shield = sides
    goals = shield.findings == AGENTS and shield.lost == 0 and shield.wall <= 1.3 * ideal
    print(
        f"SUMMARY: shield {shield.findings}/{AGENTS} findings, {shield.lost} lost, "
        f"{shield.wall / ideal:.2f} x ideal; passed on {passed.findings}/{AGENTS} "
        f"({passed.lost} lost); CLI retries {retries.findings}/{AGENTS} ({retries.lost} lost, "
        f"{retries.wall / ideal:.2f} x ideal)" + ("" if goals else " (a goal missed)")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
