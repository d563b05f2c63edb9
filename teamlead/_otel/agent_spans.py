"""One ``invoke_agent`` span per agent of a run, from its one record under every name.

An agent is known by several names as the run goes: its Agent call's ``tool_use_id`` (the
lead's message, the spawn gate's events), then its task id (``task_started``, which is
also the agent id the CLI sends on each of its requests), or a teammate's name. An
:class:`AgentRecord` gathers what is seen under any of them, and its span is made only when
first needed (a request of the agent ended, or the agent did) with the start time of the
first sighting, so the order in which the stream and the relay report never splits an
agent in two. Events (``queued``, ``admitted``, ``denied``, ``timed_out``, ``rejected``)
keep the time they happened.

A workflow's agents never show in the stream: the relay names each by the agent id its
requests carry (a record of kind ``agent``), and the run's last rows give it its kind
(``workflow_agent``), its label and its workflow. The run holds such an agent's requests
until then (see ``RunTrace.place_request``), so its span is made under its workflow's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..clock import wall_ns
from ..events import AgentKind
from . import conventions as c

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

__all__ = ["AgentRecord", "AgentSpans"]

_FAILED = frozenset({"failed", "killed", "denied", "rejected", "timeout"})


@dataclass
class AgentRecord:
    """What is known of one agent, and its span once made.

    Its ``kind`` is never ``lead`` (the run's root span is the lead's): ``task`` (an
    Agent-tool subagent's task) or ``workflow`` (its span is ``invoke_workflow``) from the
    stream, ``call`` for an Agent call that is not a task (yet), ``agent`` for one seen only
    by its requests so far (the relay named it before the stream did), ``workflow_agent``,
    ``teammate``.
    """

    key: str
    kind: AgentKind
    name: str = ""
    started_ns: int = field(default_factory=wall_ns)
    task_id: str | None = None
    tool_use_id: str | None = None
    parent: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    status: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0
    queued: bool = False
    span: Span | None = None
    done_ns: int | None = None
    ended: bool = False


class AgentSpans:
    """The agent spans of one run: a record per agent, by every name it goes by; see the
    module docstring.

    Args:
        tracer: makes the spans.
        root: the run span's context (the parent of every agent without another).
        conversation: the session id, once known.
        scrub: redacts every text that goes into a span.
    """

    def __init__(
        self,
        tracer: Tracer,
        root: Context,
        conversation: Callable[[], str | None],
        scrub: Callable[[str], str],
    ):
        self._tracer = tracer
        self.scrub = scrub
        self._root = root
        self._conversation = conversation
        self._by_name: dict[str, AgentRecord] = {}
        self.records: list[AgentRecord] = []

    def find(self, name: str | None) -> AgentRecord | None:
        """The record known as ``name`` (a tool use id, task id or teammate name)."""
        return self._by_name.get(name) if name else None

    def agent(
        self,
        key: str,
        kind: AgentKind,
        *,
        name: str | None = None,
        also: tuple[str | None, ...] = (),
    ) -> AgentRecord:
        """The record for ``key`` (made when new), also known by the names in ``also``."""
        known = [self._by_name[n] for n in (key, *also) if n and n in self._by_name]
        record = known[0] if known else None
        for other in known[1:]:
            if record is not None and other is not record:
                record = self._merge(other, into=record)
        if record is None:
            record = AgentRecord(key=key, kind=kind)
            self.records.append(record)
        elif record.kind in ("call", "agent") and kind not in ("call", "agent"):
            record.kind = kind
        record.name = name or record.name
        for alias in (key, *also):
            if alias:
                self._by_name.setdefault(alias, record)
        return record

    def _merge(self, other: AgentRecord, *, into: AgentRecord) -> AgentRecord:
        """One agent seen under two records (its requests came before the stream named
        it): one record keeps both's sightings (the one whose span exists, if either);
        returns it."""
        if other.span is not None and into.span is None:
            other, into = into, other  # keep the span already made
        if other.span is not None:
            return into  # both have spans already: leave them apart rather than lose one
        into.started_ns = min(into.started_ns, other.started_ns)
        into.name = into.name or other.name
        into.tool_use_id = into.tool_use_id or other.tool_use_id
        into.task_id = into.task_id or other.task_id
        into.attributes = {**other.attributes, **into.attributes}
        into.queued = into.queued or other.queued
        into.requests += other.requests
        into.input_tokens += other.input_tokens
        into.output_tokens += other.output_tokens
        for name, at, attributes in other.events:
            if into.span is not None:
                into.span.add_event(name, attributes, timestamp=at)
            else:
                into.events.append((name, at, attributes))
        other.events.clear()
        for alias, record in list(self._by_name.items()):
            if record is other:
                self._by_name[alias] = into
        self.records.remove(other)
        return into

    def done(self, record: AgentRecord, status: str) -> None:
        """The agent ended now with ``status``; its span ends with the run, at this time
        (so what is learnt later, its requests' usage and its result's disposition, still
        goes on it)."""
        if record.done_ns is None:
            if status == "timeout":  # its own wall-clock limit stopped it
                self.event(record, "timed_out", {"teamlead.agent.status": status})
            record.done_ns = wall_ns()
            record.status = status

    def event(self, record: AgentRecord, name: str, attributes: Mapping[str, Any]) -> None:
        """An event of the agent, at this moment."""
        at = wall_ns()
        if record.span is not None and not record.ended:
            record.span.add_event(name, dict(attributes), timestamp=at)
        else:
            record.events.append((name, at, dict(attributes)))

    def context(self, record: AgentRecord | None) -> Context:
        """The context whose span is ``record``'s (the run's for ``None``)."""
        from opentelemetry.trace import set_span_in_context

        if record is None:
            return self._root
        return set_span_in_context(self.span(record))

    def span(self, record: AgentRecord) -> Span:
        """``record``'s span, made now (with its first sighting's start time) if need be."""
        if record.span is not None:
            return record.span
        from opentelemetry.trace import SpanKind

        parent = self.find(record.parent) if record.parent else None
        operation = span_operation(record)
        attributes: dict[str, Any] = {
            c.OPERATION: operation,
            c.PROVIDER_NAME: c.PROVIDER,
            c.AGENT_ID: record.task_id or record.key,
            "teamlead.agent.kind": record.kind,
        }
        conversation = self._conversation()
        if conversation:
            attributes[c.CONVERSATION_ID] = conversation
        span = self._tracer.start_span(
            f"{operation} {self.scrub(record.name)}" if record.name else operation,
            context=self.context(parent),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=record.started_ns,
        )
        record.span = span
        for name, at, event_attributes in record.events:
            span.add_event(name, event_attributes, timestamp=at)
        record.events.clear()
        return span

    def end(self, record: AgentRecord, status: str | None = None) -> None:
        """End ``record``'s span with its status, name, ids and usage."""
        if record.ended:
            return
        from opentelemetry.trace import Status, StatusCode

        record.status = status or record.status
        span = self.span(record)
        record.ended = True
        if record.name:
            name = self.scrub(record.name)
            span.update_name(f"{span_operation(record)} {name}")
            span.set_attribute(c.AGENT_NAME, name)
        values: dict[str, Any] = {
            **record.attributes,
            "teamlead.agent.status": record.status or "unknown",
            "teamlead.agent.kind": record.kind,
        }
        if record.tool_use_id:
            values["teamlead.tool_use_id"] = record.tool_use_id
        if record.task_id:
            values[c.AGENT_ID] = record.task_id
        if record.requests:
            values[c.INPUT_TOKENS] = record.input_tokens
            values[c.OUTPUT_TOKENS] = record.output_tokens
            values["teamlead.agent.requests"] = record.requests
        span.set_attributes(values)
        if record.status in _FAILED:
            span.set_status(Status(StatusCode.ERROR, record.status))
        span.end(end_time=record.done_ns)

    def end_all(self) -> None:
        """End every agent still open (the run is over)."""
        for record in self.records:
            self.end(record)


def span_operation(record: AgentRecord) -> str:
    """The span's GenAI operation: ``invoke_workflow`` for a workflow, else ``invoke_agent``."""
    return "invoke_workflow" if record.kind == "workflow" else c.INVOKE_AGENT
