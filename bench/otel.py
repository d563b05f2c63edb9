"""Bench: what OpenTelemetry adds to a relayed request and to a run's stream.

1. **Per request.** One relay, two runs on it: one plain, one whose requests each make a
   ``chat`` span (the usage read from the streamed reply, the metrics recorded) exported by
   the SDK's batch processor and OTLP/HTTP exporter to a receiver in a process of its own.
   The upstream (the scripted server) and the client are processes of their own too, as in
   ``bench/relay.py``; plain and traced requests alternate one by one, so load from other
   processes hits both alike. Figures: TTFB and last byte, p50/p95, plain vs traced.
   Goal: <= 0.5 ms added p50 at 1 stream.
2. **Per stream item.** A run's stream of 2,000 items (SDK messages as the CLI's raw dicts,
   teamlead's gate and collection events, the shape of a 200-agent fan-out), iterated bare
   and through ``RunTrace.observe`` (spans exported to the same receiver), alternating.
   Figure: microseconds added per item. Goal: <= 50 us.

Run: ``python bench/otel.py`` (about a minute); ``--quick`` for a smoke run.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import AsyncGenerator, Iterator
from contextlib import contextmanager
from typing import Any

from _common import percentile, table
from claude_agent_sdk import ClaudeAgentOptions
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import set_span_in_context
from relay import measure, upstream_process

from teamlead._otel.chat import ChatObserver
from teamlead._otel.run import RunTrace
from teamlead._otel.setup import Instruments, Telemetry
from teamlead._relay import start_relay
from teamlead.events import Finished, SpawnDecided
from teamlead.governor import Governor, GovernorPolicy
from teamlead.testing.otlp import OtlpReceiver
from teamlead.tracker import TrackedEvent, Tracker


def telemetry_to(endpoint: str) -> tuple[Telemetry, TracerProvider, MeterProvider]:
    traces = TracerProvider()
    traces.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint + "/v1/traces"))
    )
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=endpoint + "/v1/metrics"), export_interval_millis=1000
    )
    metrics = MeterProvider(metric_readers=[reader])
    meter = metrics.get_meter("teamlead")
    made = Telemetry(traces.get_tracer("teamlead"), Instruments(meter))
    return made, traces, metrics


@contextmanager
def receiver_process() -> Iterator[str]:
    """The OTLP receiver in a process of its own (``--receive``); yield its endpoint."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--receive"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode().strip()
        if not line.startswith("http://"):
            raise SystemExit("FAILED: the receiver process did not start")
        yield line
    finally:
        proc.kill()
        proc.wait(10)


@contextmanager
def relay_with_two_runs(upstream: str, telemetry: Telemetry) -> Iterator[tuple[str, str]]:
    """A relay on its own loop in a thread; yield the (plain, traced) runs' base URLs."""
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def main() -> None:
        async with start_relay(upstream, Governor(GovernorPolicy(ceiling=1000))) as relay:
            plain, traced = relay.open_run(), relay.open_run()
            root = telemetry.tracer.start_span("bench run")
            context = set_span_in_context(root)
            traced.observer = ChatObserver(
                telemetry, place=lambda agent, write: write(context), on_usage=lambda a, u: None
            )
            box.update(urls=(plain.base_url, traced.base_url), stop=asyncio.Event())
            box["loop"] = asyncio.get_running_loop()
            ready.set()
            await box["stop"].wait()
            root.end()

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    if not ready.wait(20):
        raise SystemExit("FAILED: the relay did not start")
    try:
        yield box["urls"]
    finally:
        box["loop"].call_soon_threadsafe(box["stop"].set)
        thread.join(10)


