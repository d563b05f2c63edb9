"""Stop signals for the commands: SIGINT, SIGTERM and SIGHUP alike, from the first instant.

Each stops a run as Ctrl-C does: the CLI tree is stopped
(:func:`~teamlead._procs.stop_descendants`), the run is cancelled, and the command says how
to continue and exits 130.

Three stages. While the command loads and parses its options, :func:`stop_at_startup` has
each signal raise :class:`StoppedAtStartup` wherever the main thread is, and the entry
point (:mod:`.startup`) ends as an interrupted run does. Once the command's event loop
begins (:func:`defer_stop_signals`), a stop is only noted, for the loop's watcher
(:func:`receive_stop_signals`, :func:`run_interruptible`) to act on. A command that
handles the signals itself gives them back with :func:`release_stop_signals`.

Each signal reaches the watcher once: while the loop's receiver opens, the wake-up
descriptor (which the C-level handler writes every signal to) is teamlead's own, and a
stop landing then is read from it, not also noted (a second one would cancel the run
before it prints its end).

A library may wrap the stop raised during the imports in an error of its own
(pydantic-core makes it a ``SchemaError``), so each stop raised is also recorded
(:func:`stop_raised`) and raised again as the event loop would begin.
"""

from __future__ import annotations

# Only the signal module and what Python has loaded already: the handlers go in before
# anything else loads. socket, warnings and anyio load where they are used.
import contextlib
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import socket
    from types import FrameType

    import anyio

__all__ = [
    "STOP_SIGNALS",
    "StoppedAtStartup",
    "StopSignals",
    "defer_stop_signals",
    "mute_stop_signals",
    "receive_stop_signals",
    "release_stop_signals",
    "run_interruptible",
    "stop_at_startup",
    "stop_raised",
]

#: Every signal that stops a run (exit 130); SIGHUP only where the platform has it.
STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None
)

_T = TypeVar("_T")


class StoppedAtStartup(SystemExit):
    """A stop signal came before the command watched for it; ``received`` is the signal.

    A ``SystemExit``, as the process is to end: click lets it through, no ``except
    Exception`` swallows it, and asyncio re-raises it from any callback. The entry point
    catches it and exits 130 (:mod:`.startup`).
    """

    def __init__(self, received: signal.Signals) -> None:
        super().__init__(received.name)
        self.received = received


class _Startup:
    """The stop signals' state before a command watches for them, process-wide as the
    handlers are (a plain class: dataclasses loads inspect, slow before the handlers)."""

    def __init__(self) -> None:
        self.deferred = False  # a command's event loop has begun
        self.noted: signal.Signals | None = None  # the stop since then, for its watcher
        self.raised: signal.Signals | None = None  # the first raised as StoppedAtStartup
        # the wake-up socket pair that holds every signal meanwhile, and the fd it replaced
        self.wakeup: tuple[socket.socket, socket.socket] | None = None
        self.previous_fd = -1
        self.opening = False  # the watcher's receiver is opening


_STARTUP = _Startup()


def stop_at_startup() -> None:
    """From now until a command watches for them, each stop signal raises
    :class:`StoppedAtStartup` in the main thread, wherever it is (until
    :func:`defer_stop_signals`)."""
    if _STARTUP.wakeup is not None:  # the wake-up descriptor as before defer_stop_signals
        with contextlib.suppress(ValueError):
            signal.set_wakeup_fd(_STARTUP.previous_fd)
        _close_wakeup()
    _STARTUP.deferred, _STARTUP.noted, _STARTUP.opening = False, None, False
    _STARTUP.raised = None
    for stop in STOP_SIGNALS:
        signal.signal(stop, _on_stop)


def stop_raised() -> StoppedAtStartup | None:
    """The stop raised during the start-up, if one was, as a fresh
    :class:`StoppedAtStartup`: what the entry point reports when the exception it
    caught no longer holds it (see the module docstring)."""
    return None if _STARTUP.raised is None else StoppedAtStartup(_STARTUP.raised)


def defer_stop_signals() -> None:
    """Say a command's event loop starts now: a stop signal is then only noted, and the
    loop's watcher takes it once it listens (:func:`receive_stop_signals`), so the run
    ends through its own path. No effect unless :func:`stop_at_startup`'s handlers are in
    place.

    Raises:
        StoppedAtStartup: a stop raised earlier in the start-up was swallowed on its
            way (see the module docstring): the command is not to start its work.
    """
    if signal.getsignal(signal.SIGINT) is not _on_stop or _STARTUP.deferred:
        return
    swallowed = stop_raised()
    if swallowed is not None:
        raise swallowed
    import socket

    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)
    _STARTUP.previous_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    _STARTUP.wakeup = (reader, writer)
    _STARTUP.deferred = True


