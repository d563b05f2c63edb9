"""What the spawn gate reports: its events and its per-call records.

The events follow :mod:`teamlead.events` (frozen pydantic, ``type`` + ``version``,
``to_json()`` gives one NDJSON line); they live here until the lead moves them into
``events.py``. A :class:`SpawnRecord` is the gate's account of one Agent call, from which
the ledger builds ``Finished.tasks`` entries (``denied``/``rejected`` with the reason).
"""

from __future__ import annotations

import json
from typing import Literal, TypeAlias

from pydantic import BaseModel, ConfigDict

__all__ = [
    "DenyCode",
    "GateEvent",
    "SpawnAdmitted",
    "SpawnDenied",
    "SpawnQueued",
    "SpawnRecord",
    "SpawnRejected",
    "SpawnStatus",
]

GATE_EVENT_VERSION = 1

#: Why the gate said no: the user's limits, the deadline, the run ending, or a fault.
DenyCode = Literal[
    "spawn_budget",
    "turn_limit",
    "depth",
    "deadline",
    "wait_limit",
    "closed",
    "bad_input",
    "other_hook",
    "error",
]
#: ``queued`` waits in the hook; ``admitted`` was let through (it holds a slot until its
#: task ends); ``denied`` by the gate; ``rejected`` by the CLI after admission (its own
#: concurrency cap, a hook timeout) or cancelled while queued.
SpawnStatus = Literal["queued", "admitted", "denied", "rejected"]


class _GateEvent(BaseModel):
    model_config = ConfigDict(frozen=True)

    version: int = GATE_EVENT_VERSION

    def to_json(self) -> str:
        """One NDJSON line."""
        return json.dumps(self.model_dump(mode="json"), ensure_ascii=False)


class SpawnQueued(_GateEvent):
    """An Agent call waits for a slot; ``position`` is 1 for the next in line."""

    type: Literal["spawn_queued"] = "spawn_queued"
    tool_use_id: str
    description: str
    position: int
    running: int
    limit: int


class SpawnAdmitted(_GateEvent):
    """An Agent call may start; ``waited_s`` is its time in the gate (queue and stagger)."""

    type: Literal["spawn_admitted"] = "spawn_admitted"
    tool_use_id: str
    description: str
    waited_s: float
    running: int
    limit: int


class SpawnDenied(_GateEvent):
    """The gate refused an Agent call; ``reason`` is what the model was told."""

    type: Literal["spawn_denied"] = "spawn_denied"
    tool_use_id: str
    description: str
    code: DenyCode
    reason: str


class SpawnRejected(_GateEvent):
    """An Agent call never ran although the gate did not deny it (the CLI refused it)."""

    type: Literal["spawn_rejected"] = "spawn_rejected"
    tool_use_id: str
    description: str
    reason: str


GateEvent: TypeAlias = SpawnQueued | SpawnAdmitted | SpawnDenied | SpawnRejected


class SpawnRecord(BaseModel):
    """The gate's account of one Agent call (a snapshot; times are wall-clock seconds).

    Attributes:
        depth: 1 for the lead's spawns, 2 for a subagent's, ...
        parent_agent_id: the spawning subagent's task id (``agent_id`` in the hook input).
        turn: the model message the call came in (its id, or the gate's burst key).
        code: set with ``denied``; ``reason`` with ``denied`` and ``rejected``.
        task_id: the CLI's task id, once ``task_started`` named it.
        ended_at: when its slot was freed (terminal task event, rejection, run end).
    """

    model_config = ConfigDict(frozen=True)

    tool_use_id: str
    description: str
    subagent_type: str | None = None
    depth: int = 1
    parent_agent_id: str | None = None
    turn: str | None = None
    status: SpawnStatus
    code: DenyCode | None = None
    reason: str | None = None
    task_id: str | None = None
    queued_at: float | None = None
    admitted_at: float | None = None
    decided_at: float | None = None
    ended_at: float | None = None
