"""One ``Workflow`` run as teamlead knows it, and the changes the stream makes to it.

Claude Code's ``Workflow`` tool runs a script (``agent()``, ``parallel()``, ``pipeline()``,
``phase()``) in the background as one task. The stream tells its story in pieces: the
lead's ``Workflow`` call (a resume names ``resumeFromRunId``), the ``task_started`` of a
``local_workflow`` task, the tool result with the ``wf_`` run id and the script file, a
full ``workflow_progress`` snapshot on every ``task_progress``, and the end. A
:class:`WorkflowRun` joins them, and :meth:`WorkflowRun.snapshot` returns what changed:
a phase first seen, an agent's state changed (once per change, not per snapshot).

A resumed run keeps its ``wf_`` id under a new task: each task is one *attempt* of the
run, and the run's outcome is its latest attempt's. When the CLI refuses to resume a run
(its journal has a line it cannot read, say), a new run (a new ``wf_`` id) started after
that is its *fresh run* (``fresh_of``): it takes the unfinished agents over, matched by
label. An agent is *lost* when its attempt ended (or its CLI exited) without it being
``done``: in ``error`` (a request the CLI did not retry; its ``agent()`` returned
``null``), or never finished.

Example:
    >>> run = WorkflowRun("w1", name="scan", run_id="wf_1")
    >>> changes = run.snapshot((WorkflowAgent(1, "scan:a", "progress"),), ("Scan",))
    >>> [type(c).__name__ for c in changes]
    ['WorkflowPhaseSeen', 'WorkflowAgentChanged']
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from ._parse import (
    WorkflowAgent,
    WorkflowAgentChanged,
    WorkflowChange,
    WorkflowEnded,
    WorkflowPhaseSeen,
    WorkflowStarted,
)

__all__ = ["WorkflowRun"]

_MAX_PHASES = 1000
#: What a :class:`WorkflowAgentChanged` copies of the agent it reports (every field the
#: two share).
_CHANGED_FIELDS = tuple(
    f.name for f in fields(WorkflowAgentChanged) if f.name in WorkflowAgent.__dataclass_fields__
)


# -- the run -------------------------------------------------------------------------------
@dataclass
class WorkflowRun:
    """What is known of one workflow task (one attempt of a ``wf_`` run).

    Attributes:
        task_id: the CLI's task id of this attempt.
        name: the script's ``meta.name``.
        description: the script's ``meta.description`` (the task's description).
        run_id: the ``wf_`` run id, from the tool result (or the stopped notice).
        script_path: the script file the CLI wrote; a resume passes it as ``scriptPath``.
        transcript_dir: where the run's journal and agent transcripts are.
        resume_from: the run this attempt resumes (``resumeFromRunId``).
        fresh_of: the run this one runs afresh: the CLI refused to resume it, and this run
            takes its unfinished agents over.
        phases: the phase titles, in order.
        agents: the agents by their index in the script, from the last snapshot.
        status: the task's terminal state once it ended, else ``None``.
        error: the script's exception, when it threw.
        output_file: the task's output file (its JSON result).
    """

    task_id: str
    name: str | None = None
    description: str = ""
    run_id: str | None = None
    script_path: str | None = None
    transcript_dir: str | None = None
    resume_from: str | None = None
    fresh_of: str | None = None
    phases: list[str] = field(default_factory=list)
    agents: dict[int, WorkflowAgent] = field(default_factory=dict)
    status: str | None = None
    error: str | None = None
    output_file: str | None = None
    announced: bool = False

    @property
    def ended(self) -> bool:
        return self.status is not None

    def started(self) -> WorkflowStarted:
        """The :class:`WorkflowStarted` record of this attempt (marks it announced)."""
        self.announced = True
        return WorkflowStarted(**{f.name: getattr(self, f.name) for f in fields(WorkflowStarted)})

    def snapshot(
        self, agents: tuple[WorkflowAgent, ...], phases: tuple[str, ...] | None
    ) -> list[WorkflowChange]:
        """Fold one ``workflow_progress`` snapshot in; return what changed."""
        changes: list[WorkflowChange] = []
        for index, title in enumerate(phases or (), start=1):
            if index > len(self.phases) and len(self.phases) < _MAX_PHASES:
                self.phases.append(title)
                changes.append(WorkflowPhaseSeen(self.task_id, self.run_id, index, title))
        for agent in agents:
            before = self.agents.get(agent.index)
            self.agents[agent.index] = agent
            if before is not None and before.state == agent.state:
                continue
            changes.append(
                WorkflowAgentChanged(
                    task_id=self.task_id,
                    run_id=self.run_id,
                    previous=before.state if before is not None else None,
                    **{name: getattr(agent, name) for name in _CHANGED_FIELDS},
                )
            )
        return changes

    def end(self, status: str, error: str | None = None) -> WorkflowEnded:
        """The attempt ended with ``status``; returns its :class:`WorkflowEnded`."""
        self.status = status
        self.error = error or self.error
        states = [a.state for a in self.agents.values()]
        return WorkflowEnded(
            task_id=self.task_id,
            run_id=self.run_id,
            status=status,
            agents=len(states),
            done=states.count("done"),
            errors=states.count("error"),
            cached=sum(1 for a in self.agents.values() if a.cached),
            lost=tuple(a.label for a in self.lost_agents(exited=True)),
            error=self.error,
        )

    def lost_agents(self, *, exited: bool = False) -> list[WorkflowAgent]:
        """The agents this attempt lost: not ``done`` once it ended (or, with ``exited``,
        once its CLI exited); none while it still runs."""
        if not (self.ended or exited):
            return []
        return [self.agents[i] for i in sorted(self.agents) if self.agents[i].state != "done"]

    def agent_labelled(self, label: str) -> WorkflowAgent | None:
        """This run's agent of ``label`` (the first, by index), if any."""
        return next(
            (self.agents[i] for i in sorted(self.agents) if self.agents[i].label == label), None
        )

    def phase_counts(self) -> list[tuple[str, dict[str, int]]]:
        """Each phase's title and its agents counted by state, in phase order (agents of
        no known phase under ``""``)."""
        counts: dict[str, dict[str, int]] = {title: {} for title in self.phases}
        for index in sorted(self.agents):
            agent = self.agents[index]
            by_state = counts.setdefault(agent.phase or "", {})
            by_state[agent.state] = by_state.get(agent.state, 0) + 1
        return [(title, states) for title, states in counts.items() if states or title]