class StopSignals:
    """The stop signals a command's watcher receives, from :func:`receive_stop_signals`:
    one that came while its event loop started first (after a checkpoint, so the loop's
    other tasks have taken their first step), then each one the receiver gets. ``early``
    says whether the last one given came before the receiver opened (so no child of the
    command had it from the terminal)."""

    def __init__(self, first: signal.Signals | None, receiver: Any) -> None:
        self._first = first
        self._receiver = receiver
        self.early = False

    def __aiter__(self) -> StopSignals:
        return self

    async def __anext__(self) -> signal.Signals:
        if self._first is not None:
            import anyio.lowlevel

            first, self._first = self._first, None
            await anyio.lowlevel.checkpoint()
            self.early = True
            return first
        self.early = False
        return signal.Signals(await self._receiver.__anext__())


@contextlib.contextmanager
def receive_stop_signals() -> Iterator[StopSignals]:
    """Listen for the stop signals in the running event loop, with the one that came
    while it started (see the module docstring: each signal arrives once)."""
    import anyio

    _STARTUP.opening = True
    try:
        with anyio.open_signal_receiver(*STOP_SIGNALS) as receiver:
            yield StopSignals(_hand_over(), receiver)
    finally:
        _STARTUP.opening = False


def _hand_over() -> signal.Signals | None:
    """The stop that came before the receiver took the signals over: the one noted, else
    the first written to teamlead's wake-up socket (one that landed as the receiver
    opened); teamlead's socket is closed, as the loop's descriptor holds the rest."""
    noted, _STARTUP.noted = _STARTUP.noted, None
    if not _STARTUP.deferred:
        return noted
    written = b""
    if _STARTUP.wakeup is not None:
        with contextlib.suppress(OSError):
            written = _STARTUP.wakeup[0].recv(64)
        _close_wakeup()
    _STARTUP.deferred = False
    if noted is None:  # the first stop among them (another handled signal may be there)
        noted = next((signal.Signals(b) for b in written if b in STOP_SIGNALS), None)
    return noted


def _close_wakeup() -> None:
    """Close teamlead's wake-up socket pair (the descriptor in place stays as it is)."""
    for end in _STARTUP.wakeup or ():
        end.close()
    _STARTUP.wakeup, _STARTUP.previous_fd = None, -1


def release_stop_signals() -> None:
    """Give the stop signals back the interpreter's own handling (SIGINT raises
    ``KeyboardInterrupt``, the others end the process), for a command that handles them
    itself."""
    for stop in STOP_SIGNALS:
        signal.signal(stop, signal.default_int_handler if stop == signal.SIGINT else signal.SIG_DFL)


def mute_stop_signals() -> None:
    """From now on a stop signal changes nothing: the command is ending already."""
    for stop in STOP_SIGNALS:
        signal.signal(stop, signal.SIG_IGN)


def _on_stop(signum: int, frame: FrameType | None) -> None:
    received = signal.Signals(signum)
    if _STARTUP.deferred:
        if not _STARTUP.opening:  # else it is on a wake-up descriptor, to be read once
            _STARTUP.noted = _STARTUP.noted or received
        return
    # objects the stop leaves half made complain as they are dropped: nothing to the user
    import warnings  # loaded with the interpreter: nothing is imported here

    sys.unraisablehook = lambda unraisable: None
    warnings.simplefilter("ignore")
    _STARTUP.raised = _STARTUP.raised or received
    raise StoppedAtStartup(received)


def run_interruptible(
    work: Callable[[], Awaitable[_T]], *, stop: Callable[[], object] | None = None
) -> tuple[_T | None, signal.Signals | None]:
    """Run ``work()`` under :func:`anyio.run` until it returns or a stop signal arrives:
    what it returned (``None`` when stopped) and the signal that stopped it (``None`` when
    none did).

    ``stop`` runs (in a thread) before the work is cancelled: by default it stops every
    descendant process; a Ray run stops its trials through Ray instead.
    """
    import anyio
    import anyio.to_thread

    if stop is None:
        from .._procs import stop_descendants  # psutil: not before the work starts

        stop = stop_descendants
    result: _T | None = None
    interrupted: signal.Signals | None = None

    async def watch(scope: anyio.CancelScope) -> None:
        nonlocal interrupted
        with receive_stop_signals() as signals:
            interrupted = await anext(signals)
            await anyio.to_thread.run_sync(stop)
            scope.cancel()

    async def main() -> None:
        nonlocal result
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch, tg.cancel_scope)
            result = await work()
            tg.cancel_scope.cancel()

    defer_stop_signals()
    anyio.run(main)
    return result, interrupted