def fan_out_items(agents: int) -> list[Any]:
    """The items of a run that fans out ``agents`` agents (about 10 per agent)."""
    items: list[Any] = [{"type": "system", "subtype": "init", "session_id": "s"}]
    for n in range(agents):
        tool = f"toolu_{n}"
        task = f"a{n:016x}"
        call: dict[str, Any] = {"tool_use_id": tool, "description": f"agent-{n}"}
        items += [
            {
                "type": "assistant",
                "session_id": "s",
                "message": {
                    "id": "m0",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": tool,
                            "name": "Agent",
                            "input": {"description": f"agent-{n}", "prompt": "investigate"},
                        }
                    ],
                },
            },  # fmt: skip
            SpawnDecided(outcome="queued", position=1, running=8, limit=8, **call),
            SpawnDecided(outcome="admitted", waited_s=0.1, running=8, limit=8, **call),
            {
                "type": "system",
                "subtype": "task_started",
                "task_id": task,
                "tool_use_id": tool,
                "description": f"agent-{n}",
                "session_id": "s",
            },  # fmt: skip
            {
                "type": "system",
                "subtype": "task_progress",
                "task_id": task,
                "usage": {"total_tokens": 10},
                "session_id": "s",
            },  # fmt: skip
            {
                "type": "assistant",
                "session_id": "s",
                "parent_tool_use_id": tool,
                "message": {
                    "id": f"m{n}",
                    "content": [{"type": "text", "text": "working"}],
                    "usage": {"input_tokens": 10, "output_tokens": 2},
                },
            },  # fmt: skip
            {
                "type": "system",
                "subtype": "task_updated",
                "task_id": task,
                "patch": {"status": "completed"},
                "session_id": "s",
            },  # fmt: skip
            {
                "type": "system",
                "subtype": "task_notification",
                "task_id": task,
                "tool_use_id": tool,
                "status": "completed",
                "summary": "found",
                "session_id": "s",
                "usage": {"total_tokens": 15, "tool_uses": 0, "duration_ms": 900},
            },  # fmt: skip
            {
                "type": "result",
                "subtype": "success",
                "is_error": False,
                "result": "ok",
                "session_id": "s",
                "num_turns": 1,
                "usage": {"input_tokens": 5},
            },  # fmt: skip
            {"type": "user", "session_id": "s"},
        ]
    items.append(Finished(status="completed", result="ok", session_id="s", resumes=0))
    return items


class _Parsed:
    """A run's parse of its stream (:class:`~teamlead.tracker.StreamParse`): each item is
    fed to the run's tracker once, before it is yielded, as a run does; both sides pay it."""

    def __init__(self) -> None:
        self.tracker = Tracker()
        self._last: tuple[object, list[TrackedEvent]] = (None, [])

    def events_of(self, item: object) -> list[TrackedEvent]:
        return list(self._last[1]) if self._last[0] is item else []

    async def stream(self, items: list[Any]) -> AsyncGenerator[Any, None]:
        for item in items:
            events = [] if callable(getattr(item, "to_json", None)) else self.tracker.feed(item)
            self._last = (item, events)
            yield item


async def _drain(stream: AsyncGenerator[Any, None]) -> None:
    async for _ in stream:
        pass


def per_item(telemetry: Telemetry, repeats: int) -> tuple[float, float]:
    """Seconds per item, bare and observed (median of ``repeats`` alternating passes)."""
    items = fan_out_items(200)
    bare: list[float] = []
    observed: list[float] = []
    for _ in range(repeats):
        began = time.perf_counter()
        asyncio.run(_drain(_Parsed().stream(items)))
        bare.append((time.perf_counter() - began) / len(items))
        began = time.perf_counter()
        parsed = _Parsed()
        run = RunTrace(telemetry, parsed, mode="query", options=ClaudeAgentOptions())
        asyncio.run(_drain(run.observe(parsed.stream(items))))
        observed.append((time.perf_counter() - began) / len(items))
    return percentile(bare, 50), percentile(observed, 50)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--receive"]:
        with OtlpReceiver() as receiver:
            print(receiver.endpoint, flush=True)
            sys.stdin.read()
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    args = parser.parse_args(argv)
    repeats, passes = (30, 3) if args.quick else (400, 15)
    with receiver_process() as endpoint:
        telemetry, traces, metrics = telemetry_to(endpoint)
        with upstream_process() as upstream, relay_with_two_runs(upstream, telemetry) as urls:
            out = measure(urls[0], urls[1], 1, repeats)
        bare, observed = per_item(telemetry, passes)
        traces.shutdown()
        metrics.shutdown()
    rows = []
    for label, index in (("TTFB", 0), ("last byte", 1)):
        for q in (50, 95):
            plain = percentile([r[index] for r in out["direct"]], q) * 1000
            traced = percentile([r[index] for r in out["relay"]], q) * 1000
            rows.append([f"1 stream {label} p{q}", f"{plain:.2f}", f"{traced:.2f}",
                         f"{traced - plain:+.2f}", f"{traced / plain:.2f}"])  # fmt: skip
    print(table(["relayed reply", "plain ms", "traced ms", "added ms", "ratio"], rows))
    added_item_us = (observed - bare) * 1e6
    print()
    print(
        f"stream of a 200-agent run: {bare * 1e6:.1f} us per item bare, "
        f"{observed * 1e6:.1f} us observed ({observed / bare:.1f}x)"
    )
    added_p50 = float(rows[2][3])
    goals = added_p50 <= 0.5 and added_item_us <= 50
    print(
        f"SUMMARY: chat spans add {added_p50:+.2f} ms p50 and {float(rows[0][3]):+.2f} ms TTFB "
        f"per relayed reply (goal <= 0.5 ms); run spans add {added_item_us:.1f} us per stream "
        "item (goal <= 50 us)" + ("" if goals else " (a goal missed)")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
