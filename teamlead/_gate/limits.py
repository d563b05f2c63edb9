"""The run's limits at the relay: its ceilings on requests in flight (:class:`RunLimits`),
and the per-agent timeout and run budgets its ledger applies (:class:`AgentLimits`).

The process's governor paces every request of every run against what the account allows
(learnt from the upstream, shared with the account's other processes). A run's
:class:`~teamlead.policy.LimitsPolicy` ceilings are that run's choice, not the account's:
two runs of one process with different ``--model-limit`` must each keep their own. So a
run's ceilings are held here, one :class:`RunLimits` per run of the relay, and a request
takes a place under them before it asks the governor for a slot: it never holds a
governor slot while its own run is full, and another run never waits on it.

Waiters are served first come, first served (a request whose key is full does not stop a
later request of a key with room), and every wait is bounded on the governor's clock.

Example:
    >>> limits = RunLimits(LimitsPolicy(models={"claude-opus-5-5": 2}, total=3), SYSTEM_CLOCK)
    >>> limits.limit_of("anthropic/claude-opus-5-5"), limits.limit_of("anthropic/other")
    (2, 3)
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal, TypeAlias

from ..clock import SYSTEM_CLOCK, Clock, move_on_at
from ..policy import LimitsPolicy
from .slots import Waiter

__all__ = ["AgentLimits", "ExhaustReason", "NoPlace", "RunLimits"]

#: A run budget that can be reached.
ExhaustReason: TypeAlias = Literal["token_budget", "request_budget"]


@dataclass(frozen=True)
class AgentLimits:
    """The limits the relay's ledger applies per agent and per run (``None``: no limit):
    an agent's timeout, and the run's token and request budgets."""

    agent_timeout_s: float | None = None
    token_budget: int | None = None
    request_budget: int | None = None


class NoPlace(Exception):
    """No place under the run's own ceilings came in time."""


class RunLimits:
    """The ceilings of one run's requests in flight: per model, per provider, in all.

    Args:
        limits: the run's ceilings (unset ones do not limit).
        clock: the governor's clock, on which waits are bounded.
    """

    def __init__(self, limits: LimitsPolicy, clock: Clock = SYSTEM_CLOCK) -> None:
        self.limits = limits
        self._clock = clock
        self._held: Counter[str] = Counter()
        self._providers: Counter[str] = Counter()
        self._total = 0
        self._queue: list[Waiter] = []

    @property
    def active(self) -> bool:
        """Whether any ceiling is set (a run without one skips this step)."""
        limits = self.limits
        return bool(limits.models or limits.providers) or (
            limits.default is not None or limits.total is not None
        )

    def limit_of(self, key: str) -> int | None:
        """The most requests of bucket ``key`` (``provider/model``) this run may have in
        flight, from its model, provider and total ceilings (``None``: no ceiling)."""
        ceilings = [c for c in self._ceilings(key) if c is not None]
        return min(ceilings) if ceilings else None

    def in_flight(self, key: str | None = None) -> int:
        """This run's requests holding a place (of ``key``, or in all)."""
        return self._total if key is None else self._held[key]

    @asynccontextmanager
    async def hold(self, key: str, deadline: float | None) -> AsyncIterator[None]:
        """Hold a place for one request of ``key`` for the block.

        Args:
            key: the request's bucket, ``provider/model``.
            deadline: the latest moment to wait until, on the clock (``None``: no limit).

        Raises:
            NoPlace: no place before ``deadline``.
        """
        if not self.active:
            yield
            return
        waiter = Waiter(key)
        if self._fits(key):  # places are handed on at release: none is free to an earlier one
            self._count(waiter, True)
        else:
            self._queue.append(waiter)
            try:
                with move_on_at(self._clock, math.inf if deadline is None else deadline):
                    await waiter.wake.wait()
            except BaseException:
                self._abandon(waiter)
                raise
            if not waiter.granted:
                self._abandon(waiter)
                raise NoPlace(f"no place for a request of {key} under the run's limits")
        try:
            yield
        finally:
            self._give_back(waiter)

    def _ceilings(self, key: str) -> tuple[int | None, int | None, int | None]:
        """The ceilings on bucket ``key``'s requests: of its model, of its provider, in all."""
        provider, _, model = key.partition("/")
        return self._model_ceiling(model), self.limits.providers.get(provider), self.limits.total

    def _model_ceiling(self, model: str) -> int | None:
        models = self.limits.models
        if model in models:
            return models[model]
        matching = [v for pattern, v in models.items() if fnmatchcase(model, pattern)]
        return min(matching) if matching else self.limits.default

    def _fits(self, key: str) -> bool:
        held = (self._held[key], self._providers[key.partition("/")[0]], self._total)
        return all(c is None or n < c for n, c in zip(held, self._ceilings(key), strict=True))

    def _count(self, waiter: Waiter, granted: bool) -> None:
        """Count ``waiter``'s place in (``granted``) or out."""
        waiter.granted = granted
        step = 1 if granted else -1
        self._held[waiter.key] += step
        self._providers[waiter.key.partition("/")[0]] += step
        self._total += step

    def _give_back(self, waiter: Waiter) -> None:
        if waiter.granted:
            self._count(waiter, False)
            self._serve()

    def _abandon(self, waiter: Waiter) -> None:
        """A waiter leaves (timed out or cancelled): off the queue, or its place back if it
        was granted at the very moment it left."""
        if waiter in self._queue:
            self._queue.remove(waiter)
        self._give_back(waiter)

    def _serve(self) -> None:
        """Grant, in arrival order, every queued waiter whose key now has room."""
        for waiter in list(self._queue):
            if self._fits(waiter.key):
                self._queue.remove(waiter)
                self._count(waiter, True)
                waiter.wake.set()
