"""One agent's counters in a run's ledger (small and fixed, so memory per agent stays
flat), and what the ledger asks the run's admission (:class:`AgentAdmission`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from ..events import RelayedAgentKind

__all__ = ["AgentAdmission", "AgentCount", "WorkflowRefusal"]


@dataclass(frozen=True)
class WorkflowRefusal:
    """Why a workflow agent does not start.

    Attributes:
        code: ``spawn_budget``: the run's spawn budget is spent (every later request of the
            agent is refused too); ``no_slot``: no slot, or no turn in the stagger, came
            before the run's wrap-up point.
        reason: what the agent (and the run's rows) are told.
    """

    code: Literal["spawn_budget", "no_slot"]
    reason: str


class AgentAdmission(Protocol):
    """The run's admission as the relay's ledger asks it: the one owner of every agent's
    admission, :class:`teamlead._gate.admission.Admission` (this protocol keeps the ledger
    below it, so the relay can call the ledger without importing the gate)."""

    async def admit_workflow_agent(self, agent_id: str) -> WorkflowRefusal | None:
        """A workflow agent's first request (it fires no hook): wait for its slots and its
        turn as an Agent call does in the hook; ``None`` once it may start."""
        ...

    def agent_model(self, agent_id: str, sent_model: str | None) -> str | None:
        """The model a new agent's requests are pinned to (``None``: the one it sent),
        told the model its first request named (``sent_model``)."""
        ...


class AgentCount:
    """One agent's counters; small and fixed (``__slots__``), so a run's book stays flat.

    ``input_tokens``/``output_tokens`` are ``None`` until a reply carried usage;
    ``unknown_usage`` counts successful replies that carried none (their tokens are unknown,
    not zero).
    """

    __slots__ = (
        "absorbed",
        "first_at",
        "in_flight",
        "input_tokens",
        "kind",
        "last_at",
        "last_tool",
        "last_total",
        "model",
        "output_tokens",
        "passed",
        "requests",
        "sent_model",
        "started_at",
        "denied",
        "timed_out",
        "unknown_usage",
    )

    def __init__(self, kind: RelayedAgentKind, now: float) -> None:
        # a workflow_agent fires no hook: the relay holds its first request for its admission
        self.kind: RelayedAgentKind = kind
        self.requests = 0
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.unknown_usage = 0
        self.absorbed = 0
        self.passed = 0
        self.first_at = now  # wall clock, for people: its first request forwarded
        self.last_at = now
        self.started_at: float | None = None  # monotonic, for the timeout
        self.in_flight = 0
        self.last_total = 0
        self.last_tool: str | None = None  # the tool its latest request shows it called last
        self.timed_out = False
        self.denied: str | None = None  # why the run's spawn budget kept it from starting
        self.model: str | None = None  # the model its requests are pinned to, if any
        self.sent_model: str | None = None  # the model its first request named

    @property
    def tokens(self) -> int | None:
        """Input plus output tokens; ``None`` when no reply carried usage."""
        if self.input_tokens is None and self.output_tokens is None:
            return None
        return (self.input_tokens or 0) + (self.output_tokens or 0)
