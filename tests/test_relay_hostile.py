"""The relay against hostile upstreams and hostile clients, on loopback.

A hostile upstream is a raw socket server that answers with canned bytes: headers no
well-behaved server would send (a 20-digit year, a pause of 30 years, control characters)
and ``Expect`` left unanswered. Hostile clients are raw sockets too: header floods on a
wrong prefix, slowloris connections, more idle connections than the relay may hold.
Governors run on a FakeClock, so no test waits out a pause for real; every socket has a
timeout, so none can hang.
"""

from __future__ import annotations

import json
import logging
import random
import select
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, closing, suppress
from pathlib import Path

import anyio
import httpx2
import psutil
import pytest

from teamlead._governor import Usage, UsageScan, open_account
from teamlead._governor.retry_after import MAX_PAUSE_S
from teamlead._governor.usage import MOST_EVENT_BYTES
from teamlead._relay import Relay, RelayConfig, classify, start_relay
from teamlead._relay.forward import backoff_s
from teamlead._relay.keepalive import error_event
from teamlead.events import RateLimited
from teamlead.governor import Governor, GovernorPolicy
from teamlead.testing import FakeClock

from .polling import apoll, poll

pytestmark = pytest.mark.anyio

MODEL = "claude-opus-5-5"
KEY = f"anthropic/{MODEL}"
BODY = json.dumps({"model": MODEL, "max_tokens": 5, "messages": []}).encode()


def reply(status: int, headers: list[tuple[bytes, bytes]] = [], body: bytes = b"{}") -> bytes:  # noqa: B006 - never mutated
    head = b"".join(b"%s: %s\r\n" % pair for pair in headers)
    return (
        b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
        b"connection: close\r\n%s\r\n%s" % (status, len(body), head, body)
    )


