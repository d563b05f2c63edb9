"""A finished run kept in the user's run history (:mod:`teamlead._history`).

When a run's ``Finished`` comes, :class:`Recorder` makes the run's
:class:`~teamlead._history.RunRecord` from it and the run's state: the prompt, the command
and the options that shaped the run, every agent's row with its prompt (the Agent call's)
and its whole result (as collected, else from its transcript), the answer, the status and
its reasons, the cost and the times. The record is made and written in a worker thread,
bounded by :data:`_KEEP_TIMEOUT_S`: keeping it never fails the run and never holds it up
for long; a history that cannot be written (a full disk, a directory refused) is one
warning line. A run of a state made with ``history=False`` (or under
``TEAMLEAD_NO_HISTORY=1``) is not recorded.
"""

from __future__ import annotations

import logging
import secrets

import anyio

from .._history import AgentRecord, RunRecord
from .._redact import redact_opt
from .._run import RunState
from ..events import Finished, TaskDisposition
from .registry import RUN_ID_CHARS, command_line, run_label

__all__ = ["Recorder"]

log = logging.getLogger("teamlead.history")

#: Making and writing a run's record may take this long; past it the run goes on without.
_KEEP_TIMEOUT_S = 10.0


class Recorder:
    """Keeps one run in the history when it finishes.

    Args:
        state: the run.
        run: the run's id (its registry id, so ``ps`` names it the same before and after
            its end); a new one when it is not registered.
        mode: ``query``, ``resume`` or ``client``.
        prompt: the prompt it was started with, when known.
    """

    def __init__(self, state: RunState, *, run: str | None, mode: str, prompt: str | None) -> None:
        self._state = state
        self._history = state.process.history
        self._run = run or secrets.token_hex(RUN_ID_CHARS // 2)
        self._mode = mode
        self._prompt = prompt
        self._command = command_line()
        self._label = run_label()
        self._started = state.clock.time()

    async def keep(self, finished: Finished) -> None:
        """Record the run that ended with ``finished`` (bounded; never raises)."""
        history = self._history
        if history is None:
            return
        ended = self._state.clock.time()
        with anyio.CancelScope(shield=True), anyio.move_on_after(_KEEP_TIMEOUT_S) as scope:
            try:
                await anyio.to_thread.run_sync(
                    lambda: history.add(self._record(finished, ended)), abandon_on_cancel=True
                )
            except OSError as exc:  # PermissionError too: a directory refused
                log.warning("this run is not kept in the run history: %s", _why(exc))
            except Exception as exc:  # noqa: BLE001 - the history never fails the run
                log.warning("this run is not kept in the run history: %s", type(exc).__name__)
        if scope.cancelled_caught:
            log.warning("this run is not kept in the run history: writing it took too long")

    def _record(self, finished: Finished, ended: float) -> RunRecord:
        state = self._state
        options = state.ask.user_options
        policy = state.ask.policy
        return RunRecord(
            run=self._run,
            label=self._label,
            command=self._command,
            prompt=redact_opt(self._prompt),
            mode=self._mode,
            options={
                "model": options.model,
                "cwd": None if options.cwd is None else str(options.cwd),
                "permission_mode": options.permission_mode,
                "deadline_s": policy.deadline_s,
                "max_resumes": policy.max_resumes,
                "max_cost_usd": policy.max_cost_usd,
                "spawn_gate": state.admission.gated,
                "relay": finished.relay is not None,
            },
            session_id=finished.session_id,
            status=finished.status,
            reason=finished.reason,
            reasons=list(finished.reasons),
            result=finished.result,
            cost_usd=finished.cost_usd,
            resumes=finished.resumes,
            started=self._started,
            ended=ended,
            agents=[self._agent(row) for row in finished.tasks],
        )

    def _agent(self, row: TaskDisposition) -> AgentRecord:
        from .._run import row_text  # loads the SDK's readers, as the result's builder does

        tracker = self._state.stream.tracker
        task = tracker.tasks.get(row.id)
        call = tracker.agent_calls.get(row.id)
        prompt = task.prompt if task is not None else (call.prompt if call else None)
        whole = row_text(self._state, row) if row.kind in ("task", "teammate") else None
        return AgentRecord.of_row(row, prompt=redact_opt(prompt), result=redact_opt(whole))


def _why(exc: OSError) -> str:
    if isinstance(exc, PermissionError) and not exc.filename:
        return str(exc)  # the private folder's rule, in its own words
    where = f" ({exc.filename})" if exc.filename else ""
    return f"{exc.strerror or exc}{where}"
