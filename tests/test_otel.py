"""OpenTelemetry without the real CLI: what is exported, to a real OTLP/HTTP receiver.

The spans are exported by the SDK's own OTLP/HTTP exporter and decoded from the protobuf
it sent (``teamlead.testing.otlp``). Behaviour that depends on the process's environment
(off without the variables, an app's own provider, a missing extra) runs in a fresh
interpreter, where nothing else has imported or configured OpenTelemetry.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from claude_agent_sdk import ClaudeAgentOptions
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import get_current_span

from teamlead._gate.admission import Admission
from teamlead._gate.slots import SpawnCap
from teamlead._governor import UsageScan
from teamlead._metering.book import AgentBook
from teamlead._otel.chat import ChatObserver
from teamlead._otel.run import RunTrace
from teamlead._otel.setup import Instruments, Telemetry, export_wanted
from teamlead._relay import classify, start_relay
from teamlead.events import (
    FallbackUsed,
    Finished,
    InboxCollected,
    ResumeFailed,
    Resuming,
    SpawnDecided,
    TaskDisposition,
    WaitingForTeam,
)
from teamlead.governor import Governor, GovernorPolicy
from teamlead.policy import Policy
from teamlead.testing import FakeClock, Reply, ScriptedServer
from teamlead.testing.otlp import OtlpReceiver, ReceivedSpan
from teamlead.testing.wire import sse_events

from .parsing import HandFed

ROOT = Path(__file__).resolve().parents[1]
MODEL = "claude-opus-5-5"
KEY = "sk-ant-otel-secret-key-0123456789"


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


class Exported:
    """A tracer and meter of their own (never the global ones), exporting to ``receiver``
    with the SDK's OTLP/HTTP exporters: spans as each ends, metrics on :meth:`flush`."""

    def __init__(self, receiver: OtlpReceiver) -> None:
        self.traces = TracerProvider()
        self.traces.add_span_processor(
            SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver.endpoint + "/v1/traces"))
        )
        reader = PeriodicExportingMetricReader(
            OTLPMetricExporter(endpoint=receiver.endpoint + "/v1/metrics"),
            export_interval_millis=3_600_000,
        )
        self.metrics = MeterProvider(metric_readers=[reader])
        self.telemetry = Telemetry(
            tracer=self.traces.get_tracer("teamlead"),
            instruments=Instruments(self.metrics.get_meter("teamlead")),
        )

    def flush(self) -> None:
        self.traces.force_flush()
        self.metrics.force_flush()

    def close(self) -> None:
        self.traces.shutdown()
        self.metrics.shutdown()


@pytest.fixture
def exported(receiver: OtlpReceiver) -> Iterator[Exported]:
    made = Exported(receiver)
    yield made
    made.close()


def by_name(spans: list[ReceivedSpan], name: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.name == name]


