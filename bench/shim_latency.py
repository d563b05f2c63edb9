"""Bench: what ``teamlead-claude`` adds to a plain run's latency.

An unmodified Python SDK app (``claude_agent_sdk.query``, read to its first result) runs
one plain turn (the lead answers at once, no agents) on the scripted model, with
``cli_path`` at the bundled CLI and at ``teamlead-claude`` (the one next to this
interpreter), in alternating pairs so load from other processes hits both alike. Figures:
the app's wall time to its result, p50 per side, and the ratio of each pair (the two runs
side by side, so a drift in the machine's speed over the bench cancels out); target: the
median of the pair ratios says the shim adds <= 5% (its own start-up, the relay, the
run's bookkeeping), as ``coordinator_overhead.py`` judges ``teamlead.query``.

Run: ``python bench/shim_latency.py [--pairs 20]``; ``--quick`` runs one pair, unjudged.
Single pairs scatter by several points (the CLI's own start varies by more than the shim
costs), so fewer than 20 pairs cannot resolve a 5% target; 20 take about 20 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from contextlib import aclosing
from pathlib import Path

import anyio
from claude_agent_sdk import ClaudeAgentOptions, ResultMessage, query

sys.path.insert(0, str(Path(__file__).resolve().parent))
import anyio.lowlevel
from _common import percentile, table  # noqa: E402

from teamlead._claude import bundled_cli_path  # noqa: E402
from teamlead.testing import OfflineClaude, Reply, ScriptedServer  # noqa: E402

SHIM = Path(sys.executable).with_name("teamlead-claude")
_TARGET = 0.05


async def _one(options: ClaudeAgentOptions) -> float:
    """The app's time to its first result; its stream is closed after the clock stops
    (an app that leaves it to the garbage collector gets the SDK's closing errors)."""
    start = time.perf_counter()
    took = None
    with anyio.fail_after(60):
        async with aclosing(query(prompt="Say hello.", options=options)) as messages:
            async for message in messages:
                if isinstance(message, ResultMessage):
                    took = time.perf_counter() - start
                    assert message.result == "Hello.", message.result
                    break
    assert took is not None, "the app got no result"
    return took


async def _exits_delivered(within_s: float = 10.0) -> None:
    """Every child this process started has exited and the event loop was told (asyncio's
    watcher threads, ``asyncio-waitpid-N``, end then), so the loop closes with no child left to
    report: the last CLI's exit otherwise comes to a closed loop, with its noise."""
    for watcher in threading.enumerate():
        if watcher.name.startswith("asyncio-waitpid-"):
            await anyio.to_thread.run_sync(watcher.join, within_s)
    await anyio.lowlevel.checkpoint()  # the exits' callbacks run


def bench(pairs: int, warm: bool) -> tuple[list[float], list[float]]:
    """``pairs`` alternating runs of each side (after one warm-up pair), pair by pair."""
    bare: list[float] = []
    shim: list[float] = []
    with (
        ScriptedServer(lambda req: Reply.text("Hello.")) as server,
        OfflineClaude(server.base_url) as claude,
    ):
        sides = [
            (bare, claude.options(cli_path=bundled_cli_path())),
            (shim, claude.options(cli_path=SHIM)),
        ]

        async def every_pair() -> None:
            # one event loop for every run: the SDK keeps a closed CLI's transport for its
            # exit watcher, which a loop closed after each run would leave to complain
            for i in range(pairs + (1 if warm else 0)):
                order = sides if i % 2 == 0 else sides[::-1]
                for into, options in order:
                    took = await _one(options)
                    if not warm or i > 0:
                        into.append(took)
            await _exits_delivered()

        anyio.run(every_pair)
    return bare, shim


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one pair, no warm-up: a smoke run")
    parser.add_argument("--pairs", type=int, default=20)
    args = parser.parse_args()
    pairs = 1 if args.quick else args.pairs
    load = os.getloadavg()[0]
    print(
        f"shim latency bench{' (quick)' if args.quick else ''}: {pairs} alternating pair(s), "
        f"load average {load:.1f} on {os.cpu_count()} cores (the shim's start is CPU: "
        "a loaded machine stretches it, not the bare CLI's wait on the model)"
    )
    bare, shim = bench(pairs, warm=not args.quick)
    b50, s50 = percentile(bare, 50), percentile(shim, 50)
    ratios = [s / b for b, s in zip(bare, shim, strict=True)]
    ratio = statistics.median(ratios)
    rows = [
        ["bare CLI", f"{b50 * 1e3:.0f} ms", "1.000"],
        ["teamlead-claude", f"{s50 * 1e3:.0f} ms", f"{s50 / b50:.3f}"],
    ]
    print(table(["side", "p50 to the result", "ratio of the p50s"], rows))
    spread = ""
    if len(ratios) >= 4:
        q1, _, q3 = statistics.quantiles(ratios, n=4)
        spread = f", interquartile x{q1:.3f}..x{q3:.3f}"
    met = ratio - 1 <= _TARGET
    verdict = "not judged (--quick)" if args.quick else ("met" if met else "MISSED")
    print(
        f"SUMMARY: teamlead-claude adds {ratio - 1:+.1%} to a plain run (median of "
        f"{len(ratios)} pair ratios{spread}; slower in {sum(r > 1 for r in ratios)} pairs; "
        f"p50 {s50 * 1e3:.0f} vs bare {b50 * 1e3:.0f} ms; target <= {_TARGET:.0%}): {verdict}"
    )
    raise SystemExit(0 if met or args.quick else 1)


if __name__ == "__main__":
    main()
