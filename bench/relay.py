"""Bench: what the loopback relay adds per streamed reply, and its memory per stream.

As in use, the relay is the only thing in its process: the upstream (the scripted model
server, answering every request with the same streamed reply of about 1 KB of text in
24-character ``text_delta`` events) and the client (``http.client`` in threads, one keep-alive
connection each, the same for both sides) are processes of their own, as the API and the
Claude Code CLI are. So the GIL of the bench's own server and client threads does not count
against the relay. The relay (uvicorn with httptools + aiohttp, a governor whose ceiling never
binds) runs on its own event loop in a thread. Direct and relayed requests alternate (one by
one at 1 stream, round by round at 50), so load from other processes hits both alike.

Relayed requests go through a run of the relay with its agent ledger (issue 18), carrying
the headers Claude Code sends (``X-Claude-Code-Session-Id``, ``x-claude-code-agent-id``, one
agent per client connection), so every reply's usage is read and counted as it streams.

Figures, per streamed reply: time to first body byte (TTFB) and time to the last byte,
p50 and p95, direct vs through the relay, at 1 stream and at 50 concurrent streams; the
added milliseconds and the ratio relay / direct. Goals at 1 stream: <= 1 ms added p50,
<= 2 ms added TTFB. Then memory: the peak traced allocation per concurrent stream while
4 streams run through the relay (an upstream in this process here, outside the traced
files), for a 128 KB and a 1 MB reply; flat means the relay does not buffer a reply, only
its socket and read buffers (goal: ratio <= 1.5). Last, the ledger's memory per agent:
the bytes held by the run's agent book (allocations in ``teamlead/_metering``) after one
request from each of 10 and of 1,000 distinct agents, per agent (goal: flat, ratio <= 1.5).

The hard shape: the same 1-stream figures while strangers hold 300 idle connections and 50
slowloris ones (a partial head) to the relay, as anyone on the machine may; the relay's
connection bounds must not cost the CLI's requests anything.

Run: ``python bench/relay.py`` (about a minute); ``--quick`` for a smoke run.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import http.client
import json
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from _common import percentile, table

if TYPE_CHECKING:  # imported where used: the client processes (``--client``) need none
    from teamlead._metering.book import AgentBook
    from teamlead.testing import ScriptedServer

MODEL = "claude-opus-5-5"
BODY = (
    b'{"model": "claude-opus-5-5", "max_tokens": 64, "stream": true, '
    b'"messages": [{"role": "user", "content": "bench"}]}'
)
TEXT = "The scheduler keeps four jobs in flight and retries a failed job twice. " * 14


@contextmanager
def relay_in_thread(upstream: str, books: list[AgentBook] | None = None) -> Iterator[str]:
    """Run a relay on its own event loop in a thread; yield the base URL of one run of it,
    whose agent ledger is appended to ``books``."""
    from teamlead._metering.book import AgentBook
    from teamlead._relay import start_relay
    from teamlead.clock import SystemClock
    from teamlead.governor import Governor, GovernorPolicy

    books = [] if books is None else books
    ready = threading.Event()
    stop: list[asyncio.Event] = []
    url: list[str] = []
    loop_box: list[asyncio.AbstractEventLoop] = []

    async def main() -> None:
        governor = Governor(GovernorPolicy(ceiling=1000))
        async with start_relay(upstream, governor) as relay:
            book = AgentBook(SystemClock())  # a run's ledger, as teamlead's runs
            run = relay.open_run(agents=book)
            books.append(book)
            url.append(run.base_url)
            stop.append(asyncio.Event())
            loop_box.append(asyncio.get_running_loop())
            ready.set()
            await stop[0].wait()

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    if not ready.wait(20):
        raise SystemExit("FAILED: the relay did not start")
    try:
        yield url[0]
    finally:
        loop_box[0].call_soon_threadsafe(stop[0].set)
        thread.join(10)


class Client:
    """One keep-alive connection, as one agent; ``ask`` returns (ttfb, total) in seconds."""

    _count = 0

    def __init__(self, base_url: str, agent: str | None = None) -> None:
        parts = urlsplit(base_url)
        self.path = parts.path + "/v1/messages"
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
        Client._count += 1
        self.headers = {
            "content-type": "application/json",
            "X-Claude-Code-Session-Id": "bench-session",
            "x-claude-code-agent-id": agent or f"bench{Client._count}",
        }

    def ask(self) -> tuple[float, float, int]:
        began = time.perf_counter()
        self.conn.request("POST", self.path, BODY, self.headers)
        response = self.conn.getresponse()
        first = response.read1(65536)
        ttfb = time.perf_counter() - began
        size = len(first)
        while chunk := response.read1(65536):
            size += len(chunk)
        total = time.perf_counter() - began
        if response.status != 200 or size < len(TEXT):
            raise SystemExit(f"FAILED: status {response.status}, {size} bytes")
        return ttfb, total, size

    def close(self) -> None:
        self.conn.close()


@contextmanager
def strangers(relay_url: str, idle: int, slow: int) -> Iterator[None]:
    """Connections to the relay that never finish a request: ``idle`` silent, ``slow``
    stuck in a partial head."""
    parts = urlsplit(relay_url)
    conns = [
        socket.create_connection((parts.hostname, parts.port), timeout=10)
        for _ in range(idle + slow)
    ]
    try:
        for conn in conns[idle:]:
            conn.sendall(b"POST /")
        yield
    finally:
        for conn in conns:
            conn.close()


def rounds(clients: list[Client], pool: ThreadPoolExecutor) -> list[tuple[float, float, int]]:
    return list(pool.map(lambda c: c.ask(), clients))


def measure_here(
    direct_url: str, relay_url: str, streams: int, repeats: int
) -> dict[str, list[tuple[float, float, int]]]:
    sides = {"direct": direct_url, "relay": relay_url}
    clients = {name: [Client(url) for _ in range(streams)] for name, url in sides.items()}
    out: dict[str, list[tuple[float, float, int]]] = {name: [] for name in sides}
    with ThreadPoolExecutor(streams) as pool:
        for name in sides:  # warm the connections
            rounds(clients[name], pool)
        for _ in range(repeats):
            for name in sides:
                out[name].extend(rounds(clients[name], pool))
    for group in clients.values():
        for client in group:
            client.close()
    return out


def measure(
    direct_url: str, relay_url: str, streams: int, repeats: int
) -> dict[str, list[tuple[float, float, int]]]:
    """:func:`measure_here` in a client process of its own (``--client``)."""
    args = ["--client", direct_url, relay_url, str(streams), str(repeats)]
    done = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        raise SystemExit(f"FAILED: the client process: {done.stderr.strip()[-500:]}")
    out: dict[str, list[tuple[float, float, int]]] = json.loads(done.stdout)
    return {side: [(a, b, c) for a, b, c in rows] for side, rows in out.items()}


@contextmanager
def upstream_process() -> Iterator[str]:
    """The scripted server in a process of its own (``--serve``); yield its base URL."""
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline().decode().strip()
        if not line.startswith("http://"):
            raise SystemExit("FAILED: the upstream process did not start")
        yield line
    finally:
        server.kill()  # its stdin closes too; either ends it
        server.wait(10)


def serve_until_stdin_closes() -> None:
    from teamlead.testing import Reply, ScriptedServer

    with ScriptedServer(lambda req: Reply.text(TEXT)) as upstream:
        print(upstream.base_url, flush=True)
        sys.stdin.read()


def report(streams: int, out: dict[str, list[tuple[float, float, int]]]) -> list[list[str]]:
    rows = []
    for label, index in (("TTFB", 0), ("last byte", 1)):
        for q in (50, 95):
            d = percentile([r[index] for r in out["direct"]], q) * 1000
            r = percentile([r[index] for r in out["relay"]], q) * 1000
            rows.append(
                [
                    f"{streams} stream(s) {label} p{q}",
                    f"{d:.2f}",
                    f"{r:.2f}",
                    f"{r - d:+.2f}",
                    f"{r / d:.2f}",
                ]
            )
    return rows


_RELAY_FILES = (
    "*/teamlead/_relay/*",
    "*/aiohttp/*",
    "*/yarl/*",
    "*/multidict/*",
    "*/uvicorn/*",
    "*/asyncio/*",
    "*/anyio/*",
)


def _relay_bytes() -> int:
    """Bytes held now by allocations made in the relay's code and the libraries it runs on
    (the scripted server and the client run in plain threads, outside these files)."""
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(True, pattern) for pattern in _RELAY_FILES]
    )
    return sum(stat.size for stat in snapshot.statistics("filename"))


def memory_per_stream(upstream: ScriptedServer, relay_url: str, size: int, streams: int) -> float:
    """The most the relay held at once while ``streams`` replies of ``size`` went through,
    per stream (sampled every 10 ms)."""
    from teamlead.testing import Reply

    text = "z" * size  # one shared string: the server allocates no reply per request
    upstream.script = lambda req: Reply.text(text)
    clients = [Client(relay_url) for _ in range(streams)]
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.01):
            peak[0] = max(peak[0], _relay_bytes())

    with ThreadPoolExecutor(streams) as pool:
        rounds(clients, pool)  # warm
        gc.collect()
        tracemalloc.start()
        base = _relay_bytes()
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        rounds(clients, pool)
        done.set()
        sampler.join()
        tracemalloc.stop()
    for client in clients:
        client.close()
    return max(0, peak[0] - base) / streams


def memory_per_agent(agents: int) -> float:
    """Bytes the run's agent book holds per agent after one request from each of
    ``agents`` distinct agents (allocations made in ``teamlead/_metering``)."""
    from teamlead.testing import Reply, ScriptedServer

    books: list[AgentBook] = []
    with (
        ScriptedServer(lambda req: Reply.text(TEXT)) as upstream,
        relay_in_thread(upstream.base_url, books) as relay_url,
    ):
        Client(relay_url, "warm").ask()
        gc.collect()
        tracemalloc.start()
        before = _ledger_bytes()
        client = Client(relay_url)
        for n in range(agents):
            client.headers["x-claude-code-agent-id"] = f"agent-{n:05d}"
            client.ask()
        gc.collect()
        held = _ledger_bytes() - before
        tracemalloc.stop()
        client.close()
        assert len(books[0].entries) == agents + 1, "every agent has one entry"
    return max(0, held) / agents


def _ledger_bytes() -> int:
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(True, "*/teamlead/_metering/*")]
    )
    return sum(stat.size for stat in snapshot.statistics("filename"))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve"]:
        serve_until_stdin_closes()
        return 0
    if argv[:1] == ["--client"]:
        direct, relayed, streams, repeats = argv[1:5]
        print(json.dumps(measure_here(direct, relayed, int(streams), int(repeats))))
        return 0
    from teamlead.testing import Reply, ScriptedServer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    args = parser.parse_args(argv)
    repeats_1, repeats_50 = (30, 2) if args.quick else (400, 12)
    with upstream_process() as upstream_url, relay_in_thread(upstream_url) as relay_url:
        one = measure(upstream_url, relay_url, 1, repeats_1)
        fifty = measure(upstream_url, relay_url, 50, repeats_50)
        with strangers(relay_url, idle=300, slow=50):
            besieged = measure(upstream_url, relay_url, 1, repeats_1 // 2)
    small_kb, large_kb = (16, 64) if args.quick else (128, 1024)
    with (
        ScriptedServer(lambda req: Reply.text(TEXT)) as upstream,
        relay_in_thread(upstream.base_url) as relay_url,
    ):
        small = memory_per_stream(upstream, relay_url, small_kb * 1024, 4)
        large = memory_per_stream(upstream, relay_url, large_kb * 1024, 4)
    few, many = memory_per_agent(10), memory_per_agent(100 if args.quick else 1000)
    rows = report(1, one) + report(50, fifty)
    hard = report(1, besieged)
    rows += [[f"{row[0]}, 350 strangers", *row[1:]] for row in hard]
    print(table(["streamed reply", "direct ms", "relay ms", "added ms", "ratio"], rows))
    print()
    print(
        f"memory per stream through the relay: {small_kb} KB reply {small / 1024:.0f} KiB, "
        f"{large_kb} KB reply {large / 1024:.0f} KiB (ratio {large / small:.2f})"
    )
    many_n = 100 if args.quick else 1000
    print(
        f"agent ledger memory per agent: {few:.0f} B at 10 agents, {many:.0f} B at "
        f"{many_n} agents (ratio {many / few:.2f})"
    )
    added_p50 = float(rows[2][3])
    added_ttfb = float(rows[0][3])
    flat = many / few <= 1.5
    goals = added_p50 <= 1.0 and added_ttfb <= 2.0 and large / small <= 1.5 and flat
    print(
        f"SUMMARY: relay adds {added_p50:+.2f} ms p50 and {added_ttfb:+.2f} ms TTFB at 1 stream "
        f"(goals <= 1 / <= 2 ms), {float(rows[6][3]):+.2f} ms p50 at 50 streams; memory per "
        f"stream x{large / small:.2f} from {small_kb} KB to {large_kb} KB replies; "
        f"{float(hard[2][3]):+.2f} ms p50 at 1 stream with 350 strangers connected; ledger "
        f"memory per agent x{many / few:.2f} from 10 to {many_n} agents"
        + ("" if goals else " (a goal missed)")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
