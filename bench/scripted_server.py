"""Bench: what the scripted model server adds per streamed reply, at 1 and 50 streams.

The reply is representative of a lead turn: about 1 KB of text in 24-character
``text_delta`` events, then one ``tool_use`` whose input arrives in ``input_json_delta``
events. Its exact wire bytes (the SSE events of
:func:`teamlead.testing.scripted_server.sse_events`, each in its own HTTP chunk, as the server
sends them) are built once up front.

The baseline is a bare threaded TCP server (stdlib ``socketserver``) that reads each
request (request line, headers, ``content-length`` body) and writes those same bytes
back after a minimal HTTP header, in one ``send``. Both servers run in this process and
are measured with the same raw-socket HTTP/1.1 client (one keep-alive connection per
client thread), so the client's cost is the same on both sides. Both servers stay up for
the whole run; at 1 stream the requests alternate between them one by one, at 50
streams whole rounds alternate, so that load from other processes hits both alike.

Figures: time to last byte per reply (request sent -> terminating chunk received), p50
and p95, at 1 stream (sequential requests) and at 50 streams (50 threads, each with its
own connection, started together). Printed as the added latency (scripted minus
baseline, ms) and the ratio scripted / baseline. An extra line does the same at 1 stream
through the official ``anthropic`` client (``messages.stream`` to the final message).

Every reply is checked, outside the timed window, against the expected SSE body (message
ids aside), so both sides really sent the same bytes.

Run: ``python bench/scripted_server.py`` (under a minute); ``--quick`` for a smoke run.
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import anthropic
from _common import percentile, table

from teamlead.testing import Reply, ScriptedServer, ToolUse
from teamlead.testing.scripted_server import sse_events

MODEL = "claude-opus-5-5"
_END = b"\r\n0\r\n\r\n"  # a data chunk's CRLF, then the last-chunk marker
_MESSAGE_ID = re.compile(rb"msg_scripted_[0-9a-f]{24}")  # the scripted server marks its ids

_TEXT = (
    "I checked the three modules you named. The parser accepts every fixture in the suite, "
    "including the malformed ones, which it reports with a line number and skips. The "
    "scheduler keeps at most four jobs in flight and retries a failed job twice with "
    "backoff; its only gap is that a job cancelled during backoff is logged as failed. The "
    "cache is correct but evicts too eagerly under memory pressure: it drops entries that "
    "were read in the last second. Next I will run the integration tests to confirm the "
    "eviction issue before proposing a fix, and I will write the results to the report. "
)
TEXT = (_TEXT * 2)[:1024]
TOOL = ToolUse(
    "Bash",
    {
        "command": "python -m pytest tests/integration -q -k 'cache or eviction' --maxfail=3",
        "description": "Run the cache integration tests",
        "timeout": 120000,
    },
    id="toolu_01BenchScriptedServer0001",
)
REPLY = Reply(content=TEXT, tool_uses=(TOOL,), input_tokens=1800)

REQUEST_BODY: dict[str, Any] = {
    "model": MODEL,
    "max_tokens": 4096,
    "stream": True,
    "system": "You are a careful engineer. Report what you checked and what you found. " * 12,
    "messages": [
        {"role": "user", "content": "Check the parser, the scheduler and the cache, then report."},
    ],
    "tools": [
        {
            "name": name,
            "description": f"The {name} tool.",
            "input_schema": {
                "type": "object",
                "properties": {"command": {"type": "string"}, "description": {"type": "string"}},
                "required": ["command"],
            },
        }
        for name in ("Bash", "Read", "Grep")
    ],
}


# -- the payload ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Payload:
    """The reply's SSE body, its chunked wire form, and the request that asks for it."""

    events: int
    sse: bytes  # what the client sees once chunking is undone
    wire: bytes  # the HTTP body on the wire: one chunk per event, then the last chunk
    request: bytes

    @property
    def response(self) -> bytes:
        """The baseline's whole response: a minimal header, then the same wire body."""
        head = (
            b"HTTP/1.1 200 OK\r\n"
            b"content-type: text/event-stream; charset=utf-8\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        return head + self.wire


def build_payload() -> Payload:
    events = [
        f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
        for name, data in sse_events(REPLY, MODEL, "msg_scripted_" + "0" * 24)
    ]
    wire = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
    body = json.dumps(REQUEST_BODY).encode()
    head = (
        "POST /v1/messages?beta=true HTTP/1.1\r\n"
        "host: 127.0.0.1\r\n"
        "content-type: application/json\r\n"
        "anthropic-version: 2023-06-01\r\n"
        "x-api-key: bench\r\n"
        "accept: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode()
    return Payload(events=len(events), sse=b"".join(events), wire=wire, request=head + body)


def dechunk(response: bytes) -> bytes:
    """The body of a chunked HTTP response, or ValueError when it is not a 200."""
    head, _, rest = response.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise ValueError(f"unexpected response: {head[:80]!r}")
    out = bytearray()
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return bytes(out)
        out += rest[:size]
        rest = rest[size + 2 :]


# -- the baseline server ------------------------------------------------------------------------
class _EchoHandler(socketserver.StreamRequestHandler):
    server: _EchoServer

    def handle(self) -> None:
        while self.rfile.readline(65537):  # request line; empty at EOF
            length = 0
            while True:
                header = self.rfile.readline(65537)
                if header in (b"\r\n", b"\n", b""):
                    break
                name, _, value = header.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            self.rfile.read(length)
            self.wfile.write(self.server.response)


class _EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256  # as the scripted server: 50 clients connect at once
    response: bytes = b""


@contextmanager
def baseline_server(payload: Payload) -> Iterator[str]:
    server = _EchoServer(("127.0.0.1", 0), _EchoHandler)
    server.response = payload.response
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextmanager
def scripted_server() -> Iterator[str]:
    with ScriptedServer(lambda request: REPLY) as server:
        yield server.base_url


# -- the client -------------------------------------------------------------------------------
class RawClient:
    """One keep-alive HTTP/1.1 connection: send the request, read to the last chunk."""

    def __init__(self, base_url: str) -> None:
        port = int(base_url.rsplit(":", 1)[1])
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def roundtrip(self, request: bytes) -> tuple[float, bytes]:
        """Seconds to the last byte, and the raw response."""
        buf = bytearray()
        began = time.perf_counter()
        self.sock.sendall(request)
        while not buf.endswith(_END):
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the server closed the connection mid-reply")
            buf += data
        return time.perf_counter() - began, bytes(buf)

    def close(self) -> None:
        self.sock.close()


@dataclass
class Samples:
    """Times to last byte (seconds) per server, pooled."""

    times: dict[str, list[float]] = field(default_factory=lambda: {"baseline": [], "scripted": []})
    elapsed: dict[str, float] = field(default_factory=lambda: {"baseline": 0.0, "scripted": 0.0})

    def p(self, name: str, q: float) -> float:
        return percentile(self.times[name], q)


def _check(response: bytes, payload: Payload) -> None:
    body = _MESSAGE_ID.sub(b"msg_scripted_" + b"0" * 24, dechunk(response))
    if body != payload.sse:
        raise SystemExit("FAILED: a reply's SSE body differs from the expected payload")


def concurrent(
    base_url: str, payload: Payload, threads: int, each: int
) -> tuple[list[float], float]:
    """``threads`` clients send ``each`` requests back to back, all starting together."""
    clients = [RawClient(base_url) for _ in range(threads)]
    for client in clients:  # open every server-side handler before the clock starts
        _check(client.roundtrip(payload.request)[1], payload)
    start = threading.Barrier(threads + 1)
    results: list[list[float]] = [[] for _ in clients]
    responses: list[bytes] = []
    errors: list[BaseException] = []

    def work(client: RawClient, out: list[float]) -> None:
        try:
            start.wait(timeout=30)
            for _ in range(each):
                took, response = client.roundtrip(payload.request)
                out.append(took)
                responses.append(response)  # checked once every stream is done
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    workers = [
        threading.Thread(target=work, args=(c, out), daemon=True)
        for c, out in zip(clients, results, strict=True)
    ]
    for worker in workers:
        worker.start()
    start.wait(timeout=30)
    began = time.perf_counter()
    for worker in workers:
        worker.join(timeout=120)
    elapsed = time.perf_counter() - began
    for client in clients:
        client.close()
    if errors:
        raise SystemExit(f"FAILED: a client at concurrency {threads} failed: {errors[0]!r}")
    for response in responses:
        _check(response, payload)
    return [t for out in results for t in out], elapsed


class SdkClient:
    """The official client (one keep-alive pool), streamed to the assembled final message."""

    def __init__(self, base_url: str) -> None:
        self.client = anthropic.Anthropic(
            base_url=base_url, api_key="bench", max_retries=0, timeout=30
        )
        self.kwargs = {k: v for k, v in REQUEST_BODY.items() if k != "stream"}

    def roundtrip(self) -> float:
        began = time.perf_counter()
        with self.client.messages.stream(**self.kwargs) as stream:
            message = stream.get_final_message()
        took = time.perf_counter() - began
        text, use = message.content[0], message.content[-1]
        if text.type != "text" or text.text != TEXT or use.type != "tool_use":
            raise SystemExit("FAILED: the anthropic client assembled a different message")
        if use.input != TOOL.input:
            raise SystemExit("FAILED: the anthropic client parsed a different tool input")
        return took

    def close(self) -> None:
        self.client.close()


NAMES = ("baseline", "scripted")


def interleaved(roundtrips: dict[str, Callable[[], float]], n: int, warmup: int = 5) -> Samples:
    """``n`` replies from each server, alternating request by request (B S, then S B, ...).

    Interleaving this finely makes load from other processes hit both servers alike.
    """
    for _ in range(warmup):
        for roundtrip in roundtrips.values():
            roundtrip()
    samples = Samples()
    for i in range(n):
        for name in NAMES if i % 2 == 0 else NAMES[::-1]:
            samples.times[name].append(roundtrips[name]())
    return samples


def concurrent_rounds(
    urls: dict[str, str], payload: Payload, rounds: int, threads: int, each: int
) -> Samples:
    """Rounds of :func:`concurrent`, alternating the servers (B S, then S B, ...)."""
    samples = Samples()
    for r in range(rounds):
        for name in NAMES if r % 2 == 0 else NAMES[::-1]:
            times, elapsed = concurrent(urls[name], payload, threads, each)
            samples.times[name].extend(times)
            samples.elapsed[name] += elapsed
    return samples


def _row(label: str, s: Samples) -> list[str]:
    cells = [label]
    for q in (50, 95):
        base, mine = s.p("baseline", q), s.p("scripted", q)
        cells += [
            f"{base * 1e3:.2f}",
            f"{mine * 1e3:.2f}",
            f"{(mine - base) * 1e3:+.2f}",
            f"x{mine / base:.2f}",
        ]
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few samples: a smoke run")
    args = parser.parse_args()
    # replies per server: seq_n and sdk_n at 1 stream, c50_rounds x threads x each at 50
    seq_n, sdk_n = (20, 10) if args.quick else (400, 200)
    c50_rounds, threads, each = (1, 50, 2) if args.quick else (10, 50, 5)

    payload = build_payload()
    # A full collection over the imported packages (anthropic, pydantic, ...) pauses every
    # thread for ~150 ms on this kind of machine; freeze them so that such a pause cannot
    # land on one side by chance.
    gc.collect()
    gc.freeze()
    print(
        f"scripted server bench{' (quick)' if args.quick else ''}: reply = {len(TEXT)} chars of "
        f"text + 1 tool_use = {payload.events} SSE events, {len(payload.wire)} wire bytes; "
        f"request {len(payload.request)} bytes"
    )
    print(
        "baseline: a bare threaded socket server writing the same bytes in one send; "
        "same raw-socket keep-alive client for both; times to last byte, ms"
    )
    with ExitStack() as stack:
        urls = {
            "baseline": stack.enter_context(baseline_server(payload)),
            "scripted": stack.enter_context(scripted_server()),
        }
        raw = {name: RawClient(url) for name, url in urls.items()}
        sdk = {name: SdkClient(url) for name, url in urls.items()}
        closers: list[Callable[[], None]] = [c.close for c in raw.values()]
        closers += [c.close for c in sdk.values()]
        for close in closers:
            stack.callback(close)

        def raw_roundtrip(client: RawClient) -> Callable[[], float]:
            def roundtrip() -> float:
                took, response = client.roundtrip(payload.request)
                _check(response, payload)  # outside the timed window
                return took

            return roundtrip

        one = interleaved({name: raw_roundtrip(c) for name, c in raw.items()}, seq_n)
        many = concurrent_rounds(urls, payload, c50_rounds, threads, each)
        via_sdk = interleaved({name: c.roundtrip for name, c in sdk.items()}, sdk_n, warmup=3)

    headers = [
        "level",
        "base p50",
        "scr p50",
        "added",
        "ratio",
        "base p95",
        "scr p95",
        "added",
        "ratio",
    ]
    rows = [
        _row(f"1 stream ({len(one.times['scripted'])} replies)", one),
        _row(f"{threads} streams ({len(many.times['scripted'])} replies)", many),
        _row(f"anthropic client, 1 stream ({len(via_sdk.times['scripted'])})", via_sdk),
    ]
    print(table(headers, rows))
    rate = {k: len(many.times[k]) / many.elapsed[k] for k in ("baseline", "scripted")}
    print(
        f"throughput at {threads} streams: baseline {rate['baseline']:.0f} replies/s, scripted "
        f"{rate['scripted']:.0f} replies/s (x{rate['scripted'] / rate['baseline']:.2f})"
    )

    def added(s: Samples) -> float:
        return (s.p("scripted", 50) - s.p("baseline", 50)) * 1e3

    def ratio(s: Samples, q: float = 50) -> float:
        return s.p("scripted", q) / s.p("baseline", q)

    print(
        f"SUMMARY: the scripted server adds {added(one):.2f} ms per reply at 1 stream (p50 "
        f"x{ratio(one):.2f} a bare socket, x{ratio(via_sdk):.2f} through the anthropic client) "
        f"and {added(many):.2f} ms at {threads} streams (p50 x{ratio(many):.2f}, "
        f"p95 x{ratio(many, 95):.2f})"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