def run_python(
    code: str, env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TRACE"))}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**clean, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


#: A run on a scripted ``query_fn`` (no CLI): init, an answer, a result.
SCRIPTED_RUN = """
    import anyio, json, sys
    import teamlead

    async def query_fn(*, prompt, options):
        seen.append(dict(options.env))
        yield {"type": "system", "subtype": "init", "session_id": "s-1"}
        yield {"type": "assistant", "session_id": "s-1",
               "message": {"id": "m1", "content": [{"type": "text", "text": "done"}]}}
        yield {"type": "result", "subtype": "success", "is_error": False, "result": "done",
               "session_id": "s-1", "num_turns": 1,
               "usage": {"input_tokens": 11, "output_tokens": 5}}

    seen = []

    async def main():
        items = [i async for i in teamlead.run("hi", query_fn=query_fn,
                                                 policy=teamlead.Policy(relay=False))]
        return items[-1]
"""


@pytest.mark.slow  # a fresh interpreter or child process: seconds
def _gate(outcome: str, tool_use_id: str, description: str, **fields: Any) -> SpawnDecided:
    """One decision of the spawn gate on the call ``tool_use_id``."""
    return SpawnDecided.model_validate(
        {"outcome": outcome, "tool_use_id": tool_use_id, "description": description, **fields}
    )


def test_without_the_variables_no_sdk_or_exporter_is_imported() -> None:
    """The API package may be loaded already (the claude SDK's ``mcp`` imports it); what
    costs, the SDK, an exporter and the protobuf classes, must not be."""
    proc = run_python(
        SCRIPTED_RUN
        + """
    done = anyio.run(main)
    costly = ("opentelemetry.sdk", "opentelemetry.exporter", "opentelemetry.proto")
    loaded = sorted(m for m in sys.modules if m.startswith(costly))
    print(json.dumps({"status": done.status, "loaded": loaded,
                      "traceparent": "TRACEPARENT" in seen[0]}))
    """,
        env={},
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out == {"status": "completed", "loaded": [], "traceparent": False}


#: Makes the SDK and the exporters impossible to import, as without the ``otel`` extra (the
#: API package stays: the claude SDK's ``mcp`` depends on it).
WITHOUT_THE_EXTRA = """
    import importlib.abc, sys

    class NotInstalled(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.startswith(("opentelemetry.sdk", "opentelemetry.exporter")):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NotInstalled())
"""


@pytest.mark.slow  # a fresh interpreter or child process: seconds
def test_the_variables_without_the_extra_warn_once_and_the_run_goes_on() -> None:
    proc = run_python(
        WITHOUT_THE_EXTRA
        + SCRIPTED_RUN
        + """
    import logging
    logging.basicConfig(level=logging.WARNING)
    print(anyio.run(main).status)
    print(anyio.run(main).status)
    """,
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["completed", "completed"]
    warnings = [line for line in proc.stderr.splitlines() if "OpenTelemetry" in line]
    assert len(warnings) == 1 and "[otel]" in warnings[0], proc.stderr


def test_an_apps_own_tracer_provider_gets_the_runs_spans(receiver: OtlpReceiver) -> None:
    proc = run_python(
        SCRIPTED_RUN
        + f"""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(
        OTLPSpanExporter(endpoint="{receiver.endpoint}/v1/traces")))
    trace.set_tracer_provider(provider)
    with trace.get_tracer("app").start_as_current_span("app.request"):
        done = anyio.run(main)
    provider.shutdown()
    print(json.dumps({{"status": done.status, "traceparent": seen[0].get("TRACEPARENT")}}))
    """,
        env={},
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    spans = receiver.spans()
    (app,) = by_name(spans, "app.request")
    (run,) = by_name(spans, "invoke_agent teamlead")
    assert run.parent_span_id == app.span_id and run.trace_id == app.trace_id
    assert run.attributes["gen_ai.conversation.id"] == "s-1"
    assert run.attributes["teamlead.status"] == "completed"
    assert run.attributes["gen_ai.usage.input_tokens"] == 11
    assert run.attributes["gen_ai.usage.output_tokens"] == 5
    # the CLI was handed the run's span as its parent
    assert out["traceparent"].startswith(f"00-{run.trace_id}-{run.span_id}-")


def test_the_variables_ask_for_export_only_when_an_exporter_or_endpoint_is_set() -> None:
    assert export_wanted({}) == (False, False)
    assert export_wanted({"OTEL_SERVICE_NAME": "x", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}) == (
        False,
        False,
    )
    assert export_wanted({"OTEL_TRACES_EXPORTER": "console"}) == (True, False)
    assert export_wanted(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_METRICS_EXPORTER": "none"}
    ) == (True, False)
    assert export_wanted({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://c:4318"}) == (
        False,
        True,
    )


# -- the run's spans from its events ---------------------------------------------------------


def test_a_runs_events_become_its_phases_and_its_agents_gate_events(
    exported: Exported, receiver: OtlpReceiver
) -> None:
    run = RunTrace(
        exported.telemetry, HandFed(), mode="query", options=ClaudeAgentOptions(model=MODEL)
    )
    items: list[Any] = [
        {"type": "system", "subtype": "init", "session_id": "s-9"},
        _gate("queued", "tu1", "audit", position=1, running=2, limit=2),
        _gate("admitted", "tu1", "audit", waited_s=1.5, running=2, limit=2),
        _gate("queued", "tu2", "slow", position=1, running=2, limit=2),
        _gate("denied", "tu3", "extra", code="spawn_budget", reason="cap"),
        _gate("denied", "tu2", "slow", code="wait_limit", reason="waited"),
        {
            "type": "system",
            "subtype": "task_started",
            "task_id": "a1",
            "tool_use_id": "tu1",
            "description": "audit",
            "session_id": "s-9",
        },  # fmt: skip
        {
            "type": "system",
            "subtype": "task_notification",
            "task_id": "a1",
            "tool_use_id": "tu1",
            "status": "completed",
            "summary": "found it",
            "usage": {"total_tokens": 40, "tool_uses": 2, "duration_ms": 900},
        },  # fmt: skip
        WaitingForTeam(session_id="s-9", open_tasks=["a1"], wait_s=30),
        InboxCollected(team="t", satisfied=True),
        FallbackUsed(
            task_id="a1", description="audit", source="summary", status="completed", chars=8
        ),  # fmt: skip
        Resuming(session_id="s-9", round=1, attempt=1, deliveries=["a1"]),
        ResumeFailed(session_id="s-9", round=1, attempt=1, error="529", transient=True),
        Resuming(session_id="s-9", round=1, attempt=2, deliveries=["a1"]),
        Resuming(session_id="s-9", round=2, attempt=1, kind="wrap_up"),
        Finished(
            status="partial",
            result="answer",
            session_id="s-9",
            resumes=2,
            reason="deadline",
            tasks=[
                TaskDisposition(
                    id="a1",
                    kind="task",
                    description="audit",
                    status="completed",
                    disposition="included",
                    source="lead",
                    ended="finished",
                ),  # fmt: skip
                TaskDisposition(
                    id="mate",
                    kind="teammate",
                    description="mate",
                    status="pending",
                    disposition="missing",
                    source="none",
                ),
            ],
        ),
    ]
    for item in items:
        run.see(item)
    run.close()
    exported.flush()
    spans = receiver.spans()
    (root,) = by_name(spans, "invoke_agent teamlead")
    assert root.parent_span_id == "" and {s.trace_id for s in spans} == {root.trace_id}
    assert root.attributes["gen_ai.conversation.id"] == "s-9"
    assert root.attributes["gen_ai.request.model"] == MODEL
    assert (root.attributes["teamlead.status"], root.attributes["teamlead.reason"]) == (
        "partial",
        "deadline",
    )
    assert root.attributes["teamlead.resumes"] == 2
    phases = [s for s in spans if s.name.startswith("teamlead.")]
    assert [s.name for s in sorted(phases, key=lambda s: s.start_ns)] == [
        "teamlead.round",
        "teamlead.wait_for_team",
        "teamlead.fallback",
        "teamlead.resume",
        "teamlead.resume",
        "teamlead.wrap_up",
    ]
    assert all(s.parent_span_id == root.span_id for s in phases)
    failed, retried = sorted(by_name(spans, "teamlead.resume"), key=lambda s: s.start_ns)
    assert failed.error and "resume_failed" in failed.event_names() and not retried.error
    assert by_name(spans, "teamlead.wait_for_team")[0].event_names() == ["inbox_collected"]
    assert by_name(spans, "teamlead.fallback")[0].event_names() == ["fallback_used"]
    # one agent span per call, under the run, with the gate's events
    audit = by_name(spans, "invoke_agent audit")[0]
    assert audit.parent_span_id == root.span_id
    assert audit.event_names() == ["queued", "admitted"]
    assert audit.attributes["gen_ai.agent.id"] == "a1"
    assert audit.attributes["teamlead.agent.status"] == "completed"
    assert audit.attributes["teamlead.agent.total_tokens"] == 40
    assert audit.attributes["teamlead.disposition"] == "included"
    assert audit.attributes["teamlead.ended"] == "finished"
    slow = by_name(spans, "invoke_agent slow")[0]
    assert slow.event_names() == ["queued", "timed_out"] and slow.error
    extra = by_name(spans, "invoke_agent extra")[0]
    assert extra.event_names() == ["denied"]
    assert extra.events[0].attributes["teamlead.gate.code"] == "spawn_budget"
    mate = by_name(spans, "invoke_agent mate")[0]
    assert mate.attributes["teamlead.agent.kind"] == "teammate"
    # no prompt or result text without the opt-in
    assert not any("gen_ai.input.messages" in s.attributes for s in spans)
    assert not any("gen_ai.output.messages" in s.attributes for s in spans)
    # the queue went up twice and back down twice
    queue = [p for p in receiver.points() if p.metric == "teamlead.gate.queue.length"]
    assert queue and queue[-1].value == 0


def test_prompt_and_result_text_only_with_the_content_capture_opt_in(
    exported: Exported, receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    run = RunTrace(
        exported.telemetry,
        HandFed(),
        mode="query",
        options=ClaudeAgentOptions(),
        prompt=f"use {KEY}",
    )
    run.see(Finished(status="completed", result="the answer", session_id="s", resumes=0))
    run.close()
    exported.flush()
    (root,) = by_name(receiver.spans(), "invoke_agent teamlead")
    sent = json.loads(root.attributes["gen_ai.input.messages"])
    assert sent == [{"role": "user", "parts": [{"type": "text", "content": "use [redacted]"}]}]
    answer = json.loads(root.attributes["gen_ai.output.messages"])
    assert answer[0]["parts"][0]["content"] == "the answer"
    assert not any(KEY.encode() in body for body in receiver.bodies())


def test_a_run_that_breaks_off_ends_its_spans_as_errors(
    exported: Exported, receiver: OtlpReceiver
) -> None:
    run = RunTrace(exported.telemetry, HandFed(), mode="query", options=ClaudeAgentOptions())
    run.see(
        SpawnDecided(
            outcome="queued", tool_use_id="tu1", description="a", position=1, running=1, limit=1
        )
    )
    run.close("CancelledError")
    exported.flush()
    spans = receiver.spans()
    (root,) = by_name(spans, "invoke_agent teamlead")
    assert root.error and root.attributes["error.type"] == "CancelledError"
    assert by_name(spans, "invoke_agent a") and by_name(spans, "teamlead.round")
    queue = [p for p in receiver.points() if p.metric == "teamlead.gate.queue.length"]
    assert queue[-1].value == 0  # the call still queued left the queue with the run


# -- the relay's chat spans ------------------------------------------------------------------


def _through_relay(
    exported: Exported,
    replies: Iterator[Reply],
    ask: Callable[[anthropic.AsyncAnthropic], Awaitable[object]],
    usage: list[tuple[str | None, int | None, int | None]] | None = None,
    agents: AgentBook | None = None,
) -> None:
    """``ask`` the scripted ``replies`` through a relay whose run's requests are chat spans
    under a ``run`` span (the usage read off each reply goes to ``usage``; ``agents``: the
    run's agent ledger)."""
    import anyio

    read = usage if usage is not None else []

    async def main() -> None:
        governor = Governor(GovernorPolicy(ceiling=8), clock=FakeClock())
        with ScriptedServer(lambda req: next(replies)) as server:
            async with start_relay(server.base_url, governor) as relay:
                run = relay.open_run(agents=agents)
                root = exported.telemetry.tracer.start_span("run")
                from opentelemetry.trace import set_span_in_context

                run.observer = ChatObserver(
                    exported.telemetry,
                    place=lambda agent, write: write(set_span_in_context(root)),
                    on_usage=lambda agent, u, model: read.append(
                        (agent, u.input_tokens, u.output_tokens)
                    ),
                )
                async with anthropic.AsyncAnthropic(
                    base_url=run.base_url, api_key=KEY, max_retries=0
                ) as c:
                    await ask(c)
                root.end()

    anyio.run(main)
    exported.flush()


def test_a_relayed_request_is_a_chat_span_with_its_usage_pacing_and_429(
    exported: Exported, receiver: OtlpReceiver
) -> None:
    answer = dataclasses.replace(Reply.text("after the pause"), input_tokens=33)
    usage: list[tuple[str | None, int | None, int | None]] = []

    async def ask(c: anthropic.AsyncAnthropic) -> None:
        async with c.messages.stream(
            model=MODEL,
            max_tokens=10,
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={
                "x-claude-code-agent-id": "agent-7",
                "X-Claude-Code-Session-Id": "s-2",
            },  # fmt: skip
        ) as stream:
            await stream.get_final_message()
        await c.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "hi"}])

    _through_relay(exported, iter([Reply.error(429, retry_after=2), answer]), ask, usage)
    spans = receiver.spans()
    (chat,) = by_name(spans, f"chat {MODEL}")  # count_tokens is not a model call
    (root,) = by_name(spans, "run")
    assert chat.parent_span_id == root.span_id and chat.kind == 3  # SPAN_KIND_CLIENT
    attributes = chat.attributes
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == "anthropic"
    assert attributes["gen_ai.request.model"] == MODEL
    assert attributes["gen_ai.usage.input_tokens"] == 33
    assert attributes["gen_ai.usage.output_tokens"] > 0
    assert attributes["gen_ai.agent.id"] == "agent-7"
    assert attributes["gen_ai.conversation.id"] == "s-2"
    assert attributes["gen_ai.response.finish_reasons"] == ["end_turn"]
    assert attributes["teamlead.relay.wait_s"] == 2.0  # the Retry-After, on the fake clock
    assert attributes["teamlead.relay.attempts"] == 2
    (event,) = chat.events
    assert event.name == "rate_limited"
    assert event.attributes == {
        "http.response.status_code": 429,
        "teamlead.outcome": "absorbed",
        "teamlead.source": "upstream",
        "teamlead.retry_after_s": 2.0,
    }
    assert usage == [("agent-7", 33, attributes["gen_ai.usage.output_tokens"])]
    assert not any(KEY.encode() in body for body in receiver.bodies())
    points = receiver.points()
    limited = [p for p in points if p.metric == "teamlead.relay.rate_limited"]
    assert [(p.attributes["teamlead.outcome"], p.value) for p in limited] == [("absorbed", 1.0)]
    tokens = {p.attributes["gen_ai.token.type"]: p for p in points
              if p.metric == "gen_ai.client.token.usage"}  # fmt: skip
    assert tokens["input"].total == 33 and tokens["input"].count == 1
    # metric attributes carry no id of an agent, session or request
    ids = {"gen_ai.agent.id", "gen_ai.conversation.id", "gen_ai.response.id"}
    assert all(not ids & p.attributes.keys() for p in points)


def test_a_request_held_through_an_overload_is_an_overloaded_event_on_its_chat_span(
    exported: Exported, receiver: OtlpReceiver
) -> None:
    async def ask(c: anthropic.AsyncAnthropic) -> None:
        await c.messages.create(
            model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )

    burst = [Reply.error(529, retry_after=1), Reply.error(503, retry_after=1, should_retry=True)]
    _through_relay(exported, iter([*burst, Reply.text("after the burst")]), ask)
    (chat,) = by_name(receiver.spans(), f"chat {MODEL}")
    assert chat.attributes["teamlead.relay.attempts"] == 3
    assert [event.name for event in chat.events] == ["overloaded", "overloaded"]  # a 503 too
    assert [event.attributes for event in chat.events] == [
        {
            "http.response.status_code": status,
            "teamlead.outcome": "absorbed",  # held at the relay: the client never saw it
            "teamlead.source": "upstream",
            "teamlead.retry_after_s": 1.0,
        }
        for status in (529, 503)
    ]
    limited = [p for p in receiver.points() if p.metric == "teamlead.relay.rate_limited"]
    points = sorted(
        (p.attributes["http.response.status_code"], p.attributes["teamlead.outcome"], p.value)
        for p in limited
    )
    assert points == [(503, "absorbed", 1.0), (529, "absorbed", 1.0)]


def test_a_request_whose_agents_model_is_pinned_is_a_chat_span_of_the_model_it_went_to(
    exported: Exported, receiver: OtlpReceiver
) -> None:
    clock = FakeClock()
    admission = Admission(Policy(), clock, cap=SpawnCap())
    admission.pinned_model = "claude-haiku-5-5"  # the run's subagent model, amended

    async def ask(c: anthropic.AsyncAnthropic) -> None:
        await c.messages.create(
            model=MODEL,
            max_tokens=10,
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"x-claude-code-session-id": "s1", "x-claude-code-agent-id": "a1"},
        )

    _through_relay(exported, iter([Reply.text("done")]), ask, agents=AgentBook(clock, admission))
    (chat,) = by_name(receiver.spans(), "chat claude-haiku-5-5")
    assert chat.attributes["gen_ai.request.model"] == "claude-haiku-5-5"


def test_a_json_reply_nested_too_deep_to_read_still_ends_as_its_chat_span(
    exported: Exported, receiver: OtlpReceiver
) -> None:
    observer = ChatObserver(
        exported.telemetry, place=lambda agent, write: write(Context()), on_usage=lambda *_: None
    )
    trace = observer.request("/v1/messages", classify(b'{"model": "m-deep"}'), None, None)
    assert trace is not None
    trace.response(200, [(b"content-type", b"application/json")])
    trace.chunk(b"[" * 100_000 + b"]" * 100_000)  # within the size read, past the parser's depth
    trace.end(None, UsageScan())
    exported.flush()
    (chat,) = by_name(receiver.spans(), "chat m-deep")
    assert chat.attributes["http.response.status_code"] == 200
    assert "gen_ai.usage.input_tokens" not in chat.attributes  # unknown, not made up


def sse_bytes(text: str, input_tokens: int = 20) -> bytes:
    reply = dataclasses.replace(Reply.text(text), input_tokens=input_tokens)
    return b"".join(
        f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
        for name, data in sse_events(reply, MODEL, "msg_1")
    )


def test_the_usage_is_read_from_a_stream_cut_anywhere() -> None:
    stream = sse_bytes("x" * 300, input_tokens=41)
    for size in (1, 2, 7, 64, len(stream)):
        scan = UsageScan()
        for start in range(0, len(stream), size):
            scan.feed(stream[start : start + size])
        assert (scan.usage.input_tokens, scan.model, scan.response_id) == (41, MODEL, "msg_1")
        assert scan.usage.output_tokens == Reply.text("x" * 300).resolved_output_tokens
        assert scan.stop_reason == "end_turn"


def test_a_huge_text_line_is_skipped_not_kept() -> None:
    scan = UsageScan()
    scan.feed(b"data: " + b"y" * (200 * 1024))
    scan.feed(b'z"message_delta"\n')  # the end of the huge line: not a usage line
    scan.feed(b'data: {"type": "message_delta", "usage": {"output_tokens": 3}}\n')
    assert scan.usage.output_tokens == 3


class _Broken:
    """A request observer that fails at every step it is given."""

    def __init__(self, fail_at: str) -> None:
        self.fail_at = fail_at

    def request(self, path: str, info: Any, session_id: Any, agent_id: Any) -> Any:
        if self.fail_at == "request":
            raise RuntimeError("observer broke")
        return self

    def __getattr__(self, name: str) -> Any:
        def step(*args: object) -> None:
            if name == self.fail_at:
                raise RuntimeError(f"observer broke in {name}")

        return step


@pytest.mark.parametrize("fail_at", ["request", "opened", "response", "chunk", "end"])
def test_a_failing_request_observer_never_breaks_the_request(
    fail_at: str, caplog: pytest.LogCaptureFixture
) -> None:
    import anyio

    async def main() -> str:
        governor = Governor(GovernorPolicy(ceiling=8), clock=FakeClock())
        with ScriptedServer(lambda req: Reply.text("still fine")) as server:
            async with start_relay(server.base_url, governor) as relay:
                run = relay.open_run()
                run.observer = _Broken(fail_at)
                async with (
                    anthropic.AsyncAnthropic(
                        base_url=run.base_url, api_key=KEY, max_retries=0
                    ) as c,
                    c.messages.stream(
                        model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}]
                    ) as stream,
                ):
                    message = await stream.get_final_message()
                assert governor.total_in_flight == 0
        return message.content[0].text  # type: ignore[union-attr]

    assert anyio.run(main) == "still fine"
    assert any("request observer failed" in r.getMessage() for r in caplog.records)


