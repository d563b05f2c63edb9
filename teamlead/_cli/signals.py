"""Stop signals for the commands: SIGINT, SIGTERM and SIGHUP alike, from the first instant.

A closed terminal (SIGHUP) or a service manager (SIGTERM) must stop a run as Ctrl-C does:
the CLI children and everything they started are stopped at once
(:func:`~teamlead._procs.stop_descendants`), the run is cancelled, and the command prints
how to continue and exits 130. Without this, SIGHUP left the CLI running its agents for
tens of seconds, and SIGTERM to ``experiment run`` left its CLI children behind.

A command watches for the signals once its work starts (:class:`Interruptible`, or
:func:`~teamlead._cli.running.run_session` for a run). Before that, while its modules load
(the SDK alone takes over a second) and its options are parsed, :func:`stop_at_startup`
has each signal raise :class:`StoppedAtStartup` wherever the main thread is, and the
entry point (:mod:`.startup`) exits as an interrupted run does; without it SIGINT printed
a ``KeyboardInterrupt`` traceback, and SIGTERM and SIGHUP killed the process (exit 143
and 129) with nothing on stdout. Once the command's event loop begins
(:func:`defer_stop_signals`), a stop is only noted until the loop's watcher listens,
and the watcher acts on it (:func:`first_stop`): the run ends through its own path. A
command that handles the signals its own way (the scripted server) gives them back with
:func:`release_stop_signals` first.

Only the standard library and anyio load here: the entry point imports this module first.
"""

from __future__ import annotations

import signal
import sys
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any, Generic, TypeVar

import anyio

__all__ = [
    "STOP_SIGNALS",
    "Interruptible",
    "StoppedAtStartup",
    "defer_stop_signals",
    "first_stop",
    "mute_stop_signals",
    "release_stop_signals",
    "stop_at_startup",
]

#: Every signal that stops a run (exit 130); SIGHUP only where the platform has it.
STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None
)

_T = TypeVar("_T")


class StoppedAtStartup(SystemExit):
    """A stop signal came before the command watched for it; ``received`` is the signal.

    A ``SystemExit``, as the process is to end: click lets it through (a
    ``KeyboardInterrupt`` it answers ``Aborted!``, exit 1), no ``except Exception``
    swallows it, and asyncio would re-raise it from any callback (a plain
    ``BaseException`` it logs and drops, and the process went on). The entry point
    catches it and exits 130 (:mod:`.startup`).
    """

    def __init__(self, received: signal.Signals) -> None:
        super().__init__(received.name)
        self.received = received


@dataclass
class _Startup:
    """The stop signals' state before a command watches for them (process-wide, as the
    signal handlers are): whether a command's event loop has begun, and the stop that came
    since (for its watcher)."""

    deferred: bool = False
    noted: signal.Signals | None = None


_STARTUP = _Startup()


def stop_at_startup() -> None:
    """From now until a command watches for them, each stop signal raises
    :class:`StoppedAtStartup` in the main thread, wherever it is (until
    :func:`defer_stop_signals`)."""
    _STARTUP.deferred, _STARTUP.noted = False, None
    for stop in STOP_SIGNALS:
        signal.signal(stop, _on_stop)


def defer_stop_signals() -> None:
    """Say a command's event loop starts now: a stop signal is then only noted, and the
    loop's watcher takes it once it listens (:func:`first_stop`). Raised inside the loop,
    the stop came out grouped by anyio, asyncio logged it with its traceback, and the run
    ended without its own record. No effect unless :func:`stop_at_startup` ran."""
    _STARTUP.deferred = True


async def first_stop(signals: AsyncIterator[int]) -> signal.Signals:
    """The stop signal a watcher acts on: one noted while its event loop started, else the
    next one ``signals`` (its open receiver) gets.

    A noted one is returned after a checkpoint, so the loop's other tasks have taken their
    first step (a run has made its state and can be asked to stop), as they would have
    for a signal received the instant the receiver opened.
    """
    noted, _STARTUP.noted = _STARTUP.noted, None
    if noted is not None:
        await anyio.lowlevel.checkpoint()
        return noted
    async for received in signals:
        return signal.Signals(received)
    raise RuntimeError("the signal receiver ended")  # it does not: it waits for ever


def release_stop_signals() -> None:
    """Give the stop signals back the interpreter's own handling (SIGINT raises
    ``KeyboardInterrupt``, the others end the process), for a command that handles them
    itself."""
    for stop in STOP_SIGNALS:
        signal.signal(stop, signal.default_int_handler if stop == signal.SIGINT else signal.SIG_DFL)


def mute_stop_signals() -> None:
    """From now on a stop signal changes nothing: the command is ending already."""
    for stop in STOP_SIGNALS:
        signal.signal(stop, _ending_already)


def _on_stop(signum: int, frame: FrameType | None) -> None:
    received = signal.Signals(signum)
    if _STARTUP.deferred:
        _STARTUP.noted = _STARTUP.noted or received
        return
    # The stop cuts the start-up wherever it is: objects half made (an event loop being
    # built, coroutines not started yet) complain as they are dropped, which says nothing
    # to the user, so the dying process keeps quiet about them.
    sys.unraisablehook = _drop_unraisable
    warnings.simplefilter("ignore")
    raise StoppedAtStartup(received)


def _drop_unraisable(unraisable: Any) -> None:
    """An error in a finaliser while a stop unwinds the start-up: dropped (see above)."""


def _ending_already(signum: int, frame: FrameType | None) -> None:
    """A stop signal while the command ends after the first one: nothing more to do."""


class Interruptible(Generic[_T]):
    """Run ``work()`` under :func:`anyio.run` until it returns or a stop signal arrives.

    ``result`` holds what ``work`` returned; ``interrupted`` is the signal that stopped it.
    ``stop`` runs (in a thread) before the work is cancelled: by default it stops every
    descendant process; a Ray run stops its trials through Ray instead.
    """

    def __init__(
        self, work: Callable[[], Awaitable[_T]], *, stop: Callable[[], object] | None = None
    ) -> None:
        if stop is None:
            from .._procs import stop_descendants  # psutil: not before the work starts

            stop = stop_descendants
        self._work = work
        self._stop = stop
        self.result: _T | None = None
        self.interrupted: signal.Signals | None = None

    def run(self) -> Interruptible[_T]:
        defer_stop_signals()
        anyio.run(self._main)
        return self

    async def _main(self) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watch, tg.cancel_scope)
            self.result = await self._work()
            tg.cancel_scope.cancel()

    async def _watch(self, scope: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
            self.interrupted = await first_stop(signals)
            await anyio.to_thread.run_sync(self._stop)
            scope.cancel()
