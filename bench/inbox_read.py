"""Bench P6: reading a 100,000-entry (about 5 MB) inbox, time and memory (issue #12, case 15).

The inbox is generated in a temp dir as Claude Code writes it (a compact JSON array of
``from``/``text``/``timestamp`` entries). ``read_inbox`` is timed (best of 3, wall and
CPU) and its tracemalloc peak taken; the baseline is a bare ``json.loads`` of the same
file, measured in the same run, so the ratio shows what reading entries costs beyond
decoding JSON. Goals: under 1 s and under 100 MB (it was 11.7 s and 284 MB).

Run: python bench/inbox_read.py [--entries 100000] [--quick]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from teamlead._claude.inbox import read_inbox

MB = 1024 * 1024


def measure(fn: Callable[[], Any]) -> tuple[float, float, float]:
    """Best wall and CPU seconds of 3 runs, and the tracemalloc peak in MB of one more."""
    walls, cpus = [], []
    for _ in range(3):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    tracemalloc.start()
    try:
        fn()
        peak = tracemalloc.get_traced_memory()[1] / MB
    finally:
        tracemalloc.stop()
    return min(walls), min(cpus), peak


def main(entries: int) -> None:
    with tempfile.TemporaryDirectory(prefix="teamlead-bench-") as tmp:
        inbox = Path(tmp) / "teams" / "bench" / "inboxes" / "team-lead.json"
        inbox.parent.mkdir(parents=True)
        body = [
            {"from": f"agent{i % 7}", "text": f"m{i}", "timestamp": "2026-01-01T00:00:00.000Z"}
            for i in range(entries)
        ]
        inbox.write_text(json.dumps(body, separators=(",", ":")))
        del body
        size = inbox.stat().st_size / MB
        base = measure(lambda: json.loads(inbox.read_bytes()))
        read = measure(lambda: read_inbox(inbox, config_dir=Path(tmp)))
    print(f"P6 reading a {entries}-entry inbox ({size:.1f} MB)")
    for name, (wall, cpu, peak) in (("json.loads", base), ("read_inbox", read)):
        print(f"  {name:<11} wall {wall:6.3f} s  cpu {cpu:6.3f} s  peak {peak:6.1f} MB")
    wall, cpu, peak = read
    ok = cpu < 1.0 and peak < 100
    print(
        f"SUMMARY: inbox_read: {entries} entries in {cpu:.3f} s CPU ({wall:.3f} s wall), "
        f"{cpu / base[1]:.1f}x json.loads; peak {peak:.1f} MB, {peak / base[2]:.1f}x json.loads "
        f"(targets < 1 s, < 100 MB) -> {'PASS' if ok else 'FAIL'}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="10,000 entries")
    args = parser.parse_args()
    main(10_000 if args.quick else args.entries)
