"""How one round ended: the :class:`RoundOutcome` a :class:`~.round.Round` returns, apart
from the round, so that the ledger, which records it, does not load the SDK."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeAlias

if TYPE_CHECKING:  # the tracker loads the SDK; the ledger, which reads this, must not
    from ..tracker import ResultSeen

__all__ = ["ErrorKind", "RoundOutcome"]

#: Why a round ended without an answer: the run's deadline, a token or request budget
#: reached, a client's silence, the generator raising, the lead's own error result (or
#: no result at all), a stop asked from outside, or a graceful stop (``stopping``: the
#: run wraps up as at its deadline).
ErrorKind: TypeAlias = Literal[
    "deadline", "budget", "idle", "raised", "result", "interrupted", "stopping"
]


@dataclass
class RoundOutcome:
    """How one round ended: ``ok`` when its last real result was a success.

    Attributes:
        ok: the round's last real result was a success.
        results: every result of the round, placeholders included.
        error: why the round failed, for people.
        error_kind: why the round failed, as a code.
        transient: the failure was a transient API error (rate limit, overload, 5xx).
        retry_after: the longest ``retry-after`` of a lead request that failed with 429 or
            529 in this round (seconds), when the failure is transient.
        cli_state: the CLI's last ``session_state_changed`` state after the round.
    """

    ok: bool
    results: list[ResultSeen]
    error: str | None = None
    error_kind: ErrorKind | None = None
    transient: bool = False
    retry_after: float | None = None
    cli_state: str | None = None

    @property
    def cost_usd(self) -> float:
        """The round's cost: the CLI reports its process's running total on every result,
        so the largest is the round's."""
        return max((r.cost_usd or 0.0 for r in self.results), default=0.0)
