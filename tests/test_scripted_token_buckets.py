"""The scripted server's token buckets: the Messages API's rate limits, emulated.

Each request draws its input (the body's characters / 4, rounded up) from an
``input-tokens`` bucket and 1 from a ``requests`` bucket; what a bucket cannot cover is a
429 with ``retry-after`` rounded up; every answer says how full each bucket is. The
server's buckets refill on a :class:`~teamlead.testing.fake_clock.FakeClock` that
never moves unless a test moves it, so the time between two requests changes nothing a
test reads, however slow the machine.
"""

from __future__ import annotations

import http.client
import json
import math
import threading
from datetime import datetime
from typing import Any

import pytest

from teamlead.errors import SetupError
from teamlead.testing import Reply, ScriptedServer, TokenBucket
from teamlead.testing.fake_clock import FakeClock
from teamlead.testing.rate_buckets import input_tokens_of


def _body(chars: int, stream: bool = True) -> bytes:
    """A Messages API body of exactly ``chars`` characters."""
    base = {"model": "m", "max_tokens": 5, "stream": stream, "messages": []}
    empty = json.dumps({**base, "messages": [{"role": "user", "content": ""}]})
    text = "x" * (chars - len(empty))
    return json.dumps({**base, "messages": [{"role": "user", "content": text}]}).encode()


def _post(server: ScriptedServer, body: bytes) -> tuple[int, dict[str, str], bytes]:
    host, port = server.base_url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("POST", "/v1/messages", body, {"content-type": "application/json"})
        response = conn.getresponse()
        data = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data
    finally:
        conn.close()


def _window(headers: dict[str, str], kind: str) -> tuple[float, int, datetime]:
    prefix = f"anthropic-ratelimit-{kind}"
    reset = datetime.fromisoformat(headers[f"{prefix}-reset"].replace("Z", "+00:00"))
    return float(headers[f"{prefix}-limit"]), int(headers[f"{prefix}-remaining"]), reset


def _message_start_usage(data: bytes) -> dict[str, Any]:
    for block in data.decode().split("\n\n"):
        if block.startswith("event: message_start"):
            usage: dict[str, Any] = json.loads(block.split("data: ", 1)[1])["message"]["usage"]
            return usage
    raise AssertionError("no message_start event")


def test_an_input_token_bucket_draws_each_request_s_size_and_reports_it_as_usage() -> None:
    bucket = TokenBucket(capacity=1000, refill_per_s=1, kind="input-tokens")
    clock = FakeClock()
    with ScriptedServer(lambda req: Reply.text("ok"), token_bucket=bucket, clock=clock) as server:
        sent = clock.time()
        status, headers, data = _post(server, _body(2401))
        (record,) = server.recorded()
    assert status == 200
    assert input_tokens_of(2401) == 601
    assert record.drawn == {"input-tokens": 601.0} and server.drawn() == 601.0
    assert _message_start_usage(data)["input_tokens"] == 601
    limit, remaining, reset = _window(headers, "input-tokens")
    assert (limit, remaining) == (1000.0, 399)
    # full again once the 601 drawn have refilled, at 1 per second
    assert reset.timestamp() - sent == pytest.approx(601, abs=2)
    assert headers["anthropic-ratelimit-input-tokens-reset"].endswith("Z")


def test_a_request_the_bucket_cannot_cover_gets_429_with_the_wait_rounded_up() -> None:
    bucket = TokenBucket(capacity=1000, refill_per_s=100, kind="input-tokens")
    clock = FakeClock()
    with ScriptedServer(lambda req: Reply.text("ok"), token_bucket=bucket, clock=clock) as server:
        first = _post(server, _body(2400))  # 600 drawn, 400 left
        second = _post(server, _body(2400))  # needs 200 more: 2 s at 100/s
        statuses = [r.status for r in server.recorded()]
        drawn = server.drawn()
        clock.advance(2)  # the wait it was told
        third = _post(server, _body(2400))
    assert first[0] == 200 and second[0] == 429 and third[0] == 200
    assert second[1]["retry-after"] == "2"
    assert json.loads(second[2])["error"]["type"] == "rate_limit_error"
    assert statuses == [200, 429] and drawn == 600.0  # a refusal draws nothing
    assert _window(second[1], "input-tokens")[:2] == (1000.0, 400)  # the 429 says so too


