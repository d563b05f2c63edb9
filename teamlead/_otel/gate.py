"""The spawn gate's events on the agents' spans, and its queue length as a metric.

Each gate event names an Agent call by its ``tool_use_id`` before it is a task: it becomes
an event of that agent's span (``queued``, ``admitted``, ``denied``, ``timed_out`` for a
call that waited past the gate's limit or the deadline, ``rejected`` for one the CLI
refused), and a denied or rejected call's span ends there. The process-wide queue length is
an up-down counter: +1 when a call queues, -1 when it leaves the queue however it leaves.
"""

from __future__ import annotations

from ..events import SpawnDecided
from .agent_spans import AgentRecord, AgentSpans
from .instruments import Instruments

__all__ = ["GateTrace"]

#: Deny codes that mean the call waited too long, rather than a limit saying no.
_TIMED_OUT = frozenset({"wait_limit", "deadline"})


class GateTrace:
    """The gate events of one run."""

    def __init__(self, spans: AgentSpans, instruments: Instruments) -> None:
        self._spans = spans
        self._instruments = instruments

    def _call(self, tool_use_id: str, description: str) -> AgentRecord:
        record = self._spans.agent(tool_use_id, "call", name=description)
        record.tool_use_id = tool_use_id
        return record

    def _dequeue(self, record: AgentRecord) -> None:
        if record.queued:
            record.queued = False
            self._instruments.gate_queue.add(-1)

    def decided(self, event: SpawnDecided) -> None:
        """One decision of the gate, an event of its call's span."""
        record = self._call(event.tool_use_id, event.description)
        if event.outcome == "queued":
            if not record.queued:
                record.queued = True
                self._instruments.gate_queue.add(1)
            attributes: dict[str, str | int | float] = _given(
                position=event.position, running=event.running, limit=event.limit
            )
            self._spans.event(record, "queued", attributes)
            return
        if event.outcome == "admitted":
            self._dequeue(record)
            attributes = _given(waited_s=event.waited_s, running=event.running, limit=event.limit)
            self._spans.event(record, "admitted", attributes)
            return
        if event.outcome == "denied":
            self._dequeue(record)
        reason = self._spans.scrub(event.reason or "")
        attributes = _given(code=event.code, reason=reason)
        name = "timed_out" if event.code in _TIMED_OUT else event.outcome
        self._spans.event(record, name, attributes)
        self._spans.done(record, event.outcome)

    def close(self) -> None:
        """The run is over: calls still queued leave the queue."""
        for record in self._spans.records:
            self._dequeue(record)


def _given(**values: str | int | float | None) -> dict[str, str | int | float]:
    """The span attributes (``teamlead.gate.*``) of the values an event carries."""
    return {f"teamlead.gate.{key}": value for key, value in values.items() if value is not None}
