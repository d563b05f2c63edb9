"""One run's pause: while it is on, no new agent starts and no new request goes upstream.

``teamlead pause RUN`` turns it on through the run's control endpoint. The spawn gate's
hook then holds each Agent call it would admit, and the relay holds each new request of
the run (its lead's included) until ``teamlead unpause RUN`` lifts it; requests already
streaming finish, and nothing is refused or lost. Every hold stays bounded by its
caller's own limit (the gate's admission point, the run's deadline): the deadline keeps
running while a run is paused. The run's end lifts a pause for good.

Like the rest of a run's state it belongs to the run's event loop (the control endpoint
serves there) and is not thread-safe.

Example:
    >>> pause = Pause()
    >>> pause.pause(), pause.paused, pause.pause()
    (True, True, False)
    >>> pause.unpause(), pause.paused
    (True, False)
"""

from __future__ import annotations

import math

import anyio

from ..clock import Clock, move_on_at

__all__ = ["Pause"]


class Pause:
    """Whether one run is paused, and the holds waiting for it to be lifted."""

    def __init__(self) -> None:
        self._lifted: anyio.Event | None = None  # set at the unpause; None: not paused
        self._ended = False
        #: the run's requests the relay holds now
        self.held_requests = 0
        #: every hold waiting now (Agent calls in the gate and requests at the relay)
        self.waiting = 0

    @property
    def paused(self) -> bool:
        """The run is paused now."""
        return self._lifted is not None

    @property
    def ended(self) -> bool:
        """The run has ended: it cannot be paused any more."""
        return self._ended

    def pause(self) -> bool:
        """Hold every new agent and request from now on; ``False`` when it is paused already
        or has ended."""
        if self._ended or self._lifted is not None:
            return False
        self._lifted = anyio.Event()
        return True

    def unpause(self) -> bool:
        """Let every hold go on, in the order they came; ``False`` when it was not paused."""
        lifted, self._lifted = self._lifted, None
        if lifted is None:
            return False
        lifted.set()
        return True

    def end(self) -> None:
        """The run ends: lift the pause for good (what waits goes on; the run's CLI is
        being stopped anyway)."""
        self._ended = True
        self.unpause()

    async def wait(self, until: float | None, clock: Clock, *, request: bool = False) -> bool:
        """Return once the run is not paused: ``True``, or ``False`` when ``until`` (on
        ``clock``) came first. A pause asked again meanwhile is waited out too.

        Args:
            until: the latest moment to wait until (``None``: no limit of its own).
            clock: the clock ``until`` is read on.
            request: the hold is one of the run's API requests (counted in
                :attr:`held_requests`).
        """
        if self._lifted is None:
            return True
        self.waiting += 1
        if request:
            self.held_requests += 1
        try:
            with move_on_at(clock, math.inf if until is None else until):
                while (lifted := self._lifted) is not None:
                    await lifted.wait()
                return True
            return False
        finally:
            self.waiting -= 1
            if request:
                self.held_requests -= 1
