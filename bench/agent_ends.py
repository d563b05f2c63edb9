"""Bench: what judging how each agent ended costs per agent.

At every collection, and once at the run's end, teamlead reads the end of each ended
agent's transcript (``transcript_end``: the last assistant message's ``stop_reason`` and
final text) to judge how it ended. This bench times that check per agent on transcripts
shaped like Claude Code's (tool results of ~2 KB, assistant turns with a tool call, a
final text at the end) of two sizes, and the CLI's stopped-agent shape (a tool call left
with no turn after it). The baseline is what the run already did per agent before the
check, in the same process: ``last_assistant_text`` on the same file (the transcript
fallback). Targets: at most 2x the baseline (it parses one more record: the message before
the last, to know where the last one begins) and under 5 ms per agent on a 1 MB transcript.

Run: python bench/agent_ends.py            (--quick: fewer samples, smaller files)
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from teamlead._claude.transcript import last_assistant_text, transcript_end

MB = 1024 * 1024


def _line(record: dict[str, object]) -> bytes:
    return (json.dumps(record) + "\n").encode()


def generate(path: Path, size: int, *, stopped: bool) -> None:
    """About ``size`` bytes of turns; then a final answer, or (``stopped``) a tool call
    left with no turn after it, as the CLI leaves an agent it stopped at its turn limit."""
    result = _line(
        {
            "type": "user",
            "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_X", "content": "r" * 2000}
            ]},
        }
    )  # fmt: skip

    def turn(n: int, stop: str, *blocks: dict[str, object]) -> bytes:
        message = {"id": f"m{n}", "role": "assistant", "stop_reason": stop, "content": list(blocks)}
        return _line({"type": "assistant", "message": message})

    call = {"type": "tool_use", "id": "toolu_X", "name": "Bash", "input": {"command": "ls"}}
    with path.open("wb") as fh:
        written, n = 0, 0
        while written < size:
            chunk = turn(n, "tool_use", {"type": "text", "text": "working"}, call) + result
            fh.write(chunk)
            written += len(chunk)
            n += 1
        if not stopped:
            fh.write(turn(n, "end_turn", {"type": "text", "text": "FINAL ANSWER"}))


def per_call_us(fn: Callable[[], object], samples: int) -> float:
    """The fastest of ``samples`` calls, in microseconds (the least disturbed by a busy
    machine)."""
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1e6


def main() -> None:
    quick = "--quick" in sys.argv
    samples = 20 if quick else 200
    sizes = [(MB // 4, "256 KB")] if quick else [(MB, "1 MB"), (20 * MB, "20 MB")]
    worst, slowest_1mb = 0.0, 0.0
    with tempfile.TemporaryDirectory(prefix="teamlead-bench-") as tmp:
        for size, name in sizes:
            for stopped in (False, True):
                path = Path(tmp) / f"agent-{size}-{stopped}.jsonl"
                generate(path, size, stopped=stopped)
                end = transcript_end(path)
                assert end is not None and end.stop_reason == (
                    "tool_use" if stopped else "end_turn"
                )
                check = per_call_us(lambda p=path: transcript_end(p), samples)
                base = per_call_us(lambda p=path: last_assistant_text(p), samples)
                ratio = check / base
                worst = max(worst, ratio)
                if size <= MB:
                    slowest_1mb = max(slowest_1mb, check)
                shape = "stopped at its limit" if stopped else "finished"
                print(
                    f"{name} transcript, {shape:20}: end check {check:9.1f} us/agent, "
                    f"transcript fallback {base:9.1f} us/agent, ratio {ratio:.2f}x"
                )
    ok = worst <= 2.0 and slowest_1mb < 5000
    print(
        f"SUMMARY: agent_ends: the end check costs at most {worst:.2f}x the transcript "
        f"fallback, {slowest_1mb / 1000:.2f} ms per agent on a 1 MB transcript -> "
        f"{'PASS' if ok else 'FAIL'}"
    )


if __name__ == "__main__":
    main()
