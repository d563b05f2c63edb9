"""Fixtures of every tier: isolated Claude state and process state, checked after each test.

The real-CLI tier's own (the scripted server, ``teamlead ask``) are in ``tests/cli/conftest.py``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The suite starts a few hundred Python processes (``teamlead ask``, benches, examples):
# let them, and this one, keep compiled bytecode, which an environment that sets
# PYTHONDONTWRITEBYTECODE would have each of them compile again from source.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

from teamlead.testing import OfflineClaude  # noqa: E402

from .isolated import end_warm_processes, isolated_env  # noqa: E402
from .polling import poll  # noqa: E402

#: the real-CLI tier: every test with the ``cli`` mark lives here
_CLI_TIER = Path(__file__).resolve().parent / "cli"


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
    (``pytest -m "not cli and not slow"`` leaves those out), and a test with it lives in the
    real-CLI tier, ``tests/cli/`` (``tests/test_house.py`` checks the sources for both)."""
    if request.node.get_closest_marker("cli") is not None:
        if not request.node.path.resolve().is_relative_to(_CLI_TIER):
            pytest.fail(f"{request.node.nodeid} drives the real CLI: move it into tests/cli/")
        return

    def refuse(self: OfflineClaude, *args: object, **kwargs: object) -> None:
        raise AssertionError(f"{request.node.nodeid} drives the real CLI: mark it @pytest.mark.cli")

    monkeypatch.setattr(OfflineClaude, "__init__", refuse)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the ``slow`` tests first (a stable sort, order kept otherwise): with ``-n 2`` the
    longest ones then overlap the many short ones instead of ending the run on one worker."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The ``teamlead-claude`` tests' sessions run in warm processes the first ones start
    (each ends by itself once idle): the run ends them at its end, once, after every
    worker (the only process that is not an xdist worker), so no test loses the warm
    process it watches to a worker that finished first."""
    if not hasattr(session.config, "workerinput"):
        end_warm_processes()
