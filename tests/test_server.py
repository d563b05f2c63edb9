"""Conformance of the scripted model server with the official ``anthropic`` client."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import anthropic
import pytest

from teamlead.errors import SetupError, UsageError
from teamlead.testing import AgentCall, Reply, ScriptedRequest, ScriptedServer, ToolUse
from teamlead.testing.scripts import FanOut, scenario


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _CLIENTS:
        _CLIENTS.pop().close()


_CLIENTS: list[anthropic.Anthropic] = []


def _client(server: ScriptedServer) -> anthropic.Anthropic:
    client = anthropic.Anthropic(base_url=server.base_url, api_key="test", max_retries=0)
    _CLIENTS.append(client)
    return client


def _ask(client: anthropic.Anthropic, text: str = "hello") -> anthropic.types.Message:
    with client.messages.stream(
        model="claude-opus-5-5", max_tokens=100, messages=[{"role": "user", "content": text}]
    ) as stream:
        return stream.get_final_message()


def test_streams_text_with_usage_and_stop_reason() -> None:
    long = "The quick brown fox jumps over the lazy dog. " * 5
    with ScriptedServer(lambda req: Reply.text(long)) as server:
        message = _ask(_client(server))
    assert message.content[0].type == "text"
    assert message.content[0].text == long
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens == 20
    assert message.usage.output_tokens == len(long) // 4


def test_streams_several_tool_uses_in_one_message_with_parsed_input() -> None:
    calls = [AgentCall("probe A", "do A"), AgentCall("probe B", "do B", model="haiku")]
    with ScriptedServer(lambda req: Reply.agents(*calls, text="Delegating.")) as server:
        message = _ask(_client(server))
    assert message.stop_reason == "tool_use"
    assert [b.type for b in message.content] == ["text", "tool_use", "tool_use"]
    uses = [b for b in message.content if b.type == "tool_use"]
    assert [u.name for u in uses] == ["Agent", "Agent"]
    assert uses[1].input == {
        "description": "probe B",
        "prompt": "do B",
        "subagent_type": "general-purpose",
        "model": "haiku",
    }


def test_non_streaming_json_and_count_tokens() -> None:
    use = ToolUse("Read", {"file_path": "x.py"})
    with ScriptedServer(lambda req: Reply.tools(use)) as server:
        client = _client(server)
        message = client.messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
        count = client.messages.count_tokens(
            model="m", messages=[{"role": "user", "content": "hello there"}]
        )
    assert message.content[0].type == "tool_use"
    assert message.content[0].input == {"file_path": "x.py"}
    assert count.input_tokens > 0


def test_rate_limit_error_carries_retry_after() -> None:
    server = ScriptedServer(lambda req: Reply.error(429, retry_after=7))
    with server, pytest.raises(anthropic.RateLimitError) as info:
        _ask(_client(server))
    assert info.value.status_code == 429
    assert info.value.response.headers["retry-after"] == "7"
    assert info.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]


def test_500_is_internal_server_error_and_529_is_overloaded() -> None:
    replies = iter([Reply.error(500), Reply.error(529)])
    with ScriptedServer(lambda req: next(replies)) as server:
        client = _client(server)
        with pytest.raises(anthropic.InternalServerError) as first:
            _ask(client)
        with pytest.raises(anthropic.APIStatusError) as second:
            _ask(client)
    assert first.value.status_code == 500
    assert second.value.status_code == 529
    assert second.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    assert type(second.value).__name__ in ("OverloadedError", "InternalServerError")


def test_dropped_connection_mid_stream_is_a_connection_error() -> None:
    server = ScriptedServer(lambda req: Reply.drop(after_events=3, partial_text="x" * 200))
    with server, pytest.raises(Exception) as info:  # noqa: B017 - the client's transport class varies
        _ask(_client(server))
    assert type(info.value).__name__ in ("APIConnectionError", "RemoteProtocolError")
    assert "incomplete" in str(info.value) or isinstance(info.value, anthropic.APIConnectionError)


def test_a_raising_script_answers_500_with_the_exception_text() -> None:
    def broken(req: ScriptedRequest) -> Reply:
        raise ValueError("no reply scripted for this turn")

    with ScriptedServer(broken) as server:
        with pytest.raises(anthropic.InternalServerError) as info:
            _ask(_client(server))
        assert server.recorded()[0].error == "ValueError: no reply scripted for this turn"
    assert "no reply scripted for this turn" in str(info.value)


def test_records_requests_and_parses_session_and_system() -> None:
    with ScriptedServer(lambda req: Reply.text("ok")) as server:
        _client(server).messages.create(
            model="m",
            max_tokens=10,
            system=[{"type": "text", "text": "You are a lead."}],
            metadata={"user_id": '{"device_id":"d","session_id":"abc-123"}'},
            messages=[{"role": "user", "content": "first"}],
            tools=[{"name": "Agent", "input_schema": {"type": "object"}}],
        )
        rec = server.recorded()[0].request
    assert rec.system == "You are a lead."
    assert rec.session_id == "abc-123"
    assert rec.tools == ("Agent",)
    assert rec.role == "lead"
    assert rec.first_user_text == "first"


def test_serves_many_concurrent_streams() -> None:
    with ScriptedServer(lambda req: Reply.text("slow", delay=1.5)) as server:
        client = _client(server)
        threads = [threading.Thread(target=_ask, args=(client,)) for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert server.stats.requests == 20
        assert server.max_concurrent() == 20


def test_emulated_concurrency_limit_rejects_with_retry_after() -> None:
    errors: list[int] = []

    def call(client: anthropic.Anthropic) -> None:
        try:
            _ask(client)
        except anthropic.RateLimitError as exc:
            errors.append(int(float(exc.response.headers["retry-after"])))

    with ScriptedServer(
        lambda req: Reply.text("x", delay=0.5), concurrency_limit=3, retry_after=2
    ) as server:
        client = _client(server)
        threads = [threading.Thread(target=call, args=(client,)) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert server.stats.rejected == len(errors) == 3
    assert errors == [2, 2, 2]


def test_port_in_use_is_a_clear_setup_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(SetupError, match=f"port {port} is already in use"):
            ScriptedServer(lambda req: Reply.text("x"), port=port).start()


def test_refuses_non_loopback_host() -> None:
    with pytest.raises(SetupError, match="loopback"):
        ScriptedServer(lambda req: Reply.text("x"), host="0.0.0.0")


def test_unknown_scenario_is_a_usage_error_listing_known_ones() -> None:
    with pytest.raises(UsageError, match="known scenarios: .*fan-out"):
        scenario("nope")


def test_fan_out_helper_recognises_its_subagents() -> None:
    script = FanOut.of(2, delays=0.0)
    with ScriptedServer(script) as server:
        client = _client(server)
        first = client.messages.create(
            model="m",
            max_tokens=10,
            tools=[{"name": "Agent", "input_schema": {"type": "object"}}],
            messages=[{"role": "user", "content": "go"}],
        )
        prompt = first.content[0].input["prompt"]  # type: ignore[union-attr]
        answer = _ask(client, prompt)
        sub = server.recorded()[-1].request
    assert sub.role == "subagent"
    assert sub.agent is not None and sub.agent.description == "agent-1"
    assert "FINDING[agent-1]" in answer.content[0].text  # type: ignore[union-attr]


def test_chunk_delay_streams_text_while_waiting() -> None:
    import time

    arrivals: list[float] = []
    server = ScriptedServer(lambda req: Reply.text("x" * 120, chunk_delay=0.1))
    with (
        server,
        _client(server).messages.stream(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        ) as stream,
    ):
        for _ in stream.text_stream:
            arrivals.append(time.monotonic())
    assert len(arrivals) == 5  # 120 characters in 24-character deltas
    assert arrivals[-1] - arrivals[0] >= 0.35  # spaced by the scripted delay, not sent at once


def test_a_client_that_resets_its_connection_is_not_reported_as_an_error(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with ScriptedServer(lambda req: Reply.text("hi")) as server:
        host, port = server.base_url.removeprefix("http://").split(":")
        sock = socket.create_connection((host, int(port)))
        sock.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\n")  # then hang up hard
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.close()
        assert _ask(_client(server)).content[0].text == "hi"  # type: ignore[union-attr]
    assert "Traceback" not in capfd.readouterr().err


def test_a_request_ends_before_its_client_can_have_read_its_whole_answer() -> None:
    # the server's record of when a request ended must not come after the client has its
    # answer: the client's next request would otherwise count as overlapping it, and a
    # ceiling of one request held exactly would read as two in flight
    read_at: list[float] = []
    with ScriptedServer(lambda req: Reply.text("Done.")) as server:
        client = _client(server)
        for _ in range(20):
            _ask(client)
            read_at.append(time.monotonic())
        records = server.recorded()
    assert [r.end <= t for r, t in zip(records, read_at, strict=True)] == [True] * 20
    assert server.max_concurrent() == 1