def test_a_requests_bucket_counts_requests_and_both_kinds_describe_every_answer() -> None:
    buckets = [
        TokenBucket(capacity=2, refill_per_s=0.25, kind="requests"),
        TokenBucket(capacity=10_000, refill_per_s=100, kind="input-tokens"),
    ]
    clock = FakeClock()
    with ScriptedServer(lambda req: Reply.text("ok"), token_bucket=buckets, clock=clock) as server:
        answers = [_post(server, _body(400, stream=False)) for _ in range(3)]
    assert [a[0] for a in answers] == [200, 200, 429]
    assert answers[2][1]["retry-after"] == "4"  # one request back at 0.25 per second
    for _, headers, _ in answers:
        assert _window(headers, "requests")[0] == 2.0
        assert _window(headers, "input-tokens")[0] == 10_000.0
    assert [_window(a[1], "requests")[1] for a in answers] == [1, 0, 0]
    assert json.loads(answers[0][2])["usage"]["input_tokens"] == 100


def test_a_gateway_that_strips_the_headers_still_limits() -> None:
    bucket = TokenBucket(capacity=500, refill_per_s=10, headers=False)
    clock = FakeClock()
    with ScriptedServer(lambda req: Reply.text("ok"), token_bucket=bucket, clock=clock) as server:
        answers = [_post(server, _body(1600)) for _ in range(2)]
    assert [a[0] for a in answers] == [200, 429]
    assert answers[1][1]["retry-after"] == "30"
    assert not [k for a in answers for k in a[1] if k.startswith("anthropic-ratelimit-")]


def test_a_request_larger_than_the_bucket_goes_once_it_is_full_and_leaves_it_in_debt() -> None:
    bucket = TokenBucket(capacity=100, refill_per_s=1000)
    clock = FakeClock()
    with ScriptedServer(lambda req: Reply.text("ok"), token_bucket=bucket, clock=clock) as server:
        big = _post(server, _body(4000))  # 1000 tokens: ten times the bucket
        small = _post(server, _body(40))  # the bucket is 900 in debt: about 0.9 s
    assert big[0] == 200 and _window(big[1], "input-tokens")[1] == 0
    assert small[0] == 429 and small[1]["retry-after"] == "1"


def test_concurrent_requests_never_draw_more_than_the_bucket_holds() -> None:
    bucket = TokenBucket(capacity=5 * 250, refill_per_s=0.001)
    clock = FakeClock()
    with ScriptedServer(
        lambda req: Reply.text("ok", delay=0.2), token_bucket=bucket, clock=clock
    ) as server:
        statuses: list[int] = []
        threads = [
            threading.Thread(target=lambda: statuses.append(_post(server, _body(1000))[0]))
            for _ in range(20)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        drawn = server.drawn()
    assert sorted(statuses) == [200] * 5 + [429] * 15
    assert drawn == 5 * 250


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"capacity": 0, "refill_per_s": 1}, "positive"),
        ({"capacity": 10, "refill_per_s": -1}, "positive"),
        ({"capacity": 10, "refill_per_s": math.nan}, "positive"),
        ({"capacity": 10, "refill_per_s": 1, "kind": "output-tokens"}, "not 'output-tokens'"),
    ],
)
def test_a_bucket_that_cannot_exist_is_a_setup_error(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(SetupError, match=message):
        TokenBucket(**kwargs)


def test_the_bucket_s_own_minimum_is_what_exceeds_its_capacity_over_its_refill() -> None:
    bucket = TokenBucket(capacity=20_000, refill_per_s=12_000)
    assert bucket.minimum_s(140_000) == 10.0
    assert bucket.minimum_s(5_000) == 0.0
