"""Collection: wait for the team, read the lead's inbox, fall back for tasks -> deliveries.

After each round the session asks the :class:`Collector` what is still outstanding. It
finds the session's team, waits (one ``wait_s`` budget for the whole run) for members
that have not reported, turns fresh inbox entries into deliveries, and recovers every
unused task result from its summary or transcript. Once a lead turn used a delivery,
:meth:`Collector.absorb` marks it and consumes its inbox entry, so nothing is delivered
twice.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias

from .._claude.inbox import consume_inbox, read_inbox, wait_for_inbox
from .._claude.inbox.model import InboxRead, TeammateMessage
from .._claude.team import Team, find_team
from .._claude.transcript import find_subagent_transcript, last_assistant_text
from .._redact import redact
from ..clock import Clock
from ..events import FallbackUsed, InboxCollected, TeamleadEvent, WaitingForTeam
from ..policy import Policy
from ..tracker import TaskInfo, Tracker
from .resume_prompt import Delivery, TaskSource

__all__ = ["Collector", "Member", "MemberStatus"]

MemberStatus: TypeAlias = Literal["pending", "reported"]


@dataclass
class Member:
    """A teammate of the session's team and whether it has reported."""

    name: str
    status: MemberStatus = "pending"
    detail: str = ""
    failed: bool = False


