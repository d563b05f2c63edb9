"""One agent's counters in a run's ledger: small and fixed, so memory per agent stays flat."""

from __future__ import annotations

from dataclasses import dataclass

from ..events import RelayedAgentKind

__all__ = ["AgentCount"]


@dataclass(eq=False, slots=True)
class AgentCount:
    """One agent's counters (slotted, so a run's book stays flat).

    ``input_tokens``/``output_tokens`` are ``None`` until a reply carried usage;
    ``unknown_usage`` counts successful replies that carried none (their tokens are unknown,
    not zero).
    """

    # a workflow_agent fires no hook: the relay holds its first request for its admission
    kind: RelayedAgentKind
    first_at: float  # wall clock, for people: its first request forwarded
    last_at: float
    requests: int = 0
    input_tokens: int | None = None
    output_tokens: int | None = None
    unknown_usage: int = 0
    absorbed: int = 0
    passed: int = 0
    started_at: float | None = None  # monotonic, for the timeout
    last_total: int = 0
    last_tool: str | None = None  # the tool its latest request shows it called last
    timed_out: bool = False
    denied: str | None = None  # why the run's spawn budget kept it from starting
    model: str | None = None  # the model its requests are pinned to, if any
    sent_model: str | None = None  # the model its first request named

    @property
    def tokens(self) -> int | None:
        """Input plus output tokens; ``None`` when no reply carried usage."""
        if self.input_tokens is None and self.output_tokens is None:
            return None
        return (self.input_tokens or 0) + (self.output_tokens or 0)
