"""The run's agents: the relay's agent ledger joined with the stream's task events.

:class:`RunAgents` owns the run's :class:`~teamlead._metering.book.AgentBook`, which the
relay fills and which applies the run's admission to each request (the per-agent timeout,
the budgets, the workflow agents' admission); it tells the book and the admission what the
stream says of the agents, and at the end makes ``Finished.tasks`` one row per agent.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from .._gate import Admission, ExhaustReason
from .._metering import AgentBook
from .._redact import redact
from ..clock import Clock
from ..events import AgentUsage, Disposition, TaskDisposition, TaskState
from ..policy import Policy
from ..tracker import TaskEnded, TaskInfo, TaskProgress, TaskStarted, TrackedEvent, Tracker
from .resume_prompt import FAILED_STATES

__all__ = ["WORKFLOW_CAP_VAR", "RunAgents"]

#: The workflow engine's own gate; teamlead sets it to the run's cap.
WORKFLOW_CAP_VAR = "CLAUDE_CODE_WORKFLOW_MAX_CONCURRENT_AGENTS"
_FAILED = FAILED_STATES | {"timeout"}


class RunAgents:
    """Every agent of one run: the ledger, its limits, and what the stream said of them.

    Args:
        policy: the run's policy (``spawn.agent_timeout_s`` names the timeout in rows).
        clock: the run's clock.
        admission: the run's admission, whose limits the book applies (``None``: no limit,
            agents start as they come, on their own model).
        publish: where each agent's :class:`~teamlead.events.AgentUsage` goes (the run's
            event bus); ``None``: nowhere.
    """

    def __init__(
        self,
        policy: Policy,
        clock: Clock,
        admission: Admission | None = None,
        publish: Callable[[AgentUsage], None] | None = None,
    ) -> None:
        self.policy = policy
        self.book = AgentBook(clock, admission, publish=publish)
        self._admission = admission
        self._workflow_of: dict[str, str] = {}
        self._session: str | None = None

    # -- limits -------------------------------------------------------------------------
    @property
    def exhaust_reason(self) -> ExhaustReason | None:
        return self.book.exhausted

    def wrapping(self) -> None:
        """The wrap-up starts: its own lead request may spend the room kept for it."""
        self.book.wrapping = True

    def next_turn(self) -> None:
        """A client run's next turn begins: the last turn's wrap-up is over, so the lead's
        requests face the budgets again, and the gate it closed opens (as admission says)."""
        self.book.wrapping = False
        if self._admission is not None:
            self._admission.next_turn()

    # -- what the stream says -------------------------------------------------------------
    def observe(self, events: Iterable[TrackedEvent], tracker: Tracker) -> None:
        """Tell the ledger what ``events`` (one message's) say about the run's agents."""
        book = self.book
        for event in events:
            if isinstance(event, TaskStarted) and event.task_type != "local_workflow":
                book.agent_started(event.task_id)  # an Agent-tool task's id is its agent id
            elif isinstance(event, TaskProgress) and event.workflow_agents:
                for agent in event.workflow_agents:
                    if agent.agent_id is None:
                        continue
                    self._workflow_of[agent.agent_id] = event.task_id
                    if agent.state in ("done", "error"):
                        self._ended(agent.agent_id)
                    else:
                        book.agent_started(agent.agent_id)
            elif isinstance(event, TaskEnded):
                task = tracker.tasks.get(event.task_id)
                if task is not None and task.is_workflow:
                    for agent in task.workflow_agents.values():
                        if agent.agent_id is not None:
                            self._ended(agent.agent_id)

    def _ended(self, agent_id: str) -> None:
        if self._admission is not None:
            self._admission.agent_ended(agent_id)

    def close(self) -> None:
        self.book.close()

    def timed_out(self, agent_id: str) -> bool:
        count = self.book.agent(agent_id)
        return count is not None and count.timed_out

    def denied(self, agent_id: str) -> str | None:
        """Why the run's spawn budget kept workflow agent ``agent_id`` from starting."""
        count = self.book.agent(agent_id)
        return count.denied if count is not None else None

    def stopped_by_limits(self, agent_id: str) -> str | None:
        """What the user's own limits did to ``agent_id`` (its timeout, or the spawn budget),
        if anything: such an agent is named, never run again by a resume."""
        if self.timed_out(agent_id):
            return "stopped at its timeout"
        if self.denied(agent_id) is not None:
            return "not started: the run's spawn budget is used up"
        return None

    def missing_lines(self, tracker: Tracker) -> list[str]:
        """What the resume prompt tells the lead about agents stopped at their timeout."""
        seconds = self.policy.spawn.agent_timeout_s or 0
        lines = []
        for agent_id in self.book.timed_out:
            task = tracker.tasks.get(agent_id)
            name = (task.description if task is not None else "") or agent_id
            lines.append(
                f'agent "{name}" ran past its timeout of {seconds:g} s and was stopped: '
                "go on with the other results"
            )
        return lines

    # -- Finished.tasks -------------------------------------------------------------------
    def rows(self, tracker: Tracker, rows: list[TaskDisposition]) -> list[TaskDisposition]:
        """``rows`` with each task's usage, and a row for every agent of each workflow."""
        out: list[TaskDisposition] = []
        self._session = tracker.session_id
        for row in rows:
            task = tracker.tasks.get(row.id) if row.kind == "task" else None
            if task is None:
                out.append(row)
                continue
            row = self._task_row(row, task)
            run = task.workflow
            later = tracker.later_attempt(run) if run is not None else None
            if run is not None and later is not None and row.disposition in ("failed", "missing"):
                # a resume of its run (the same wf_ id), or the fresh run of a run the CLI
                # refused to resume, took its work over: its rows say how
                reason = f"resumed by task {later.task_id}"
                if run.run_id is not None and later.fresh_of == run.run_id:
                    refused = tracker.refused_resumes.get(run.run_id, "")
                    reason = (
                        f"run afresh by task {later.task_id} (run {later.run_id}): the CLI "
                        f"refused to resume it: {redact(refused)}"
                    )
                row = row.model_copy(update={"disposition": "not_run", "reason": reason})
            out.append(row)
            if task.is_workflow:
                out += self._workflow_rows(row, task, tracker)
        return out

    def _usage_fields(self, agent_id: str | None) -> dict[str, object]:
        if not agent_id:
            return {}
        # the run's own session first; a session the tracker did not see (a forked resume)
        # still came on this run's relay path, so the agent's first session is this run's
        count = self.book.agent(agent_id, self._session) or self.book.agent(agent_id)
        if count is None:
            return {}
        fields: dict[str, object] = {
            "tokens_in": count.input_tokens,
            "tokens_out": count.output_tokens,
            "requests": count.requests,
        }
        if count.requests:
            fields["started_at"] = round(count.first_at, 3)
            fields["ended_at"] = round(max(count.first_at, count.last_at), 3)
        return fields

    def _task_row(self, row: TaskDisposition, task: TaskInfo) -> TaskDisposition:
        update: dict[str, object] = {"label": row.label or row.description}
        if not task.is_workflow:
            update.update(self._usage_fields(task.task_id))
        if task.parent_task_id:
            update["parent"] = task.parent_task_id
        usage = task.usage or {}
        tools = usage.get("tool_uses")
        if isinstance(tools, int):
            update["tool_uses"] = tools
        elif task.tool_uses is not None:
            update["tool_uses"] = task.tool_uses
        duration = _seconds(usage.get("duration_ms"))
        if duration is not None:
            update["duration_s"] = duration
        elif task.ended_at is not None:
            update["duration_s"] = round(max(0.0, task.ended_at - task.started_at), 3)
        if task.output_file:
            update["transcript"] = task.output_file
        if task.workflow is not None:
            update["run_id"] = task.workflow.run_id
            if task.workflow.error:  # the script threw: its error, on one line
                first = (task.workflow.error.strip().splitlines() or [""])[0]
                update["reason"] = redact(" ".join(first.split())[:300]) or "the script failed"
        if self.timed_out(task.task_id):
            update["status"] = "timeout"
            update["disposition"] = "failed"
            seconds = self.policy.spawn.agent_timeout_s or 0
            update["reason"] = f"ran past its timeout of {seconds:g} s and was stopped"
        return row.model_copy(update=update)

    def _workflow_rows(
        self, parent: TaskDisposition, task: TaskInfo, tracker: Tracker
    ) -> list[TaskDisposition]:
        rows: list[TaskDisposition] = []
        run = task.workflow
        later = tracker.later_attempt(run) if run is not None else None
        fresh = later is not None and run is not None and later.fresh_of == run.run_id
        for index in sorted(task.workflow_agents):
            agent = task.workflow_agents[index]
            status: TaskState = _agent_status(agent.state, agent.cached, task, agent.error)
            denied = self.denied(agent.agent_id) if agent.agent_id is not None else None
            if agent.agent_id is not None and self.timed_out(agent.agent_id):
                status = "timeout"
            elif denied is not None:
                status = "denied"
            # one the spawn budget kept from starting did not run; one stopped at the user's
            # own timeout failed; a lost one's result is missing work (a resume of its run
            # may recover it); one that finished in a workflow that did not is included when
            # a resume of its run replays it, else its workflow's result never came
            disposition: Disposition = parent.disposition
            if status == "denied":
                disposition = "not_run"
            elif status == "timeout":
                disposition = "failed"
            elif status in _FAILED:
                disposition = "missing"
            elif disposition in ("not_run", "failed"):
                disposition = "included" if later is not None else "missing"
            reason = denied if denied is not None else redact(agent.error) if agent.error else None
            if status in _FAILED and later is not None:
                # a later attempt ran it again (a fresh run has its own order: the same agent
                # has the same label): its row says how that went
                again = later.agent_labelled(agent.label) if fresh else later.agents.get(index)
                if again is not None:
                    disposition = "not_run"
                    reason = f"{reason + '; ' if reason else ''}run again by task {later.task_id}"
            # a replayed agent sent no request: the journal's copy is not new usage
            usage = {"requests": 0} if agent.cached else self._usage_fields(agent.agent_id)
            row = TaskDisposition(
                id=agent.agent_id or f"{task.task_id}#{index}",
                kind="workflow_agent",
                description=redact(agent.label),
                status=status,
                disposition=disposition,
                source=parent.source,
                reason=reason,
                parent=task.task_id,
                label=redact(agent.label),
                tool_uses=agent.tool_calls,
                duration_s=_seconds(agent.duration_ms),
                run_id=run.run_id if run is not None else None,
                phase=redact(agent.phase) if agent.phase else None,
                cached=agent.cached,
            )
            rows.append(row.model_copy(update=usage))
        return rows


def _seconds(duration_ms: object) -> float | None:
    """A duration the CLI reported in milliseconds, in seconds; ``None`` unless it is a
    finite number not below zero (the stream may hold NaN, or an integer past any float)."""
    if not isinstance(duration_ms, (int, float)) or isinstance(duration_ms, bool):
        return None
    try:
        seconds = duration_ms / 1000
    except OverflowError:
        return None
    return round(seconds, 3) if math.isfinite(seconds) and seconds >= 0 else None


def _agent_status(
    state: str, cached: bool, workflow: TaskInfo, error: str | None = None
) -> TaskState:
    """A workflow agent's row status from its last state and its workflow's (an agent that
    never ended, or that the workflow's stop ended in error, is ``stopped`` with a stopped
    workflow, else ``lost``)."""
    stopped = workflow.status in ("stopped", "killed")
    if state == "done":
        return "cached" if cached else "completed"
    if state == "error":
        # Claude Code 2.1.332: "Stopped because the workflow was stopped"
        return "stopped" if stopped and "stopped" in (error or "").lower() else "failed"
    return "stopped" if stopped else "lost"
