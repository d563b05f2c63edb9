"""The spans of one run, read off the stream the run already yields.

:class:`RunTrace` turns every item of a run's stream (the SDK's messages as the run parsed
them, its :class:`~teamlead.tracker.StreamParse`, and teamlead's typed events) into the
trace docs/opentelemetry.md draws, without a hook into the coordinator: the root
``invoke_agent teamlead`` span, one phase span at a time under it (``teamlead.round``,
``teamlead.wait_for_team``, ``teamlead.fallback``, ``teamlead.resume``,
``teamlead.wrap_up``), a span per agent with the spawn gate's decisions as its events
(:mod:`.agent_spans`), and a ``chat`` span per relayed request (:mod:`.chat`).

Spans are started with explicit parents, never made current: a run is an async
generator, and a context attached across its ``yield``\\ s would leak into the caller.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from claude_agent_sdk import ClaudeAgentOptions

from .._governor import Usage
from .._parse import (
    AgentCallSeen,
    ResultSeen,
    SessionSeen,
    TaskEnded,
    TaskStarted,
)
from .._redact import secret_scrubber
from ..clock import SYSTEM_CLOCK, wall_ns
from ..events import (
    AgentKind,
    ConcurrencyChanged,
    FallbackUsed,
    Finished,
    InboxCollected,
    ResumeFailed,
    Resuming,
    SpawnDecided,
    WaitingForTeam,
)
from . import conventions as c
from . import labels, parent_context
from .agent_spans import AgentRecord, AgentSpans
from .chat import ChatObserver

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span

    from .._relay import RelayRun
    from ..tracker import StreamParse
    from .setup import Telemetry

__all__ = ["RunTrace"]

_AGENT_NAME = "teamlead"
#: Deny codes that mean the call waited too long, rather than a limit saying no.
_TIMED_OUT = frozenset({"wait_limit", "deadline"})


class RunTrace:
    """The spans of one run; see the module docstring.

    Args:
        telemetry: where the spans and metrics go.
        run: the run's parse of its stream: the events of each message it yields.
        mode: ``query``, ``resume`` or ``client`` (which entry point runs).
        options: the run's SDK options (the model, and ``env`` for redaction).
        prompt: the user's prompt; kept only under the content-capture opt-in.
    """

    def __init__(
        self,
        telemetry: Telemetry,
        run: StreamParse,
        *,
        mode: str,
        options: ClaudeAgentOptions,
        prompt: str | None = None,
        session_id: str | None = None,
    ) -> None:
        from opentelemetry.trace import SpanKind, set_span_in_context

        self._telemetry = telemetry
        self._run = run
        self._tracer = telemetry.tracer
        self._env = dict(options.env)
        self._capture = c.capture_content({**os.environ, **self._env})
        self._scrub = secret_scrubber(self._env)  # the secrets looked up once per run
        self._started = SYSTEM_CLOCK.monotonic()
        self._started_ns = wall_ns()
        self._model = options.model
        self._session: str | None = session_id
        attributes: dict[str, Any] = {
            c.OPERATION: c.INVOKE_AGENT,
            c.PROVIDER_NAME: c.PROVIDER,
            c.AGENT_NAME: _AGENT_NAME,
            "teamlead.mode": mode,
        }
        attributes.update({f"teamlead.{k}": v for k, v in labels().items()})
        if options.model:
            attributes[c.REQUEST_MODEL] = options.model
        if session_id:
            attributes[c.CONVERSATION_ID] = session_id
        if prompt is not None and self._capture:
            attributes[c.INPUT_MESSAGES] = c.messages("user", prompt, self._scrub)
        self.root: Span = self._tracer.start_span(
            f"{c.INVOKE_AGENT} {_AGENT_NAME}",
            context=parent_context(),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
        self._root_context: Context = set_span_in_context(self.root)
        self.spans = AgentSpans(
            self._tracer, self._root_context, lambda: self._session, self._scrub
        )
        self._phase: Span | None = None
        self._phase_name = ""
        self._results: list[Usage] = []
        self._relayed: Usage | None = None
        self._finished = False
        self._closed = False
        self._unplaced: dict[str, list[Callable[[Context], None]]] = {}
        self._enter("teamlead.round", {"teamlead.round": 0})

    # -- hookups ---------------------------------------------------------------------------
    def trace_env(self) -> dict[str, str]:
        """The CLI's ``TRACEPARENT`` (and ``TRACESTATE``) for this run's root span, for the
        run's options (:func:`teamlead._run.options.build_options`, which keeps one the
        caller set in ``options.env``); empty when the span has no valid context."""
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        carrier: dict[str, str] = {}  # traceparent, and tracestate when it has entries
        TraceContextTextMapPropagator().inject(carrier, context=self._root_context)
        return {name.upper(): value for name, value in carrier.items()}

    def attach(self, relay_run: RelayRun | None) -> None:
        """Have a ``chat`` span made for each of the run's requests through the relay."""
        if relay_run is None:
            return
        self._relayed = Usage(input_tokens=0, output_tokens=0)
        relay_run.observer = ChatObserver(
            self._telemetry, place=self.place_request, on_usage=self.add_usage
        )

    async def observe(self, items: AsyncGenerator[Any, None]) -> AsyncGenerator[Any, None]:
        """``items`` unchanged, each seen on the way; the spans end with the stream."""
        error: str | None = "cancelled"
        try:
            async with aclosing(items):
                async for item in items:
                    self.see(item)
                    yield item
            error = None
        except GeneratorExit:  # the caller stopped reading: after Finished, nothing is wrong
            error = None if self._finished else "cancelled"
            raise
        except Exception as exc:
            error = type(exc).__name__
            raise
        finally:
            self.close(error)

    # -- what the relay tells --------------------------------------------------------------
    def place_request(self, agent_id: str | None, write: Callable[[Context], None]) -> None:
        """Write a finished request of ``agent_id`` (``None``: the lead's, under the run)
        under its agent's span. An agent known only by the id its requests carry (a
        workflow's agent, or a subagent whose requests came before the stream named it) has
        its requests held until its place is known: the stream names it, or the run's rows
        say which workflow it belongs to; so its span is made under the right parent."""
        if agent_id is None or self._closed:  # a request still ending after the run: its root
            write(self._root_context)
            return
        record = self.spans.find(agent_id) or self.spans.agent(agent_id, "agent")
        if record.task_id is None:
            record.task_id = agent_id
        if record.kind == "agent" and not self._finished:
            self._unplaced.setdefault(agent_id, []).append(write)
            return
        self._place_held(agent_id)
        write(self.spans.context(record))

    def _place_held(self, agent_id: str | None = None) -> None:
        """Write the requests held for ``agent_id`` (every agent's when ``None``) where
        their agents are known to belong by now."""
        for held_id in [agent_id] if agent_id is not None else list(self._unplaced):
            writes = self._unplaced.pop(held_id, [])
            if writes:
                record = self.spans.find(held_id) or self.spans.agent(held_id, "agent")
                context = self.spans.context(record)
                for write in writes:
                    write(context)

    def add_usage(self, agent_id: str | None, usage: Usage, model: str | None = None) -> None:
        """One finished request's usage (and the model that answered it): to the run's
        total and its agent's."""
        if self._closed:
            return  # the run's spans are written already
        if self._relayed is not None:
            self._relayed = _sum([self._relayed, usage])
        if agent_id is None:
            if self._model is None and model:
                self._model = model
                self.root.set_attribute(c.REQUEST_MODEL, model)
            return
        record = self.spans.find(agent_id)
        if record is not None:
            record.requests += 1
            record.input_tokens += usage.input_tokens or 0
            record.output_tokens += usage.output_tokens or 0

    # -- what the stream tells -------------------------------------------------------------
    def see(self, item: Any) -> None:
        """Note one item of the stream."""
        handler = _HANDLERS.get(type(item))
        if handler is not None:
            handler(self, item)
        else:
            for event in self._run.events_of(item):
                self._tracked(event)

    def _tracked(self, event: Any) -> None:
        if isinstance(event, SessionSeen):
            if self._session is None:
                self._session = event.session_id
                self.root.set_attribute(c.CONVERSATION_ID, event.session_id)
        elif isinstance(event, AgentCallSeen):
            record = self.spans.agent(event.tool_use_id, "call", name=event.description)
            record.tool_use_id = event.tool_use_id
            if event.subagent_type:
                record.attributes["teamlead.subagent_type"] = event.subagent_type
            if self._capture and event.prompt:
                record.attributes[c.INPUT_MESSAGES] = c.messages("user", event.prompt, self._scrub)
        elif isinstance(event, TaskStarted):
            kind: AgentKind = "workflow" if event.task_type == "local_workflow" else "task"
            record = self.spans.agent(
                event.task_id, kind, name=event.description, also=(event.tool_use_id,)
            )
            record.task_id = event.task_id
            record.tool_use_id = event.tool_use_id or record.tool_use_id
            if event.subagent_type:
                record.attributes["teamlead.subagent_type"] = event.subagent_type
            self.spans.span(record)
        elif isinstance(event, TaskEnded):
            record = self.spans.agent(event.task_id, "task", also=(event.tool_use_id,))
            record.task_id = event.task_id
            for name, value in (event.usage or {}).items():
                if name in ("total_tokens", "tool_uses", "duration_ms") and isinstance(value, int):
                    record.attributes[f"teamlead.agent.{name}"] = value
            if self._capture and event.summary:
                record.attributes[c.OUTPUT_MESSAGES] = c.messages(
                    "assistant", event.summary, self._scrub
                )
            self.spans.done(record, event.status)
        elif isinstance(event, ResultSeen):
            self._results.append(Usage.of(event.usage) or Usage())
            if event.ok is False and self._phase is not None:
                self._phase.add_event(
                    "lead_error", {"teamlead.error": self._scrub(event.text or event.subtype)[:300]}
                )

    def _spawn_decided(self, event: SpawnDecided) -> None:
        record = self.spans.agent(event.tool_use_id, "call", name=event.description)
        record.tool_use_id = event.tool_use_id
        if event.outcome == "queued":
            if not record.queued:
                record.queued = True
                self._telemetry.instruments.gate_queue.add(1)
            attributes = _gate(position=event.position, running=event.running, limit=event.limit)
            self.spans.event(record, "queued", attributes)
            return
        self._dequeue(record)
        if event.outcome == "admitted":
            attributes = _gate(waited_s=event.waited_s, running=event.running, limit=event.limit)
            self.spans.event(record, "admitted", attributes)
            return
        attributes = _gate(code=event.code, reason=self.spans.scrub(event.reason or ""))
        name = "timed_out" if event.code in _TIMED_OUT else event.outcome
        self.spans.event(record, name, attributes)
        self.spans.done(record, event.outcome)

    def _dequeue(self, record: AgentRecord) -> None:
        if record.queued:
            record.queued = False
            self._telemetry.instruments.gate_queue.add(-1)

    def _waiting(self, event: WaitingForTeam) -> None:
        attributes: dict[str, Any] = {
            "teamlead.open_tasks": len(event.open_tasks),
            "teamlead.pending_members": len(event.pending_members),
            "teamlead.wait_s": event.wait_s,
        }
        self._enter("teamlead.wait_for_team", attributes)

    def _inbox(self, event: InboxCollected) -> None:
        if self._phase is None:
            return
        self._phase.add_event(
            "inbox_collected",
            {
                "teamlead.inbox.messages": len(event.messages) + event.omitted_messages,
                "teamlead.inbox.warnings": len(event.warnings) + event.omitted_warnings,
                "teamlead.inbox.satisfied": event.satisfied,
            },
        )

    def _fallback(self, event: FallbackUsed) -> None:
        if self._phase_name != "teamlead.fallback":
            self._enter("teamlead.fallback", {})
        assert self._phase is not None
        self._phase.add_event(
            "fallback_used",
            {
                "teamlead.task_id": event.task_id,
                "teamlead.fallback.source": event.source,
                "teamlead.fallback.status": event.status,
                "teamlead.fallback.chars": event.chars,
            },
        )

    def _resuming(self, event: Resuming) -> None:
        name = "teamlead.wrap_up" if event.kind == "wrap_up" else "teamlead.resume"
        attributes = {
            "teamlead.round": event.round,
            "teamlead.attempt": event.attempt,
            "teamlead.deliveries": len(event.deliveries),
        }
        self._enter(name, attributes)

    def _resume_failed(self, event: ResumeFailed) -> None:
        from opentelemetry.trace import Status, StatusCode

        if self._phase is None:
            return
        self._phase.add_event(
            "resume_failed",
            {
                "teamlead.transient": event.transient,
                "teamlead.error": self._scrub(event.error)[:300],
            },
        )
        self._phase.set_status(Status(StatusCode.ERROR, "resume_failed"))
        self._exit()

    def _changed(self, event: ConcurrencyChanged) -> None:
        bucket = {"teamlead.bucket": event.key}
        self._telemetry.instruments.governor_limit.set(event.effective, bucket)
        self.root.add_event(
            "concurrency_changed",
            {
                "teamlead.bucket": event.key,
                "teamlead.reason": event.reason,
                "teamlead.cap": event.cap,
                "teamlead.effective": event.effective,
            },
        )

    def _on_finished(self, event: Finished) -> None:
        from opentelemetry.trace import Status, StatusCode

        self._finished = True
        self._exit()
        if event.session_id and self._session is None:
            self._session = event.session_id
            self.root.set_attribute(c.CONVERSATION_ID, event.session_id)
        for row in event.tasks:
            record = self.spans.find(row.id)
            if record is None:  # a teammate, or a call the stream never showed
                record = self.spans.agent(row.id, row.kind, name=row.description)
                record.started_ns = self._started_ns
            elif record.kind == "agent" and row.kind == "workflow_agent":
                # known so far only by the agent id of its requests: its row names it, and
                # the workflow it belongs to
                record.kind, record.name = row.kind, row.label or row.description
                record.parent = record.parent or row.parent
            record.attributes["teamlead.disposition"] = row.disposition
            record.attributes["teamlead.result_source"] = row.source
            if row.ended is not None:  # how it ended, judged from evidence
                record.attributes["teamlead.ended"] = row.ended
            self.spans.done(record, row.status)
        self._place_held()
        usage = self._relayed or _sum(self._results)
        values: dict[str, Any] = {
            "teamlead.status": event.status,
            "teamlead.resumes": event.resumes,
            "teamlead.cost_usd": event.cost_usd,
            "teamlead.tasks": len(event.tasks),
            c.INPUT_TOKENS: usage.input_tokens or 0,
            c.OUTPUT_TOKENS: usage.output_tokens or 0,
            "teamlead.usage.source": "relay" if self._relayed is not None else "results",
        }
        if event.reason:
            values["teamlead.reason"] = event.reason
        if event.relay is not None:
            values["teamlead.relay.requests"] = event.relay.requests
            values["teamlead.relay.absorbed"] = event.relay.absorbed
            values["teamlead.relay.passed"] = event.relay.passed
        if self._capture and event.result:
            values[c.OUTPUT_MESSAGES] = c.messages("assistant", event.result, self._scrub)
        self.root.set_attributes(values)
        if event.status == "failed":
            self.root.set_status(Status(StatusCode.ERROR, event.reason or "failed"))
            self.root.set_attribute(c.ERROR_TYPE, event.reason or "failed")

    # -- phases ----------------------------------------------------------------------------
    def _enter(self, name: str, attributes: Mapping[str, Any]) -> None:
        self._exit()
        self._phase = self._tracer.start_span(
            name, context=self._root_context, attributes=dict(attributes)
        )
        self._phase_name = name

    def _exit(self) -> None:
        if self._phase is not None:
            self._phase.end()
        self._phase, self._phase_name = None, ""

    def close(self, error: str | None = None) -> None:
        """End every span still open; the run's own last (``error`` when it broke off)."""
        if self._closed:
            return
        from opentelemetry.trace import Status, StatusCode

        self._place_held()  # no Finished came: where they are known to belong by now
        self._closed = True
        self._exit()
        for record in self.spans.records:  # calls still queued leave the queue
            self._dequeue(record)
        self.spans.end_all()
        failed = error or (None if self._finished else "no_finished")
        if failed:
            self.root.set_status(Status(StatusCode.ERROR, failed))
            self.root.set_attribute(c.ERROR_TYPE, failed)
        metric: dict[str, Any] = {c.OPERATION: c.INVOKE_AGENT, c.PROVIDER_NAME: c.PROVIDER}
        if self._model:
            metric[c.REQUEST_MODEL] = self._model
        if failed:
            metric[c.ERROR_TYPE] = failed
        self._telemetry.instruments.duration.record(
            SYSTEM_CLOCK.monotonic() - self._started, metric
        )
        self.root.end()


def _gate(**values: str | int | float | None) -> dict[str, str | int | float]:
    """The span attributes (``teamlead.gate.*``) of the values a gate event carries."""
    return {f"teamlead.gate.{key}": value for key, value in values.items() if value is not None}


def _sum(usages: list[Usage]) -> Usage:
    return Usage(
        input_tokens=sum(u.input_tokens or 0 for u in usages),
        output_tokens=sum(u.output_tokens or 0 for u in usages),
    )


_HANDLERS: dict[type, Any] = {
    SpawnDecided: RunTrace._spawn_decided,
    WaitingForTeam: RunTrace._waiting,
    InboxCollected: RunTrace._inbox,
    FallbackUsed: RunTrace._fallback,
    Resuming: RunTrace._resuming,
    ResumeFailed: RunTrace._resume_failed,
    ConcurrencyChanged: RunTrace._changed,
    Finished: RunTrace._on_finished,
}