class HostileUpstream:
    """Answers the n-th request with ``replies[n]`` (the last one from then on).

    It reads a request's head, then its body by ``content-length``, and ignores
    ``Expect``: a client waiting for ``100 Continue`` before sending the body waits forever.
    """

    def __init__(self, replies: list[bytes]) -> None:
        self.replies = replies
        self.heads: list[bytes] = []
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.settimeout(0.1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(10)
                with suppress(OSError):
                    self._answer(conn)

    def _answer(self, conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            chunk = conn.recv(65536)
            if not chunk:
                return
            rest += chunk
        self.heads.append(head)
        conn.sendall(self.replies[min(len(self.heads), len(self.replies)) - 1])

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()


@pytest.fixture
def hostile() -> Iterator[list[HostileUpstream]]:
    made: list[HostileUpstream] = []
    yield made
    for upstream in made:
        upstream.close()


def upstream(made: list[HostileUpstream], *replies: bytes) -> HostileUpstream:
    server = HostileUpstream(list(replies))
    made.append(server)
    return server


def fake_governor(ceiling: int = 4) -> Governor:
    return Governor(GovernorPolicy(ceiling=ceiling), clock=FakeClock())


@asynccontextmanager
async def http() -> AsyncIterator[httpx2.AsyncClient]:
    async with httpx2.AsyncClient(timeout=10) as h:
        yield h


def prefix_of(relay: Relay) -> str:
    return relay.base_url.rsplit("/", 1)[1]


def connect(relay: Relay) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", relay.port), timeout=10)
    return conn


def read_all(conn: socket.socket) -> bytes:
    """What the relay sends until it closes (raises on the socket's timeout)."""
    data = b""
    while True:
        try:
            chunk = conn.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def relay_connections(relay: Relay) -> int:
    """The relay's accepted connections (its end of them), as the OS sees them."""
    return sum(
        1
        for c in psutil.Process().net_connections(kind="tcp")
        if c.laddr and c.laddr.port == relay.port and c.status == psutil.CONN_ESTABLISHED
    )


# -- time values from outside ---------------------------------------------------------------

HUGE_YEAR = b"Wed, 21 Oct 99999999999999999999 07:28:05 GMT"


async def test_a_retry_after_with_a_20_digit_year_leaks_no_slot(
    hostile: list[HostileUpstream],
) -> None:
    server = upstream(hostile, *[reply(429, [(b"retry-after", HUGE_YEAR)])] * 12, reply(200))
    governor = fake_governor(ceiling=4)
    config = RelayConfig(max_retries=1)
    async with start_relay(server.url, governor, config=config) as relay, http() as h:
        statuses = []
        for _ in range(7):
            r = await h.post(relay.base_url + "/v1/messages", content=BODY)
            statuses.append(r.status_code)
            assert governor.total_in_flight == 0
    # 6 requests met two unreadable 429s each (passed on, not a 500); the 7th got through
    assert statuses == [429] * 6 + [200]
    assert len(server.heads) == 13


def window_reset_2099() -> list[tuple[bytes, bytes]]:
    return [
        (b"anthropic-ratelimit-requests-limit", b"50"),
        (b"anthropic-ratelimit-requests-remaining", b"0"),
        (b"anthropic-ratelimit-requests-reset", b"2099-01-01T00:00:00Z"),
    ]


@pytest.mark.parametrize(
    ("status", "headers"),
    [
        (429, [(b"retry-after", b"1e9")]),
        (429, [(b"retry-after", b"Thu, 01 Jan 2099 00:00:00 GMT")]),
        (429, [(b"retry-after-ms", b"1e12")]),
        (529, [(b"retry-after", b"1e9")]),
        (529, [(b"retry-after", b"Thu, 01 Jan 2099 00:00:00 GMT")]),
        (200, window_reset_2099()),
    ],
    ids=["seconds", "date-2099", "millis", "529-seconds", "529-date", "window-reset-2099"],
)
async def test_an_implausible_header_pauses_a_model_no_longer_than_a_backoff(
    hostile: list[HostileUpstream], status: int, headers: list[tuple[bytes, bytes]]
) -> None:
    server = upstream(hostile, reply(status, headers), reply(200))
    governor = fake_governor()
    clock: FakeClock = governor.clock  # type: ignore[assignment]
    config = RelayConfig(max_retries=0, overload_hold_s=0)  # each reply goes on as it is
    async with start_relay(server.url, governor, config=config) as relay, http() as h:
        first = await h.post(relay.base_url + "/v1/messages", content=BODY)
        paused = governor.state(KEY).cooldown_s
        started = clock.monotonic()
        second = await h.post(relay.base_url + "/v1/messages", content=BODY)
        assert governor.total_in_flight == 0
    assert first.status_code == status
    # a faulty header is no pause: at most the relay's own backoff, never the header's
    assert 0 <= paused <= config.backoff_max_s
    assert second.status_code == 200
    assert clock.monotonic() - started <= config.backoff_max_s


@pytest.mark.parametrize(
    ("status", "headers", "said"),
    [
        (429, [(b"retry-after", b"1e9")], "wait 1000000000 s after a 429: not a plausible"),
        (529, [(b"retry-after-ms", b"1e12")], "wait 1000000000 s after a 529: not a plausible"),
        (200, window_reset_2099(), "its requests window is empty for "),
    ],
    ids=["retry-after", "529-millis", "window-reset-2099"],
)
async def test_a_faulty_header_is_one_warning_per_run_however_often_it_comes(
    hostile: list[HostileUpstream],
    status: int,
    headers: list[tuple[bytes, bytes]],
    said: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = upstream(hostile, reply(status, headers))  # every answer has it
    governor = fake_governor()
    config = RelayConfig(max_retries=0, overload_hold_s=0)  # each reply goes on as it is
    with caplog.at_level(logging.WARNING, logger="teamlead.relay"):
        async with start_relay(server.url, governor, config=config) as relay, http() as h:
            for run in (relay.open_run(deadline_s=300), relay.open_run(deadline_s=300)):
                for _ in range(4):
                    answer = await h.post(run.base_url + "/v1/messages", content=BODY)
                    assert answer.status_code == status
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warned) == 2, warned  # one per run, not one per answer
    assert all(said in line and line.endswith(")") for line in warned), warned


async def test_an_idle_spell_clears_a_pause_so_the_next_run_is_not_held(
    hostile: list[HostileUpstream],
) -> None:
    server = upstream(hostile, reply(200))
    governor = fake_governor()
    clock: FakeClock = governor.clock  # type: ignore[assignment]
    config = RelayConfig(max_retries=0)
    async with start_relay(server.url, governor, config=config) as relay, http() as h:
        async with governor.slot(KEY) as slot:  # an app's own report: the longest pause
            slot.rate_limited(1e9)
        assert governor.state(KEY).cooldown_s == MAX_PAUSE_S
        clock.advance(governor.policy.idle_reset_s)  # nobody asked for the model meanwhile
        held_from = clock.monotonic()
        r = await h.post(relay.base_url + "/v1/messages", content=BODY)
    assert r.status_code == 200
    assert clock.monotonic() == held_from  # not held at all
    assert governor.journal[-1].reason == "idle_reset"


async def test_a_pause_longer_than_the_slot_timeout_passes_the_429_on_at_once(
    hostile: list[HostileUpstream],
) -> None:
    server = upstream(hostile, reply(429, [(b"retry-after", b"120")]), reply(200))
    governor = fake_governor()
    clock: FakeClock = governor.clock  # type: ignore[assignment]
    events: list[object] = []
    config = RelayConfig(slot_timeout_s=60)
    async with (
        start_relay(server.url, governor, config=config, on_event=events.append) as relay,
        http() as h,
    ):
        first = await h.post(relay.base_url + "/v1/messages", content=BODY)
        # while the model is paused for longer than a request may wait, the relay says so
        # at once instead of holding the request for its whole slot timeout
        second = await h.post(relay.base_url + "/v1/messages", content=BODY)
    assert (first.status_code, first.headers["retry-after"]) == (429, "120")
    assert second.status_code == 429
    assert int(second.headers["retry-after"]) >= 119
    assert clock.monotonic() == 0  # nothing waited
    assert len(server.heads) == 1
    limited = [e for e in events if isinstance(e, RateLimited)]
    assert [(e.outcome, e.source) for e in limited] == [("passed", "upstream"), ("passed", "relay")]


async def test_a_pause_past_the_runs_deadline_passes_the_429_on(
    hostile: list[HostileUpstream],
) -> None:
    server = upstream(hostile, reply(429, [(b"retry-after", b"40")]), reply(200))
    governor = fake_governor()
    clock: FakeClock = governor.clock  # type: ignore[assignment]
    async with start_relay(server.url, governor) as relay, http() as h:
        run = relay.open_run(deadline_s=30)
        r = await h.post(run.base_url + "/v1/messages", content=BODY)
        other = relay.open_run(deadline_s=300)
        held = await h.post(other.base_url + "/v1/messages", content=BODY)
    assert r.status_code == 429  # 40 s would outlive the run: passed on, not held
    assert held.status_code == 200  # a run with time to spare waits the pause out
    assert clock.monotonic() >= 40


class Fixed(random.Random):
    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


@pytest.mark.parametrize(
    ("jitter", "pauses"), [(1.0, [1.0, 2.0, 3.0, 3.0]), (0.0, [0.5, 1.0, 1.5, 1.5])]
)
async def test_a_429_without_retry_after_backs_off_exponentially_jittered_and_bounded(
    hostile: list[HostileUpstream], jitter: float, pauses: list[float]
) -> None:
    server = upstream(hostile, *[reply(429)] * 4, reply(200))
    governor = fake_governor(ceiling=8)
    clock: FakeClock = governor.clock  # type: ignore[assignment]
    config = RelayConfig(max_retries=4, backoff_base_s=1.0, backoff_max_s=3.0)
    async with (
        start_relay(server.url, governor, config=config, rng=Fixed(jitter)) as relay,
        http() as h,
    ):
        r = await h.post(relay.base_url + "/v1/messages", content=BODY)
    assert r.status_code == 200
    assert len(server.heads) == 5
    assert [e.retry_after_s for e in governor.journal] == pauses
    assert clock.monotonic() == pytest.approx(sum(pauses))


def test_the_backoff_stays_bounded_however_many_attempts() -> None:
    config = RelayConfig(backoff_base_s=1.0, backoff_max_s=30.0)
    rng = random.Random(3)
    pauses = [backoff_s(config, attempt, rng) for attempt in range(2000)]
    assert all(0.5 <= p <= 30.0 for p in pauses)
    assert all(p >= 15.0 for p in pauses[5:])  # at the bound, jitter keeps at least half


# -- a hostile upstream's reply ---------------------------------------------------------------


@pytest.mark.parametrize("value", [b"a\x01b", b"a\x1bb", b"a\x7fb"])
async def test_a_control_character_in_an_upstream_header_is_a_502_with_one_warning(
    hostile: list[HostileUpstream], caplog: pytest.LogCaptureFixture, value: bytes
) -> None:
    server = upstream(hostile, reply(200, [(b"x-bad", value)]))
    governor = fake_governor()
    with caplog.at_level(logging.WARNING, logger="teamlead.relay"):
        async with start_relay(server.url, governor) as relay, http() as h:
            r = await h.post(relay.base_url + "/v1/messages", content=BODY)
            assert governor.total_in_flight == 0
    assert r.status_code == 502
    assert "control character" in r.json()["error"]["message"]
    warnings = [rec for rec in caplog.records if rec.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "502" in warnings[0].getMessage()


def exchange_with_expect(relay: Relay) -> tuple[bytes, bytes]:
    """Send a request with ``Expect: 100-continue``: (what came before the body, the reply)."""
    with closing(connect(relay)) as conn:
        conn.sendall(
            b"POST /%s/v1/messages HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
            b"Expect: 100-continue\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
            % (prefix_of(relay).encode(), relay.port, len(BODY))
        )
        interim = conn.recv(65536)
        conn.sendall(BODY)
        return interim, read_all(conn)


async def test_expect_100_continue_is_answered_by_the_relay_never_forwarded(
    hostile: list[HostileUpstream],
) -> None:
    server = upstream(hostile, reply(200, body=b'{"ok": true}'))
    governor = fake_governor()
    # forwarded, the upstream would wait for the body and aiohttp for a 100: a 504
    config = RelayConfig(read_timeout_s=2)
    async with start_relay(server.url, governor, config=config) as relay:
        interim, final = await anyio.to_thread.run_sync(exchange_with_expect, relay)
        assert governor.total_in_flight == 0
    assert interim.startswith(b"HTTP/1.1 100 ")
    assert status_of(final) == 200 and final.endswith(b'{"ok": true}')
    assert len(server.heads) == 1 and b"expect" not in server.heads[0].lower()


# -- hostile clients --------------------------------------------------------------------------


def flood_headers(relay: Relay, target: bytes, total: int) -> tuple[int, bytes]:
    """Send a head with ``total`` bytes of headers; (bytes the relay took, its answer)."""
    with closing(connect(relay)) as conn:
        conn.sendall(b"POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % (target, relay.port))
        line = b"x-flood: " + b"a" * 1000 + b"\r\n"
        sent = 0
        try:
            while sent < total:
                conn.sendall(line * 64)
                sent += len(line) * 64
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            answer = read_all(conn)
        except TimeoutError:
            answer = b""
        return sent, answer


async def test_a_wrong_prefix_is_refused_before_any_header_is_kept(
    hostile: list[HostileUpstream],
) -> None:
    server = upstream(hostile, reply(200))
    async with start_relay(server.url, fake_governor()) as relay:
        total = 256 * 1024 * 1024
        sent, _ = await anyio.to_thread.run_sync(
            flood_headers, relay, b"/not-the-prefix/v1/messages", total
        )
    # the relay stopped reading at the target: the flood could not be delivered
    assert sent < total
    assert server.heads == []


@pytest.mark.parametrize("kind", ["bytes", "count"])
async def test_headers_over_the_limits_are_answered_431(
    hostile: list[HostileUpstream], kind: str
) -> None:
    server = upstream(hostile, reply(200))
    config = RelayConfig(max_header_bytes=16 * 1024, max_headers=50)
    async with start_relay(server.url, fake_governor(), config=config) as relay:
        target = b"/%s/v1/messages" % prefix_of(relay).encode()
        if kind == "bytes":
            sent, answer = await anyio.to_thread.run_sync(
                flood_headers, relay, target, 64 * 1024 * 1024
            )
            assert sent < 64 * 1024 * 1024
        else:
            head = b"POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % (target, relay.port)
            head += b"".join(b"x-h%d: v\r\n" % n for n in range(60)) + b"\r\n"

            def send_head() -> bytes:
                with closing(connect(relay)) as conn:
                    conn.sendall(head)
                    return read_all(conn)

            answer = await anyio.to_thread.run_sync(send_head)
    if answer:  # a flood may see the reset before the answer
        assert status_of(answer) == 431
    else:
        assert kind == "bytes"
    assert server.heads == []


async def test_a_head_within_the_limits_goes_through(hostile: list[HostileUpstream]) -> None:
    server = upstream(hostile, reply(200))
    config = RelayConfig(max_header_bytes=16 * 1024, max_headers=50)
    async with start_relay(server.url, fake_governor(), config=config) as relay, http() as h:
        headers = {f"x-h{n}": "v" * 200 for n in range(40)}
        r = await h.post(relay.base_url + "/v1/messages", content=BODY, headers=headers)
    assert r.status_code == 200
    assert b"x-h39: " + b"v" * 200 in server.heads[0]


async def test_a_model_name_with_half_a_surrogate_pair_is_forwarded_not_a_500(
    hostile: list[HostileUpstream], tmp_path: Path
) -> None:
    """A model name no store can hold as text (half a surrogate pair, escaped in the JSON)
    is paced under the default bucket, and the request goes on for the upstream to judge,
    on the machine's shared store too."""
    server = upstream(hostile, reply(400))
    account = open_account("machine", clock=FakeClock(), machine_path=tmp_path / "l.sqlite3")
    governor = Governor(GovernorPolicy(ceiling=4), clock=FakeClock(), account=account)
    bad = b'{"model": "claude-\\ud800", "max_tokens": 5, "messages": []}'
    try:
        async with start_relay(server.url, governor) as relay, http() as h:
            r = await h.post(relay.base_url + "/v1/messages", content=bad)
    finally:
        account.close()
    assert r.status_code == 400 and len(server.heads) == 1
    assert classify(bad).model == "default"


def slowloris(relay: Relay, silent: int, trickling: int) -> list[bytes]:
    """Open connections that never finish a head; what each got before it was closed."""
    conns = [connect(relay) for _ in range(silent + trickling)]
    try:
        for conn in conns[silent:]:
            conn.sendall(b"POST /%s/v1/mess" % prefix_of(relay).encode())
        return [read_all(conn) for conn in conns]
    finally:
        for conn in conns:
            conn.close()


async def test_connections_that_never_send_a_complete_head_are_closed(
    hostile: list[HostileUpstream],
) -> None:
    server = upstream(hostile, reply(200))
    config = RelayConfig(head_timeout_s=0.5)
    async with start_relay(server.url, fake_governor(), config=config) as relay:
        # read_all raises TimeoutError after 10 s if a connection is left open
        answers = await anyio.to_thread.run_sync(slowloris, relay, 10, 10)
        await wait_for(lambda: relay_connections(relay) == 0, "the relay's connections")
    assert answers[:10] == [b""] * 10  # silent: just closed
    assert all(status_of(a) == 408 for a in answers[10:])
    assert server.heads == []


async def test_an_idle_keep_alive_connection_is_closed_even_if_it_trickles(
    hostile: list[HostileUpstream],
) -> None:
    server = upstream(hostile, reply(200))
    config = RelayConfig(head_timeout_s=0.5, idle_timeout_s=0.5)

    def keep_alive_then_trickle(relay: Relay) -> tuple[bytes, bytes]:
        with closing(connect(relay)) as conn:
            conn.sendall(
                b"POST /%s/v1/messages HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Length: %d"
                b"\r\n\r\n%s" % (prefix_of(relay).encode(), relay.port, len(BODY), BODY)
            )
            first = b""
            while not first.endswith(b"\r\n\r\n{}"):  # the whole reply, however it comes
                chunk = conn.recv(65536)
                assert chunk, first
                first += chunk
            conn.sendall(b"P")  # one byte of a next request, then nothing
            return first, read_all(conn)

    async with start_relay(server.url, fake_governor(), config=config) as relay:
        first, rest = await anyio.to_thread.run_sync(keep_alive_then_trickle, relay)
    assert status_of(first) == 200
    assert status_of(rest) == 408


def hold_idle(
    relay: Relay, count: int, ready: threading.Event, done: threading.Event, cap: int
) -> None:
    """Open ``count`` idle connections; ``ready`` once the relay has dealt with them all:
    kept at most ``cap`` open, the others closed (counting only the relay's own sockets
    would not do: those still waiting in its accept queue have none yet)."""
    conns = [connect(relay) for _ in range(count)]

    watch = select.poll()
    for conn in conns:
        watch.register(conn, select.POLLIN)

    def kept() -> int:  # a connection the relay closed, or answered 503, is readable
        return len(conns) - len(watch.poll(0))

    try:
        assert poll(lambda: kept() <= cap, within_s=30), f"{kept()} of {count} still open"
        ready.set()
        done.wait(20)
    finally:
        for conn in conns:
            conn.close()


async def wait_for(predicate: Callable[[], bool], what: str) -> None:
    assert await apoll(predicate, within_s=10), f"timed out waiting for {what}"  # OS state


async def test_past_the_connection_cap_a_valid_request_still_gets_through(
    hostile: list[HostileUpstream], caplog: pytest.LogCaptureFixture
) -> None:
    server = upstream(hostile, reply(200))
    config = RelayConfig(max_connections=16, head_timeout_s=60)
    ready, done = threading.Event(), threading.Event()
    with caplog.at_level(logging.WARNING, logger="teamlead.relay"):
        async with (
            start_relay(server.url, fake_governor(), config=config) as relay,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(anyio.to_thread.run_sync, hold_idle, relay, 60, ready, done, 16)
            assert await anyio.to_thread.run_sync(ready.wait, 40), "the flood was never dealt with"
            await wait_for(lambda: relay_connections(relay) <= 16, "the cap")
            async with http() as h:
                r = await h.post(relay.base_url + "/v1/messages", content=BODY)
            open_now = relay_connections(relay)
            done.set()
    assert r.status_code == 200
    assert open_now <= 16
    cap_lines = [rec for rec in caplog.records if "cap" in rec.getMessage()]
    assert len(cap_lines) == 1


RELAY_UNDER_A_LOW_FILE_LIMIT = """
import asyncio, logging, resource, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s: %(message)s")
resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
from teamlead._relay import start_relay
from teamlead.testing import Reply, ScriptedServer

async def main() -> None:
    server = ScriptedServer(lambda req: Reply.text("ok")).start()
    try:
        async with start_relay(server.base_url) as relay:
            print(relay.base_url, flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    finally:
        server.stop()

asyncio.run(main())
"""


@pytest.mark.slow
def test_more_idle_connections_than_open_files_leave_a_valid_request_answered() -> None:
    # the relay alone in a process limited to 256 open files; 400 idle connections to it

    relay = subprocess.Popen(
        [sys.executable, "-c", RELAY_UNDER_A_LOW_FILE_LIMIT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    conns: list[socket.socket] = []
    try:
        assert relay.stdout is not None
        base_url = relay.stdout.readline().decode().strip()
        assert base_url.startswith("http://127.0.0.1:"), base_url
        port = int(base_url.split(":")[2].split("/")[0])
        for _ in range(400):  # well past the relay's 256 open files
            conns.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        r = httpx2.post(base_url + "/v1/messages", content=BODY, timeout=20)
        assert r.status_code == 200
    finally:
        for conn in conns:
            conn.close()
        _, err = relay.communicate(b"", timeout=30)
    lines = err.decode().splitlines()
    assert relay.returncode == 0, lines[-5:]
    assert len(lines) == 1 and "cap of 96 client connections" in lines[0]


async def test_a_body_that_never_arrives_is_answered_408_without_a_slot(
    hostile: list[HostileUpstream],
) -> None:
    server = upstream(hostile, reply(200))
    governor = fake_governor()
    config = RelayConfig(body_timeout_s=0.5)

    def half_a_body(relay: Relay) -> bytes:
        with closing(connect(relay)) as conn:
            conn.sendall(
                b"POST /%s/v1/messages HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Length: 100"
                b"\r\n\r\n0123456789" % (prefix_of(relay).encode(), relay.port)
            )
            return conn.recv(65536)

    async with start_relay(server.url, governor, config=config) as relay:
        answer = await anyio.to_thread.run_sync(half_a_body, relay)
        assert governor.total_in_flight == 0
    assert status_of(answer) == 408
    assert server.heads == []


def readable(conn: socket.socket) -> bool:
    """Whether the relay has sent something (or closed): ``select`` with no wait."""
    return bool(select.select([conn], [], [], 0)[0])


async def test_a_body_declared_over_the_limit_is_answered_413_at_once_and_closed_cleanly(
    hostile: list[HostileUpstream],
) -> None:
    server = upstream(hostile, reply(200))
    governor = fake_governor()
    config = RelayConfig(max_body_bytes=1024 * 1024)  # the body timeout stays its 60 s

    def declare_a_huge_body(relay: Relay) -> tuple[bytes, bytes]:
        """(the answer to the head, what came after it once the client stopped sending)."""
        with closing(connect(relay)) as conn:
            conn.sendall(
                b"POST /%s/v1/messages HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                b"Content-Length: 99999999999\r\n\r\n%s"
                % (prefix_of(relay).encode(), relay.port, BODY)
            )
            assert poll(lambda: readable(conn), within_s=10, every_s=0.01), "no answer"
            answer = b""
            while b"request body too large" not in answer:
                chunk = conn.recv(65536)
                assert chunk, answer
                answer += chunk
            # a client that writes its whole body before it reads: the relay reads and
            # drops the rest, so the connection ends with a FIN, not a reset
            conn.sendall(b"x" * 256 * 1024)
            conn.shutdown(socket.SHUT_WR)
            rest = b""
            while chunk := conn.recv(65536):
                rest += chunk
            return answer, rest

    async with start_relay(server.url, governor, config=config) as relay:
        answer, rest = await anyio.to_thread.run_sync(declare_a_huge_body, relay)
        assert governor.total_in_flight == 0
    assert status_of(answer) == 413
    assert b"connection: close\r\n" in answer.lower()
    assert rest == b""
    assert server.heads == []


def test_a_replys_usage_is_read_within_limits() -> None:
    """The usage is the upstream's word: a count that is not a plain int in range is left
    out, an event larger than the limit is skipped unread (whole or cut across chunks), and
    lines ended by CRLF are read."""
    scan = UsageScan()
    odd = {"input_tokens": True, "cache_read_input_tokens": 10**9, "output_tokens": 2.0}
    start = {
        "type": "message_start",
        "message": {"usage": odd | {"cache_creation_input_tokens": -1}},
    }
    assert scan.feed(b"data: " + json.dumps(start).encode() + b"\r\n\r\n") == []
    assert not scan.seen
    huge = {"type": "message_delta", "usage": {"output_tokens": 5}, "pad": "x" * MOST_EVENT_BYTES}
    line = b"data: " + json.dumps(huge).encode() + b"\n"
    assert scan.feed(line) == []  # whole in one chunk
    assert [scan.feed(line[:40_000]), scan.feed(line[40_000:])] == [[], []]  # cut in two
    delta = b'data: {"type":"message_delta","usage":{"input_tokens":3,"output_tokens":9}}\r\n'
    assert scan.feed(delta[:20]) == []
    assert scan.feed(delta[20:]) == [Usage(input_tokens=3, output_tokens=9)]
    assert (scan.usage, scan.seen) == (Usage(input_tokens=3, output_tokens=9), True)


def test_a_deeply_nested_event_within_the_size_limit_is_skipped() -> None:
    """JSON nested deeper than the parser recurses, in an event under the size limit, is
    skipped like any unreadable event: the reply's stream goes on and later counts are
    read."""
    scan = UsageScan()
    deep = b"[" * 20_000 + b"]" * 20_000
    line = b'data: {"type":"message_delta","usage":' + deep + b"}\n"
    assert len(line) <= MOST_EVENT_BYTES
    assert scan.feed(line) == []
    delta = b'data: {"type":"message_delta","usage":{"output_tokens":9}}\n'
    assert scan.feed(delta) == [Usage(output_tokens=9)]


def test_a_request_body_nested_deeper_than_the_parser_recurses_is_classified_as_other() -> None:
    """A body the JSON parser cannot read for its depth is one that is not JSON: paced as
    ``other`` under the default model and forwarded, not a relay failure."""
    deep = b'{"model": "m", "messages": ' + b"[" * 20_000 + b"]" * 20_000 + b"}"
    info = classify(deep)
    assert (info.model, info.role, info.estimate) == ("default", "other", None)


def test_an_error_body_nested_deeper_than_the_parser_recurses_gives_the_status_error() -> None:
    """A held stream's error event: an upstream error body too deep to parse is one that
    is not JSON, so the event is built from the status."""
    deep = b'{"error": ' + b"[" * 20_000 + b"]" * 20_000 + b"}"
    event = error_event(529, deep)
    assert json.loads(event.splitlines()[1][6:])["error"]["type"] == "overloaded_error"
