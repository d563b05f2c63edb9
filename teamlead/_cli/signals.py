"""Stop signals for the long-running commands: SIGINT, SIGTERM and SIGHUP alike.

A closed terminal (SIGHUP) or a service manager (SIGTERM) must stop a run as Ctrl-C does:
the CLI children and everything they started are stopped at once
(:func:`~teamlead._procs.stop_descendants`), the run is cancelled, and the command prints
how to continue and exits 130. Without this, SIGHUP left the CLI running its agents for
tens of seconds, and SIGTERM to ``experiment run`` left its CLI children behind.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import anyio

from .._procs import stop_descendants

__all__ = ["STOP_SIGNALS", "Interruptible"]

#: Every signal that stops a run (exit 130); SIGHUP only where the platform has it.
STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None
)

_T = TypeVar("_T")


class Interruptible(Generic[_T]):
    """Run ``work()`` under :func:`anyio.run` until it returns or a stop signal arrives.

    ``result`` holds what ``work`` returned; ``interrupted`` is the signal that stopped it.
    ``stop`` runs (in a thread) before the work is cancelled: by default it stops every
    descendant process; a Ray run stops its trials through Ray instead.
    """

    def __init__(
        self, work: Callable[[], Awaitable[_T]], *, stop: Callable[[], object] = stop_descendants
    ) -> None:
        self._work = work
        self._stop = stop
        self.result: _T | None = None
        self.interrupted: signal.Signals | None = None

    def run(self) -> Interruptible[_T]:
        anyio.run(self._main)
        return self

    async def _main(self) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watch, tg.cancel_scope)
            self.result = await self._work()
            tg.cancel_scope.cancel()

    async def _watch(self, scope: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
            async for received in signals:
                self.interrupted = signal.Signals(received)
                await anyio.to_thread.run_sync(self._stop)
                scope.cancel()
                return
