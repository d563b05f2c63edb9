"""Shared fixtures: isolated Claude state, the scripted server and the real CLI."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

# The suite starts a few hundred Python processes (``teamlead ask``, benches, examples):
# let them, and this one, keep compiled bytecode, which an environment that sets
# PYTHONDONTWRITEBYTECODE would have each of them compile again from source.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

from teamlead.testing import OfflineClaude, Script, ScriptedServer  # noqa: E402

from .isolated import isolated_env  # noqa: E402
from .polling import poll  # noqa: E402


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _isolated_claude_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads or writes the real ~/.claude or cache, and none can reach a real API:
    the environment :func:`tests.isolated.isolated_env` gives, with its state in the test's
    temp dir. (The governor's shared limits, an SQLite file in the cache dir, are then one
    per test, so parallel tests and processes never share learnt limits or leases by
    accident; nor does a test export telemetry, or nest under a trace, because the
    developer's shell does.)"""
    isolated = isolated_env(tmp_path)
    for name in list(os.environ):
        if name not in isolated:
            monkeypatch.delenv(name)
    for name, value in isolated.items():
        if os.environ.get(name) != value:
            monkeypatch.setenv(name, value)


@pytest.fixture(autouse=True)
def _own_process_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts with a fresh default :class:`teamlead.ProcessState` (the process's
    shared spawn cap, relays and live runs), and fails if it leaves a slot held or a run
    live: a leak would otherwise starve the next test of the worker."""
    from teamlead._run import process

    monkeypatch.setattr(process, "_default", None)
    yield
    state = process._default
    if state is None or state._spawn_cap is None and state.live_runs == 0:
        return
    cap = state._spawn_cap

    def settled() -> bool:
        return (cap is None or cap.running == cap.waiting == 0) and state.live_runs == 0

    # a run's last clean-up may still be on its way on another thread
    if not poll(settled, within_s=10):
        held = "" if cap is None else f"{cap.running} spawn slot(s) held, {cap.waiting} waiting; "
        pytest.fail(f"the test leaked {held}{state.live_runs} live run(s) in the process state")


@pytest.fixture(autouse=True)
def _real_cli_tests_are_marked(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keep the fast tier fast: a test that sets up the real CLI must carry the ``cli`` mark
    (``pytest -m "not cli and not slow"`` leaves those out)."""
    if request.node.get_closest_marker("cli") is not None:
        return

    def refuse(self: OfflineClaude, *args: object, **kwargs: object) -> None:
        raise AssertionError(f"{request.node.nodeid} drives the real CLI: mark it @pytest.mark.cli")

    monkeypatch.setattr(OfflineClaude, "__init__", refuse)


OfflineFactory = Callable[..., tuple[ScriptedServer, OfflineClaude]]


@pytest.fixture
def offline(tmp_path: Path) -> Iterator[OfflineFactory]:
    """Start a scripted server and an isolated CLI home: ``server, claude = offline(script)``."""
    started: list[ScriptedServer] = []

    def make(script: Script, **server_kwargs: object) -> tuple[ScriptedServer, OfflineClaude]:
        server = ScriptedServer(script, **server_kwargs).start()  # type: ignore[arg-type]
        started.append(server)
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / f"claude-{len(started)}")
        return server, claude

    yield make
    for server in started:
        server.stop()


def cli_processes(state_dir: Path) -> list[psutil.Process]:
    """Live processes whose CLAUDE_CONFIG_DIR is under ``state_dir``: the CLI children a
    test started there (and all they started). Zombies are left out: they have ended."""
    found = []
    for proc in psutil.process_iter(["environ"]):
        try:
            env = proc.info["environ"] or {}
            ours = str(state_dir) in env.get("CLAUDE_CONFIG_DIR", "") and proc.pid != os.getpid()
            if ours and proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:  # it ended while we looked
            continue
    return found


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the ``slow`` tests first (a stable sort, order kept otherwise): with ``-n 2`` the
    longest ones then overlap the many short ones instead of ending the run on one worker."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
