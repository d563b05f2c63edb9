"""What the control endpoint's ops do to one run: :class:`RunSteering` over its state.

The endpoint (:mod:`.endpoint`) parses a request and calls one method here, on the run's
own loop; each reads the run's state or asks the part that owns what changes: ``status``
(``teamlead ps``), ``detail`` (``teamlead view``, :func:`~.detail.live_detail`), ``stop``
(a graceful stop wraps up as the deadline would, :meth:`~teamlead._run.stop.RunStop.wrap_up`;
``now``, or a run without a spawn gate, stops at once; a paused run is unpaused first, so
its wrap-up can reach the model), ``pause``/``unpause`` (the run's pause) and ``amend``
(the run's :class:`~teamlead.control.RunControl`, one attached when it has none, so an
amend from outside is one from code). A refusal is a
:class:`~teamlead.errors.ControlError` saying why in one line.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any, cast

from .._run import RunState
from ..control import UNSET, RunControl, Unset
from ..errors import AmendRefused, ControlError
from ..events import ConcurrencyChanged
from ..tracker import TaskInfo
from .detail import LimitHistory, agent_state, live_detail, task_state

__all__ = ["STOP_REASON", "RunSteering"]

#: What a stop from ``teamlead stop`` is called in the run's reasons.
STOP_REASON = "teamlead stop"


class RunSteering:
    """The endpoint's view of one run (see the module docstring).

    Args:
        state: the run.
        run: its registry id.
        command: what its process was started as.
        started: when it started (seconds since the epoch).
    """

    def __init__(self, state: RunState, *, run: str, command: str, started: float) -> None:
        self._state = state
        self._run = run
        self._command = command
        self._started = started
        #: the governor's limit per bucket over time, from the run's stream
        self.limits = LimitHistory()

    def saw(self, item: object) -> None:
        """One item of the run's stream: a governor's change is kept for ``detail``."""
        if isinstance(item, ConcurrencyChanged):
            self.limits.record(item)

    def status(self) -> dict[str, Any]:
        """The run now, as ``teamlead ps`` shows it."""
        state = self._state
        admission = state.admission
        book = state.agents.book
        now = state.clock.monotonic()
        running, done, failed = _counted(state.stream.tracker.tasks.values())
        relayed = state.relay is not None and state.relay.run is not None
        return {
            "run": self._run,
            "session_id": state.stream.tracker.session_id,
            "pid": os.getpid(),
            "status": self._status(),
            "mode": state.ask.mode,
            "command": self._command,
            "started": self._started,
            "agents": {
                "running": running,
                "queued": admission.queued,
                "done": done,
                "failed": failed,
            },
            "tokens": book.tokens,
            "requests": book.requests,
            "cap": admission.cap,
            "max_cap": admission.most,
            "subagent_model": state.outside.control.subagent_model
            if state.outside.control
            else None,
            "held": admission.pause.held_requests,
            "paused": admission.pause.paused,
            "relayed": relayed,
            "deadline_in_s": round(max(0.0, state.deadline.at - now), 1)
            if state.deadline.at
            else None,
        }

    def detail(self) -> dict[str, Any]:
        """The run in detail, as ``teamlead view`` shows it (:class:`~.detail.RunDetail`)."""
        detail = live_detail(self._state, run=self._run, status=self._status(), limits=self.limits)
        if detail.started is None or self._started < detail.started:
            detail.started = self._started
        return detail.to_json()

    def _status(self) -> str:
        state = self._state
        if state.stop.requested:
            return "stopping"
        if state.stop.wrapping:
            return "wrapping_up"
        if state.admission.pause.paused:
            return "paused"
        if state.agents.book.wrapping:
            return "wrapping_up"
        return "running"

    def stop(self, *, now: bool) -> str:
        """Stop the run: gracefully (a wrap-up from what finished), or ``now``."""
        state = self._state
        self._need_live()
        if state.stop.requested:
            raise ControlError(f"run {self._run} is already stopping", code="state")
        state.admission.pause.unpause()  # a paused run's last requests must go out
        if now or not state.admission.gated:
            state.stop.request(STOP_REASON)
            why = "" if now else " (it has no spawn gate, so no wrap-up)"
            return (
                f"stopping run {self._run} now{why}: its agents are stopped, it ends with "
                "its finished line (interrupted)"
            )
        if state.stop.wrapping:
            raise ControlError(
                f"run {self._run} is already wrapping up; `teamlead stop --now` ends it at once",
                code="state",
            )
        state.stop.wrap_up(STOP_REASON)
        return (
            f"stopping run {self._run}: its agents are stopped and the lead answers from the "
            "finished work, then it ends with its finished line (partial, interrupted)"
        )

    def pause(self) -> str:
        """Hold every new agent and request of the run."""
        state = self._state
        self._need_live()
        if state.stop.requested or state.stop.wrapping:
            raise ControlError(f"run {self._run} is stopping; it cannot be paused", code="state")
        if not state.admission.pause.pause():
            raise ControlError(f"run {self._run} is already paused", code="state")
        relayed = state.relay is not None and state.relay.run is not None
        held = (
            "new requests"
            if relayed
            else "nothing at the relay (the run goes direct: its lead's requests go on)"
        )
        left = state.deadline.at - state.clock.monotonic() if state.deadline.at else None
        clock = f"; its deadline keeps running ({left:.0f} s left)" if left is not None else ""
        return (
            f"paused run {self._run}: no new agent starts and it holds {held}; requests "
            f"already streaming finish{clock}"
        )

    def unpause(self) -> str:
        """Let what the pause held go on."""
        state = self._state
        self._need_live()
        held = state.admission.pause.waiting
        if not state.admission.pause.unpause():
            raise ControlError(f"run {self._run} is not paused", code="state")
        return f"unpaused run {self._run}: {held} held agent(s) and request(s) go on"

    def amend(self, changes: Mapping[str, int | str | None]) -> str:
        """Amend the run's cap and subagent model (``RunControl.amend``'s three states)."""
        state = self._state
        self._need_live()
        control = state.outside.control
        if control is None:  # a run started without one: the registry's own
            control = RunControl()  # used on the run's loop: applied at once
            state.outside.use_control(control, state.admission, on_loop=True)
        # the request's parse typed each (a cap a whole number, a model a string, or None)
        cap = cast("int | None | Unset", changes.get("cap", UNSET))
        model = cast("str | None | Unset", changes.get("subagent_model", UNSET))
        try:
            event = control.amend(cap=cap, subagent_model=model)
        except AmendRefused as exc:
            raise ControlError(str(exc), code="refused") from None
        parts = []
        if "cap" in event.changed:
            parts.append(f"cap {event.previous_cap} -> {event.cap}")
        if "subagent_model" in event.changed:
            before = event.previous_subagent_model or "their own"
            parts.append(f"subagent model {before} -> {event.subagent_model or 'their own'}")
        return f"amended run {self._run}: " + ", ".join(parts)

    def _need_live(self) -> None:
        if self._state.admission.pause.ended:
            raise ControlError("the run has finished", code="finished")


def _counted(tasks: Iterable[TaskInfo]) -> tuple[int, int, int]:
    """Running, done and failed agents: Agent-tool tasks, and each workflow's agents (one
    whose workflow ended before it did failed), in the states the tree shows them in."""
    states: list[str] = []
    for task in tasks:
        agents = task.workflow.agents.values() if task.workflow is not None else ()
        if agents:
            unended = "failed" if task.terminal else "running"
            states += [agent_state(agent, unended) for agent in agents]
        else:
            states.append(task_state(task, "running"))
    running = states.count("running")
    done = states.count("done") + states.count("cached")
    return running, done, len(states) - running - done
