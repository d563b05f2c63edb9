"""Each stop signal reaches a command's watcher once, whenever it lands while the event
loop starts (teamlead._cli.signals).

These run in this process's main thread with the real signal machinery: ``os.kill`` to
this process, the entry point's start-up handlers, and asyncio's own receiver. Where the
signal lands is set by wrapping the loop's ``add_signal_handler``, so each instant of the
receiver's opening is hit on purpose, not by luck. After the first signal a marker signal
follows: the next one the watcher gets must be the marker, not a copy of the first.

A stop raised during the imports that a library turned into its own error (pydantic-core
does, building a model in Rust), or dropped, still ends the command as a stop: the entry
point is run for real in a child process, the stop met inside pydantic as CI met it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest

from teamlead._cli import signals as stops

from .isolated import isolated_env

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


def _watch(
    opening: Callable[[int], None] | None = None, early: list[bool] | None = None
) -> list[signal.Signals]:
    """Run a watcher in a new event loop: the first stop it gets, then, after the marker
    is sent, the next. ``opening(n)`` runs before the receiver's ``n``-th signal is taken
    over (and with ``n`` one past the last, after them all). ``early`` gets, for each, whether
    it came before the receiver opened (``StopSignals.early``)."""

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
            got.append(await anext(received))
            seen = [received.early]
            os.kill(os.getpid(), _MARK)
            got.append(await received.__anext__())
            seen.append(received.early)
        if early is not None:
            early.extend(seen)
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
    early: list[bool] = []
    assert _watch(early=early) == [signal.SIGTERM, _MARK]
    assert early == [True, False]  # the noted stop came before the command's children ran


@pytest.mark.parametrize("instant", range(len(stops.STOP_SIGNALS) + 1))
def test_a_stop_while_the_receiver_opens_arrives_once(startup: None, instant: int) -> None:
    """Before the receiver sets its wake-up descriptor (read from teamlead's), between two
    signals taken over (the loop's descriptor, with teamlead's handler or the loop's own
    for it), and after them all: handed over from teamlead's descriptor only before."""
    early: list[bool] = []
    assert _watch(_stop_at(instant), early) == [signal.SIGTERM, _MARK]
    assert early == [instant == 0, False]


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


def test_a_stop_a_library_dropped_is_raised_again_before_the_loop_begins(startup: None) -> None:
    with contextlib.suppress(stops.StoppedAtStartup):  # a library that drops what it meets
        signal.raise_signal(signal.SIGTERM)
    with pytest.raises(stops.StoppedAtStartup) as raised:
        stops.defer_stop_signals()
    assert raised.value.received == signal.SIGTERM
    assert not stops._STARTUP.deferred and stops._STARTUP.wakeup is None


#: The entry point, with a ``commands`` module whose loading meets the stop where CI's did:
#: inside pydantic-core, building a model (a literal's ``repr``, as the SDK's MCP types
#: have), which turns it into a ``SchemaError`` holding nothing but its text. ``dropped``
#: swallows that error too and starts its work as a command does.
_ENTRY = textwrap.dedent(
    """
    import signal, sys, types
    from typing import Literal

    from teamlead._cli import startup
    from teamlead._cli.signals import run_interruptible

    def main():
        from pydantic import BaseModel

        class Kind(str):
            def __repr__(self):
                signal.raise_signal(signal.SIGTERM)
                return str.__repr__(self)

        try:
            class Message(BaseModel):
                kind: Literal[Kind("text")]
        except Exception as exc:
            if "StoppedAtStartup" not in str(exc) or exc.__context__ is not None:
                raise AssertionError(f"not the conversion CI met: {exc!r}") from None
            if sys.argv[-1] != "dropped":
                raise
        async def work():
            print("the work ran", file=sys.stderr)
        run_interruptible(work)
        sys.exit(0)

    commands = types.ModuleType("teamlead._cli.commands")
    commands.main = main
    sys.modules["teamlead._cli.commands"] = commands
    startup.run()
    """
)


@pytest.mark.parametrize("fate", ["converted", "dropped"])
def test_a_stop_a_library_turned_into_its_own_error_ends_the_command_as_a_stop(
    tmp_path: Path, fate: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _ENTRY, "ask", "Fix it.", "--json", "--", fate],
        env=isolated_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (130, "teamlead: interrupted\n"), done.stderr
    finished = json.loads(done.stdout.splitlines()[-1])
    assert finished["type"] == "finished" and finished["reason"] == "interrupted", finished
    assert "SIGTERM" in " ".join(finished["reasons"]), finished


_LOADED_BEFORE_THE_HANDLERS = textwrap.dedent(
    """
    import sys
    before = set(sys.modules)
    import teamlead._cli.startup
    print(" ".join(sorted(set(sys.modules) - before)))
    """
)


def test_the_entry_point_takes_the_signals_before_it_loads_what_opens_descriptors(
    tmp_path: Path,
) -> None:
    """CI's ``looping`` point, met early: importing ``socket`` loads ``selectors``, which
    opens an epoll descriptor to see that it can, and a stop at that instant met the
    default action (SIGINT's traceback, SIGHUP's and SIGTERM's death), as the handlers
    were set only once the signals module had loaded socket, dataclasses and anyio."""
    done = subprocess.run(
        [sys.executable, "-c", _LOADED_BEFORE_THE_HANDLERS],
        env=isolated_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    loaded = set(done.stdout.split())
    assert "teamlead._cli.signals" in loaded
    heavy = {"socket", "selectors", "select", "anyio", "asyncio", "dataclasses", "inspect"}
    assert not loaded & heavy, sorted(loaded)
