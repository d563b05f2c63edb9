"""NDJSON progress for ``--json``: one versioned line per fact.

:class:`JsonProgress` writes the run's tracker events (``event_record``) and teamlead's
own events, each once: a ``lead_turn`` per API message, a ``task_ended`` per task (see the
class). It reads what the run made of each message (its
:class:`~teamlead.tracker.StreamParse`), never parsing the stream itself; ``teamlead ask
--json`` (:mod:`teamlead._cli.running`) and a run's watch feed
(:mod:`teamlead._control.registered`) both write with it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import IO, Any

import pydantic

from . import events
from ._redact import json_line_safe, ndjson_line, redact, secret_scrubber
from .events import (
    EVENT_VERSION,
    AgentUsage,
    ConcurrencyChanged,
    RateLimited,
    SpawnDecided,
)
from .tracker import (
    AgentCallSeen,
    LeadTurn,
    ResultSeen,
    SessionSeen,
    StreamParse,
    SubagentTurn,
    TaskEnded,
    TaskProgress,
    TaskStarted,
    TrackedEvent,
    WorkflowAgentChanged,
    WorkflowEnded,
    WorkflowPhaseSeen,
    WorkflowStarted,
)

__all__ = [
    "RECORD_FACTS",
    "JsonProgress",
    "current_record",
    "event_record",
    "first_sighting",
    "read_record",
]

#: The tracker events of the NDJSON schema, by their record ``type`` (the workflow ones are
#: the tracker's changes: a workflow launched, a phase first seen, an agent's state changed,
#: the workflow ended).
_SNAKE: dict[type[TrackedEvent], str] = {
    SessionSeen: "session",
    AgentCallSeen: "agent_call",
    TaskStarted: "task_started",
    TaskProgress: "task_progress",
    TaskEnded: "task_ended",
    LeadTurn: "lead_turn",
    SubagentTurn: "subagent_turn",
    ResultSeen: "result",
    WorkflowStarted: "workflow_started",
    WorkflowPhaseSeen: "workflow_phase",
    WorkflowAgentChanged: "workflow_agent",
    WorkflowEnded: "workflow_ended",
}


#: The same, the other way: the tracker event each record ``type`` is written from (a
#: reader of the records makes it again from the record's fields).
RECORD_FACTS: dict[str, type[TrackedEvent]] = {name: fact for fact, name in _SNAKE.items()}


#: The spawn gate's record types before event version 6, one per outcome; version 6 writes
#: each as ``spawn_decided`` with that ``outcome``.
_SPAWN_BEFORE_6: dict[str, str] = {
    "spawn_queued": "queued",
    "spawn_admitted": "admitted",
    "spawn_denied": "denied",
    "spawn_rejected": "rejected",
}


def current_record(record: Mapping[str, Any]) -> Mapping[str, Any]:
    """``record`` as this version writes it: a log written by an older version reads as its
    fact reads now (the fields a later version added default on their own)."""
    outcome = _SPAWN_BEFORE_6.get(str(record.get("type")))
    if outcome is None:
        return record
    return {**record, "type": "spawn_decided", "outcome": outcome}


#: How each record ``type`` is read back: teamlead's own events (every event the events
#: module exports) by their model, the tracker facts by their fields.
_READERS: dict[str, Callable[[Any], object]] = {
    **{
        str(kind.model_fields["type"].default): kind.model_validate
        for kind in (getattr(events, name) for name in events.__all__)
        if isinstance(kind, type)
        and issubclass(kind, pydantic.BaseModel)
        and "type" in kind.model_fields
    },
    **{kind: pydantic.TypeAdapter(fact).validate_python for kind, fact in RECORD_FACTS.items()},
}


def read_record(record: Mapping[str, Any]) -> object:
    """The event or tracker fact a :func:`current_record` was written from.

    Raises:
        KeyError: its ``type`` is not one this version writes.
        pydantic.ValidationError: its fields do not make that event (a ``ValueError``).
    """
    kind = record.get("type")
    if not isinstance(kind, str):
        raise KeyError(kind)
    return _READERS[kind](dict(record))


#: The fields each record writes (a workflow's snapshot is written as its changes).
_FIELDS = {
    fact: tuple(
        f.name
        for f in dataclasses.fields(fact)
        if f.name not in ("workflow_agents", "workflow_phases")
    )
    for fact in _SNAKE
}


def event_record(event: TrackedEvent) -> dict[str, Any]:
    """A tracker event as a versioned JSON-ready dict: its fields one level deep (a frozen
    event's values are written, never changed), strings redacted, sequences as lists."""
    data: dict[str, Any] = {"type": _SNAKE[type(event)], "version": EVENT_VERSION}
    scrub = secret_scrubber()  # the secrets looked up once for the record's strings
    for name in _FIELDS[type(event)]:
        value = getattr(event, name)
        if isinstance(value, str):
            data[name] = scrub(value)
        elif isinstance(value, (tuple, list)):
            data[name] = [scrub(v) if isinstance(v, str) else v for v in value]
        else:
            data[name] = value
    return data


def first_sighting(event: SessionSeen, run: StreamParse, shown: set[str]) -> bool:
    """Whether ``event`` first names the run's session (then it is marked announced)."""
    tracked = run.tracker.session_id if run.tracker is not None else None
    if event.session_id != tracked or event.session_id in shown:
        return False
    shown.add(event.session_id)
    return True


#: teamlead events that can come while the lead's message still streams: they do not
#: close the message (or a task's end) that :class:`JsonProgress` is assembling.
_MID_MESSAGE = (AgentUsage, SpawnDecided, RateLimited, ConcurrencyChanged)


class JsonProgress:
    """NDJSON on ``stream``: the run's tracker events and teamlead events, each with type
    and version. ``run`` is the run's parse of the items :meth:`handle` is given.

    Each fact is written once:

    - ``lead_turn``: one line per API message. The CLI streams a message block by block,
      each block as an ``assistant`` message with the same ``message.id``, so the line is
      written once the message is complete (at the next lead message, its ``result``, or
      a teamlead event that comes after the stream), after its ``agent_call`` lines;
      ``tool_names`` lists every tool it called and ``agent_calls`` the ``tool_use_id`` of
      each of its Agent calls.
    - ``task_ended``: one line per task. The CLI reports a task's end twice
      (``task_updated``, then ``task_notification`` with the summary); the line is written
      at the notification with both merged (``source`` names the report that ended it
      first), or, when no notification follows, at the next lead message or event.
    """

    def __init__(self, stream: IO[str], run: StreamParse) -> None:
        self.stream = stream
        self.run = run
        self._shown: set[str] = set()
        self._turn: dict[str, Any] | None = None  # the lead message being assembled
        self._ended: dict[str, dict[str, Any]] = {}  # task_id -> its held task_ended
        self._ended_written: set[str] = set()

    def handle(self, item: Any) -> None:
        to_json = getattr(item, "to_json", None)
        if callable(to_json):
            if not isinstance(item, _MID_MESSAGE):
                self._flush()
            self.stream.write(ndjson_line(to_json()) + "\n")
        else:
            for event in self.run.events_of(item):
                if type(event) in _SNAKE:  # the parser's other events are teamlead's own
                    self._event(event)
        self.stream.flush()

    def _event(self, event: TrackedEvent) -> None:
        if isinstance(event, SessionSeen):
            if first_sighting(event, self.run, self._shown):
                self._write(event_record(event))
            return
        if isinstance(event, LeadTurn):
            self._lead_turn(event)
            return
        if isinstance(event, TaskEnded):
            self._task_ended(event)
            return
        if isinstance(event, ResultSeen):
            self._flush()
        elif (
            isinstance(event, AgentCallSeen)
            and self._turn is not None
            and event.message_id is not None
            and event.message_id == self._turn["message_id"]
        ):
            self._turn["agent_calls"].append(event.tool_use_id)
        self._write(event_record(event))

    def _lead_turn(self, event: LeadTurn) -> None:
        turn = self._turn
        if (
            turn is not None
            and event.message_id is not None
            and turn["message_id"] == event.message_id
        ):
            if event.text:
                turn["text"] = f"{turn['text']}\n{event.text}" if turn["text"] else event.text
            turn["error"] = turn["error"] or event.error
            turn["tool_names"] = [*turn["tool_names"], *event.tool_names]
            turn["read_paths"] = [*turn["read_paths"], *(redact(p) for p in event.read_paths)]
            return
        self._flush()
        self._turn = {**event_record(event), "agent_calls": []}
        self._turn["tool_names"] = list(event.tool_names)

    def _task_ended(self, event: TaskEnded) -> None:
        if event.task_id in self._ended_written:
            return
        record = event_record(event)
        held = self._ended.pop(event.task_id, None)
        if held is not None:  # the second report: keep the first's status and source
            record = {
                **held,
                **{k: v for k, v in record.items() if v is not None},
                "status": held["status"],
                "source": held["source"],
            }
        if event.source == "task_notification" or held is not None:
            self._ended_written.add(event.task_id)
            self._write(record)
        else:
            self._ended[event.task_id] = record

    def _flush(self) -> None:
        """Write the lead message and the task ends still held: no more of them will come."""
        if self._turn is not None:
            turn, self._turn = self._turn, None
            turn["text"] = redact(turn["text"])
            self._write(turn)
        for task_id, record in list(self._ended.items()):
            del self._ended[task_id]
            self._ended_written.add(task_id)
            self._write(record)

    def _write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, default=str)
        self.stream.write(json_line_safe(line) + "\n")

    def close(self) -> None:
        self._flush()
        self.stream.flush()
