"""One run's event bus: every producer publishes to it, every consumer subscribes.

The run's producers are handed :meth:`EventBus.publish` when they are made (the spawn
gate through the admission, the relay, the agents' metering, the user's control), and
publish their typed events (:data:`RunEvent`) from wherever they run on the run's event
loop. Each consumer takes a :class:`Subscription` of its own and gets every event published
after it subscribed, whoever else reads: the run's public stream is one subscriber
(:func:`with_run_events`), a round that needs the lead's Retry-After another, so neither
can take an event from the other.

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
    """One consumer's view of the bus: every event published since it subscribed, until
    it is closed.

    Nothing is dropped: a subscription keeps every event until it is drained. Its
    consumers drain it at each message of the run's stream and close it with the run,
    so what it holds is bounded by what one stream gap publishes (a few events per agent).
    """

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
