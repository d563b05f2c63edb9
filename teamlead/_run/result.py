"""The run's result: the :class:`~teamlead.events.Finished` a run ends with, built only here.

A run stopped before its lead started gets :func:`stopped_before_start`; any other run
gets :func:`finish`, once, at the end, from what the run recorded (its rows, the agents'
usage, what the admission refused, the relay's summary); :func:`build_finished` decides
from the :class:`~.ledger.Ledger` the status, the reasons and the one reason code.
Nothing patches a ``Finished`` after it is built.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .._gate import SpawnRecord, call_dispositions, with_invalid_calls
from .._redact import redact, redact_opt
from ..events import Finished, FinishReason, RelaySummary, Status, TaskDisposition
from .ledger import Ledger

if TYPE_CHECKING:  # they load the SDK, which a run stopped at start-up must not wait for
    from ..tracker import Tracker
    from .state import RunState

__all__ = ["build_finished", "finish", "stopped_before_start"]

_MAX_NAMED = 20  # lost workflow agents named in one reason line


def finish(state: RunState) -> Finished:
    """The final :class:`Finished` event for the state reached; the run's gate, if any, is
    closed here."""
    # the rows' readers come with the SDK: imported here, so that stopped_before_start,
    # which `teamlead ask` may need while the SDK is still half-imported, never loads it
    from .collect import cut_rows, dispositions, judge_ends, with_results

    state.close()
    judge_ends(state)
    records = state.admission.records()
    tracker = state.stream.tracker
    if tracker.invalid_calls:  # refused by the CLI before any hook ran
        order = {i: c.description for i, c in tracker.agent_calls.items()}
        records = with_invalid_calls(records, tracker.invalid_calls, order)
    collected = state.delivered.collected
    rows = cut_rows(state.agents.rows(tracker, dispositions(tracker, collected)), collected)
    # the Workflow calls the gate denied: no task, still a row
    rows = [*rows, *_denied_workflows(state.admission.workflow_denials)]
    rows = with_results(state, rows)  # a result the answer did not use still reaches the caller
    return build_finished(
        state.delivered.ledger,
        state.stream.tracker,
        rows,
        unreported=[m.name for m in collected.members.values() if m.status == "pending"],
        unproven_team=collected.ambiguous_team,
        wait_s=state.ask.policy.wait_s,
        calls=records,
        relay=state.relay.summary() if state.relay is not None else None,
        in_user_terms=state.relay.in_user_terms if state.relay is not None else None,
    )


def _denied_workflows(denials: Sequence[tuple[str, str, str]]) -> list[TaskDisposition]:
    """A ``call`` row per Workflow call the spawn gate denied (its agents never started)."""
    return [
        TaskDisposition(
            id=tool_use_id,
            kind="call",
            description="Workflow",
            status="denied",
            disposition="not_run",
            source="none",
            reason=reason,
        )
        for tool_use_id, _code, reason in denials
    ]


def build_finished(
    ledger: Ledger,
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
    """The :class:`Finished` of what ``ledger`` recorded (``relay``: what the
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
    reasons = list(ledger.reasons)
    if ledger.first_error is not None:
        recovered = ledger.last_round_ok and last is not None
        prefix = "recovered from: " if recovered else ""
        reasons.insert(0, f"{prefix}the lead's stream ended with an error: {ledger.first_error}")
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
        elif d.disposition == "missing":  # its reason: it never finished, or went unread
            why = d.reason or "its result was not used"
            reasons.append(f'{d.kind} "{d.description}" ({d.status}): {why}')
        elif d.disposition == "failed":
            reasons.append(_failed_reason(d))
    say = in_user_terms or (lambda text: text)
    status: Status
    carried = [
        d
        for d in dispositions
        if d.result is not None and d.status == "completed" and d.ended in (None, "finished")
    ]
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
    elif final is None or not (ledger.last_round_ok or _used_finished_work(dispositions)):
        status = "failed"
        if final is None and not any("failed" in r or "error" in r for r in reasons):
            reasons.append("the lead produced no successful answer")
    elif (
        not ledger.last_round_ok  # an answer from finished work, but the last round failed
        or any(d.disposition not in ("included", "not_run") for d in dispositions)
        # wrapped up short of the work, or stopped from outside
        or ledger.stop in ("token_budget", "request_budget", "interrupted")
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
        resumes=ledger.resumes,
        tasks=dispositions,
        cost_usd=round(ledger.cost_usd, 6),
        reasons=[redact(say(r)) for r in dict.fromkeys(reasons)],
        reason=_reason(ledger, status, dispositions, answered=final is not None),
        relay=relay,
    )


def _reason(
    ledger: Ledger, status: Status, dispositions: list[TaskDisposition], *, answered: bool = True
) -> FinishReason:
    if status == "completed":
        return "all_results_used"
    if ledger.stop is not None:
        return ledger.stop
    if not answered and status == "partial":
        return "deadline" if ledger.first_error_kind == "deadline" else "no_answer"
    if status == "failed":
        if any(d.kind == "task" and d.run_id and d.status == "failed" for d in dispositions):
            return "work_failed"
        return "deadline" if ledger.first_error_kind == "deadline" else "no_answer"
    if any(d.disposition == "failed" for d in dispositions):
        return "work_failed"
    return "results_missing"


def stopped_before_start(stop: str) -> Finished:
    """The :class:`Finished` of a run stopped from outside before its lead started.

    ``stop`` names what stopped it (``SIGTERM``). Nothing ran, so nothing is lost: no task,
    status ``failed`` (no answer), reason ``interrupted``, as :func:`build_finished` reports
    a run stopped before any answer. ``teamlead ask --json`` ends with it when a stop signal
    comes while the command is still starting.

    Example:
        >>> stopped_before_start("SIGTERM").reason
        'interrupted'
    """
    return Finished(
        status="failed",
        result=None,
        session_id=None,
        resumes=0,
        reasons=[redact(f"the run was stopped ({stop}) before it started; nothing ran")],
        reason="interrupted",
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
