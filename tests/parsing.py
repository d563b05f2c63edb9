"""A run's parse of its stream for readers a test feeds by hand, with no run behind them.

The readers of a run's stream (the NDJSON writer, the team view, focus, telemetry) read
what the run made of each item (:class:`~teamlead.tracker.StreamParse`) and never parse
it themselves. A test that hands them recorded messages gives them a :class:`HandFed`
instead of a run: it parses each item once, the first time it is asked about it, as a
run does before it yields the item. Several readers may share one.
"""

from __future__ import annotations

from teamlead.tracker import TrackedEvent, Tracker

__all__ = ["HandFed"]


class HandFed:
    """A :class:`~teamlead.tracker.StreamParse` over ``tracker`` (a new one by default).

    Args:
        tracker: the tracker it feeds (a test that prepared one passes it).
    """

    def __init__(self, tracker: Tracker | None = None) -> None:
        self._tracker = tracker if tracker is not None else Tracker()
        self._last: tuple[object, list[TrackedEvent]] | None = None

    @property
    def tracker(self) -> Tracker:
        return self._tracker

    def events_of(self, item: object) -> list[TrackedEvent]:
        if self._last is not None and self._last[0] is item:
            return list(self._last[1])
        # teamlead's own events are not the SDK's messages: a run never parses them
        events = [] if callable(getattr(item, "to_json", None)) else self._tracker.feed(item)
        self._last = (item, events)
        return list(events)
