"""Stopping child processes ends them but leaves the reaping, and the exit status, to their owner.

The stop used to reap with ``psutil.wait_procs``. When the owner was asyncio (the SDK
starts the CLI with ``anyio.open_process``), its child watcher then found no child to
wait for and logged ``Unknown child process pid …, will report returncode 255``, which
Ctrl-C printed above the live view in 2 of 4 tries.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import uuid
from collections.abc import Callable

import anyio
import psutil
import pytest

from teamlead._procs import _environ, stop_marked, wait_ended

from .polling import poll

MARK = "TEAMLEAD_TEST_PROCS_MARK"


def _spawn(mark: str, *argv: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(list(argv), env={**os.environ, MARK: mark})


def _until(predicate: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    assert poll(predicate, within_s=timeout_s, every_s=0.01), f"timed out waiting for {what}"


def test_a_stopped_child_is_left_for_its_owner_to_reap() -> None:
    mark = uuid.uuid4().hex
    child = _spawn(mark, "sleep", "30")
    assert stop_marked(MARK, mark) == 1
    # reaped by psutil, Popen would find no child and report 0 instead of the signal
    assert child.wait(timeout=10) == -signal.SIGTERM


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace() -> None:
    mark = uuid.uuid4().hex
    child = _spawn(mark, "sh", "-c", "trap '' TERM; sleep 30")
    shell = psutil.Process(child.pid)
    _until(lambda: bool(shell.children()), "the trap to be set (sh started its sleep)")
    stop_marked(MARK, mark, grace_s=0.3)
    assert child.wait(timeout=10) == -signal.SIGKILL


def test_grandchildren_are_stopped_with_their_parent() -> None:
    mark = uuid.uuid4().hex
    child = _spawn(mark, "sh", "-c", "sleep 30 & sleep 30 & wait")
    parent = psutil.Process(child.pid)
    _until(lambda: len(parent.children()) == 2, "both sleeps to start")
    grandchildren = parent.children()
    assert len(grandchildren) == 2
    assert stop_marked(MARK, mark) == 3
    child.wait(timeout=10)
    assert wait_ended(grandchildren, 10) == []


@pytest.mark.anyio
async def test_asyncio_reaps_what_the_stop_ended_and_warns_of_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="asyncio")
    codes = []
    for _ in range(30):  # the reap used to race asyncio's watcher: about 1 in 5 lost
        mark = uuid.uuid4().hex
        process = await anyio.open_process(["sleep", "30"], env={**os.environ, MARK: mark})
        await anyio.to_thread.run_sync(stop_marked, MARK, mark)
        with anyio.fail_after(10):
            codes.append(await process.wait())
        await process.aclose()
    assert codes == [-signal.SIGTERM] * 30
    assert not [r for r in caplog.records if "Unknown child process" in r.getMessage()]


class _Exec:
    """A child seen through ``/proc`` as it execs: its parent's image, none, then its own."""

    def __init__(self, *images: tuple[list[str], dict[str, str]]) -> None:
        self.images = list(images)
        self.reads = 0

    def _image(self) -> tuple[list[str], dict[str, str]]:
        return self.images[min(self.reads, len(self.images) - 1)]

    def environ(self) -> dict[str, str]:
        env = self._image()[1]
        self.reads += 1
        return env

    def cmdline(self) -> list[str]:
        return self.images[min(self.reads - 1, len(self.images) - 1)][0]


def test_a_child_caught_between_its_fork_and_its_exec_is_read_again() -> None:
    ours = (["python", "-m", "pytest"], {"HOME": "/h"})
    its_own = (["sleep", "30"], {"HOME": "/h", MARK: "m"})
    child = _Exec(ours, ([], {}), its_own)
    assert _environ(child, ours, settle_s=5.0) == its_own[1]  # type: ignore[arg-type]
    assert child.reads == 3


def test_a_child_that_stays_a_copy_of_us_is_given_up_on_after_the_settle_time() -> None:
    ours = (["python", "-m", "pytest"], {"HOME": "/h"})
    child = _Exec(ours)
    assert _environ(child, ours, settle_s=0.05) == ours[1]  # type: ignore[arg-type]
    assert child.reads >= 2
