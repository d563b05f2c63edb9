"""The loopback relay: pass-through, 429s held and retried, disconnects, deadlines, security.

The upstream is the scripted server (or a raw socket that never answers). Governors pacing
a Retry-After run on a FakeClock, so no test waits out a pause for real.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client as http_client
import json
import logging
import re
import socket
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timezone
from functools import partial

import aiohttp
import anthropic
import anyio
import httpx2
import psutil
import pytest

from teamlead._gate.pause import Pause
from teamlead._governor import UsageScan
from teamlead._relay import (
    RelayConfig,
    RelayError,
    RelayPool,
    UpstreamUnreachable,
    classify,
    relay_applicable,
    start_relay,
)
from teamlead._relay.app import RelayApp
from teamlead._relay.keepalive import PING
from teamlead._relay.stats import RelayEvent
from teamlead.events import ConcurrencyChanged, RateLimited
from teamlead.governor import Governor, GovernorPolicy
from teamlead.policy import LimitsPolicy
from teamlead.testing import FakeClock, Reply, ScriptedRequest, ScriptedServer

from .polling import apoll, settle
from .relay_upstream import KEY, MODEL, body, fake_governor, http, serve, server_factory

__all__ = ["server_factory"]  # the fixture, imported for this module's tests

pytestmark = pytest.mark.anyio


async def wait_until(predicate: Callable[[], bool], what: str) -> None:
    """Poll a state with a deadline (it changes in other threads: no event to wait on)."""
    assert await apoll(predicate, within_s=10), f"timed out waiting for {what}"


def client(base_url: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=base_url, api_key=KEY, max_retries=0)


# -- pass-through ---------------------------------------------------------------------------


async def test_the_anthropic_client_streams_through_the_relay(
    server_factory: list[ScriptedServer],
) -> None:
    long = "The quick brown fox jumps over the lazy dog. " * 20
    server = serve(server_factory, lambda req: Reply.text(long))
    async with start_relay(server.base_url, fake_governor()) as relay:
        async with (
            client(relay.base_url) as c,
            c.messages.stream(
                model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}]
            ) as stream,
        ):
            message = await stream.get_final_message()
        assert relay.governor.total_in_flight == 0
        summary = relay.summary()
    assert message.content[0].text == long  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    assert (summary.requests, summary.absorbed, summary.passed) == (1, 0, 0)
    assert summary.buckets[0].key == f"anthropic/{MODEL}"


async def test_headers_reach_the_upstream_unchanged(server_factory: list[ScriptedServer]) -> None:
    server = serve(server_factory, lambda req: Reply.text("ok"))
    sent = {
        "x-api-key": KEY,
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "interleaved-thinking-2025-05-14",
        "user-agent": "claude-cli/2.1.332 (external, sdk-py)",
        "x-custom": "Mixed Case Value",
    }
    async with start_relay(server.base_url, fake_governor()) as relay, http() as h:
        direct = await h.post(
            server.base_url + "/v1/messages?beta=true", content=body(), headers=sent
        )
        relayed = await h.post(
            relay.base_url + "/v1/messages?beta=true", content=body(), headers=sent
        )
    assert relayed.status_code == direct.status_code == 200
    got_direct, got_relayed = ({k.lower(): v for k, v in r.headers} for r in server.recorded())
    for name, value in sent.items():
        assert got_relayed[name] == value
    # the same headers with the same values, but the hop-by-hop ones (names are
    # case-insensitive; ASGI lowercases them)
    hop = {"host", "connection"}
    assert {k: v for k, v in got_relayed.items() if k not in hop} == {
        k: v for k, v in got_direct.items() if k not in hop
    }
    assert json.loads(relayed.content)["content"] == json.loads(direct.content)["content"]


async def test_error_bodies_and_statuses_are_passed_on(
    server_factory: list[ScriptedServer],
) -> None:
    server = serve(server_factory, lambda req: Reply.error(400, message="bad max_tokens"))
    async with start_relay(server.base_url, fake_governor()) as relay, http() as h:
        direct = await h.post(server.base_url + "/v1/messages", content=body())
        relayed = await h.post(relay.base_url + "/v1/messages", content=body())
        assert relay.governor.total_in_flight == 0
    assert relayed.status_code == 400
    assert relayed.json()["error"] == direct.json()["error"]
    assert relayed.json()["error"]["message"] == "bad max_tokens"
    assert relayed.headers["content-type"] == "application/json"


async def test_sse_chunks_are_forwarded_as_they_come(server_factory: list[ScriptedServer]) -> None:
    gate = threading.Event()

    def script(req: ScriptedRequest) -> Reply:
        return Reply.text("x" * 96, chunk_delay=0.2)

    server = serve(server_factory, script)
    async with (
        start_relay(server.base_url, fake_governor()) as relay,
        http() as h,
        h.stream("POST", relay.base_url + "/v1/messages", content=body(stream=True)) as r,
    ):
        assert r.headers["content-type"].startswith("text/event-stream")
        seen = 0
        async for chunk in r.aiter_raw():
            seen += chunk.count(b"text_delta")
            if seen == 1:
                # the first delta is here while the upstream still writes the rest
                assert server.recorded()[0].finished is None
                gate.set()
    assert gate.is_set() and seen == 4


@asynccontextmanager
async def held_open_upstream(events: bytes) -> AsyncIterator[tuple[str, anyio.Event]]:
    """An upstream that streams ``events``, then a ping, and then holds its body open until
    the event it yields is set (as a gateway slow to pass the last chunk on does)."""
    from aiohttp import web

    end = anyio.Event()

    async def answer(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(events)
        await response.write(_PING)  # once it is through, the relay has read all before it
        with anyio.fail_after(10):
            await end.wait()
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/messages", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", end
    finally:
        end.set()
        await runner.cleanup()


_ANSWER = (
    b'event: message_start\ndata: {"type":"message_start"}\n\n'
    b'event: content_block_delta\ndata: {"text":"\\nevent: message_stop\\n\\n"}\n\n'
)
_STOP = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
_PING = b'event: ping\ndata: {"type": "ping"}\n\n'


@pytest.mark.parametrize("stops", [True, False], ids=["message-stop", "no-message-stop"])
async def test_an_answer_past_its_message_stop_is_not_counted_by_a_later_429(
    stops: bool,
) -> None:
    """The upstream has finished a request once it sent ``message_stop``: its slot is held
    to the body's last byte, but a 429 met by a request sent after that does not count it
    among the requests the upstream ran. Text that only looks like the event (inside a
    JSON string) does not end the answer."""
    governor = fake_governor()
    key = f"anthropic/{MODEL}"
    async with (
        held_open_upstream(_ANSWER + (_STOP if stops else b"")) as (upstream, end),
        start_relay(upstream, governor) as relay,
        http() as h,
        h.stream("POST", relay.base_url + "/v1/messages", content=body(stream=True)) as r,
    ):
        chunks = r.aiter_raw()
        received = b""
        while not received.endswith(_PING):
            received += await chunks.__anext__()
        assert governor.total_in_flight == 1  # held until the body's end, answered or not
        others = [await governor.acquire(key) for _ in range(3)]
        others[2].rate_limited(measured=True)  # two others run, and the held-open one?
        assert governor.state(key).cap == (2 if stops else 3)
        for slot in others:
            slot.release()
        end.set()
        async for chunk in chunks:
            received += chunk
    assert received == _ANSWER + (_STOP if stops else b"") + _PING
    assert governor.total_in_flight == 0


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"], ids=["lf", "crlf"])
def test_the_end_of_an_answer_is_found_at_its_last_blank_line_whatever_the_chunks(
    newline: bytes,
) -> None:
    def ended(scan: UsageScan, chunk: bytes) -> bool:
        scan.feed(chunk)
        return scan.ended

    stream = (_ANSWER + _STOP).replace(b"\n", newline)
    for cut in range(1, len(stream)):  # every split in two, and byte by byte
        scan = UsageScan()
        assert (ended(scan, stream[:cut]), ended(scan, stream[cut:])) == (False, True), cut
    scan = UsageScan()
    found = [ended(scan, stream[n : n + 1]) for n in range(len(stream))]
    assert found.index(True) == len(stream) - 1
    lookalikes = (_ANSWER, b"event: message_stopped\ndata: {}\n\n", b"xevent: message_stop\n\n")
    for lookalike in lookalikes:
        assert not ended(UsageScan(), lookalike.replace(b"\n", newline))


# -- 429 and 529 ------------------------------------------------------------------------------


async def test_a_429_is_held_and_retried_so_the_client_never_sees_it(
    server_factory: list[ScriptedServer],
) -> None:
    replies = iter([Reply.error(429, retry_after=2), Reply.text("after the pause")])
    server = serve(server_factory, lambda req: next(replies))
    events: list[RelayEvent] = []
    clock = FakeClock()
    governor = fake_governor(clock=clock)
    async with start_relay(server.base_url, governor, on_event=events.append) as relay:
        async with client(relay.base_url) as c:
            reply = await c.messages.create(
                model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}]
            )
        summary = relay.summary()
    assert reply.content[0].text == "after the pause"  # type: ignore[union-attr]
    assert [r.status for r in server.recorded()] == [429, 200]
    assert clock.monotonic() >= 2.0  # the retry waited out the Retry-After, on the clock
    limited = [e for e in events if isinstance(e, RateLimited)]
    assert [(e.outcome, e.status, e.retry_after_s, e.role) for e in limited] == [
        ("absorbed", 429, 2.0, "other")
    ]
    assert any(isinstance(e, ConcurrencyChanged) and e.reason == "rate_limited" for e in events)
    assert (summary.absorbed, summary.passed, summary.buckets[0].rate_limited) == (1, 0, 1)


@pytest.mark.parametrize(
    ("limit", "held_s", "paced"),
    [
        # a window that gives its limit refills continuously (50 in 30 s): the next request
        # waits for its own draw and the policy's headroom (5% of 50), not for the reset
        ("50", 30 * (1 + 0.05 * 50) / 50, 0),
        # one that does not say its limit can only be waited out until its reset
        (None, 30.0, 1),
    ],
    ids=["limit-given-refills-continuously", "no-limit-waits-for-the-reset"],
)
async def test_an_empty_rate_limit_window_holds_the_next_request_without_a_429(
    server_factory: list[ScriptedServer], limit: str | None, held_s: float, paced: int
) -> None:
    clock = FakeClock()
    governor = fake_governor(clock=clock)
    reset = datetime.fromtimestamp(clock.time() + 30, tz=timezone.utc).isoformat()
    window = {
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": reset,
    }
    if limit is not None:
        window["anthropic-ratelimit-requests-limit"] = limit
    replies = iter([Reply.text("first", headers=window), Reply.text("second")])
    server = serve(server_factory, lambda req: next(replies))
    events: list[RelayEvent] = []
    async with (
        start_relay(server.base_url, governor, on_event=events.append) as relay,
        client(relay.base_url) as c,
    ):
        texts = []
        for _ in range(2):
            reply = await c.messages.create(
                model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}]
            )
            texts.append(reply.content[0].text)  # type: ignore[union-attr]
            if len(texts) == 1:
                held_from = clock.monotonic()
    assert texts == ["first", "second"]
    assert clock.monotonic() - held_from == pytest.approx(held_s, abs=0.1)
    assert [r.status for r in server.recorded()] == [200, 200]
    journal = [e for e in events if isinstance(e, ConcurrencyChanged) and e.reason == "paced"]
    assert len(journal) == paced
    assert not [e for e in events if isinstance(e, RateLimited)]


async def test_past_the_bound_the_429_is_passed_on_with_its_body(
    server_factory: list[ScriptedServer],
) -> None:
    server = serve(server_factory, lambda req: Reply.error(429, retry_after=1))
    config = RelayConfig(max_retries=2)
    async with start_relay(server.base_url, fake_governor(), config=config) as relay, http() as h:
        r = await h.post(relay.base_url + "/v1/messages", content=body())
        summary = relay.summary()
        assert relay.governor.total_in_flight == 0
    assert r.status_code == 429
    assert r.headers["retry-after"] == "1"
    assert r.json()["error"]["type"] == "rate_limit_error"
    assert len(server.recorded()) == 3
    assert (summary.absorbed, summary.passed) == (2, 1)


async def test_with_no_hold_a_529_is_passed_on_at_once_and_feeds_the_governor(
    server_factory: list[ScriptedServer],
) -> None:
    server = serve(server_factory, lambda req: Reply.error(529))
    governor = fake_governor(ceiling=8)
    config = RelayConfig(overload_hold_s=0)
    async with start_relay(server.base_url, governor, config=config) as relay, http() as h:
        r = await h.post(relay.base_url + "/v1/messages", content=body())
        summary = relay.summary()
    assert r.status_code == 529
    assert r.json()["error"]["type"] == "overloaded_error"
    assert len(server.recorded()) == 1
    assert governor.state(f"anthropic/{MODEL}").cap == 6
    assert governor.journal[-1].reason == "overloaded"
    assert (summary.overloaded, summary.passed, summary.absorbed) == (1, 1, 0)


class Overloaded:
    """529 (with ``retry_after``) for the first ``n`` requests, then an answer."""

    def __init__(self, n: int, retry_after: float | None = None) -> None:
        self.n, self.retry_after, self.seen = n, retry_after, 0
        self._lock = threading.Lock()

    def __call__(self, req: ScriptedRequest) -> Reply:
        with self._lock:
            self.seen += 1
            if self.seen <= self.n:
                return Reply.error(529, retry_after=self.retry_after)
        return Reply.text("served after the burst")


async def test_a_529_burst_is_held_at_the_relay_and_the_request_served_after_it(
    server_factory: list[ScriptedServer],
) -> None:
    server = serve(server_factory, Overloaded(5))
    governor = fake_governor(ceiling=8)
    clock: FakeClock = governor.clock  # type: ignore[assignment]
    async with start_relay(server.base_url, governor) as relay, http() as h:
        r = await h.post(relay.base_url + "/v1/messages", content=body())
        summary = relay.summary()
    assert r.status_code == 200 and "served after the burst" in r.text
    assert len(server.recorded()) == 6
    assert (summary.overloaded, summary.absorbed, summary.passed) == (5, 5, 0)
    # each retry waited a jittered, doubling backoff, all of it as the bucket's pause
    waits = [w for w in clock.sleeps if w > 0]
    assert len(waits) >= 5 and 0 < clock.monotonic() <= sum(min(2.0**n, 8.0) for n in range(5)) + 1
    assert "overloaded" in [e.reason for e in governor.journal]
    assert governor.total_in_flight == 0


async def test_a_503_or_a_drop_held_as_an_overload_is_counted_as_one_not_as_a_rate_limit(
    server_factory: list[ScriptedServer],
) -> None:
    faults = [Reply.error(503, should_retry=True), Reply.drop()]

    def reply(req: ScriptedRequest) -> Reply:
        return faults.pop(0) if faults else Reply.text("served after the burst")

    server = serve(server_factory, reply)
    governor = fake_governor(ceiling=8)
    async with start_relay(server.base_url, governor) as relay, http() as h:
        r = await h.post(relay.base_url + "/v1/messages", content=body())
        summary = relay.summary()
    assert r.status_code == 200 and len(server.recorded()) == 3
    assert (summary.overloaded, summary.overloaded_held, summary.absorbed) == (2, 2, 2)
    assert [b.rate_limited for b in summary.buckets] == [0]


@pytest.mark.parametrize("retry_after", [0, 0.001])
async def test_an_overload_asking_no_pause_or_less_than_a_backoff_waits_a_backoff_between_tries(
    server_factory: list[ScriptedServer], retry_after: float
) -> None:
    """A 529 saying ``Retry-After: 0`` (or a date already past, by a skewed clock), or
    asking a pause shorter than the backoff's (a millisecond): each try still waits a
    backoff, so a burst is not met with tries as fast as the upstream answers them (a
    thousand a second) for the whole hold."""
    server = serve(server_factory, Overloaded(3, retry_after=retry_after))
    governor = fake_governor(ceiling=8)
    clock: FakeClock = governor.clock  # type: ignore[assignment]
    async with start_relay(server.base_url, governor) as relay, http() as h:
        r = await h.post(relay.base_url + "/v1/messages", content=body())
    assert r.status_code == 200 and len(server.recorded()) == 4
    # one backoff per overload, the n-th jittered to between half and all of 2**n s
    assert len(clock.sleeps) == 3, clock.sleeps
    assert all(2**n / 2 <= w <= 2**n for n, w in enumerate(clock.sleeps)), clock.sleeps


async def test_a_529_burst_past_the_hold_is_passed_on_once_the_hold_is_spent(
    server_factory: list[ScriptedServer],
) -> None:
    server = serve(server_factory, lambda req: Reply.error(529))
    governor = fake_governor(ceiling=8)
    clock: FakeClock = governor.clock  # type: ignore[assignment]
    config = RelayConfig(overload_hold_s=60)
    async with start_relay(server.base_url, governor, config=config) as relay, http() as h:
        r = await h.post(relay.base_url + "/v1/messages", content=body())
        summary = relay.summary()
    assert r.status_code == 529 and r.json()["error"]["type"] == "overloaded_error"
    assert 60 - config.backoff_max_s <= clock.monotonic() <= 60  # held for the whole hold
    assert summary.passed == 1 and summary.absorbed == len(server.recorded()) - 1 >= 3
    assert governor.total_in_flight == 0


async def test_a_hold_through_an_overload_ends_at_the_runs_deadline(
    server_factory: list[ScriptedServer],
) -> None:
    server = serve(server_factory, lambda req: Reply.error(529))
    governor = fake_governor(ceiling=8)
    clock: FakeClock = governor.clock  # type: ignore[assignment]
    async with start_relay(server.base_url, governor) as relay, http() as h:
        run = relay.open_run(deadline_s=20.0)  # the hold alone would allow 300 s
        r = await h.post(run.base_url + "/v1/messages", content=body())
    assert r.status_code == 529
    assert clock.monotonic() <= 20.0
    assert run.summary().passed == 1 and governor.total_in_flight == 0


async def test_a_held_streaming_request_is_kept_alive_with_pings_then_streams_the_answer(
    server_factory: list[ScriptedServer],
) -> None:
    server = serve(server_factory, Overloaded(2, retry_after=0.4))
    governor = Governor(GovernorPolicy(ceiling=8))  # real time: the pings are on it
    config = RelayConfig(ping_every_s=0.1)
    async with start_relay(server.base_url, governor, config=config) as relay, http() as h:
        r = await h.post(relay.base_url + "/v1/messages", content=body(stream=True))
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    text = r.text
    held, _, answer = text.partition("event: message_start")
    # the relay's pings while it held the request, then the answer's own events, whole
    assert held.count("event: ping") >= 3 and held.replace(PING.decode(), "") == "", held
    assert "served after the burst" in answer and "event: message_stop" in answer


async def test_a_held_request_whose_client_goes_away_as_it_is_answered_gives_its_slot_back(
    server_factory: list[ScriptedServer],
) -> None:
    """A client that reads nothing more (its ping blocked) and goes away just as the held
    request is answered: the answer's slot and upstream response are given back."""
    server = serve(server_factory, Overloaded(1, retry_after=0.5))
    governor = fake_governor(ceiling=8)
    pinged, gone = anyio.Event(), anyio.Event()
    requests = [{"type": "http.request", "body": body(stream=True), "more_body": False}]

    async def receive() -> dict[str, object]:
        if requests:
            return requests.pop()
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, object]) -> None:
        if message["type"] == "http.response.body":
            pinged.set()
            await anyio.sleep_forever()  # a client that reads nothing more

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/p/v1/messages",
        "raw_path": b"/p/v1/messages",
        "query_string": b"",
        "headers": [(b"host", b"relay"), (b"content-type", b"application/json")],
    }
    async with aiohttp.ClientSession() as session:
        app = RelayApp(
            upstream=server.base_url,
            session=session,
            governor=governor,
            config=RelayConfig(ping_every_s=0.01),
            prefix="p",
        )
        app.hosts = frozenset({b"relay"})
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(app, scope, receive, send)
                await pinged.wait()
                # the retry is answered: its slot is held, its response open
                assert await apoll(
                    lambda: governor.state(f"anthropic/{MODEL}").streaming == 1, within_s=5
                )
                gone.set()
    assert governor.total_in_flight == 0