def test_an_agent_whose_request_ends_before_the_stream_names_it_is_one_span(
    exported: Exported, receiver: OtlpReceiver
) -> None:
    """The relay can report an agent's request (by its agent id) before the stream shows
    the task: the call, the task and the requests still make one agent span."""
    from teamlead._governor import Usage

    run = RunTrace(exported.telemetry, HandFed(), mode="query", options=ClaudeAgentOptions())
    run.see({"type": "assistant", "session_id": "s", "message": {"id": "m", "content": [
        {"type": "tool_use", "id": "tu1", "name": "Agent",
         "input": {"description": "audit", "prompt": "p"}}]}})  # fmt: skip
    run.see(
        SpawnDecided(
            outcome="admitted",
            tool_use_id="tu1",
            description="audit",
            waited_s=0,
            running=1,
            limit=2,
        )
    )
    placed: list[Context] = []
    run.place_request("a1", placed.append)  # the relay: a request of agent a1 ended
    assert placed == []  # held: known only by its id, its place in the run is not known yet
    run.add_usage("a1", Usage(input_tokens=7, output_tokens=3))
    run.see({"type": "system", "subtype": "task_started", "task_id": "a1", "tool_use_id": "tu1",
             "description": "audit", "session_id": "s"})  # fmt: skip
    run.place_request("a1", placed.append)  # named now: the held one goes first, then this
    assert len(placed) == 2
    run.see(Finished(status="completed", result="ok", session_id="s", resumes=0))
    run.close()
    exported.flush()
    agents = [s for s in receiver.spans() if s.name.startswith("invoke_agent a")]
    assert [s.name for s in agents] == ["invoke_agent audit"]
    (agent,) = agents
    for context in placed:  # both requests under the one agent span
        assert f"{get_current_span(context).get_span_context().span_id:016x}" == agent.span_id
    assert agent.attributes["gen_ai.agent.id"] == "a1"
    assert agent.attributes["teamlead.tool_use_id"] == "tu1"
    assert agent.attributes["gen_ai.usage.input_tokens"] == 7
    assert agent.event_names() == ["admitted"]


