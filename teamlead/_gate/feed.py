"""The spawn gate's part in a session: one gate for all rounds, fed by the stream.

A session runs one :class:`~teamlead._gate.gate.SpawnGate` across all its rounds: the run
state builds it (:func:`new_gate`) on the run's clock, its hook is merged into the options
of every round (a client's options get it before the client connects, since a client's
hooks are fixed then), and :class:`GateFeed` shows it every stream event and hands back
the gate events each one caused, so they are yielded right after the message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..clock import Clock
from ..policy import Policy
from .calls import GateEvent
from .gate import SpawnGate
from .slots import FifoSlots, SpawnCap
from .stream import observe

__all__ = ["GateFeed", "new_gate"]


def new_gate(
    policy: Policy, clock: Clock, env: Mapping[str, Any], cap: SpawnCap
) -> SpawnGate | None:
    """The spawn gate of a run with ``policy`` on ``clock``; ``None`` when it is off.

    Args:
        policy: the run's policy (``spawn`` for the limits, ``deadline_s`` for the deadline).
        clock: the run's clock: every wait in the gate runs on it.
        env: the CLI's environment (its own subagent cap is read from it).
        cap: the cap on subagents the run shares with its process's other runs.
    """
    if not policy.spawn.enabled:
        return None
    cli_env = {k: v for k, v in env.items() if isinstance(v, str)}
    return SpawnGate(policy.spawn, cap=cap, deadline_s=policy.deadline_s, env=cli_env, clock=clock)


class GateFeed:
    """One session's gate: observes messages and hands back the events they caused.

    Args:
        gate: the run's gate; the feed becomes its ``on_event`` listener.
    """

    def __init__(self, gate: SpawnGate) -> None:
        self.gate = gate
        self._events: list[GateEvent] = []
        gate.on_event = self._events.append

    def observe(self, message: Any, events: Sequence[Any] | None = None) -> list[Any]:
        """Feed ``message`` to the gate (``None``: none); the gate events since the last call.

        Args:
            message: the SDK message just read, or ``None`` once the stream has ended.
            events: the tracker's events for ``message``, when already parsed.
        """
        if message is not None:
            observe(self.gate, message, events)
        return self.drain()

    def slot_pools(self) -> list[FifoSlots]:
        """The pools a workflow agent (which fires no hook) takes a slot of at the relay, as
        an Agent call does in the hook: the run's own limit, then the process-wide cap."""
        return self.gate.slot_pools

    async def stagger(self, until: float) -> bool:
        """A workflow agent's first request waits its turn in the run's stagger, as an
        Agent call does in the hook (see :meth:`SpawnGate.stagger`)."""
        return await self.gate.stagger(until)

    def take_workflow_agent(self, agent_id: str) -> str | None:
        """A workflow agent takes a unit of the spawn budget before it starts (see
        :meth:`SpawnGate.take_workflow_agent`): ``None``, or why it does not start."""
        return self.gate.take_workflow_agent(agent_id)

    def give_back_workflow_agent(self) -> None:
        """A workflow agent that took a unit never started (no slot came in time)."""
        self.gate.give_back_workflow_agent()

    def drain(self) -> list[Any]:
        """The gate events not yet handed out."""
        events, self._events[:] = list(self._events), []
        return events
