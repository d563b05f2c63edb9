"""What the spawn gate reports: its events and its per-call records.

The events themselves live in :mod:`teamlead.events` (re-exported here for the gate's
modules). A :class:`SpawnRecord` is the gate's account of one Agent call, from which
the ledger builds ``Finished.tasks`` entries (``denied``/``rejected`` with the reason).
"""

from __future__ import annotations

from typing import Literal, TypeAlias

from pydantic import BaseModel, ConfigDict

from ..events import DenyCode, SpawnAdmitted, SpawnDenied, SpawnQueued, SpawnRejected

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

#: ``queued`` waits in the hook; ``admitted`` was let through (it holds a slot until its
#: task ends); ``denied`` by the gate; ``rejected`` by the CLI after admission (its own
#: concurrency cap, a hook timeout) or cancelled while queued.
SpawnStatus = Literal["queued", "admitted", "denied", "rejected"]


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
