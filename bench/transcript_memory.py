"""Bench P5: memory of ``last_assistant_text`` on a 100 MB transcript vs a 1 MB one.

Transcripts are generated in a temp dir from records shaped like Claude Code's: user
tool results of ~2 KB and assistant turns with thinking and tool_use but no text. Two
layouts: the answer near the end (the usual case) and the answer in the first record
only, which forces a scan of the whole file. Memory is the tracemalloc peak during the
call and the ru_maxrss growth; the baseline is the 1 MB transcript measured in the same
run. Flat memory = ratio near 1.

Run: python bench/transcript_memory.py
"""

from __future__ import annotations

import json
import resource
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from teamlead._claude.transcript import last_assistant_text

MB = 1024 * 1024


def record_lines() -> tuple[bytes, bytes]:
    tool_result = {
        "type": "user",
        "message": {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_X", "content": "r" * 2000}],
        },
        "isSidechain": True,
    }
    turn = {
        "type": "assistant",
        "message": {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "working on it", "signature": "s"},
                {"type": "tool_use", "id": "toolu_X", "name": "Bash", "input": {"command": "ls"}},
            ],
        },
        "agent_id": "abc",
        "isSidechain": True,
    }
    return (json.dumps(tool_result) + "\n").encode(), (json.dumps(turn) + "\n").encode()


def answer_line(text: str) -> bytes:
    record = {
        "type": "assistant",
        "message": {"role": "assistant", "content": [{"type": "text", "text": text}]},
        "agent_id": "abc",
    }
    return (json.dumps(record) + "\n").encode()


def generate(path: Path, size: int, *, answer_first: bool) -> None:
    """Write ~``size`` bytes; the answer is the first record or near the end."""
    filler_user, filler_turn = record_lines()
    chunk = (filler_user + filler_turn) * 64
    with path.open("wb") as fh:
        if answer_first:
            fh.write(answer_line("FINAL ANSWER"))
            tail = filler_user
        else:
            tail = answer_line("FINAL ANSWER") + filler_user * 3
        written = 0
        while written + len(chunk) + len(tail) < size:
            fh.write(chunk)
            written += len(chunk)
        fh.write(tail)


def maxrss_bytes() -> int:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024


def measure(path: Path) -> tuple[int, int, float]:
    """tracemalloc peak, ru_maxrss growth (bytes) and seconds for one call."""
    rss0 = maxrss_bytes()
    tracemalloc.start()
    start = time.perf_counter()
    text = last_assistant_text(path)
    elapsed = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    if text != "FINAL ANSWER":
        raise SystemExit(f"wrong answer from {path.name}: {text!r}")
    return peak, maxrss_bytes() - rss0, elapsed


def main() -> None:
    worst = 0.0
    with tempfile.TemporaryDirectory(prefix="teamlead-bench-") as tmp:
        for layout, first in (("answer near the end", False), ("answer first (full scan)", True)):
            small, big = Path(tmp) / "small.jsonl", Path(tmp) / "big.jsonl"
            generate(small, 1 * MB, answer_first=first)
            generate(big, 100 * MB, answer_first=first)
            base_peak, base_rss, base_s = measure(small)
            peak, rss, seconds = measure(big)
            ratio = peak / base_peak
            worst = max(worst, ratio)
            print(f"P5 {layout}:")
            print(
                f"  1 MB transcript   tracemalloc peak {base_peak / 1024:8.1f} KiB  "
                f"maxrss +{base_rss / 1024:8.1f} KiB  {base_s * 1000:8.1f} ms"
            )
            print(
                f"  100 MB transcript tracemalloc peak {peak / 1024:8.1f} KiB  "
                f"maxrss +{rss / 1024:8.1f} KiB  {seconds * 1000:8.1f} ms"
            )
            print(f"  ratio 100 MB / 1 MB: peak {ratio:.2f}x (file size ratio 100x)")
            small.unlink()
            big.unlink()
    print(
        f"SUMMARY: transcript_memory: worst peak-memory ratio 100 MB vs 1 MB = {worst:.2f}x "
        f"(flat is ~1x) -> {'PASS' if worst <= 1.5 else 'FAIL'}"
    )


if __name__ == "__main__":
    main()
