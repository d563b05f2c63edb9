"""The status record teamlead keeps in its stores: how a session's last run ended.

The SDK's stores know transcripts, not outcomes. When a run ends (finished, partial,
failed or interrupted, not when its machine dies), teamlead writes one small record per
session into its own stores (Redis: ``teamlead:session:status:<project>:<session>``;
SQLite: the ``teamlead_session_status`` table), which ``teamlead sessions`` shows beside the
store's own listing. A session with no record never ended under teamlead: it is running, or
its machine died (resume it).

The record is versioned (``version``); a reader keeps fields it does not know and accepts
older versions. It is read back as untrusted input: one that is no such record reads as
no record at all.

Example:
    >>> record = SessionStatus(session_id="s", project_key="p", status="partial",
    ...                        reason="max_resumes", agents=4, used=2, lost=2, ended_at=1)
    >>> read_status(record.model_dump_json(), WarnOnce(), "a store").used
    2
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, ValidationError

from .._version import __version__
from .stored import MAX_ENTRY_BYTES, WarnOnce

if TYPE_CHECKING:
    from ..events import Finished

__all__ = ["STATUS_VERSION", "SessionStatus", "read_status", "status_of"]

STATUS_VERSION = 1
_COUNTED = frozenset({"workflow_agent", "teammate"})


class SessionStatus(BaseModel):
    """How a session's last teamlead run ended, as its store keeps it.

    Attributes:
        session_id: the session.
        project_key: the store's project key of the session (its sanitized working dir).
        status: the run's ``Finished.status``: ``completed``, ``partial`` or ``failed``.
        reason: the run's ``Finished.reason`` (``all_results_used``, ``interrupted``, ...).
        agents: the run's agents (Agent-tool agents, workflow agents, teammates).
        used: those whose result the final answer used (``included``).
        lost: those whose result is missing or who failed.
        ended_at: when the run ended, Unix epoch milliseconds.
        teamlead: the teamlead version that wrote the record.
    """

    model_config = ConfigDict(frozen=True, extra="allow")

    version: int = STATUS_VERSION
    session_id: str
    project_key: str
    status: str
    reason: str | None = None
    agents: int = 0
    used: int = 0
    lost: int = 0
    ended_at: int = 0
    teamlead: str = __version__


def read_status(raw: object, warn: WarnOnce, where: str) -> SessionStatus | None:
    """A stored status record, or ``None`` when it is not one (or over the size cap): then
    one warning says so."""
    if not isinstance(raw, (str, bytes)) or len(raw) > MAX_ENTRY_BYTES:
        status = None
    else:
        try:
            status = SessionStatus.model_validate_json(raw)
        except (ValidationError, ValueError, RecursionError):
            status = None
    if status is None:
        warn("status", f"session store {where}: skipped an unreadable status")
    return status


def status_of(
    finished: Finished, *, session_id: str, project_key: str, ended_at: int
) -> SessionStatus:
    """The record of a run that ended with ``finished``.

    An agent is a row of ``Finished.tasks`` of an Agent-tool agent (a task that is not a
    workflow), a workflow agent or a teammate; an Agent call that never ran and a
    workflow's own task are not agents.
    """
    rows = [
        row
        for row in finished.tasks
        if row.kind in _COUNTED or (row.kind == "task" and row.run_id is None)
    ]
    return SessionStatus(
        session_id=session_id,
        project_key=project_key,
        status=finished.status,
        reason=finished.reason,
        agents=sum(1 for row in rows if row.disposition != "not_run"),
        used=sum(1 for row in rows if row.disposition == "included"),
        lost=sum(1 for row in rows if row.disposition in ("missing", "failed")),
        ended_at=ended_at,
    )