async def test_a_held_streaming_request_whose_burst_outlasts_the_hold_ends_in_an_error_event(
    server_factory: list[ScriptedServer],
) -> None:
    server = serve(server_factory, Overloaded(100, retry_after=0.3))
    governor = Governor(GovernorPolicy(ceiling=8))
    config = RelayConfig(ping_every_s=0.1, overload_hold_s=1.0)
    async with start_relay(server.base_url, governor, config=config) as relay, http() as h:
        r = await h.post(relay.base_url + "/v1/messages", content=body(stream=True))
        summary = relay.summary()
    assert r.status_code == 200  # the head went out with the first ping
    events = [line for line in r.text.splitlines() if line.startswith("event: ")]
    assert events[0] == "event: ping" and events[-1] == "event: error"
    error = json.loads(r.text.strip().splitlines()[-1][len("data: ") :])
    assert error == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    }
    assert summary.passed == 1 and governor.total_in_flight == 0


async def test_the_lead_is_served_before_queued_subagents(
    server_factory: list[ScriptedServer],
) -> None:
    order: list[str] = []
    release = threading.Event()

    def script(req: ScriptedRequest) -> Reply:
        order.append(req.first_user_text)
        if req.first_user_text == "first":
            release.wait(10)  # holds the only slot until everyone queued
        return Reply.text("ok")

    server = serve(server_factory, script)
    sub_system = [{"type": "text", "text": "x-anthropic-billing-header: cc_is_subagent=true;"}]

    def sub(text: str) -> bytes:
        return json.dumps(
            {
                "model": MODEL,
                "max_tokens": 5,
                "system": sub_system,
                "stream": False,
                "messages": [{"role": "user", "content": text}],
            }
        ).encode()

    lead = json.dumps(
        {
            "model": MODEL,
            "max_tokens": 5,
            "tools": [{"name": "Agent"}],
            "messages": [{"role": "user", "content": "lead"}],
        }
    ).encode()
    # the real clock: on a FakeClock every queued waiter's slot timeout would pass at once
    governor = Governor(GovernorPolicy(ceiling=1))
    async with start_relay(server.base_url, governor) as relay, http() as h:
        url = relay.base_url + "/v1/messages"
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(h.post, url, content=sub("first")))
            await wait_until(lambda: order == ["first"], "the first request")
            for n in range(3):
                tg.start_soon(partial(h.post, url, content=sub(f"sub-{n}")))
            await wait_until(lambda: governor.state(f"anthropic/{MODEL}").waiting == 3, "queue")
            tg.start_soon(partial(h.post, url, content=lead))
            await wait_until(lambda: governor.state(f"anthropic/{MODEL}").waiting == 4, "lead")
            release.set()
    assert order[:2] == ["first", "lead"]
    assert classify(lead).role == "lead" and classify(sub("x")).role == "subagent"


