"""Stop the CLI processes this process started, and everything they started."""

from __future__ import annotations

import contextlib
import os

import psutil


def descendants() -> list[psutil.Process]:
    """Every live descendant of this process."""
    try:
        children: list[psutil.Process] = psutil.Process(os.getpid()).children(recursive=True)
        return children
    except psutil.Error:
        return []


def stop_descendants(grace_s: float = 2.0) -> int:
    """SIGTERM every descendant, SIGKILL what is left after ``grace_s``, reap; returns the count.

    The whole tree is collected first, so grandchildren (a subagent's shell) are not
    orphaned when their parent dies.
    """
    procs = descendants()
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=grace_s)
    return len(procs)
