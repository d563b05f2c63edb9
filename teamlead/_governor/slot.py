"""A :class:`Slot`: permission to run one piece of work, and the reports it carries back.

The slot forwards each report to its owner (the :class:`~teamlead.governor.Governor`)
through a small private protocol, so it needs no import of the governor itself.
"""

from __future__ import annotations

from typing import Protocol

from ..errors import UsageError
from .policy import check_seconds

__all__ = ["Slot", "SlotOwner"]


class SlotOwner(Protocol):
    """What a slot calls back on its governor."""

    def _on_success(self, slot: Slot) -> None: ...
    def _on_streaming(self, slot: Slot) -> None: ...
    def _on_rate_limited(
        self, slot: Slot, retry_after: float | None, accepted: int | None
    ) -> None: ...
    def _on_overloaded(self, slot: Slot, retry_after: float | None) -> None: ...
    def _release(self, slot: Slot) -> None: ...


class Slot:
    """Permission to run one piece of work in a bucket; report its outcome, then release.

    Get one from :meth:`Governor.slot` or :meth:`Governor.acquire`. Report each outcome
    with :meth:`success`, :meth:`rate_limited` or :meth:`overloaded` (reports after release
    still count). :meth:`release` is idempotent.
    """

    __slots__ = ("_governor", "_released", "_streaming", "acquired_at", "epoch", "key")

    def __init__(self, governor: SlotOwner, key: str, epoch: int, acquired_at: float) -> None:
        self._governor = governor
        self._released = False
        self._streaming = False
        self.key = key
        self.epoch = epoch
        self.acquired_at = acquired_at

    @property
    def released(self) -> bool:
        """Whether the slot was given back."""
        return self._released

    def success(self) -> None:
        """Report that the work went through: counts toward the additive increase."""
        self._governor._on_success(self)

    def streaming(self) -> None:
        """Report that the upstream accepted the request (its response is streaming)."""
        if not self._streaming and not self._released:
            self._streaming = True
            self._governor._on_streaming(self)

    def rate_limited(
        self, retry_after: float | None = None, *, accepted: int | None = None
    ) -> None:
        """Report a rate limit (429), with the Retry-After pause in seconds if it had one.

        Args:
            retry_after: the pause the upstream asked for.
            accepted: requests of this bucket the upstream was accepting when the 429 came
                (e.g. ``governor.state(key).streaming``); the cut goes straight there.

        Example:
            >>> slot.rate_limited(parse_retry_after(response.headers.get("retry-after")))
            ... # doctest: +SKIP
        """
        check_seconds("retry_after", retry_after)
        if accepted is not None and accepted < 0:
            raise UsageError(f"accepted must be zero or more, got {accepted}")
        self._governor._on_rate_limited(self, retry_after, accepted)

    def overloaded(self, retry_after: float | None = None) -> None:
        """Report an overload (529): a pause and a cut, but no level marked bad."""
        check_seconds("retry_after", retry_after)
        self._governor._on_overloaded(self, retry_after)

    def release(self) -> None:
        """Give the slot back; only once the work it stood for has really ended."""
        if not self._released:
            self._released = True
            self._governor._release(self)

    def __repr__(self) -> str:
        state = "released" if self._released else "held"
        return f"Slot(key={self.key!r}, epoch={self.epoch}, {state})"