# -- disconnects and deadlines ----------------------------------------------------------------


async def test_a_client_disconnect_cancels_upstream_and_frees_the_slot(
    server_factory: list[ScriptedServer],
) -> None:
    server = serve(server_factory, lambda req: Reply.text("y" * 2400, chunk_delay=0.05))
    governor = fake_governor()
    async with start_relay(server.base_url, governor) as relay:
        async with (
            http() as h,
            h.stream("POST", relay.base_url + "/v1/messages", content=body(stream=True)) as r,
        ):
            async for _ in r.aiter_raw():
                break  # read one chunk, then hang up
        await wait_until(lambda: governor.total_in_flight == 0, "the slot")
        await wait_until(lambda: server.recorded()[0].finished is not None, "upstream")
    record = server.recorded()[0]
    assert record.status == 499  # the upstream write failed: the relay hung up too
    assert record.finished is not None


async def test_no_slot_in_time_is_the_relays_own_429_counted_and_reported(
    server_factory: list[ScriptedServer],
) -> None:
    server = serve(server_factory, lambda req: Reply.text("slow", delay=1.0))
    governor = fake_governor(ceiling=1)
    events: list[RelayEvent] = []
    config = RelayConfig(slot_timeout_s=0)
    async with (
        start_relay(server.base_url, governor, config=config, on_event=events.append) as relay,
        http() as h,
        anyio.create_task_group() as tg,
    ):
        run = relay.open_run()
        first: list[httpx2.Response] = []

        async def hold_the_slot() -> None:
            first.append(await h.post(run.base_url + "/v1/messages", content=body()))

        tg.start_soon(hold_the_slot)
        await wait_until(lambda: governor.total_in_flight == 1, "the first request's slot")
        await wait_until(lambda: len(server.recorded()) == 1, "the first request upstream")
        second = await h.post(run.base_url + "/v1/messages", content=body())
        assert second.status_code == 429
        assert second.headers["retry-after"] == "5"
        assert second.json()["error"]["type"] == "rate_limit_error"
        assert len(server.recorded()) == 1  # the upstream never saw the second request
        await wait_until(lambda: bool(first), "the first reply")
        summary, total = run.summary(), relay.summary()
    assert first[0].status_code == 200
    limited = [e for e in events if isinstance(e, RateLimited)]
    assert [(e.status, e.outcome, e.source, e.retry_after_s) for e in limited] == [
        (429, "passed", "relay", 5.0)
    ]
    for s in (summary, total):
        assert (s.requests, s.absorbed, s.passed) == (2, 0, 1)
        assert s.buckets[0].rate_limited == 1


