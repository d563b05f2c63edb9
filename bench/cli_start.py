"""Bench: how fast the commands people type at a running run start (`teamlead --help`,
`ps`, `stop`, `pause`), each a fresh interpreter, as a user runs it.

Every command runs through the console entry point (`python -m teamlead ...`), against a
runtime directory of the bench's own that holds one live run: the bench serves that run's
control endpoint itself (the real :class:`~teamlead._control.endpoint.Endpoint`, on an event
loop in a thread, with a steering that answers at once), so `ps` asks it for its status,
`pause` and `stop` find it by a prefix and get an answer, as they would from a real run.
The commands rotate round by round, so load from other processes hits each alike.

Baselines, measured in the same run: the bare interpreter (`python -c pass`), and the
interpreter importing what the verbs need (click, anyio, psutil, asyncio): the ratio to
that one is what teamlead itself adds. `teamlead ask --help`, which loads the SDK, is
shown for contrast. Targets: each fast command within 2x its libraries' baseline (p50),
and under a third of `ask --help`.

Run: python bench/cli_start.py [--rounds 15] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import percentile, table  # noqa: E402

from teamlead._control.endpoint import Endpoint, WatchFeed  # noqa: E402
from teamlead._control.registry import Registry  # noqa: E402

TEAMLEAD = [sys.executable, "-m", "teamlead"]
LIBRARIES = "import click, anyio, psutil, asyncio"
#: p50 of a fast command over its libraries' baseline, and over `ask --help`.
TARGET_OVER_LIBRARIES = 2.0
TARGET_OVER_ASK = 1 / 3


class _Answers:
    """A run's steering that answers every op at once (nothing to steer here)."""

    def status(self) -> dict[str, Any]:
        return {"status": "running", "agents": {"running": 2, "queued": 1, "done": 3}}

    def stop(self, *, now: bool) -> str:
        return "stopping"

    def pause(self) -> str:
        return "paused"

    def unpause(self) -> str:
        return "unpaused"

    def amend(self, changes: Mapping[str, int | str | None]) -> str:
        return "amended"


def _serve(registry: Registry) -> tuple[str, asyncio.AbstractEventLoop]:
    """Register one run of this process and serve its endpoint on a loop in a thread."""
    registration = registry.register(mode="query", command="teamlead ask bench")
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    async def start() -> None:
        endpoint = Endpoint(registration.socket, _Answers(), run=registration.run, feed=WatchFeed())
        await endpoint.start()
        registration.write()
        ready.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop)
    if not ready.wait(10):
        raise SystemExit("FAILED: the bench's run endpoint did not start")
    return registration.run, loop


def _timed(args: list[str], env: Mapping[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(args, env=dict(env), capture_output=True, text=True, timeout=60)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"FAILED: {' '.join(args[1:])} exited {done.returncode}: {done.stderr}")
    return took


def main(rounds: int, quick: bool) -> int:
    with tempfile.TemporaryDirectory(prefix="tl-bench-") as tmp:
        env = {**os.environ, "TEAMLEAD_RUNTIME_DIR": str(Path(tmp) / "run")}
        run, loop = _serve(Registry(Path(tmp) / "run"))
        commands: dict[str, list[str]] = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "libraries": [sys.executable, "-c", LIBRARIES],
            "teamlead --help": [*TEAMLEAD, "--help"],
            "teamlead ps": [*TEAMLEAD, "ps"],
            "teamlead stop RUN": [*TEAMLEAD, "stop", run[:6]],
            "teamlead pause RUN": [*TEAMLEAD, "pause", run[:6]],
            "teamlead ask --help": [*TEAMLEAD, "ask", "--help"],
        }
        for args in commands.values():  # warm the file cache and the bytecode
            _timed(args, env)
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(rounds):
            for name, args in commands.items():
                times[name].append(_timed(args, env))
        loop.call_soon_threadsafe(loop.stop)
    p50 = {name: percentile(values, 50) for name, values in times.items()}
    libraries, ask = p50["libraries"], p50["teamlead ask --help"]
    rows = [
        [
            name,
            f"{p50[name] * 1000:.0f}",
            f"{percentile(values, 95) * 1000:.0f}",
            f"{p50[name] / libraries:.2f}",
            f"{p50[name] / ask:.2f}",
        ]
        for name, values in times.items()
    ]
    print(f"start time of each command, {rounds} rounds (ms; x libraries: click, anyio, psutil)")
    print(table(["command", "p50 ms", "p95 ms", "x libraries", "x ask --help"], rows))
    fast = ["teamlead --help", "teamlead ps", "teamlead stop RUN", "teamlead pause RUN"]
    worst = max(fast, key=lambda name: p50[name])
    over_libraries, over_ask = p50[worst] / libraries, p50[worst] / ask
    met = over_libraries <= TARGET_OVER_LIBRARIES and over_ask <= TARGET_OVER_ASK
    verdict = "target not judged (--quick)" if quick else ("met" if met else "MISSED")
    print(
        f"SUMMARY: the slowest fast command ({worst}) starts in {p50[worst] * 1000:.0f} ms "
        f"p50 = {over_libraries:.2f}x its libraries (target <= {TARGET_OVER_LIBRARIES:g}) and "
        f"{over_ask:.2f}x `ask --help` (target <= {TARGET_OVER_ASK:.2f}); {verdict}"
    )
    return 0 if quick or met else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="3 rounds; targets not judged")
    options = parser.parse_args()
    sys.exit(main(3 if options.quick else options.rounds, options.quick))
