"""The ledger: the run's bookkeeping, and the one :class:`~teamlead.events.Finished` it ends with.

The session records here what the final event must report: resumes, cost, the first
stream error, why it stopped resuming (a typed :data:`~teamlead.events.FinishReason`
plus human text). :meth:`Ledger.finish` then decides, from the tracker, what became of
every task and teammate (from :func:`~.collect.dispositions`) and the gate's records, the
status and the one reason code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypeAlias

from .._gate.calls import SpawnRecord, call_dispositions
from .._redact import redact, redact_opt
from ..events import Finished, FinishReason, RelaySummary, Status, TaskDisposition
from .outcome import ErrorKind, RoundOutcome

if TYPE_CHECKING:  # the tracker loads the SDK, which a run stopped at start-up never needs
    from ..tracker import Tracker

__all__ = ["Ledger", "StopReason", "stopped_before_start"]

_MAX_NAMED = 20  # lost workflow agents named in one reason line

#: Why the session stopped resuming with results unused.
StopReason: TypeAlias = Literal[
    "max_resumes",
    "cost_budget",
    "deadline",
    "resume_failed",
    "no_session_id",
    "token_budget",
    "request_budget",
    "interrupted",
]


@dataclass
class Ledger:
    """What the run has done so far, as the final event will report it."""

    one_process: bool = False  # a client's rounds share one CLI process (and its cost total)
    resumes: int = 0
    cost_usd: float = 0.0
    reasons: list[str] = field(default_factory=list)
    stop: StopReason | None = None
    last_round_ok: bool = False
    first_error: str | None = None
    first_error_kind: ErrorKind | None = None

    def stopped(self, reason: StopReason, text: str) -> None:
        """The session stopped resuming: ``reason`` as a code, ``text`` for people (a stop
        asked from outside, ``interrupted``, wins over any other)."""
        self.stop = reason if reason == "interrupted" else self.stop or reason
        self.reasons.append(text)

    def add_cost(self, outcome: RoundOutcome) -> None:
        """Count a round's cost: each query round is its own CLI process, whose results
        report that process's running total; a client's rounds share one process."""
        if self.one_process:
            self.cost_usd = max(self.cost_usd, outcome.cost_usd)
        else:
            self.cost_usd += outcome.cost_usd

    def after_round(self, outcome: RoundOutcome, *, first: bool) -> None:
        """Record a round that ended (after any retries)."""
        self.last_round_ok = outcome.ok
        self.add_cost(outcome)
        if first and not outcome.ok and outcome.error:
            self.first_error = redact(outcome.error)
            self.first_error_kind = outcome.error_kind

    def finish(
        self,
        tracker: Tracker,
        dispositions: Sequence[TaskDisposition],
        *,
        unreported: Sequence[str] = (),
        unproven_team: str | None = None,
        wait_s: float,
        calls: Sequence[SpawnRecord] = (),
        relay: RelaySummary | None = None,
        in_user_terms: Callable[[str], str] | None = None,
    ) -> Finished:
        """The final :class:`Finished` event for the state reached (``relay``: what the
        request relay did for the run, ``None`` when it went direct; ``in_user_terms``
        rewrites a reason that names the relay to name the upstream the user set).

        Args:
            tracker: the session as followed.
            dispositions: what became of each task and teammate.
            unreported: the teammates that never reported.
            unproven_team: why the session's team is unproven (several teams claim it):
                the run is then never ``completed``.
            wait_s: the policy's wait for teammates, for the reason text.
            calls: the spawn gate's records: the Agent calls that never became tasks
                (denied, rejected) are reported too, and a rejected one that the lead did
                not re-issue makes the run partial.
        """
        dispositions = list(dispositions)
        not_run, call_reasons = call_dispositions(list(calls), seen=tracker.call_seen)
        dispositions += not_run
        last = tracker.last_success
        final = last.text if last is not None and (last.text or "").strip() else None
        reasons = list(self.reasons)
        if self.first_error is not None:
            recovered = self.last_round_ok and last is not None
            prefix = "recovered from: " if recovered else ""
            reasons.insert(0, f"{prefix}the lead's stream ended with an error: {self.first_error}")
        if unproven_team is not None:
            reasons.append(unproven_team)
        for name in unreported:
            reasons.append(f'teammate "{name}" did not report within {wait_s:g} s')
        reasons += call_reasons
        for run, lost in tracker.lost_workflow_agents(exited=True):
            labels = ", ".join(f'"{a.label}"' for a in lost[:_MAX_NAMED])
            more = f" and {len(lost) - _MAX_NAMED} more" if len(lost) > _MAX_NAMED else ""
            name = run.description or run.name or run.task_id
            reasons.append(
                f'workflow "{name}" (run {run.run_id or "unknown"}) lost {len(lost)} agent(s) '
                f"that no resume recovered: {labels}{more}"
            )
        thrown = [d for d in dispositions if d.kind == "task" and d.run_id and d.status == "failed"]
        thrown_ids = {d.id for d in thrown}
        for d in dispositions:
            if d.kind == "call" or (d.kind == "workflow_agent" and d.parent in thrown_ids):
                continue  # a thrown workflow's agents: its one error line says it
            if d in thrown:
                reasons.append(f'workflow "{d.description}" failed: {d.reason or "no error given"}')
            elif d.disposition == "missing":
                reasons.append(f'{d.kind} "{d.description}" ({d.status}): its result was not used')
            elif d.disposition == "failed":
                reasons.append(_failed_reason(d))
        say = in_user_terms or (lambda text: text)
        status: Status
        carried = [d for d in dispositions if d.result is not None and d.status == "completed"]
        if thrown:  # a workflow's script threw: the work it stood for did not run
            status = "failed"
        elif final is None and carried:
            # no answer, but finished work: the rows carry every result (the caller's
            # fallback answer, see Finished.fallback_answer), nothing of it is lost
            status = "partial"
            reasons.append(
                f"the lead could not write its own answer; {len(carried)} finished "
                "result(s) are in the rows"
            )
        elif final is None or not (self.last_round_ok or _used_finished_work(dispositions)):
            status = "failed"
            if final is None and not any("failed" in r or "error" in r for r in reasons):
                reasons.append("the lead produced no successful answer")
        elif (
            not self.last_round_ok  # an answer from finished work, but the last round failed
            or any(d.disposition not in ("included", "not_run") for d in dispositions)
            # wrapped up short of the work, or stopped from outside
            or self.stop in ("token_budget", "request_budget", "interrupted")
            or bool(unreported)
            or unproven_team is not None  # forged claims: results are unproven
        ):
            status = "partial"
        else:
            status = "completed"
        return Finished(
            status=status,
            result=redact_opt(final),  # an answer can echo a key the lead read
            session_id=tracker.session_id,
            resumes=self.resumes,
            tasks=dispositions,
            cost_usd=round(self.cost_usd, 6),
            reasons=[redact(say(r)) for r in dict.fromkeys(reasons)],
            reason=self._reason(status, dispositions, answered=final is not None),
            relay=relay,
        )

    def _reason(
        self, status: Status, dispositions: list[TaskDisposition], *, answered: bool = True
    ) -> FinishReason:
        if status == "completed":
            return "all_results_used"
        if self.stop is not None:
            return self.stop
        if not answered and status == "partial":
            return "deadline" if self.first_error_kind == "deadline" else "no_answer"
        if status == "failed":
            if any(d.kind == "task" and d.run_id and d.status == "failed" for d in dispositions):
                return "work_failed"
            return "deadline" if self.first_error_kind == "deadline" else "no_answer"
        if any(d.disposition == "failed" for d in dispositions):
            return "work_failed"
        return "results_missing"


def stopped_before_start(stop: str) -> Finished:
    """The :class:`Finished` of a run stopped from outside before its lead started.

    ``stop`` names what stopped it (``SIGTERM``). Nothing ran, so nothing is lost: no task,
    status ``failed`` (no answer), reason ``interrupted``, as :meth:`Ledger.finish` reports
    a run stopped before any answer. ``teamlead ask --json`` ends with it when a stop signal
    comes while the command is still starting.

    Example:
        >>> stopped_before_start("SIGTERM").reason
        'interrupted'
    """
    ledger = Ledger()
    ledger.stopped("interrupted", f"the run was stopped ({stop}) before it started; nothing ran")
    status: Status = "failed"
    return Finished(
        status=status,
        result=None,
        session_id=None,
        resumes=0,
        reasons=[redact(r) for r in ledger.reasons],
        reason=ledger._reason(status, []),
    )


def _used_finished_work(dispositions: list[TaskDisposition]) -> bool:
    """Whether a successful lead turn used a task's or teammate's result.

    Then the last successful answer came after it: a later round that failed (the deadline
    cut the wrap-up turn, a resume gave up) leaves that answer, and the run is ``partial``.
    """
    return any(d.kind != "call" and d.disposition == "included" for d in dispositions)


def _failed_reason(d: TaskDisposition) -> str:
    """The reason line of a failed task or teammate, saying where its last words came from."""
    head = f'{d.kind} "{d.description}" ended {d.status}'
    if d.source == "none":
        return f"{head} and left no result"
    if d.source == "lead":
        return f"{head}; the lead saw what it reported"
    return f"{head}; what it left came from its {d.source}"
