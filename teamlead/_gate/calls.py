"""One Agent call as the spawn gate sees it: the live :class:`Call`, its frozen record.

Both share one definition of their fields (:class:`CallFields`): a :class:`Call` is
mutable on purpose (it moves from queued to admitted, denied or rejected, and holds or
frees its slots), and :meth:`Call.snapshot` gives the frozen :class:`SpawnRecord` the rest
of the run sees. :func:`call_dispositions` turns the records into ``Finished.tasks``
entries for the calls that never became tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal

import anyio
from pydantic import BaseModel, ConfigDict

from .._redact import redact
from ..events import (
    DenyCode,
    Disposition,
    SpawnOutcome,
    TaskDisposition,
)

__all__ = [
    "Call",
    "CallFields",
    "SpawnRecord",
    "call_dispositions",
    "with_invalid_calls",
]


class CallFields(BaseModel):
    """The fields of one Agent call, shared by :class:`Call` and :class:`SpawnRecord`.

    Attributes:
        tool_use_id: the call's tool_use id (made unique by the gate when it repeats).
        description: the call's ``description`` input, cut to 200 characters.
        subagent_type: the call's ``subagent_type`` input, if any.
        depth: 1 for the lead's spawns, 2 for a subagent's, ...
        parent_agent_id: the spawning subagent's task id (``agent_id`` in the hook input).
        turn: the model message the call came in (its id, or the gate's burst key).
        status: where the call is (:data:`~teamlead.events.SpawnOutcome`: ``queued`` waits in
            the hook; ``admitted`` holds a slot until its task ends; ``rejected`` also when
            cancelled while queued).
        code: set with ``denied``; ``reason`` with ``denied`` and ``rejected``.
        task_id: the CLI's task id, once ``task_started`` named it.
        queued_at: when the call reached the gate (wall-clock seconds).
        admitted_at: when it was admitted.
        ended_at: when its slot was freed (terminal task event, rejection, run end).
        starved: it was denied while it waited for the process-wide cap (other runs held
            every slot), not for the run's own limits: its work is missing, not declined.
    """

    tool_use_id: str
    description: str
    subagent_type: str | None = None
    depth: int = 1
    parent_agent_id: str | None = None
    turn: str | None = None
    status: SpawnOutcome = "queued"
    code: DenyCode | None = None
    reason: str | None = None
    task_id: str | None = None
    queued_at: float | None = None
    admitted_at: float | None = None
    ended_at: float | None = None
    starved: bool = False


class SpawnRecord(CallFields):
    """The gate's account of one Agent call: a frozen snapshot of a :class:`Call`."""

    model_config = ConfigDict(frozen=True)

    status: SpawnOutcome  # a record always says where its call ended up


_RECORD_FIELDS = frozenset(CallFields.model_fields)


class Call(CallFields):
    """One Agent call while the gate decides on it and while its slots are held.

    Attributes:
        run_slot: holds a slot of the run's own limit.
        cap_slot: holds a slot of the process-wide :class:`~teamlead._gate.slots.SpawnCap`.
        budget: holds a unit of the spawn budget (and of its message's per-turn limit).
        waiting: the cancel scope of its wait for slots, while it waits.
        close_reason: why the wait was cancelled by the gate (the run or process ended).
        model_set: the model alias the gate gave its agent (``updatedInput.model``), if any.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    run_slot: bool = False
    cap_slot: bool = False
    budget: bool = False
    waiting: anyio.CancelScope | None = None
    close_reason: str | None = None
    model_set: str | None = None

    def snapshot(self) -> SpawnRecord:
        """The frozen record of this call as it stands."""
        return SpawnRecord(**{name: getattr(self, name) for name in _RECORD_FIELDS})


def _reissued(record: SpawnRecord, later: list[SpawnRecord]) -> bool:
    """Whether the lead re-issued a rejected call's work: a later call with the same
    description (and subagent type) that the gate admitted."""
    if not record.description:
        return False
    return any(
        r.status == "admitted"
        and r.description == record.description
        and r.subagent_type == record.subagent_type
        for r in later
    )


def with_invalid_calls(
    records: list[SpawnRecord], invalid: Mapping[str, str], order: Mapping[str, str]
) -> list[SpawnRecord]:
    """``records`` with a ``rejected`` record for each call the CLI refused for invalid
    input (``invalid``: tool_use id -> the CLI's reason), in the order the lead sent them.

    The CLI checks an Agent call's input before its PreToolUse hooks run, so the gate never
    sees such a call; the stream does (:attr:`teamlead.tracker.Tracker.invalid_calls`).

    Args:
        records: the gate's records, in arrival order.
        invalid: the refused calls the gate does not know.
        order: the lead's Agent calls in the order sent, tool_use id -> description.
    """
    known = {r.tool_use_id for r in records}
    position = {tool_use_id: i for i, tool_use_id in enumerate(order)}
    extra = [
        SpawnRecord(
            tool_use_id=tool_use_id,
            description=(order.get(tool_use_id) or "")[:200],
            status="rejected",
            reason=reason,
        )
        for tool_use_id, reason in invalid.items()
        if tool_use_id not in known
    ]
    extra.sort(key=lambda r: position.get(r.tool_use_id, len(position)))
    out: list[SpawnRecord] = []
    for record in records:
        at = position.get(record.tool_use_id)
        while extra and at is not None and position.get(extra[0].tool_use_id, at) < at:
            out.append(extra.pop(0))
        out.append(record)
    return out + extra


#: an admitted call of which nothing more was seen
_UNSEEN = "admitted, but the stream ended before the agent was seen to start or end"


def call_dispositions(
    records: list[SpawnRecord], seen: Callable[[str], bool] | None = None
) -> tuple[list[TaskDisposition], list[str]]:
    """``Finished.tasks`` entries for the Agent calls that never ran, and reason lines.

    Denied calls (the user's own limits) are ``not_run``; a call the CLI rejected, or one
    denied because the process-wide cap was starved by other runs, is ``missing`` (so the
    run is never ``completed``) unless the lead re-issued that work later. An admitted call
    of which ``seen`` says nothing more was seen (no task, no tool result: the stream broke
    first) is ``lost`` and ``missing``: no row would account for it otherwise.

    Args:
        records: the gate's records, in arrival order.
        seen: whether the stream showed what became of an admitted call (its tool_use id);
            ``None``: every admitted call counts as seen.

    Returns:
        the dispositions of the calls that never ran, and one reason line for each
        rejected call whose work was not re-issued.
    """
    out: list[TaskDisposition] = []
    reasons: list[str] = []
    for index, record in enumerate(records):
        description = redact(record.description or record.tool_use_id)
        status: Literal["denied", "rejected", "lost"]
        disposition: Disposition = "not_run"
        if record.status == "admitted":
            # its task started (a repeated id's call is keyed ``id#n``, which the stream
            # never names: its task id says it was seen)
            if seen is None or record.task_id is not None or seen(record.tool_use_id):
                continue
            status, disposition, reason = "lost", "missing", _UNSEEN
            reasons.append(f'Agent call "{description}" was lost: {reason}')
        elif record.status in ("denied", "rejected", "queued"):
            status = "denied" if record.status == "denied" else "rejected"
            reason = redact(record.reason or "")
            lost = status == "rejected" or record.starved
            if lost and not _reissued(record, records[index + 1 :]):
                disposition = "missing"
                reasons.append(f'Agent call "{description}" never ran: {reason or "rejected"}')
        else:
            continue
        out.append(
            TaskDisposition(
                id=record.tool_use_id,
                kind="call",
                description=description,
                status=status,
                disposition=disposition,
                source="none",
                reason=reason or None,
            )
        )
    return out, reasons
