"""The relay's counters and event fan-out, per relay and per run.

The relay keeps a :class:`Tally` for its whole life and one per
:class:`~teamlead._relay.RelayRun`, so a run's ``Finished`` carries what happened to *its*
requests although the relay and the governor are shared. A failing listener is logged,
never allowed to break a request.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from ..events import BucketSummary, ConcurrencyChanged, RateLimited, RelaySummary

__all__ = ["RelayEvent", "RelayListener", "Tally", "notify"]

log = logging.getLogger("teamlead.relay")

RelayEvent = RateLimited | ConcurrencyChanged
RelayListener = Callable[[RelayEvent], None]


@dataclass
class _BucketCount:
    requests: int = 0
    rate_limited: int = 0


@dataclass
class Tally:
    """Counts of one relay or one run."""

    requests: int = 0
    absorbed: int = 0
    passed: int = 0
    overloaded: int = 0
    overloaded_held: int = 0
    buckets: dict[str, _BucketCount] = field(default_factory=dict)

    def request(self, key: str) -> None:
        """One request seen (retries are not new requests)."""
        self.requests += 1
        self.buckets.setdefault(key, _BucketCount()).requests += 1

    def moved(self, key: str, to: str) -> None:
        """One request counted in bucket ``key`` goes to bucket ``to`` instead (its agent's
        model pinned); ``key`` is left out once nothing is counted in it."""
        left = self.buckets[key]
        left.requests -= 1
        if left == _BucketCount():
            del self.buckets[key]
        self.buckets.setdefault(to, _BucketCount()).requests += 1

    def limited(self, key: str, event: RateLimited) -> None:
        """One 429 or overload met, absorbed or passed on: an overload is any status but
        429 (a 529, a gateway's 503, or a connection dropped before the reply's head)."""
        if event.status != 429:
            self.overloaded += 1
            self.overloaded_held += event.outcome == "absorbed"
        else:
            self.buckets.setdefault(key, _BucketCount()).rate_limited += 1
        if event.outcome == "absorbed":
            self.absorbed += 1
        else:
            self.passed += 1

    def summary(self, limit_of: Callable[[str], int]) -> RelaySummary:
        """The summary, with each bucket's current limit from ``limit_of``."""
        return RelaySummary(
            requests=self.requests,
            absorbed=self.absorbed,
            passed=self.passed,
            overloaded=self.overloaded,
            overloaded_held=self.overloaded_held,
            buckets=[
                BucketSummary(
                    key=key, limit=limit_of(key), requests=c.requests, rate_limited=c.rate_limited
                )
                for key, c in sorted(self.buckets.items())
            ],
        )


def notify(listeners: list[RelayListener], event: RelayEvent) -> None:
    """Call every listener; one that raises is logged and skipped."""
    for listener in list(listeners):
        try:
            listener(event)
        except Exception:
            log.exception("relay event listener failed on %s", event.type)
