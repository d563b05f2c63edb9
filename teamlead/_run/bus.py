"""One run's event bus: every producer publishes to it, every consumer subscribes.

The run's producers (the admission, the relay, the agents' metering, the user's control)
are handed :meth:`EventBus.publish` when they are made. Each consumer has a
:class:`Subscription` of its own, with every event published since it subscribed: the
run's public stream (:func:`with_run_events`) and a round watching for the lead's
Retry-After never take an event from each other.

Example:
    >>> bus = EventBus()
    >>> watch = bus.subscribe()
    >>> bus.publish(RunAmended(changed=["cap"], cap=2, at=0.0))
    >>> [e.cap for e in bus.stream.drain()], [e.cap for e in watch.drain()]
    ([2], [2])
"""

from __future__ import annotations

import collections
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any, TypeAlias

from ..events import AgentUsage, ConcurrencyChanged, RateLimited, RunAmended, SpawnDecided

__all__ = ["EventBus", "RunEvent", "Subscription", "with_run_events"]

#: What a run's producers publish: the gate's decisions, the relay's rate limits and
#: concurrency changes, the agents' usage and the control's amends.
RunEvent: TypeAlias = SpawnDecided | RateLimited | ConcurrencyChanged | AgentUsage | RunAmended


class Subscription:
    """One consumer's view of the bus: every event published since it subscribed, kept
    until drained (its consumers drain it at each message of the run's stream, so it holds
    what one stream gap publishes, a few events per agent), until it is closed."""

    def __init__(self, bus: EventBus) -> None:
        self._bus = bus
        self._events: collections.deque[RunEvent] = collections.deque()

    def put(self, event: RunEvent) -> None:
        """Keep ``event`` for the next :meth:`drain` (the bus calls this)."""
        self._events.append(event)

    def drain(self) -> list[RunEvent]:
        """The events published since the last call, oldest first."""
        out = list(self._events)
        self._events.clear()
        return out

    def close(self) -> None:
        """Stop receiving events (idempotent)."""
        self._bus.leave(self)


class EventBus:
    """One run's events, each given to every subscriber (see the module docstring).

    Attributes:
        stream: the public stream's subscription, made with the bus, so that nothing
            published before the stream is read, or between a client's turns, is lost.
    """

    def __init__(self) -> None:
        self._subscribers: list[Subscription] = []
        self.stream = self.subscribe()

    def publish(self, event: RunEvent) -> None:
        """Give ``event`` to every current subscriber."""
        for subscriber in list(self._subscribers):
            subscriber.put(event)

    def subscribe(self) -> Subscription:
        """A new subscription: it gets every event published from now on."""
        subscription = Subscription(self)
        self._subscribers.append(subscription)
        return subscription

    def leave(self, subscription: Subscription) -> None:
        """Drop ``subscription`` (nothing more is kept for it)."""
        if subscription in self._subscribers:
            self._subscribers.remove(subscription)


async def with_run_events(
    items: AsyncGenerator[Any, None], bus: EventBus
) -> AsyncGenerator[Any, None]:
    """``items`` with the run's events yielded before each item, as they come: the run's
    public stream, one subscriber of ``bus`` (:attr:`EventBus.stream`; an event published
    after an item is yielded before the next one, so each follows what caused it)."""
    async with aclosing(items):
        async for item in items:
            for event in bus.stream.drain():
                yield event
            yield item