@dataclass
class Collector:
    """What the run has collected and delivered, and how to collect more.

    Args:
        config_dir: the Claude config dir holding teams, inboxes and transcripts.
        policy: waits and inbox consumption.
        clock: time source for the inbox wait.
    """

    config_dir: Path
    policy: Policy
    clock: Clock
    deliveries: dict[str, Delivery] = field(default_factory=dict)
    absorbed: set[str] = field(default_factory=set)
    members: dict[str, Member] = field(default_factory=dict)
    seen_inbox_keys: set[str] = field(default_factory=set)
    carry: list[Delivery] = field(default_factory=list)  # collected, but over the prompt cap
    _waited_s: float = 0.0
    _team: Team | None = None

    async def collect(
        self,
        tracker: Tracker,
        pending: list[Delivery],
        *,
        deadline: float,
        process_alive: bool = False,
    ) -> AsyncIterator[TeamleadEvent]:
        """Wait for outstanding work and fill ``pending`` with undelivered results.

        With ``process_alive`` (a client's CLI still runs), tasks still running are left
        to the CLI instead of being recovered as lost.
        """
        pending.extend(self.carry)
        self.carry = []
        session = tracker.session_id
        team = self._find_team(session)
        if team is not None:
            async for event in self._collect_team(team, tracker, pending, deadline):
                yield event
        for task in tracker.tasks.values():
            key = f"task:{task.task_id}"
            if task.absorbed or key in self.absorbed or key in self.deliveries:
                continue
            if not task.terminal and process_alive:
                continue
            delivery, source = self._task_delivery(task, tracker.session_id)
            yield FallbackUsed(
                task_id=task.task_id,
                description=redact(task.description),
                source=source,
                status=delivery.status,
                chars=len(delivery.text),
            )
            pending.append(delivery)
        for delivery in pending:
            self.deliveries.setdefault(delivery.key, delivery)

    async def _collect_team(
        self, team: Team, tracker: Tracker, pending: list[Delivery], deadline: float
    ) -> AsyncIterator[TeamleadEvent]:
        for teammate in team.config.teammates:
            self.members.setdefault(teammate.name, Member(teammate.name))
        read = read_inbox(team.lead_inbox, config_dir=self.config_dir)
        for message in read.messages:
            if message.is_report and message.sender in self.members:
                self.members[message.sender].status = "reported"  # already in the file
        waiting = [m.name for m in self.members.values() if m.status == "pending"]
        satisfied = True
        if waiting:
            # wait_s is one budget for the whole run, not per round
            budget = self.policy.wait_s - self._waited_s
            wait_s = max(0.0, min(budget, deadline - self.clock.monotonic()))
            yield WaitingForTeam(
                session_id=tracker.session_id,
                open_tasks=[t.task_id for t in tracker.open_tasks],
                pending_members=waiting,
                team=team.name,
                wait_s=wait_s,
            )
            wait_started = self.clock.monotonic()
            result = await wait_for_inbox(
                team.lead_inbox,
                until=self._members_reported,
                policy=self.policy.inbox,
                clock=self.clock,
                deadline=wait_started + wait_s,
                config_dir=self.config_dir,
            )
            self._waited_s += self.clock.monotonic() - wait_started
            read, satisfied = result.read, result.satisfied
        fresh = [m for m in read.messages if m.key not in self.seen_inbox_keys and not m.read]
        for message in fresh:
            self.seen_inbox_keys.add(message.key)
            self._note_member(message)
            if message.is_result:
                pending.append(_inbox_delivery(message, team))
        if fresh or read.warnings:
            yield InboxCollected(
                team=team.name,
                messages=[_message_summary(m) for m in fresh],
                warnings=list(read.warnings),
                satisfied=satisfied,
            )

    def _find_team(self, session: str | None) -> Team | None:
        if self._team is not None or not session:
            return self._team
        self._team = find_team(session, config_dir=self.config_dir)
        return self._team

    def _members_reported(self, read: InboxRead) -> bool:
        reported = {m.sender for m in read.messages if m.is_report}
        return all(m.status == "reported" or m.name in reported for m in self.members.values())

    def _note_member(self, message: TeammateMessage) -> None:
        if message.sender not in self.members and not (message.is_report or message.is_result):
            return  # a stranger's protocol frame is reported, but nobody waits for it
        member = self.members.setdefault(message.sender, Member(message.sender))
        if message.is_report or message.is_result:
            member.status = "reported"
        if message.completed_status == "failed" or message.idle_reason == "failed":
            member.failed = True
            member.detail = message.failure_reason or "reported a failure"

    def _task_delivery(self, task: TaskInfo, session: str | None) -> tuple[Delivery, TaskSource]:
        status = task.status if task.terminal else "lost"
        text = ""
        source_of: TaskSource = "none"
        if task.status == "completed" and task.summary and task.summary.strip():
            text, source_of = task.summary, "summary"
        else:
            transcript = self._transcript_text(task, session)
            if transcript:
                text, source_of = transcript, "transcript"
            elif task.summary:
                text, source_of = task.summary, "summary"
        delivery = Delivery(
            key=f"task:{task.task_id}",
            kind="task",
            label=task.description or task.task_id,
            status=status,
            text=text,
            source=source_of,
        )
        return delivery, source_of

    def _transcript_text(self, task: TaskInfo, session: str | None) -> str | None:
        candidates: list[Path] = []
        if task.output_file:
            candidates.append(Path(task.output_file))
        if session:
            try:
                found = find_subagent_transcript(self.config_dir, session, task.task_id)
            except Exception:  # noqa: BLE001 - a malformed id must not stop the fallback
                found = None
            if found is not None:
                candidates.append(found)
        for path in candidates:
            try:
                text = last_assistant_text(path)
            except OSError:
                continue
            if text:
                return text
        return None

    async def absorb(self, delivered: list[Delivery]) -> list[str]:
        """A successful lead turn used ``delivered``: mark them, consume their inbox entries.

        Returns:
            reasons for the ledger: inbox entries that could not be consumed.
        """
        reasons: list[str] = []
        by_team: dict[Path, list[str]] = {}
        for delivery in delivered:
            self.absorbed.add(delivery.key)
            if delivery.inbox_key and delivery.team is not None:
                by_team.setdefault(delivery.team.lead_inbox, []).append(delivery.inbox_key)
        if not self.policy.consume_inbox:
            return reasons
        for path, keys in by_team.items():
            try:
                done = await consume_inbox(
                    path, keys, config_dir=self.config_dir, clock=self.clock, own_pids=_own_pids()
                )
            except Exception as exc:  # noqa: BLE001 - the results were used; report, do not fail
                reasons.append(f"could not consume delivered inbox entries: {redact(str(exc))}")
                continue
            if done.refused:
                reasons.append(f"inbox entries left in place: {done.refused}")
        return reasons

    def missing_lines(self) -> list[str]:
        """The teammates the resume prompt names as not reported or failed."""
        lines = [
            f'teammate "{m.name}" has not reported'
            for m in self.members.values()
            if m.status == "pending"
        ]
        lines += [
            f'teammate "{m.name}" failed: {m.detail}' for m in self.members.values() if m.failed
        ]
        return lines


def _own_pids() -> list[int]:
    """Our CLI children: a lead process recorded by them is us, not a rival reader."""
    from .._procs import descendants

    return [p.pid for p in descendants()]


def _message_summary(message: TeammateMessage) -> dict[str, Any]:
    return {
        "from": message.sender,
        "kind": message.kind,
        "frame": message.frame_type,
        "summary": redact(message.summary or "")[:200] or None,
        "status": message.completed_status,
        "is_result": message.is_result,
    }


def _inbox_delivery(message: TeammateMessage, team: Team) -> Delivery:
    if message.kind == "idle":
        text = message.result or message.summary or ""
        status = message.completed_status or "resolved"
    else:
        text, status = message.text, "message"
    return Delivery(
        key=f"inbox:{message.key}",
        kind="teammate",
        label=message.sender,
        status=status,
        text=text,
        source="inbox",
        inbox_key=message.key,
        team=team,
    )