async def test_a_hung_upstream_is_bounded_by_the_read_deadline() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        upstream = f"http://127.0.0.1:{sock.getsockname()[1]}"
        config = RelayConfig(read_timeout_s=0.3, connect_timeout_s=1)
        governor = fake_governor()
        async with start_relay(upstream, governor, config=config) as relay, http() as h:
            r = await h.post(relay.base_url + "/v1/messages", content=body())
            assert governor.total_in_flight == 0
    assert r.status_code == 504
    assert r.json()["error"]["type"] == "api_error"


async def test_an_unreachable_upstream_is_a_502() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connection refused
        async with start_relay(f"http://127.0.0.1:{port}", fake_governor()) as relay, http() as h:
            r = await h.post(relay.base_url + "/v1/messages", content=body())
    assert r.status_code == 502


@pytest.mark.parametrize("check", [None, "ANTHROPIC_BASE_URL"])
async def test_the_upstream_connection_is_opened_ahead_and_the_first_request_takes_it(
    check: str | None,
) -> None:
    # the relay starts while the CLI does (hundreds of ms before its first request): the
    # upstream's handshakes are done by then, not in front of that request; an upstream
    # the user set is checked on that same connection
    accepted = anyio.Event()
    carried: list[list[bytes]] = []  # per connection, the request lines it carried

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        lines: list[bytes] = []
        carried.append(lines)
        accepted.set()
        reply = json.dumps({"type": "message", "content": []}).encode()
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines.append(head.split(b"\r\n", 1)[0])
                length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
                await reader.readexactly(int(length.group(1)) if length else 0)
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(reply), reply)
                )
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(upstream, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    relayed = start_relay(f"http://127.0.0.1:{port}", fake_governor(), check=check)
    async with server, relayed as relay:
        with anyio.fail_after(10):
            await accepted.wait()  # before any request was sent
        async with http() as h:
            r = await h.post(relay.base_url + "/v1/messages", content=body())
    assert r.status_code == 200
    assert carried == [[b"POST /v1/messages HTTP/1.1"]]


# -- security ---------------------------------------------------------------------------------


def raw_request(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(data)
        return conn.recv(65536)


async def test_refuses_wrong_prefix_other_host_absolute_uri_and_connect(
    server_factory: list[ScriptedServer],
) -> None:
    server = serve(server_factory, lambda req: Reply.text("never"))
    async with start_relay(server.base_url, fake_governor()) as relay, http() as h:
        root = f"http://127.0.0.1:{relay.port}"
        prefix = relay.base_url.rsplit("/", 1)[1]
        wrong = await h.post(root + "/not-the-prefix/v1/messages", content=body())
        bare = await h.post(root + "/v1/messages", content=body())
        partial = await h.post(f"{root}/{prefix[:-1]}/v1/messages", content=body())
        other_host = await h.post(
            relay.base_url + "/v1/messages", content=body(), headers={"host": "evil.example:80"}
        )
        absolute = await anyio.to_thread.run_sync(
            raw_request,
            relay.port,
            f"POST http://127.0.0.1:{relay.port}/{prefix}/v1/messages HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{relay.port}\r\nContent-Length: 2\r\n\r\n{{}}".encode(),
        )
        connect = await anyio.to_thread.run_sync(
            raw_request,
            relay.port,
            b"CONNECT api.anthropic.com:443 HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % relay.port,
        )
    assert (wrong.status_code, bare.status_code, partial.status_code) == (404, 404, 404)
    assert other_host.status_code == 421
    assert absolute.split(b" ", 2)[1] == b"400"  # refused by the connection, before the app
    assert connect.split(b" ", 2)[1] == b"405"
    assert server.recorded() == []  # nothing refused reached the upstream


async def test_binds_loopback_only(server_factory: list[ScriptedServer]) -> None:
    server = serve(server_factory, lambda req: Reply.text("x"))
    async with start_relay(server.base_url, fake_governor()) as relay:
        mine = [
            c.laddr
            for c in psutil.Process().net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == relay.port
        ]
        assert relay.base_url.startswith(f"http://127.0.0.1:{relay.port}/")
    assert [addr.ip for addr in mine] == ["127.0.0.1"]


async def test_no_key_in_any_log_event_or_summary(
    server_factory: list[ScriptedServer], caplog: pytest.LogCaptureFixture
) -> None:
    replies = iter(
        [Reply.error(429, retry_after=1), Reply.text("ok"), Reply.error(529), Reply.error(401)]
    )
    server = serve(server_factory, lambda req: next(replies))
    events: list[RelayEvent] = []
    config = RelayConfig(max_retries=1)
    with caplog.at_level(logging.DEBUG):
        async with start_relay(
            server.base_url, fake_governor(), config=config, on_event=events.append
        ) as relay:
            for path in ("/v1/messages",) * 3 + ("/nope",):
                await anyio.to_thread.run_sync(quiet_post, relay.base_url + path)
            summary = relay.summary()
            prefix = relay.base_url.rsplit("/", 1)[1]
    assert events and summary.requests == 4
    text = caplog.text + "".join(e.to_json() for e in events) + summary.model_dump_json()
    assert KEY not in text
    assert prefix not in text  # the path prefix is a secret too


def quiet_post(url: str) -> int:
    """POST with the key from a client that logs nothing itself (http.client)."""
    parts = httpx2.URL(url)
    conn = http_client.HTTPConnection(parts.host, parts.port, timeout=10)
    try:
        conn.request("POST", parts.raw_path.decode(), body(), {"x-api-key": KEY})
        return conn.getresponse().status
    finally:
        conn.close()


# -- applicability and the shared instance -----------------------------------------------------


@pytest.mark.parametrize(
    ("env", "ok", "fragment"),
    [
        ({}, True, None),
        ({"ANTHROPIC_BASE_URL": "http://127.0.0.1:8080/proxy"}, True, None),
        ({"CLAUDE_CODE_USE_BEDROCK": "1"}, False, "Bedrock (CLAUDE_CODE_USE_BEDROCK)"),
        ({"CLAUDE_CODE_USE_VERTEX": "true"}, False, "Vertex (CLAUDE_CODE_USE_VERTEX)"),
        ({"CLAUDE_CODE_USE_VERTEX": "0"}, True, None),
        ({"ANTHROPIC_BASE_URL": "unix:///tmp/api.sock"}, False, "not an http(s) URL"),
        ({"ANTHROPIC_BASE_URL": "ftp://example.com"}, False, "not an http(s) URL"),
        ({"ANTHROPIC_BASE_URL": "http://[::1"}, False, "not an http(s) URL"),
        ({"ANTHROPIC_BASE_URL": "http://127.0.0.1:99999"}, False, "not an http(s) URL"),
        ({"ANTHROPIC_BASE_URL": "http://127.0.0.1:port"}, False, "not an http(s) URL"),
        # an undecodable byte of the environment, as Python keeps it: no host name
        ({"ANTHROPIC_BASE_URL": "http://api\udcff.example"}, False, "not an http(s) URL"),
    ],
)
def test_relay_applicable(env: dict[str, str], ok: bool, fragment: str | None) -> None:
    result = relay_applicable(env)
    assert result.ok is ok
    assert result.upstream == (env.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com")
    if fragment is None:
        assert result.note is None
    else:
        assert result.note is not None and fragment in result.note
        assert "\n" not in result.note


async def test_concurrent_runs_share_one_relay_and_one_governor(
    server_factory: list[ScriptedServer],
) -> None:
    server = serve(server_factory, lambda req: Reply.text("ok"))
    pool = RelayPool()
    async with pool.run(server.base_url) as one, pool.run(server.base_url) as two:
        assert one.relay is two.relay
        assert one.relay.governor is pool.governor()
        assert one.base_url != two.base_url
        async with http() as h:
            for _ in range(2):
                await h.post(one.base_url + "/v1/messages", content=body())
            await h.post(two.base_url + "/v1/messages", content=body())
        assert (one.summary().requests, two.summary().requests) == (2, 1)
        assert one.relay.summary().requests == 3
        port = one.relay.port
    with pytest.raises(OSError):  # stopped when the last run left
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


async def test_a_run_on_a_clock_of_its_own_has_its_relay_and_pause_on_that_clock(
    server_factory: list[ScriptedServer],
) -> None:
    """A run on a FakeClock shares no governor with the system clock's runs: its relay's
    governor reads the run's clock, so its paused request is answered as soon as that
    clock passes the run's deadline, with no real waiting."""
    server = serve(server_factory, lambda req: Reply.text("ok"))
    pool, clock, pause = RelayPool(), FakeClock(), Pause()
    async with (
        pool.run(server.base_url) as real,
        pool.run(server.base_url, deadline_s=20, pause=pause, clock=clock) as run,
    ):
        assert run.relay is not real.relay and real.relay.governor is pool.governor()
        assert run.relay.governor is pool.governor(clock=clock)
        assert run.relay.governor.clock is clock
        pause.pause()
        answers: list[httpx2.Response] = []
        async with http() as h, anyio.create_task_group() as tg:

            async def post() -> None:
                answers.append(await h.post(run.base_url + "/v1/messages", content=body()))

            tg.start_soon(post)
            assert await apoll(lambda: pause.held_requests == 1, within_s=10)
            clock.advance(19.5)
            await settle()
            assert answers == [] and pause.held_requests == 1
            clock.advance(0.5)  # the run's deadline
        assert [(a.status_code, a.json()["error"]["message"]) for a in answers] == [
            (503, "teamlead relay: the run was paused until its deadline")
        ]
    assert server.recorded() == []


async def test_past_the_runs_deadline_on_its_clock_its_ceiling_queues_no_request(
    server_factory: list[ScriptedServer],
) -> None:
    """A run's own ceiling (one request at a time) bounds its queue by the run's deadline on
    the run's clock: once a FakeClock passed it, a request over the ceiling is the relay's
    own 429 at once, while the request holding the place still runs."""
    first_in, go = threading.Event(), threading.Event()

    def script(req: ScriptedRequest) -> Reply:
        first_in.set()
        go.wait(10)
        return Reply.text("ok")

    server = serve(server_factory, script)
    clock, answers = FakeClock(), []
    limits = LimitsPolicy(total=1, shared="process")
    async with (
        RelayPool().run(server.base_url, deadline_s=20, limits=limits, clock=clock) as run,
        http() as h,
        anyio.create_task_group() as tg,
    ):

        async def post() -> None:
            answers.append(await h.post(run.base_url + "/v1/messages", content=body()))

        tg.start_soon(post)
        assert await apoll(first_in.is_set, within_s=10)
        clock.advance(20)
        tg.start_soon(post)
        assert await apoll(lambda: len(answers) == 1, within_s=10)
        go.set()
    assert [a.status_code for a in answers] == [429, 200]
    assert len(server.recorded()) == 1


async def test_a_relay_that_cannot_start_is_a_relay_error() -> None:
    with socket.socket() as taken:  # the port the relay is asked for is someone else's
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RelayError, match=f"cannot listen on 127.0.0.1:{port}: "):
            async with start_relay("http://127.0.0.1:9", config=RelayConfig(port=port)):
                pass


async def test_a_relay_listens_on_the_port_it_is_given() -> None:
    with socket.socket() as probe:  # a port free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with start_relay("http://127.0.0.1:9", config=RelayConfig(port=port)) as relay:
        assert relay.port == port and relay.base_url.startswith(f"http://127.0.0.1:{port}/")


def open_stream(relay_port: int, prefix_path: str) -> socket.socket:
    """A raw client with a streamed reply under way: its first body bytes have arrived."""
    conn = socket.create_connection(("127.0.0.1", relay_port), timeout=10)
    data = body(stream=True)
    conn.sendall(
        b"POST %s/v1/messages HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Length: %d\r\n\r\n%s"
        % (prefix_path.encode(), relay_port, len(data), data)
    )
    seen = b""
    while b"\r\n\r\n" not in seen or seen.endswith(b"\r\n\r\n"):  # the head, then some body
        chunk = conn.recv(65536)
        assert chunk, seen
        seen += chunk
    return conn


def time_waits(port: int) -> int:
    """Sockets of ``port`` in TIME-WAIT (no process owns them: the whole system is read)."""
    return sum(
        1
        for c in psutil.net_connections(kind="tcp4")
        if c.laddr and c.laddr.port == port and c.status == psutil.CONN_TIME_WAIT
    )


async def test_a_relay_stopped_with_streams_in_flight_restarts_on_its_port_at_once(
    server_factory: list[ScriptedServer],
) -> None:
    server = serve(server_factory, lambda req: Reply.text("z " * 600, chunk_delay=0.5))
    with socket.socket() as probe:  # a port free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = RelayConfig(port=port)
    async with start_relay(server.base_url, fake_governor(), config=config) as relay:
        path = "/" + relay.base_url.split("/", 3)[3]
        streams = [await anyio.to_thread.run_sync(open_stream, port, path) for _ in range(4)]
    # the relay hung up first; once each client has read its end and closed too, the
    # relay's side of every connection waits out TIME-WAIT on the port
    for conn in streams:
        with conn:
            while await anyio.to_thread.run_sync(conn.recv, 65536):
                pass
    await wait_until(lambda: time_waits(port) >= len(streams), "the relay's TIME-WAIT sockets")
    async with start_relay(server.base_url, fake_governor(), config=config) as again:
        assert again.port == port
        with pytest.raises(RelayError, match="Address already in use"):  # no SO_REUSEPORT
            async with start_relay(server.base_url, fake_governor(), config=config):
                pass


async def test_an_upstream_that_fails_tls_is_named_with_the_cause_before_any_request() -> None:
    """``https`` to a server that speaks plain HTTP: the start of a run says so in one
    line (the URL, the TLS failure, the fix), before the CLI sends anything."""
    import asyncio

    async def plain_http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
        writer.close()

    server = await asyncio.start_server(plain_http, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(UpstreamUnreachable) as caught:
            upstream = f"https://key:secret@127.0.0.1:{port}/v1"
            async with start_relay(upstream, fake_governor(), check="ANTHROPIC_BASE_URL"):
                pass
    finally:
        server.close()
        await server.wait_closed()
    assert str(caught.value) == (
        f"cannot connect to ANTHROPIC_BASE_URL https://127.0.0.1:{port}: the TLS handshake "
        "failed; set ANTHROPIC_BASE_URL to your API's address, or unset it for the Anthropic API"
    )


@pytest.mark.parametrize("upstream", ["http://[::1", "http://127.0.0.1:99999"])
async def test_an_upstream_that_is_no_url_is_named_so_in_one_line_before_any_request(
    upstream: str,
) -> None:
    """A malformed upstream given to the start (an unclosed IPv6 bracket, a port out of
    range) is the start check's one line, not a ValueError's traceback."""
    with pytest.raises(UpstreamUnreachable) as caught:
        async with start_relay(upstream, fake_governor(), check="ANTHROPIC_BASE_URL"):
            pass
    assert str(caught.value) == (
        "cannot connect to ANTHROPIC_BASE_URL the upstream: it is not a valid URL; set "
        "ANTHROPIC_BASE_URL to your API's address, or unset it for the Anthropic API"
    )


async def test_an_upstream_that_answers_passes_the_start_check_whatever_it_answers() -> None:
    """An upstream that is there passes, whatever it would answer (here a 529 to every
    request): overloads and rate limits are the relay's to hold, never a reason to stop."""
    with ScriptedServer(lambda request: Reply.error(529)) as upstream:
        async with start_relay(upstream.base_url, fake_governor(), check="ANTHROPIC_BASE_URL"):
            assert upstream.recorded() == []  # a connection only: no request reached it
