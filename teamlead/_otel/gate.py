"""The spawn gate's events on the agents' spans, and its queue length as a metric.

Each gate event names an Agent call by its ``tool_use_id`` before it is a task: it becomes
an event of that agent's span (``queued``, ``admitted``, ``denied``, ``timed_out`` for a
call that waited past the gate's limit or the deadline, ``rejected`` for one the CLI
refused), and a denied or rejected call's span ends there. The process-wide queue length is
an up-down counter: +1 when a call queues, -1 when it leaves the queue however it leaves.
"""

from __future__ import annotations

from ..events import SpawnAdmitted, SpawnDenied, SpawnQueued, SpawnRejected
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

    def queued(self, event: SpawnQueued) -> None:
        record = self._call(event.tool_use_id, event.description)
        if not record.queued:
            record.queued = True
            self._instruments.gate_queue.add(1)
        attributes = {
            "teamlead.gate.position": event.position,
            "teamlead.gate.running": event.running,
            "teamlead.gate.limit": event.limit,
        }
        self._spans.event(record, "queued", attributes)

    def admitted(self, event: SpawnAdmitted) -> None:
        record = self._call(event.tool_use_id, event.description)
        self._dequeue(record)
        attributes = {
            "teamlead.gate.waited_s": event.waited_s,
            "teamlead.gate.running": event.running,
            "teamlead.gate.limit": event.limit,
        }
        self._spans.event(record, "admitted", attributes)

    def denied(self, event: SpawnDenied) -> None:
        record = self._call(event.tool_use_id, event.description)
        self._dequeue(record)
        attributes = {
            "teamlead.gate.code": event.code,
            "teamlead.gate.reason": self._spans.scrub(event.reason),
        }
        name = "timed_out" if event.code in _TIMED_OUT else "denied"
        self._spans.event(record, name, attributes)
        self._spans.done(record, "denied")

    def rejected(self, event: SpawnRejected) -> None:
        record = self._call(event.tool_use_id, event.description)
        reason = self._spans.scrub(event.reason)
        self._spans.event(record, "rejected", {"teamlead.gate.reason": reason})
        self._spans.done(record, "rejected")

    def close(self) -> None:
        """The run is over: calls still queued leave the queue."""
        for record in self._spans.records:
            self._dequeue(record)
