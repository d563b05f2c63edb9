"""How an agent ended, judged from evidence rather than from the CLI's status alone.

The CLI reports an agent it stopped at its subagent type's ``maxTurns`` as ``completed``
(its result opens with a note that the text is PARTIAL), and agents cut short otherwise can
be reported completed too. So a task's end is judged from what it left: the notification's
note, and its transcript's last assistant message (its ``stop_reason``, a tool call with no
turn after it, a final text). Only a ``finished`` end counts as a complete result (see
:data:`teamlead.events.EndKind`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .._claude import TranscriptEnd, find_subagent_transcript, transcript_end, turn_limit
from ..events import EndKind
from ..tracker import TaskInfo

__all__ = ["AgentEnd", "judge_end", "read_end", "read_evidence", "transcript_paths"]


@dataclass(frozen=True)
class AgentEnd:
    """How one task's agent ended.

    Attributes:
        kind: see :data:`~teamlead.events.EndKind`.
        turns: the turn limit the CLI stopped it at (``turn_limit``).
    """

    kind: EndKind
    turns: int | None = None

    @property
    def finished(self) -> bool:
        """Whether its result is complete."""
        return self.kind == "finished"

    def describe(self) -> str:
        """The cut, for a reason line and the resume prompt."""
        if self.kind == "turn_limit" and self.turns:
            return f"stopped at its {self.turns}-turn limit before finishing"
        return _SAID[self.kind]


_SAID: dict[EndKind, str] = {
    "finished": "ended",
    "turn_limit": "stopped at its turn limit before finishing",
    "output_limit": "was cut at the output token limit before finishing",
    "no_final_message": "ended without a final message",
    "failed": "failed",
    "lost": "was lost",
}


def judge_end(task: TaskInfo, evidence: TranscriptEnd | None) -> AgentEnd:
    """How ``task`` ended, from its state, its notification's summary and ``evidence`` (its
    transcript's end; ``None`` when it could not be read: then the CLI's word stands)."""
    if task.status not in ("completed", "failed"):
        return AgentEnd("lost")  # never ended, or stopped or killed with its process
    if evidence is not None and evidence.stop_reason == "max_tokens":
        return AgentEnd("output_limit")
    turns = turn_limit(task.summary)
    if turns is not None:
        return AgentEnd("turn_limit", turns)
    if task.status == "failed":
        return AgentEnd("failed")
    if evidence is not None and evidence.final_text is None:
        return AgentEnd("no_final_message")
    return AgentEnd("finished")


def transcript_paths(config_dir: Path, task: TaskInfo, session: str | None) -> list[Path]:
    """Where ``task``'s transcript may be: its output file, then its file in ``session``."""
    paths: list[Path] = []
    if task.output_file:
        paths.append(Path(task.output_file))
    if session:
        try:
            found = find_subagent_transcript(config_dir, session, task.task_id)
        except Exception:  # noqa: BLE001 - a malformed id must not stop the fallback
            found = None
        if found is not None:
            paths.append(found)
    return paths


def read_evidence(config_dir: Path, task: TaskInfo, session: str | None) -> TranscriptEnd | None:
    """How ``task``'s transcript ends, read from the end; ``None`` for a task that is not an
    agent's (a workflow's output file is its script's result, a shell's its output: neither
    is a transcript) or when none can be read."""
    if task.is_workflow or task.task_type not in (None, "local_agent"):
        return None
    for path in transcript_paths(config_dir, task, session):
        evidence = transcript_end(path)
        if evidence is not None:
            return evidence
    return None


def read_end(config_dir: Path, task: TaskInfo, session: str | None) -> AgentEnd:
    """:func:`judge_end` on ``task``'s transcript (a task that never ended is ``lost``
    without reading it)."""
    evidence = read_evidence(config_dir, task, session) if task.terminal else None
    return judge_end(task, evidence)
