"""A stop asked of a run from outside: the ``teamlead`` command's SIGINT, SIGTERM, SIGHUP.

Cancelling a run loses its account: nothing can be yielded once its generator is
cancelled, so ``--json`` would end without ``finished``. A stop is asked instead
(:meth:`~teamlead.ProcessState.stop_every_run` sets every live run's :class:`RunStop`): the
round that reads cuts its stream at once (ending the run's CLI tree), and the run ends with
a :class:`~teamlead.events.Finished` whose reason is ``interrupted``.

A graceful stop (``teamlead stop RUN``, :meth:`RunStop.wrap_up`) ends the run the way its
deadline does instead: the round is cut, what finished is collected, and the lead answers
once more without tools (``partial``, reason ``interrupted`` too).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import anyio

__all__ = ["RunStop"]


class RunStop:
    """Whether a stop was asked of one run, and why; its listeners are told at once.

    ``on_request`` is told the reason once, at the request (the run's admission rejects its
    queued calls then, before the run's CLI is ended and their hooks cancelled); an
    exception from it is ignored.
    """

    def __init__(self, on_request: Callable[[str], None] | None = None) -> None:
        self.reason: str | None = None
        self._on_request = on_request
        #: called once, when the run has ended (its process forgets it then)
        self.on_done: Callable[[RunStop], None] | None = None
        #: why a graceful stop was asked (the run wraps up), if one was
        self.wrap_reason: str | None = None
        self._listeners: list[Callable[[], None]] = []

    @property
    def requested(self) -> bool:
        """A stop was asked."""
        return self.reason is not None

    def request(self, reason: str) -> None:
        """Ask the run to stop (the first reason is kept)."""
        if self.reason is None:
            self.reason = reason
            if self._on_request is not None:
                with contextlib.suppress(Exception):
                    self._on_request(reason)
        self._tell()

    @property
    def wrapping(self) -> bool:
        """A graceful stop was asked: the run wraps up as at its deadline."""
        return self.wrap_reason is not None

    def wrap_up(self, reason: str) -> None:
        """Ask the run to end as its deadline ends it: cut the work now, collect what
        finished, let the lead answer once without tools (the first reason is kept)."""
        if self.wrap_reason is None:
            self.wrap_reason = reason
        self._tell()

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` at every request of either kind, on the run's loop (a round's
        read is cut); returns the call that unsubscribes."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    @property
    def listened(self) -> bool:
        """Someone is subscribed."""
        return bool(self._listeners)

    def _tell(self) -> None:
        for listener in list(self._listeners):
            listener()

    @contextlib.contextmanager
    def cancels(self) -> Iterator[None]:
        """Run the block until it ends or a stop of either kind is asked, which cancels it:
        a wait for the run's work (a teammate's report, a retry's backoff) ends then."""
        with anyio.CancelScope() as scope:
            if self.requested or self.wrapping:
                scope.cancel()
            leave = self.subscribe(scope.cancel)
            try:
                yield
            finally:
                leave()

    def done(self) -> None:
        """The run has ended: it no longer listens; idempotent."""
        on_done, self.on_done = self.on_done, None
        if on_done is not None:
            on_done(self)
