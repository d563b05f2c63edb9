"""Collection: wait for the team, read the lead's inbox, fall back for tasks -> deliveries.

After each round a :class:`Collection` finds the session's team, waits (one ``wait_s``
budget for the whole run) for members that have not reported, turns fresh inbox entries
into deliveries and recovers every unused task result from its summary or transcript;
:func:`absorb` marks what a lead turn used (and consumes its inbox entry), so nothing is
delivered twice; :func:`dispositions` says at the end what became of every task and
teammate. Only this module changes the run's :class:`~.delivered.Collected`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal, TypeAlias, cast

from .._claude import (
    InboxRead,
    JournalResult,
    Notification,
    Team,
    TeammateMessage,
    consume_inbox,
    journal_results,
    last_assistant_text,
    read_inbox,
    resolve_team,
    session_notifications,
    wait_for_inbox,
    workflow_result,
)
from .._redact import redact
from ..events import (
    ROW_RESULT_CHARS,
    Disposition,
    FallbackUsed,
    InboxCollected,
    TaskDisposition,
    TeamleadEvent,
    WaitingForTeam,
)
from ..tracker import TaskEnded, TaskInfo, Tracker, WorkflowAgent, WorkflowRun
from .delivered import Collected, CutResult, Member
from .ending import AgentEnd, read_end, read_evidence, transcript_paths
from .resume_prompt import (
    FAILED_STATES,
    Delivery,
    DeliveryStatus,
    TaskOutcome,
    TaskSource,
    WorkflowResume,
    escape,
)
from .state import RunState

__all__ = [
    "Collection",
    "absorb",
    "cut_rows",
    "dispositions",
    "judge_ends",
    "row_text",
    "used_deliveries",
    "with_results",
]

logger = logging.getLogger("teamlead.inbox")  # where the inbox reader's warnings go

_EVENT_MESSAGES = 50
_EVENT_WARNINGS = 20
_EVENT_CHARS = 200
_Source: TypeAlias = Literal["lead", "summary", "transcript", "inbox", "none"]
_MAX_LOST_REASON = 160
#: the states a teammate may report that the resume prompt knows
_REPORTED: dict[str, DeliveryStatus] = {"failed": "failed", "completed": "completed"}
#: a task id the resume prompt may name in a SendMessage call (the CLI's ids are hex)
_PLAIN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: how an agent still running when its CLI process ended was cut, as the prompt says it
_LOST_WITH_ITS_CLI = "was lost with its CLI process before finishing"


class Collection:
    """Wait for outstanding work, until ``deadline`` at the latest, and collect what was not
    delivered yet; iterate it for its events, then :attr:`deliveries` holds what it found,
    after the deliveries ``carried`` from an earlier prompt they did not fit. With
    ``process_alive`` (a client's CLI still runs), tasks still running are left to the CLI
    instead of being recovered as lost."""

    def __init__(
        self,
        state: RunState,
        *,
        deadline: float,
        carried: list[Delivery] | None = None,
        process_alive: bool = False,
    ) -> None:
        self._state = state
        self._tracker = state.stream.tracker
        self._collected = state.delivered.collected
        self._config_dir = state.ask.config_dir
        self._policy = state.ask.policy
        self._clock = state.clock
        self._deadline = deadline
        self._process_alive = process_alive
        self._found: list[Delivery] = list(carried or [])
        self._done = False
        self._notified: dict[str, Notification] | None = None
        self._journals: dict[str, dict[str, JournalResult]] = {}

    @property
    def deliveries(self) -> list[Delivery]:
        """What the collection found, carried deliveries first; only once it has ended."""
        if not self._done:
            raise RuntimeError("a collection's deliveries are known only once it has ended")
        return self._found

    def __aiter__(self) -> AsyncIterator[TeamleadEvent]:
        return self._collect()

    async def _collect(self) -> AsyncIterator[TeamleadEvent]:
        tracker, pending, collected = self._tracker, self._found, self._collected
        team = self._find_team()
        if team is not None:
            async for event in self._collect_team(team):
                yield event
        exited = not self._process_alive
        self._journaled_ends(exited=exited)
        lost = {run.task_id: agents for run, agents in tracker.lost_workflow_agents(exited=exited)}
        if exited:
            self._ended_unannounced()
        judge_ends(self._state)
        for task in tracker.tasks.values():
            end = collected.ends[task.task_id][1]
            delivery = self._continue_ask(task, end) or self._outstanding(task, lost, end)
            if delivery is None:
                continue
            if delivery.key == f"task:{task.task_id}" and not task.is_workflow:
                collected.delivered_ends[delivery.key] = task.ended_seq
            yield FallbackUsed(
                task_id=task.task_id,
                description=redact(task.description),
                source=cast(TaskSource, delivery.source),  # never an inbox's
                status=_task_outcome(task),
                chars=len(delivery.text),
            )
            pending.append(delivery)
        for task_id, agents in lost.items():
            fresh = self._fresh_run(tracker.tasks[task_id], agents)
            if fresh is not None:
                pending.append(fresh)
        for delivery in pending:
            collected.deliveries.setdefault(delivery.key, delivery)
        self._done = True

    def _outstanding(
        self, task: TaskInfo, lost: dict[str, list[WorkflowAgent]], end: AgentEnd
    ) -> Delivery | None:
        """What of ``task`` no lead turn used yet (``lost``: the workflow agents lost, by task
        id), if anything is left to deliver."""
        key = f"task:{task.task_id}"
        collected = self._collected
        if key in collected.absorbed or key in collected.deliveries:
            made_of = collected.delivered_ends.get(key)
            if made_of is None or not task.terminal or made_of == task.ended_seq:
                return None
            # it ended again since (continued): its new end supersedes what was delivered
            collected.absorbed.discard(key)
            collected.deliveries.pop(key, None)
            collected.unread.pop(key, None)
            self._found[:] = [d for d in self._found if d.key != key]  # carried, not sent yet
        if task.absorbed and task.task_id not in lost:
            # the lead was told the task ended; a workflow's result may still have been cut
            # in that notification, and the rest of it is outstanding
            run = task.workflow
            return self._rest_of_cut(task, run) if run is not None else None
        if not task.terminal and self._process_alive:
            return None
        if task.workflow is not None:
            agents = lost.get(task.task_id, [])
            return self._workflow_delivery(task, task.workflow, agents)
        return task_delivery(self._config_dir, task, self._tracker.session_id, end)

    async def _collect_team(self, team: Team) -> AsyncIterator[TeamleadEvent]:
        tracker = self._tracker
        for teammate in team.config.teammates:
            self._collected.members.setdefault(teammate.name, Member(teammate.name))
        read = read_inbox(team.lead_inbox, config_dir=self._config_dir, log=False)
        for warning in read.warnings:
            if warning not in self._collected.logged:
                self._collected.logged.add(warning)
                logger.warning("%s", warning)
        for message in read.messages:
            if message.is_report and message.sender in self._collected.members:
                self._collected.members[message.sender].status = "reported"  # already in the file
        waiting = [m.name for m in self._collected.members.values() if m.status == "pending"]
        satisfied = True
        if waiting:
            # wait_s is one budget for the whole run, not per round
            budget = self._policy.wait_s - self._collected.waited_s
            wait_s = max(0.0, min(budget, self._deadline - self._clock.monotonic()))
            yield WaitingForTeam(
                session_id=tracker.session_id,
                open_tasks=[t.task_id for t in tracker.open_tasks],
                pending_members=waiting,
                team=team.name,
                wait_s=wait_s,
            )
            wait_started = self._clock.monotonic()
            satisfied = False  # unless the wait ends before a stop cancels it
            with self._state.stop.cancels():
                result = await wait_for_inbox(
                    team.lead_inbox,
                    until=self._members_reported,
                    policy=self._policy.inbox,
                    clock=self._clock,
                    deadline=wait_started + wait_s,
                    config_dir=self._config_dir,
                    logged=self._collected.logged,
                )
                read, satisfied = result.read, result.satisfied
            self._collected.waited_s += self._clock.monotonic() - wait_started
        fresh = [
            m for m in read.messages if m.key not in self._collected.seen_inbox_keys and not m.read
        ]
        for message in fresh:
            self._collected.seen_inbox_keys.add(message.key)
            self._note_member(message)
            if message.is_result:
                self._found.append(_inbox_delivery(message, team))
        if fresh or read.warnings:
            shown = fresh[:_EVENT_MESSAGES]  # one NDJSON line stays small, however big the inbox
            yield InboxCollected(
                team=team.name,
                messages=[_message_summary(m) for m in shown],
                warnings=list(read.warnings[:_EVENT_WARNINGS]),
                satisfied=satisfied,
                omitted_messages=len(fresh) - len(shown),
                omitted_warnings=max(0, len(read.warnings) - _EVENT_WARNINGS),
            )

    def _ended_unannounced(self) -> None:
        """An agent whose transcript shows it finished (its last message a final text that
        ended its turn, :attr:`~teamlead._claude.transcript.TranscriptEnd.natural_end`) but
        whose end the stream never showed, its CLI gone (a notification the CLI dropped:
        claude-code #86200), ended ``completed``: its end is taken from the transcript, and
        its result is delivered like any other outstanding result."""
        tracker = self._tracker
        for task in tracker.open_tasks:
            evidence = read_evidence(self._config_dir, task, tracker.session_id)
            if evidence is None or not evidence.natural_end:
                continue  # still at work, or nothing to prove it finished: lost
            ended = TaskEnded(task.task_id, "completed", "task_updated")
            tracker.apply(ended)
            self._state.agents.observe([ended], tracker)

    def _journaled_ends(self, *, exited: bool) -> None:
        """A workflow agent of an attempt that ended (or whose CLI ``exited``) whose result
        its run's journal holds finished, though the last snapshot the stream gave still
        shows it at work: it is ``done`` from now on. An attempt still running is left to
        its snapshots (its lost agents and its delivery wait for its end)."""
        for run in self._tracker.workflow_runs:
            if not (run.ended or exited) or all(a.state == "done" for a in run.agents.values()):
                continue
            journaled = self._journaled(run)
            for index, agent in run.agents.items():
                if agent.state != "done" and agent.agent_id in journaled:
                    run.agents[index] = dataclasses.replace(agent, state="done")

    def _find_team(self) -> Team | None:
        collected, session = self._collected, self._tracker.session_id
        if collected.team is not None or collected.ambiguous_team is not None or not session:
            return collected.team
        found = resolve_team(session, config_dir=self._config_dir)
        collected.team, collected.ambiguous_team = found.team, found.ambiguous
        return collected.team

    def _members_reported(self, read: InboxRead) -> bool:
        reported = {m.sender for m in read.messages if m.is_report}
        return all(
            m.status == "reported" or m.name in reported for m in self._collected.members.values()
        )

    def _note_member(self, message: TeammateMessage) -> None:
        if message.sender not in self._collected.members and not (
            message.is_report or message.is_result
        ):
            return  # a stranger's protocol frame is reported, but nobody waits for it
        member = self._collected.members.setdefault(message.sender, Member(message.sender))
        if message.is_report or message.is_result:
            member.status = "reported"
        if message.completed_status == "failed" or message.idle_reason == "failed":
            member.failed = True
            member.detail = message.failure_reason or "reported a failure"

    def _workflow_delivery(
        self, task: TaskInfo, run: WorkflowRun, lost: list[WorkflowAgent]
    ) -> Delivery:
        """A workflow task's delivery: its finished agents' results (from the run's journal,
        else the snapshot's previews) and, when it lost agents, how to resume it."""
        journaled = dict(self._journaled(run))  # what is left once each is placed
        parts: list[str] = []
        source: TaskSource = "none"
        for index in sorted(run.agents):
            agent = run.agents[index]
            found = journaled.pop(agent.agent_id or "", None)
            if agent.state != "done" and found is None:
                continue
            text = found.text if found is not None else agent.result_preview
            if text:
                source = "transcript" if found is not None else "summary"
                parts.append(f"[{agent.label}] {text}")
        # the journal is the truth: an agent it holds finished, though the last snapshot the
        # stream gave (or a rebuilt session, which has none) does not say so yet
        parts += [f"[{r.label or agent_id}] {r.text}" for agent_id, r in journaled.items()]
        if journaled:
            source = "transcript"
        if not parts and task.summary:
            parts.append(task.summary)
            source = "summary"
        denied = self._state.agents.exhaust_reason is not None
        limited = self._limited(lost)
        resumable = bool(
            lost and run.run_id and not run.error and not denied and len(limited) < len(lost)
        )
        unfinished = task.status != "completed" and not run.error and not lost
        if unfinished and run.run_id and not denied and self._tracker.later_attempt(run) is None:
            resumable = True  # a run cut short with no agents known (a rebuilt session)
        workflow = None
        if (lost or unfinished) and run.run_id:
            workflow = self._resume_of(run, run.run_id, task, lost, limited, resumable)
        return Delivery(
            key=f"task:{task.task_id}",
            kind="workflow",
            label=run.description or run.name or task.task_id,
            status=_task_outcome(task),
            text="\n".join(parts),
            source=source,
            workflow=workflow,
        )

    def _journaled(self, run: WorkflowRun) -> dict[str, JournalResult]:
        """The results ``run``'s journal holds, by agent id (none without its ids), read
        once per collection."""
        session = self._tracker.session_id
        if not session or not run.run_id:
            return {}
        if run.run_id not in self._journals:
            self._journals[run.run_id] = journal_results(self._config_dir, session, run.run_id)
        return self._journals[run.run_id]

    def _limited(self, lost: list[WorkflowAgent]) -> dict[int, str]:
        """The ``lost`` agents the user's own limits stopped (named, never run again), by
        index, with why."""
        agents = self._state.agents
        return {
            a.index: why
            for a in lost
            if a.agent_id and (why := agents.stopped_by_limits(a.agent_id)) is not None
        }

    def _notification(self, task_id: str) -> Notification | None:
        """The notification the CLI gave the lead for ``task_id``, from the session's
        transcript (read once per collection)."""
        session = self._tracker.session_id
        if self._notified is None:
            self._notified = {}
            if session:
                try:
                    self._notified = session_notifications(self._config_dir, session)
                except Exception as exc:  # noqa: BLE001 - no transcript: nothing seen cut
                    logger.debug("no notifications read back: %s", exc)
        return self._notified.get(task_id)

    def _rest_of_cut(self, task: TaskInfo, run: WorkflowRun) -> Delivery | None:
        """The rest of a workflow result the CLI cut in the lead's notification, as a
        delivery; ``None`` when the lead was shown all of it (or nothing is left to give).

        The rest comes from the task's output file (the whole result), from the start of
        the item the cut fell in; without that file, the finished agents' results the lead
        was not shown come from the run's journal.
        """
        note = self._notification(task.task_id)
        if note is None or note.cut is None:
            return None
        cut = note.cut
        journaled = self._journaled(run)
        results = _agent_results(run, journaled)
        path = run.output_file or task.output_file or note.output_file
        whole = workflow_result(Path(path)) if path else None
        rest = cut.rest(whole) if whole is not None else None
        head = (
            f"The CLI's notification of this workflow showed you only the first "
            f"{len(cut.shown)} characters of its result and cut the other {cut.chars}. "
        )
        if rest is not None:
            text = rest[1]
            lead_in = head + (
                "Here is the rest, from its output file, beginning with the item the cut fell in:"
            )
        else:
            unseen = [
                f"[{run.agents[i].label}] {journaled[agent_id].text}"
                for i in sorted(run.agents)
                if (agent_id := run.agents[i].agent_id) in journaled
                and not _seen_in(results.get(agent_id, ()), cut.shown)
            ]
            text = "\n".join(unseen)
            lead_in = head + (
                "Here are the results of its finished agents that it did not show, from the "
                "run's journal:"
            )
        self._collected.cuts[task.task_id] = CutResult(
            shown=cut.shown, cut=cut.chars, rest=len(text), results=results
        )
        if not text:
            return None
        return Delivery(
            key=f"task:{task.task_id}",
            kind="workflow",
            label=run.description or run.name or task.task_id,
            status=_task_outcome(task),
            text=text,
            source="transcript",
            lead_in=lead_in,
        )

    def _fresh_run(self, task: TaskInfo, lost: list[WorkflowAgent]) -> Delivery | None:
        """The ask for a new run of a workflow whose resume the CLI refused, once the lead
        has the results of its finished agents (a prompt delivered them with the ask to
        resume it): a delivery with no result of its own; else ``None``."""
        run, tracker, collected = task.workflow, self._tracker, self._collected
        if run is None or not run.run_id or run.run_id not in tracker.refused_resumes:
            return None
        key = f"fresh:{run.run_id}"
        if key in collected.absorbed or key in collected.deliveries:
            return None  # asked once: a lead that did not start it is left with the loss
        if f"task:{task.task_id}" not in collected.absorbed or tracker.later_attempt(run):
            return None  # its results go with the ask (the task's delivery), or it ran again
        if self._state.agents.exhaust_reason is not None:
            return None
        limited = self._limited(lost)
        if len(limited) >= len(lost):
            return None  # the user's own limits stopped them: never run again
        return Delivery(
            key=key,
            kind="workflow",
            label=run.description or run.name or task.task_id,
            status="lost",
            text="",
            source="none",
            workflow=self._resume_of(run, run.run_id, task, lost, limited, True),
        )

    def _resume_of(
        self,
        run: WorkflowRun,
        run_id: str,
        task: TaskInfo,
        lost: list[WorkflowAgent],
        limited: dict[int, str],
        resumable: bool,
    ) -> WorkflowResume:
        """What the resume prompt says of a workflow that lost agents, and asks of the lead: to
        resume it, or (the CLI refused to resume it) to run the agents that did not finish
        anew, naming those that finished."""
        refused = self._tracker.refused_resumes.get(run_id)
        again = [a for a in lost if a.index not in limited]
        done = [run.agents[i].label for i in sorted(run.agents) if run.agents[i].state == "done"]
        return WorkflowResume(
            run_id=run_id,
            name=run.name or run.description or task.task_id,
            script_path=_script_here(run.script_path, self._config_dir),
            lost=tuple(_lost_line(a, limited.get(a.index)) for a in lost)
            or ("the run did not finish",),
            resumable=resumable,
            refused=refused,
            unfinished=tuple(a.label for a in again) if refused is not None else (),
            done=tuple(done) if refused is not None else (),
        )

    def _continue_ask(self, task: TaskInfo, end: AgentEnd) -> Delivery | None:
        """The ask to continue ``task`` (a ``SendMessage`` to its id resumes it on its own
        transcript, in the next CLI process too), with its partial output: an agent stopped
        at its turn limit, or one lost with its CLI (still running when that process
        ended: never one the lead or the run stopped). ``None`` for any other end, or
        when it was continued :attr:`~teamlead.policy.Policy.max_continuations` times (by
        the lead or on teamlead's ask) or its id is not a plain one."""
        bound = self._policy.max_continuations
        asked = self._collected.continue_asks.get(task.task_id, 0)
        lost = end.kind == "lost" and not task.terminal and not self._process_alive
        if not (end.kind == "turn_limit" and task.terminal or lost) or task.is_workflow:
            return None
        if max(task.continued, asked) >= bound or not _PLAIN_ID.fullmatch(task.task_id):
            return None
        self._collected.continue_asks[task.task_id] = asked + 1
        delivery = task_delivery(self._config_dir, task, self._tracker.session_id, end)
        delivery.key = _continue_key(task.task_id, asked + 1)
        delivery.continue_task = task.task_id
        if lost:
            delivery.cut = _LOST_WITH_ITS_CLI
        return delivery


def task_delivery(
    config_dir: Path, task: TaskInfo, session: str | None, end: AgentEnd | None = None
) -> Delivery:
    """``task``'s result as a delivery: its summary when it
    completed with one, else the last answer in its transcript in ``session``, else whatever
    summary it has (an empty delivery when there is none). When ``end`` says it did not
    finish although the CLI reported it completed, the delivery is ``partial``: its last
    text (from its transcript first), never a complete result."""
    status: DeliveryStatus = _task_outcome(task)
    text = ""
    source: TaskSource = "none"
    partial = end is not None and not end.finished and status == "completed"
    if partial:
        status = "partial"  # its own last text first, not the CLI's note of the cut
    if not partial and task.status == "completed" and (task.summary or "").strip():
        text, source = task.summary or "", "summary"
    else:
        transcript = transcript_text(config_dir, task, session)
        if transcript:
            text, source = transcript, "transcript"
        elif task.summary:
            text, source = task.summary, "summary"
    return Delivery(
        key=f"task:{task.task_id}",
        kind="task",
        label=task.description or task.task_id,
        status=status,
        text=text,
        source=source,
        cut=end.describe() if partial and end is not None else None,
    )


def transcript_text(config_dir: Path, task: TaskInfo, session: str | None) -> str | None:
    """The last answer in ``task``'s transcript (its output file, else its file in the
    session's folder), or ``None`` when neither can be read."""
    for path in transcript_paths(config_dir, task, session):
        try:
            text = last_assistant_text(path)
        except OSError:
            continue
        if text:
            return text
    return None


async def absorb(state: RunState, delivered: list[Delivery]) -> list[str]:
    """A successful lead turn used ``delivered``: mark them, consume their inbox entries;
    returns the ledger's reasons for entries that could not be consumed.

    A delivery the prompt handed over partly by path (it quoted the head and tail, the whole
    is in ``full_path``) counts as used only when the lead then read that file (a ``Read`` of
    it in the stream); otherwise it is recorded as never seen (``Collected.unread``).
    """
    reasons: list[str] = []
    by_team: dict[Path, list[str]] = {}
    for delivery in delivered:
        whole = delivery.full_path
        if whole is not None and not state.stream.tracker.lead_read(whole):
            state.delivered.collected.unread[delivery.key] = whole
            continue
        state.delivered.collected.unread.pop(delivery.key, None)
        state.delivered.collected.absorbed.add(delivery.key)
        if delivery.inbox_key and delivery.team is not None:
            by_team.setdefault(delivery.team.lead_inbox, []).append(delivery.inbox_key)
    if not state.ask.policy.consume_inbox:
        return reasons
    from .._procs import descendants

    for path, keys in by_team.items():
        try:
            done = await consume_inbox(
                path,
                keys,
                config_dir=state.ask.config_dir,
                clock=state.clock,
                # our CLI children: a lead process recorded by them is us, not a rival reader
                own_pids=[p.pid for p in descendants()],
            )
        except Exception as exc:  # noqa: BLE001 - the results were used; report, do not fail
            reasons.append(f"could not consume delivered inbox entries: {redact(str(exc))}")
            continue
        if done.refused:
            reasons.append(f"inbox entries left in place: {done.refused}")
    return reasons


def used_deliveries(state: RunState) -> list[Delivery]:
    """Every finished result a lead turn already used, as deliveries again: the deadline's
    wrap-up answer replaces the earlier replies, so it must quote these too."""
    collected, tracker = state.delivered.collected, state.stream.tracker
    out = [d for key, d in collected.deliveries.items() if key in collected.absorbed]
    known = {d.key for d in out}
    for task in tracker.tasks.values():
        key = f"task:{task.task_id}"
        if key in known or not task.terminal or not task.absorbed:
            continue
        delivery = task_delivery(state.ask.config_dir, task, tracker.session_id)
        if delivery.text:
            out.append(delivery)
    return out


def judge_ends(state: RunState) -> None:
    """Judge how each task's agent ended (:func:`~.ending.read_end`), once per end: a task
    that ended again since (it was continued) is judged again."""
    collected, tracker = state.delivered.collected, state.stream.tracker
    for task in tracker.tasks.values():
        judged = collected.ends.get(task.task_id)
        if judged is None or judged[0] != task.ended_seq or task.ended_seq is None:
            end = read_end(state.ask.config_dir, task, tracker.session_id)
            collected.ends[task.task_id] = (task.ended_seq, end)


def _continue_key(task_id: str, ask: int) -> str:
    """The delivery key of the ``ask``-th ask to continue task ``task_id``."""
    return f"continue:{task_id}:{ask}"


def dispositions(tracker: Tracker, collected: Collected) -> list[TaskDisposition]:
    """What became of every task and teammate of the run, for ``Finished.tasks`` (each
    task's end as :func:`judge_ends` judged it)."""
    out: list[TaskDisposition] = []
    disposition: Disposition
    replaced = _replacements(tracker, collected)
    for task in tracker.tasks.values():
        key = f"task:{task.task_id}"
        judged = collected.ends.get(task.task_id)
        end = judged[1] if judged is not None else None
        delivery = collected.deliveries.get(key)
        asks = collected.continue_asks.get(task.task_id)
        if delivery is None and asks and not (end is not None and end.finished):
            # never finished: what the last ask to continue it quoted of what it left
            delivery = collected.deliveries.get(_continue_key(task.task_id, asks))
        used = task.absorbed or key in collected.absorbed
        status = _task_outcome(task)
        source: _Source = delivery.source if delivery else ("lead" if task.absorbed else "none")
        reason: str | None = None
        unread = collected.unread.get(key)
        by = replaced.get(task.task_id)
        if by is not None:  # work done again counts once: by the agent that finished it
            disposition = "not_run"
            reason = (
                f"lost ({status}); superseded by task {by.task_id}: the lead delegated its "
                "work again and that agent finished"
            )
        elif status in FAILED_STATES:
            disposition = "failed"
            if end is not None and end.kind == "output_limit":  # not any failure: its cut
                reason = end.describe()
        elif end is not None and not end.finished:
            disposition, reason = "missing", _unfinished_reason(task, end, collected)
        elif unread is not None and task.task_id not in collected.cuts:
            disposition, reason = "missing", _unread_reason(unread)
        elif used and (task.absorbed or (delivery is not None and delivery.text)):
            disposition = "included"
        else:
            disposition = "missing"
        cut = collected.cuts.get(task.task_id)
        if cut is not None and disposition == "included":
            disposition, reason = _cut_disposition(cut, delivery, collected, key)
        out.append(
            TaskDisposition(
                id=task.task_id,
                kind="task",
                description=redact(task.description or task.task_id),
                status=status,
                disposition=disposition,
                source=source,
                reason=reason,
                result_file=delivery.full_path if delivery is not None else None,
                ended=end.kind if end is not None else None,
            )
        )
    for member in collected.members.values():
        keys = [
            d.key
            for d in collected.deliveries.values()
            if d.kind == "teammate" and d.label == member.name
        ]
        used = bool(keys) and all(k in collected.absorbed for k in keys)
        if member.failed:
            disposition = "failed"
        elif used or (member.status == "reported" and not keys):
            disposition = "included"  # used, or it went idle with nothing to report
        else:
            disposition = "missing"
        out.append(
            TaskDisposition(
                id=member.name,
                kind="teammate",
                description=member.name,
                status="failed" if member.failed else member.status,
                disposition=disposition,
                source="inbox" if keys else "none",
            )
        )
    return out


def _replacements(tracker: Tracker, collected: Collected) -> dict[str, TaskInfo]:
    """Each lost task (its process or machine went away) whose work the lead delegated again,
    with the later task that did it and finished: the same description (or the same prompt),
    one replacement per lost task, in the order they started."""
    tasks = [t for t in tracker.tasks.values() if not t.is_workflow]
    taken: set[str] = set()
    out: dict[str, TaskInfo] = {}
    for index, task in enumerate(tasks):
        judged = collected.ends.get(task.task_id)
        if judged is None or judged[1].kind != "lost":
            continue
        for later in tasks[index + 1 :]:
            done = collected.ends.get(later.task_id)
            same = (task.description and later.description == task.description) or (
                task.prompt and later.prompt == task.prompt
            )
            if same and later.task_id not in taken and done is not None and done[1].finished:
                out[task.task_id] = later
                taken.add(later.task_id)
                break
    return out


def _unfinished_reason(task: TaskInfo, end: AgentEnd, collected: Collected) -> str:
    """Why the row of a task that did not finish is missing: its cut, how often it was
    continued, and that only its partial output is left."""
    parts = [end.describe()]
    if task.continued:
        parts.append(f"continued {task.continued} time(s)")
    asks = collected.continue_asks.get(task.task_id, 0)
    if asks:
        parts.append(f"the lead was asked {asks} time(s) to continue it")
    return f"{'; '.join(parts)}: only its PARTIAL output is left, never a complete result"


def with_results(state: RunState, rows: list[TaskDisposition]) -> list[TaskDisposition]:
    """``rows`` with the text of each result the final answer did not use (every result
    when the run has no final answer), so none is lost with the lead: from what was
    collected, else from the agent's transcript. A text over :data:`ROW_RESULT_CHARS`
    keeps its head and tail; the whole goes to a file of the run (``result_file``)."""
    no_answer = state.stream.tracker.last_success is None
    out = []
    for row in rows:
        wanted = no_answer or row.disposition != "included"
        text = row_text(state, row) if wanted and row.kind in ("task", "teammate") else None
        if text is None:
            out.append(row)
            continue
        full = row.result_file
        if len(text) > ROW_RESULT_CHARS:
            full = full or state.spill(f"{row.kind}:{row.id}", text)
            keep = ROW_RESULT_CHARS // 2
            text = f"{text[:keep]}\n[… {len(text) - 2 * keep} characters cut …]\n{text[-keep:]}"
        out.append(row.model_copy(update={"result": redact(text), "result_file": full}))
    return out


def row_text(state: RunState, row: TaskDisposition) -> str | None:
    """The result of ``row`` as collected (a teammate's reports together), else a finished
    task's from its transcript or summary; ``None`` when there is none."""
    collected, tracker = state.delivered.collected, state.stream.tracker
    texts = [
        d.text
        for d in collected.deliveries.values()
        if d.text.strip()
        and (d.key == f"task:{row.id}" or (d.kind == "teammate" and d.label == row.id))
    ]
    if texts:
        return "\n\n".join(texts)
    task = tracker.tasks.get(row.id) if row.kind == "task" else None
    if task is None or task.status != "completed":
        return None
    text = transcript_text(state.ask.config_dir, task, tracker.session_id) or task.summary
    return text if (text or "").strip() else None


def _unread_reason(path: str) -> str:
    """Why a result handed over partly by path is missing: the lead never read its file."""
    return (
        "a resume prompt quoted only its head and tail, and the lead never read the whole "
        f"in {path}"
    )


def _cut_disposition(
    cut: CutResult, rest: Delivery | None, collected: Collected, key: str
) -> tuple[Disposition, str]:
    """A cut workflow result's row: included once its rest reached the lead (all of it, or
    by path with the lead reading the file), else missing."""
    head = (
        f"the CLI cut its result in the lead's notification after {len(cut.shown)} "
        f"characters ({cut.cut} more)"
    )
    unread = collected.unread.get(key)
    if unread is not None:
        return "missing", f"{head}; the rest ({cut.rest} characters): {_unread_reason(unread)}"
    if rest is None or key not in collected.absorbed:
        return "missing", f"{head}; the rest never reached the lead"
    if rest.full_path is not None:
        return "included", (
            f"{head}; the rest ({cut.rest} characters) was delivered in a resume prompt, "
            f"partly by path only: the prompt quoted the rest's head and tail, and the lead "
            f"read all of it in {rest.full_path}"
        )
    return "included", f"{head}; the rest ({cut.rest} characters) was delivered in a resume prompt"


def cut_rows(rows: list[TaskDisposition], collected: Collected) -> list[TaskDisposition]:
    """``rows`` with the agents of each workflow whose result the CLI cut in the lead's
    notification saying where the lead got their result: in the notification, in the rest a
    resume prompt quoted, only by path (the prompt quoted the rest's head and tail), or
    nowhere (``missing``)."""
    if not collected.cuts:
        return rows
    out: list[TaskDisposition] = []
    for row in rows:
        cut = collected.cuts.get(row.parent or "") if row.kind == "workflow_agent" else None
        needles = cut.results.get(row.id, ()) if cut is not None else ()
        # a cut workflow's row is missing for the cut alone (the lead was told it ended):
        # each of its agents that finished is judged by where its own result went
        if cut is None or not needles or row.disposition not in ("included", "missing"):
            out.append(row)
            continue
        if _seen_in(needles, cut.shown):  # read in the notification
            out.append(row.model_copy(update={"source": "lead", "disposition": "included"}))
            continue
        key = f"task:{row.parent}"
        rest = collected.deliveries.get(key)
        if rest is None or not _seen_in(needles, rest.text):
            out.append(row)  # not in the rest either (the script made its result of it)
            continue
        head = "the CLI cut its result from the lead's notification"
        update: dict[str, object]
        unread = collected.unread.get(key)
        if key not in collected.absorbed and unread is None:
            update = {
                "disposition": "missing",
                "reason": f"{head} and the rest never reached the lead",
            }
        elif _seen_in(needles, rest.quoted or "") or _seen_in(
            tuple(escape(n) for n in needles), rest.quoted or ""
        ):
            reason = f"{head}; a resume prompt delivered it"
            update = {"disposition": "included", "source": "transcript", "reason": reason}
        elif unread is not None:
            reason = f"{head}; {_unread_reason(unread)}"
            update = {"disposition": "missing", "result_file": unread, "reason": reason}
        else:
            path = rest.full_path
            update = {
                "disposition": "included",
                "source": "transcript",
                "result_file": path,
                "reason": f"{head}, and the resume prompt gave it only by path: "
                f"{path or 'its output file'}, which the lead read",
            }
        out.append(row.model_copy(update=update))
    return out


def _agent_results(
    run: WorkflowRun, journaled: dict[str, JournalResult]
) -> dict[str, tuple[str, ...]]:
    """Each finished agent's result as it may read inside the workflow's result: as it is
    (a text result) and as a JSON string's body (a result the CLI wrote as JSON)."""
    out: dict[str, tuple[str, ...]] = {}
    for agent in run.agents.values():
        if agent.state != "done" or not agent.agent_id:
            continue
        found = journaled.get(agent.agent_id)
        text = found.text if found is not None else ""
        if text.strip():
            out[agent.agent_id] = (text, json.dumps(text, ensure_ascii=False)[1:-1])
    return out


def _seen_in(needles: tuple[str, ...], text: str) -> bool:
    return bool(text) and any(n and n in text for n in needles)


def _message_summary(message: TeammateMessage) -> dict[str, Any]:
    return {
        "from": message.sender[:_EVENT_CHARS],
        "kind": message.kind,
        "frame": message.frame_type,
        "summary": redact(message.summary or "")[:_EVENT_CHARS] or None,
        "status": message.completed_status,
        "is_result": message.is_result,
    }


def _script_here(path: str | None, config_dir: Path) -> str | None:
    """``path`` when the script is a file under this machine's config dir (where the CLI
    wrote it, and reads it back from), else ``None``: a session brought from its store ran
    on another machine, whose script path the CLI here refuses; the lead is asked for the
    same script inline instead."""
    if not path:
        return None
    try:
        inside = Path(path).resolve().is_relative_to(Path(config_dir).resolve())
    except (OSError, ValueError):
        return None
    return path if inside and Path(path).is_file() else None


def _lost_line(agent: WorkflowAgent, limited: str | None) -> str:
    """A lost workflow agent, for the resume prompt: its label and what became of it."""
    if limited is not None:
        what = limited
    elif agent.state == "error":
        what = f"failed: {(agent.error or 'no result')[:_MAX_LOST_REASON]}"
    else:
        what = "did not finish"
    return f'"{agent.label}" {what}'


def _task_outcome(task: TaskInfo) -> TaskOutcome:
    """A task's delivery state: its terminal state, or ``lost`` if it never ended."""
    status = task.status
    if status in ("completed", "failed", "stopped", "killed"):
        return status
    return "lost"


def _inbox_delivery(message: TeammateMessage, team: Team) -> Delivery:
    status: DeliveryStatus
    if message.kind == "idle":
        text = message.result or message.summary or ""
        # the teammate's own word: only a state the prompt knows passes
        status = _REPORTED.get(message.completed_status or "", "resolved")
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
