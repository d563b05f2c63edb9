"""The ledger: the run's bookkeeping for its one :class:`~teamlead.events.Finished`.

The session records here what the final event must report: resumes, cost, the first
stream error, why it stopped resuming (a typed :data:`~teamlead.events.FinishReason`
plus human text). :mod:`.result` builds the ``Finished`` from it, once, at the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from .._redact import redact
from .outcome import ErrorKind, RoundOutcome

__all__ = ["Ledger", "StopReason"]

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
