"""A run's stream with the run's own parse of it: :class:`RunStream`.

teamlead's own readers of a run's stream (the CLI's views, the experiment runner) need what
the run made of each item too: a :class:`RunStream` iterates the same items as
:func:`teamlead.run` and is the run's :class:`~teamlead.tracker.StreamParse`, so nothing
parses the stream again.

Example:
    >>> run = RunStream(make_state, items_of)  # doctest: +SKIP
    >>> progress = JsonProgress(sys.stdout, run)  # doctest: +SKIP
    >>> async for item in run:  # doctest: +SKIP
    ...     progress.handle(item)
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from typing import Any

from ..tracker import TrackedEvent, Tracker
from .state import RunState

__all__ = ["RunStream"]


class RunStream:
    """One run's items, and the run's parse of them: ``items`` makes the run's stream (the
    entry point's whole stack) from its state, which ``make`` makes once, when the stream is
    first read (on the event loop that reads it) or :meth:`made`."""

    def __init__(
        self,
        make: Callable[[], RunState],
        items: Callable[[RunState], AsyncGenerator[Any, None]],
    ) -> None:
        self._make = make
        self._items_of = items
        self._state: RunState | None = None
        self._items: AsyncGenerator[Any, None] | None = None
        self._closed = False

    def __aiter__(self) -> RunStream:
        return self

    async def __anext__(self) -> Any:
        if self._items is None:
            if self._closed:
                raise StopAsyncIteration
            self._items = self._items_of(self.made())
        return await self._items.__anext__()

    def made(self) -> RunState:
        """The run's state, made now if the stream was not read yet: its options can be
        read before the run starts (``teamlead-claude`` starts its first CLI on them)."""
        if self._state is None:
            self._state = self._make()
        return self._state

    async def aclose(self) -> None:
        """Close the run's stream (its CLI is stopped, its slots let go); idempotent."""
        self._closed = True
        if self._items is not None:
            await self._items.aclose()

    @property
    def tracker(self) -> Tracker | None:
        """The run's own tracker; ``None`` until the stream is first read."""
        return self._state.stream.tracker if self._state is not None else None

    def events_of(self, item: object) -> list[TrackedEvent]:
        """What the run made of ``item``, the item it yielded last
        (:meth:`~teamlead._run.state.Streamed.events_of`)."""
        return self._state.stream.events_of(item) if self._state is not None else []
