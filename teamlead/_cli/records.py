"""A run's NDJSON records (``ask --json``, a run's watch feed) as lines for people.

``teamlead watch RUN`` without ``--json`` prints one line per record: each is read back
into the event or tracker fact it was written from and said as ``ask``'s progress says it
(:mod:`.team_view`). A record is untrusted: one this version cannot read is named by its
type, never dumped raw; the caller escapes every line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pydantic

from .._claude import is_scripted_message
from .._ndjson import current_record, read_record
from ..events import AgentUsage
from ..tracker import AgentCallSeen, LeadTurn, SessionSeen, TaskEnded, TaskStarted
from .team_view import describe_event, describe_tracked, task_ended_line

__all__ = ["RecordLines"]

#: The tracker facts with no line, as in the progress.
_QUIET = frozenset({"task_progress", "subagent_turn"})


class RecordLines:
    """One run's records, each as a line: what a task is called (from its start) and
    whether the model is scripted (from its messages' ids) carry over between records."""

    def __init__(self) -> None:
        self._names: dict[str, str] = {}  # task id -> its description
        self._scripted = False

    def line(self, record: Mapping[str, Any]) -> str | None:
        """``record`` as a line, or ``None`` for a record the progress shows no line for."""
        record = current_record(record)
        kind = str(record.get("type") or "")
        if kind in _QUIET:
            return None
        try:
            event = read_record(record)
        except KeyError:
            return f"{kind or 'a record without a type'} (unknown to this version)"
        except ValueError:
            return f"{kind}: (a record this version cannot read)"
        if isinstance(event, AgentUsage):
            return _usage_line(event)
        if isinstance(event, pydantic.BaseModel):
            return describe_event(event, scripted=self._scripted)
        return self._tracked(event)

    def _tracked(self, fact: Any) -> str | None:
        if isinstance(fact, SessionSeen):
            return f"session {fact.session_id}"
        if isinstance(fact, AgentCallSeen):
            return f"lead delegates {fact.description!r}"
        if isinstance(fact, TaskStarted):
            self._names[fact.task_id] = fact.description
        if isinstance(fact, TaskEnded):
            return task_ended_line(fact, self._names.get(fact.task_id, ""))
        if isinstance(fact, LeadTurn):
            self._scripted = self._scripted or is_scripted_message(fact.message_id)
            said = " ".join((fact.text or fact.error or "").split())[:160]  # one line
            used = f"[{', '.join(fact.tool_names)}]" if fact.tool_names else ""
            return (
                f"lead: {' '.join(part for part in (said, used) if part)}" if said or used else None
            )
        return describe_tracked(fact, verbose=True)


def _usage_line(usage: AgentUsage) -> str:
    """``usage of agent 3f2a…: 4 request(s), 1,234 tokens, last tool Grep``."""
    who = "the lead" if usage.kind == "lead" else f"agent {usage.agent_id[:12] or '?'}"
    known = [t for t in (usage.input_tokens, usage.output_tokens) if t is not None]
    tokens = f", {sum(known):,} tokens" if known else ""
    tool = f", last tool {usage.last_tool}" if usage.last_tool else ""
    limited = f", {usage.rate_limited} rate-limited" if usage.rate_limited else ""
    return f"usage of {who}: {usage.requests} request(s){tokens}{limited}{tool}"
