"""Each stop signal reaches a command's watcher once, whenever it lands while the event
loop starts (teamlead._cli.signals).

These run in this process's main thread with the real signal machinery: ``os.kill`` to
this process, the entry point's start-up handlers, and asyncio's own receiver. Where the
signal lands is set by wrapping the loop's ``add_signal_handler``, so each instant of the
receiver's opening is hit on purpose, not by luck. After the first signal a marker signal
follows: the next one the watcher gets must be the marker, not a copy of the first.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Iterator

import anyio
import pytest

from teamlead._cli import signals as stops

_MARK = signal.SIGHUP


@pytest.fixture
def startup() -> Iterator[None]:
    """The entry point's stop handling, as ``teamlead`` sets it up; put back afterwards."""
    saved = {sig: signal.getsignal(sig) for sig in stops.STOP_SIGNALS}
    wakeup = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(wakeup)
    stops.stop_at_startup()
    try:
        yield
    finally:
        stops.stop_at_startup()  # forgets teamlead's wake-up socket and the noted stop
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        signal.set_wakeup_fd(wakeup)


def _watch(opening: Callable[[int], None] | None = None) -> list[signal.Signals]:
    """Run a watcher in a new event loop: the first stop it gets, then, after the marker
    is sent, the next. ``opening(n)`` runs before the receiver's ``n``-th signal is taken
    over (and with ``n`` one past the last, after them all)."""

    async def main() -> list[signal.Signals]:
        if opening is not None:
            loop = asyncio.get_running_loop()
            original = loop.add_signal_handler
            calls = 0

            def add_signal_handler(
                sig: int, callback: Callable[..., object], *args: object
            ) -> None:
                nonlocal calls
                opening(calls)
                calls += 1
                original(sig, callback, *args)
                if calls == len(stops.STOP_SIGNALS):
                    opening(calls)

            loop.add_signal_handler = add_signal_handler  # type: ignore[method-assign]
        got = []
        with anyio.fail_after(10), stops.receive_stop_signals() as received:
            got.append(await received.first())
            os.kill(os.getpid(), _MARK)
            got.append(await received.__anext__())
        return got

    stops.defer_stop_signals()
    return anyio.run(main)


def _stop_at(instant: int) -> Callable[[int], None]:
    def opening(n: int) -> None:
        if n == instant:
            os.kill(os.getpid(), signal.SIGTERM)

    return opening


def test_a_stop_noted_before_the_loop_listens_arrives_once(startup: None) -> None:
    stops.defer_stop_signals()
    os.kill(os.getpid(), signal.SIGTERM)
    assert stops._STARTUP.noted == signal.SIGTERM
    assert _watch() == [signal.SIGTERM, _MARK]


@pytest.mark.parametrize("instant", range(len(stops.STOP_SIGNALS) + 1))
def test_a_stop_while_the_receiver_opens_arrives_once(startup: None, instant: int) -> None:
    """Before the receiver sets its wake-up descriptor (read from teamlead's), between two
    signals taken over (the loop's descriptor, with teamlead's handler or the loop's own
    for it), and after them all."""
    assert _watch(_stop_at(instant)) == [signal.SIGTERM, _MARK]


def test_without_the_start_up_handlers_the_receiver_is_the_loops_own(startup: None) -> None:
    """A process that gave the signals back (an app, the scripted server) keeps its own
    wake-up descriptor: deferring is then nothing."""
    stops.release_stop_signals()
    before = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(before)
    stops.defer_stop_signals()
    assert stops._STARTUP.wakeup is None
    assert signal.set_wakeup_fd(before) == before
    assert _watch(_stop_at(len(stops.STOP_SIGNALS))) == [signal.SIGTERM, _MARK]