def test_a_request_ending_after_the_run_leaves_no_span_open(
    exported: Exported, receiver: OtlpReceiver
) -> None:
    from teamlead._governor import Usage

    run = RunTrace(exported.telemetry, HandFed(), mode="query", options=ClaudeAgentOptions())
    run.see(Finished(status="completed", result="ok", session_id="s", resumes=0))
    run.close()
    placed: list[Context] = []
    run.place_request("a-late", placed.append)  # the CLI's teardown: a request still ending
    run.add_usage("a-late", Usage(input_tokens=5, output_tokens=1))
    exported.flush()
    spans = receiver.spans()
    (root,) = by_name(spans, "invoke_agent teamlead")
    (late,) = placed  # written at once, under the run
    assert f"{get_current_span(late).get_span_context().span_id:016x}" == root.span_id
    assert [s.name for s in spans if "a-late" in str(s.attributes)] == []
    assert run.spans.records == []


def test_a_workflows_agent_known_by_its_requests_is_placed_under_its_workflow(
    exported: Exported, receiver: OtlpReceiver
) -> None:
    """A workflow agent's requests come long before the run's rows say whose it is: they
    are held, and written under its span, which is made under its workflow's."""
    run = RunTrace(exported.telemetry, HandFed(), mode="query", options=ClaudeAgentOptions())
    run.see({"type": "system", "subtype": "task_started", "task_id": "wf-task",
             "tool_use_id": "tu-wf", "description": "probe", "task_type": "local_workflow",
             "session_id": "s"})  # fmt: skip
    placed: list[Context] = []
    run.place_request("w1", placed.append)
    run.place_request("w1", placed.append)
    assert placed == []  # held: nothing says yet which workflow it belongs to
    rows = [
        TaskDisposition(id="wf-task", kind="task", description="probe", status="completed",
                        disposition="included", source="lead"),
        TaskDisposition(id="w1", kind="workflow_agent", description="scan", label="scan:a",
                        parent="wf-task", status="completed", disposition="included",
                        source="lead"),
    ]  # fmt: skip
    run.see(Finished(status="completed", result="ok", session_id="s", resumes=0, tasks=rows))
    assert len(placed) == 2
    run.close()
    exported.flush()
    spans = receiver.spans()
    (workflow,) = [s for s in spans if s.name.startswith("invoke_workflow")]
    (agent,) = by_name(spans, "invoke_agent scan:a")
    assert agent.parent_span_id == workflow.span_id
    for context in placed:
        assert f"{get_current_span(context).get_span_context().span_id:016x}" == agent.span_id


def test_an_agent_past_its_own_timeout_is_marked_timed_out(
    exported: Exported, receiver: OtlpReceiver
) -> None:
    run = RunTrace(exported.telemetry, HandFed(), mode="query", options=ClaudeAgentOptions())
    run.see({"type": "system", "subtype": "task_started", "task_id": "a1", "tool_use_id": "tu1",
             "description": "hung", "session_id": "s"})  # fmt: skip
    row = TaskDisposition(id="a1", kind="task", description="hung", status="timeout",
                          disposition="failed", source="none")  # fmt: skip
    run.see(Finished(status="partial", result="ok", session_id="s", resumes=0, tasks=[row]))
    run.close()
    exported.flush()
    (agent,) = by_name(receiver.spans(), "invoke_agent hung")
    assert agent.event_names() == ["timed_out"] and agent.error
    assert agent.attributes["teamlead.agent.status"] == "timeout"
    assert agent.attributes["teamlead.disposition"] == "failed"
