"""One past run, as the history keeps it: a versioned :class:`RunRecord` with a row per agent.

A record is written by the run that it tells of and read back by ``teamlead ps --all``,
``show`` and ``view``: it is parsed at this edge (every field typed, unknown fields kept,
older versions read as their fields allow), and its texts (the prompt, the answer, each
agent's prompt and result) are the user's and the agents' words, shown as text only.

An agent's result longer than :data:`INLINE_RESULT_CHARS` is not in the record: it is kept
in a file of its own beside it, which :attr:`AgentRecord.result_ref` names (and
:attr:`AgentRecord.result_chars` sizes), so that listing the history stays cheap.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..events import TaskDisposition

__all__ = ["INLINE_RESULT_CHARS", "RECORD_VERSION", "AgentRecord", "RunRecord"]

#: The ``version`` of a record this code writes.
RECORD_VERSION = 1
#: An agent's result up to this many characters is kept in the record itself.
INLINE_RESULT_CHARS = 8000


class AgentRecord(BaseModel):
    """One agent of a past run: its row of the run's ``Finished`` with its prompt and its
    whole result.

    Attributes:
        id: the agent's id (as in :class:`~teamlead.events.TaskDisposition`).
        kind: task, teammate, workflow agent, call...
        description: what the lead called it.
        status: how it ended, as the CLI said.
        ended: how it ended, as its transcript showed (a ``completed`` agent may have been
            cut: :data:`~teamlead.events.CUT_ENDS`).
        disposition: whether the final answer used its result.
        parent: the agent (or workflow task) it ran under.
        label: a workflow agent's label.
        reason: why it was denied, rejected or stopped, or its error.
        prompt: what it was asked to do, when the run saw it.
        result: its result, when at most :data:`INLINE_RESULT_CHARS`.
        result_ref: the file beside the record holding a longer result.
        result_chars: the length of its whole result.
        tokens_in / tokens_out / requests / tool_uses / duration_s: as on the row.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str
    kind: str = "task"
    description: str = ""
    status: str = "unknown"
    ended: str | None = None
    disposition: str | None = None
    parent: str | None = None
    label: str | None = None
    reason: str | None = None
    prompt: str | None = None
    result: str | None = None
    result_ref: str | None = None
    result_chars: int | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    requests: int | None = None
    tool_uses: int | None = None
    duration_s: float | None = None

    @classmethod
    def of_row(cls, row: TaskDisposition, *, prompt: str | None, result: str | None) -> AgentRecord:
        """The record of ``row`` with the agent's ``prompt`` and whole ``result`` (either may
        be unknown: ``None``; then the row's own result is kept)."""
        fields = row.model_dump(
            exclude={"result", "result_file", "started_at", "ended_at", "source"}
        )
        text = result if result is not None else row.result
        return cls(
            **fields,
            prompt=prompt,
            result=text,
            result_chars=None if text is None else len(text),
        )


class RunRecord(BaseModel):
    """One finished run (see the module docstring).

    Attributes:
        version: the record's format (:data:`RECORD_VERSION` when written by this code).
        run: the run's id (the id ``teamlead ps`` showed while it ran).
        label: what the run was, when a program named it (an experiment's trial: its arm,
            task and trial number).
        command: what the process was started as (``teamlead ask ...``).
        prompt: the prompt the run was started with (``None`` for a client's run, whose
            prompt the client sent).
        mode: ``query`` (``ask``, ``query``), ``resume`` or ``client``.
        options: the options that shape a run (model, directory, limits).
        session_id: the lead's session id.
        status / reason / reasons: as on :class:`~teamlead.events.Finished`.
        result: the final answer.
        cost_usd: what the run cost, as the CLI reported.
        resumes: how many times the lead was resumed.
        started / ended: when the run started and ended (seconds since the epoch).
        agents: every agent of the run.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    version: int = RECORD_VERSION
    run: str
    label: str | None = None
    command: str = ""
    prompt: str | None = None
    mode: str = "query"
    options: dict[str, Any] = Field(default_factory=dict)
    session_id: str | None = None
    status: str = "unknown"
    reason: str | None = None
    reasons: list[str] = Field(default_factory=list)
    result: str | None = None
    cost_usd: float = 0.0
    resumes: int = 0
    started: float = 0.0
    ended: float = 0.0
    agents: list[AgentRecord] = Field(default_factory=list)

    @property
    def duration_s(self) -> float:
        """How long the run took."""
        return max(0.0, self.ended - self.started)

    def matches(self, ref: str) -> bool:
        """Whether ``ref`` is this run's id or session id, or a prefix of one."""
        ref = ref.strip().lower()
        return bool(ref) and (
            self.run.startswith(ref)
            or (self.session_id is not None and self.session_id.lower().startswith(ref))
        )
