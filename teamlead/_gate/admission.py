"""Admission, one owner: every agent and request of a run is let start or go on (or not) by
its :class:`Admission`.

A run starts agents three ways, and one object decides for all of them: an ``Agent`` call
and a ``Workflow`` call in the PreToolUse hook (the admission is the run's
:class:`~teamlead._gate.gate.SpawnGate`; :meth:`Admission.hook_matcher` goes into the run's
options), and a workflow agent, which fires no hook, at its first request, when the relay's
ledger (:class:`~teamlead._metering.book.AgentBook`) asks
:meth:`Admission.admit_workflow_agent`.

It owns what those decisions share: the gate's part (the run's pool and the process-wide
cap, the stagger, the spawn budget, the depth limit, the deadline), the run's
:attr:`~Admission.pause`, the limits the ledger applies to each request
(:attr:`~Admission.limits`) and the subagent model. :class:`~teamlead.RunControl` amends it
(:meth:`Admission.amend`); the ledger tells it a budget reached or an agent timed out; the
run tells it what the stream shows, that a workflow agent's work ended, that a stop was
asked and that the run ended. Everything it needs is passed when it is made (a client run
also hands it how to stop its client's timed-out tasks, :meth:`Admission.stop_with`).

With the gate off (``SpawnPolicy(enabled=False)``, or a client connected without it) the
admission is not :attr:`~SpawnGate.gated`: every agent starts at once, and only the
subagent model, the pause, the timeout and the budgets still apply.

Example:
    >>> policy = Policy(spawn={"max_concurrent_agents": 3})
    >>> admission = Admission(policy, SYSTEM_CLOCK, cap=SpawnCap(4))  # 4 for the process
    >>> admission.gated, admission.cap, admission.most
    (True, 3, 4)
    >>> admission.amend(cap=4, subagent_model="claude-haiku-5-5")
    >>> admission.cap, admission.agent_model("agent-1", "claude-opus-5-5")
    (4, 'claude-haiku-5-5')
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio

from ..clock import SYSTEM_CLOCK, Clock
from ..events import RelayedAgentKind, RunAmended, SpawnDecided
from ..policy import Policy, is_model_alias
from .gate import SpawnGate
from .limits import AgentLimits, ExhaustReason
from .pause import Pause
from .slots import SpawnCap

__all__ = ["Admission"]

#: Agents whose first request's model (or wanted alias) the admission remembers.
_MAX_AGENTS = 4096
#: How long stopping one timed-out task of a client may take.
_STOP_TASK_S = 5


class Admission(SpawnGate):
    """The one owner of a run's admissions (see the module docstring): the run's spawn gate,
    and what else decides whether its agents and requests go on.

    Args:
        policy: the run's policy (``spawn`` for the limits, ``deadline_s`` for the deadline).
        clock: the run's clock: every wait runs on it.
        cap: the cap on subagents the run shares with its process's other runs.
        env: the CLI's environment (its own subagent cap is read from it).
        starting_model: the subagent model the run starts with (``None``: the agents' own).
        gated: build the spawn gate when ``policy.spawn`` is on; ``False`` for a client
            that connected without it (its hooks were fixed then).
        publish: where the gate's events and the amends go (the run's event bus);
            ``None``: nowhere.
    """

    def __init__(
        self,
        policy: Policy,
        clock: Clock = SYSTEM_CLOCK,
        *,
        cap: SpawnCap,
        env: Mapping[str, Any] | None = None,
        starting_model: str | None = None,
        gated: bool = True,
        publish: Callable[[SpawnDecided | RunAmended], None] | None = None,
    ) -> None:
        self.clock = clock
        self._publish = publish
        #: The run's pause (``teamlead pause``): the gate holds the Agent calls it would
        #: admit, the relay the run's new requests, while it is on.
        self.pause = Pause()
        super().__init__(
            policy.spawn,
            cap=cap,
            deadline_s=policy.deadline_s,
            env={k: v for k, v in (env or {}).items() if isinstance(v, str)},
            clock=clock,
            on_event=publish,
            pause=self.pause,
            subagent_model=starting_model,
            gated=gated and policy.spawn.enabled,
        )
        #: What the relay's ledger applies to each request: the timeout and the budgets.
        self.limits = AgentLimits(
            agent_timeout_s=policy.spawn.agent_timeout_s,
            token_budget=policy.token_budget,
            request_budget=policy.request_budget,
        )
        #: The budget reached, once one is: no agent starts and no agent request goes on.
        self.exhaust_reason: ExhaustReason | None = None
        self._exhaust_listeners: list[Callable[[], None]] = []
        self._stop_task: Callable[[str], Awaitable[None]] | None = None
        self._stopping: set[asyncio.Task[None]] = set()
        #: The subagent model the run started with (what an amend to ``None`` restores).
        self.starting_model = starting_model
        #: The model the relay pins new agents to (``None``: the CLI's own choice); set
        #: only once an amend moved it off the starting model.
        self.pinned_model: str | None = None
        #: What the CLI resolved each model alias to, as its agents' first requests showed.
        self.aliases: dict[str, str] = {}
        self._alias_wanted: dict[str, str] = {}  # agent id -> the alias the hook gave it
        self._sent: dict[str, str] = {}  # agent id -> the model its first request named

    # -- what the relay's ledger tells it -----------------------------------------------------
    def on_exhausted(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` once, when a budget is reached, on the run's loop (a round's
        read is cut); returns the call that unsubscribes."""
        listeners = self._exhaust_listeners
        listeners.append(listener)
        return lambda: listeners.remove(listener) if listener in listeners else None

    def budget_reached(self, reason: ExhaustReason) -> None:
        """A run budget (``token_budget``, ``request_budget``) is reached: no agent starts
        and no agent request goes on; the round is cut (:meth:`on_exhausted`) and the run
        wraps up. Only the first call counts."""
        if self.exhaust_reason is not None:
            return
        self.exhaust_reason = reason
        for listener in list(self._exhaust_listeners):
            listener()
        self.close(f"the run's {reason.replace('_', ' ')} is reached: no more agents")

    def next_turn(self) -> None:
        """A client run's next turn begins, on a deadline of its own: a gate that the last
        turn's wrap-up closed opens again. A budget reached or a stop asked keeps it closed
        (they are the run's, not a turn's)."""
        if self.exhaust_reason is None and not self._stopped:
            self._closed = False

    def stop_with(self, stop_task: Callable[[str], Awaitable[None]]) -> None:
        """A client run: an Agent-tool task past its timeout is stopped with
        ``stop_task(task_id)``, the client's, too (the relay has ended its request and
        refuses its next ones)."""
        self._stop_task = stop_task

    def agent_timed_out(self, agent_id: str, kind: RelayedAgentKind) -> None:
        """``agent_id`` ran past its timeout: on a client run its task is stopped (a
        workflow agent has no task of its own). The stop is kept referenced until done."""
        stop_task = self._stop_task
        if stop_task is None or kind != "agent":
            return

        async def stop() -> None:
            with anyio.move_on_after(_STOP_TASK_S), contextlib.suppress(Exception):
                await stop_task(agent_id)

        task = asyncio.get_running_loop().create_task(stop())
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    # -- what the control changes -------------------------------------------------------------
    def amend(
        self, *, cap: int | None, subagent_model: str | None, event: RunAmended | None = None
    ) -> None:
        """Put the control's values into the run: the cap (``None``: unchanged; a raise
        admits queued agents at once, a cut stops none) and the model agents that start
        from now on run on (``None``: their own); ``event``, the control's account of the
        amend, is published once they apply.

        An alias goes into later Agent calls through the hook; the relay pins a model id
        (or an alias, once an Agent call's agent showed what the CLI made of it) to every
        request of each agent whose first request comes later.
        """
        if self.gated and cap is not None and cap != self.cap:
            self.set_limit(cap)
        self.subagent_model = subagent_model
        # the CLI runs new agents on the starting model already: no pin for it
        changed = subagent_model is not None and subagent_model != self.starting_model
        self.pinned_model = subagent_model if changed else None
        if event is not None and self._publish is not None:
            self._publish(event)

    # -- what the relay's ledger asks ---------------------------------------------------------
    def agent_model(self, agent_id: str, sent_model: str | None) -> str | None:
        """The model a new agent is pinned to: :attr:`pinned_model`, an alias resolved
        (``None`` until an agent showed what it became). ``sent_model`` is the model its
        first request named: for an agent the hook gave an alias, what the CLI made of it."""
        if sent_model is not None and len(self._sent) < _MAX_AGENTS:
            self._sent.setdefault(agent_id, sent_model)
        alias = self._alias_wanted.pop(agent_id, None)
        if alias is not None and sent_model is not None:
            self.aliases[alias] = sent_model
        pinned = self.pinned_model
        if pinned is not None and is_model_alias(pinned):
            return self.aliases.get(pinned)
        return pinned

    def _model_set(self, agent_id: str, alias: str) -> None:
        """The hook gave ``agent_id`` the model ``alias``: the model its first request names
        is what the CLI resolved the alias to (learnt now, or at that request)."""
        sent = self._sent.get(agent_id)
        if sent is not None:
            self.aliases[alias] = sent
        elif len(self._alias_wanted) < _MAX_AGENTS:
            self._alias_wanted[agent_id] = alias
