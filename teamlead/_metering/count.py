"""One agent's counters in a run's ledger: small and fixed, so memory per agent stays flat."""

from __future__ import annotations

from ..events import RelayedAgentKind

__all__ = ["AgentCount"]


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
